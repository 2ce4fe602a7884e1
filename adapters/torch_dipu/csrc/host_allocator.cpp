// at::HostAllocator over the runtime's pinned-host allocator: pin_memory(),
// pinned tensors and non-blocking copies from and to them.
#include <ATen/core/CachingHostAllocator.h>
#include <c10/util/Logging.h>

#include "allocator.h"
#include "common.h"

namespace torch_dipu {
namespace {

void free_pinned(void* ptr) {
  dipu_status st = dipu_host_free(ptr);
  if (st != DIPU_OK) LOG(WARNING) << error_message("dipu_host_free", st);
}

void copy_stat(at::Stat& to, const dipu_stat& from) {
  to.current = static_cast<int64_t>(from.current);
  to.peak = static_cast<int64_t>(from.peak);
  to.allocated = static_cast<int64_t>(from.allocated);
  to.freed = static_cast<int64_t>(from.freed);
}

struct DipuHostAllocator final : public at::HostAllocator {
  c10::DataPtr allocate(size_t nbytes) override {
    void* ptr = nullptr;
    if (nbytes > 0) DIPU_CHECK(dipu_host_malloc(nbytes, &ptr));
    // Pinned memory is host memory: its tensors are CPU tensors.
    return {ptr, ptr, &free_pinned, c10::Device(c10::DeviceType::CPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &free_pinned; }

  void copy_data(void* dst, const void* src, std::size_t count) const override {
    DIPU_CHECK(dipu_memcpy(dst, src, count, DIPU_COPY_HOST_TO_HOST));
  }

  bool record_event(void* ptr, void* ctx, c10::Stream stream) override {
    void* base = ctx != nullptr ? ctx : ptr;
    if (base == nullptr) return true;
    return dipu_host_record_stream(base, from_c10(stream)) == DIPU_OK;
  }

  void empty_cache() override { DIPU_CHECK(dipu_host_empty_cache()); }

  at::HostStats get_stats() override {
    dipu_memory_stats s{};
    DIPU_CHECK(dipu_host_memory_get_stats(&s));
    at::HostStats out;
    copy_stat(out.active_requests, s.allocation);
    copy_stat(out.active_bytes, s.allocated_bytes);
    copy_stat(out.allocations, s.segment);
    copy_stat(out.allocated_bytes, s.reserved_bytes);
    out.num_host_alloc = static_cast<int64_t>(s.num_device_alloc);
    out.num_host_free = static_cast<int64_t>(s.num_device_free);
    return out;
  }

  void reset_accumulated_stats() override {
    TORCH_CHECK_NOT_IMPLEMENTED(false,
                                "dipu: resetting the pinned allocator's accumulated "
                                "statistics is not supported yet");
  }

  void reset_peak_stats() override { DIPU_CHECK(dipu_host_memory_reset_peak_stats()); }
};

DipuHostAllocator g_host_allocator;

}  // namespace

REGISTER_HOST_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_host_allocator);

c10::Allocator* host_allocator() { return &g_host_allocator; }

}  // namespace torch_dipu
