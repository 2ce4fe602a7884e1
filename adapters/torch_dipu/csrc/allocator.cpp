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

// Stores the aggregate and both pools' value of one statistic.
void copy_stats(c10::CachingAllocator::StatArray& to, const dipu_stat& all, const dipu_stat& small,
                const dipu_stat& large) {
  using c10::CachingAllocator::StatType;
  copy_stat(to[static_cast<size_t>(StatType::AGGREGATE)], all);
  copy_stat(to[static_cast<size_t>(StatType::SMALL_POOL)], small);
  copy_stat(to[static_cast<size_t>(StatType::LARGE_POOL)], large);
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
    // The pools are read after the aggregate: under concurrent allocations
    // they may be a moment newer (each read is consistent in itself).
    dipu_memory_pool_stats sm{};
    dipu_memory_pool_stats lg{};
    DIPU_CHECK(dipu_memory_get_pool_stats(device, DIPU_MEMORY_POOL_SMALL, &sm));
    DIPU_CHECK(dipu_memory_get_pool_stats(device, DIPU_MEMORY_POOL_LARGE, &lg));
    c10::CachingDeviceAllocator::DeviceStats out;
#define DIPU_COPY_STAT(name) copy_stats(out.name, s.name, sm.name, lg.name)
    DIPU_COPY_STAT(allocation);
    DIPU_COPY_STAT(segment);
    DIPU_COPY_STAT(active);
    DIPU_COPY_STAT(inactive_split);
    DIPU_COPY_STAT(allocated_bytes);
    DIPU_COPY_STAT(reserved_bytes);
    DIPU_COPY_STAT(active_bytes);
    DIPU_COPY_STAT(inactive_split_bytes);
    DIPU_COPY_STAT(requested_bytes);
#undef DIPU_COPY_STAT
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
