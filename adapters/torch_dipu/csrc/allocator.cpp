// c10::DeviceAllocator over the runtime's caching allocator: memory comes
// from dipu_malloc on the current stream of the current device.
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/util/Logging.h>

#include "allocator.h"
#include "common.h"

namespace torch_dipu {
namespace {

void free_device(void* ptr) {
  dipu_status st = dipu_free(ptr);
  if (st != DIPU_OK) {
    // A deleter cannot throw: say what went wrong instead.
    LOG(WARNING) << error_message("dipu_free", st);
  }
}

void copy_stat(c10::CachingAllocator::Stat& to, const dipu_stat& from) {
  to.current = static_cast<int64_t>(from.current);
  to.peak = static_cast<int64_t>(from.peak);
  to.allocated = static_cast<int64_t>(from.allocated);
  to.freed = static_cast<int64_t>(from.freed);
}

void copy_stats(c10::CachingAllocator::StatArray& to, const dipu_stat& from) {
  // The runtime keeps one pool: the aggregate; small and large stay zero.
  copy_stat(to[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)], from);
}

int32_t device_count() {
  int32_t n = 0;
  DIPU_CHECK(dipu_device_count(&n));
  return n;
}

struct DipuDeviceAllocator final : public c10::DeviceAllocator {
  c10::DataPtr allocate(size_t nbytes) override {
    int32_t device = current_device();
    void* ptr = nullptr;
    if (nbytes > 0) {
      DIPU_CHECK(dipu_malloc(nbytes, current_stream(device), &ptr));
    }
    return {ptr, ptr, &free_device, dipu_device(device)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &free_device; }

  void copy_data(void* dst, const void* src, std::size_t count) const override {
    DIPU_CHECK(dipu_memcpy(dst, src, count, DIPU_COPY_DEVICE_TO_DEVICE));
  }

  bool initialized() override {
    int32_t init = 0;
    return dipu_is_initialized(&init) == DIPU_OK && init != 0;
  }

  void emptyCache(c10::MempoolId_t /*mempool_id*/) override {
    for (int32_t d = 0, n = device_count(); d < n; ++d) {
      DIPU_CHECK(dipu_empty_cache(d));
    }
  }

  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override {
    if (ptr.get() == nullptr) return;
    DIPU_CHECK(dipu_record_stream(ptr.get(), from_c10(stream)));
  }

  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    dipu_memory_stats s{};
    DIPU_CHECK(dipu_memory_get_stats(device, &s));
    c10::CachingDeviceAllocator::DeviceStats out;
    copy_stats(out.allocation, s.allocation);
    copy_stats(out.segment, s.segment);
    copy_stats(out.active, s.active);
    copy_stats(out.inactive_split, s.inactive_split);
    copy_stats(out.allocated_bytes, s.allocated_bytes);
    copy_stats(out.reserved_bytes, s.reserved_bytes);
    copy_stats(out.active_bytes, s.active_bytes);
    copy_stats(out.inactive_split_bytes, s.inactive_split_bytes);
    copy_stats(out.requested_bytes, s.requested_bytes);
    out.num_alloc_retries = static_cast<int64_t>(s.num_alloc_retries);
    out.num_ooms = static_cast<int64_t>(s.num_ooms);
    out.num_sync_all_streams = static_cast<int64_t>(s.num_sync_all_streams);
    out.num_device_alloc = static_cast<int64_t>(s.num_device_alloc);
    out.num_device_free = static_cast<int64_t>(s.num_device_free);
    return out;
  }

  void resetAccumulatedStats(c10::DeviceIndex device) override {
    DIPU_CHECK(dipu_memory_reset_accumulated_stats(device));
  }

  void resetPeakStats(c10::DeviceIndex device) override {
    DIPU_CHECK(dipu_memory_reset_peak_stats(device));
  }

  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    dipu_memory_info info{};
    DIPU_CHECK(dipu_device_memory_info(device, &info));
    return {static_cast<size_t>(info.free), static_cast<size_t>(info.total)};
  }
};

DipuDeviceAllocator g_allocator;

}  // namespace

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_allocator);

c10::Allocator* device_allocator() { return &g_allocator; }

}  // namespace torch_dipu
