// DDP's timer for dipu (c10d::TimerRegistry, as CudaTimer is CUDA's): the
// reducer's time stats (forward, backward compute, backward comm) from
// timing events recorded on the device's current stream, so
// DistributedDataParallel._get_ddp_logging_data() has them on dipu.
#include <c10/core/DeviceGuard.h>
#include <torch/csrc/distributed/c10d/reducer_timer.hpp>

#include <array>

#include "common.h"

namespace torch_dipu {
namespace {

class DipuTimer final : public c10d::Timer {
 public:
  explicit DipuTimer(c10::Device device) : device_(device) {}

  DipuTimer(const DipuTimer&) = delete;
  DipuTimer& operator=(const DipuTimer&) = delete;

  ~DipuTimer() override {
    for (dipu_event* e : events_) {
      if (e != nullptr) dipu_event_destroy(e);
    }
  }

  void record(Event event) override {
    // The host time too, as the base class keeps it.
    c10d::Timer::record(event);
    c10::DeviceGuard guard(device_);
    dipu_event*& e = events_[static_cast<size_t>(event)];
    if (e == nullptr) DIPU_CHECK(dipu_event_create(1, &e));
    DIPU_CHECK(dipu_event_record(e, current_stream(device_.index())));
  }

  std::optional<int64_t> measureDifference(Event start, Event end) override {
    dipu_event* a = events_[static_cast<size_t>(start)];
    dipu_event* b = events_[static_cast<size_t>(end)];
    if (a == nullptr || b == nullptr) return std::nullopt;
    c10::DeviceGuard guard(device_);
    DIPU_CHECK(dipu_event_synchronize(a));
    DIPU_CHECK(dipu_event_synchronize(b));
    float ms = 0.0f;
    DIPU_CHECK(dipu_event_elapsed_ms(a, b, &ms));
    // Events recorded out of order (e.g. no communication this step).
    if (ms < 0) return std::nullopt;
    return static_cast<int64_t>(static_cast<double>(ms) * 1e6);
  }

 private:
  c10::Device device_;
  std::array<dipu_event*, 5> events_{};
};

}  // namespace
}  // namespace torch_dipu

namespace c10d {
C10_REGISTER_TYPED_CLASS(TimerRegistry, c10::kPrivateUse1, torch_dipu::DipuTimer);
}  // namespace c10d
