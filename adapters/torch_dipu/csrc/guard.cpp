// c10::impl::DeviceGuardImplInterface over dipu devices, streams and
// events: what DeviceGuard, StreamGuard, torch.Stream, torch.Event and
// torch.accelerator use.
#include <c10/core/Allocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "common.h"

namespace torch_dipu {
namespace {

dipu_event* as_event(void* e) { return static_cast<dipu_event*>(e); }

struct DipuGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kDipu; }

  c10::Device exchangeDevice(c10::Device d) const override {
    TORCH_CHECK(d.type() == kDipu, "expected a dipu device, got ", d);
    int32_t old = current_device();
    if (d.index() != old) DIPU_CHECK(dipu_device_set(d.index()));
    return dipu_device(old);
  }

  c10::Device getDevice() const override { return dipu_device(current_device()); }

  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.type() == kDipu, "expected a dipu device, got ", d);
    DIPU_CHECK(dipu_device_set(d.index()));
  }

  void uncheckedSetDevice(c10::Device d) const noexcept override {
    (void)dipu_device_set(d.index());
  }

  c10::Stream getStream(c10::Device d) const override {
    return to_c10(current_stream(device_index(d)));
  }

  c10::Stream getDefaultStream(c10::Device d) const override {
    dipu_stream s{};
    DIPU_CHECK(dipu_stream_default(device_index(d), &s));
    return to_c10(s);
  }

  c10::Stream getStreamFromGlobalPool(c10::Device d, bool high) const override {
    dipu_stream s{};
    DIPU_CHECK(dipu_stream_from_pool(device_index(d), high ? 1 : 0, &s));
    return to_c10(s);
  }

  // torch.Stream(device="dipu") and every other "new" stream come from
  // the runtime's pools, as CUDA's do: any number of them holds at most
  // 32 normal and 32 high-priority vendor streams per device.
  c10::Stream getNewStream(c10::Device d, int priority) const override {
    dipu_stream s{};
    DIPU_CHECK(dipu_stream_from_pool(device_index(d), priority < 0 ? 1 : 0, &s));
    return to_c10(s);
  }

  c10::Stream exchangeStream(c10::Stream s) const override {
    dipu_stream next = from_c10(s);
    dipu_stream old = current_stream(next.device);
    DIPU_CHECK(dipu_stream_set_current(next));
    return to_c10(old);
  }

  c10::DeviceIndex deviceCount() const noexcept override {
    int32_t n = 0;
    if (dipu_device_count(&n) != DIPU_OK) return 0;
    return static_cast<c10::DeviceIndex>(n);
  }

  // Events: created on first record; BACKEND_DEFAULT ones keep timestamps
  // (torch.Event(enable_timing=True)).
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag flag) const override {
    TORCH_CHECK(device_index == -1 || device_index == stream.device_index(),
                "event device index ", device_index, " does not match the stream's ",
                stream.device_index());
    if (*event == nullptr) {
      dipu_event* e = nullptr;
      DIPU_CHECK(dipu_event_create(flag == c10::EventFlag::BACKEND_DEFAULT ? 1 : 0, &e));
      *event = e;
    }
    DIPU_CHECK(dipu_event_record(as_event(*event), from_c10(stream)));
  }

  void block(void* event, const c10::Stream& stream) const override {
    if (event == nullptr) return;
    DIPU_CHECK(dipu_event_block(as_event(event), from_c10(stream)));
  }

  bool queryEvent(void* event) const override {
    if (event == nullptr) return true;
    int32_t done = 0;
    DIPU_CHECK(dipu_event_query(as_event(event), &done));
    return done != 0;
  }

  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    if (event != nullptr) (void)dipu_event_destroy(as_event(event));
  }

  bool queryStream(const c10::Stream& stream) const override {
    int32_t done = 0;
    DIPU_CHECK(dipu_stream_query(from_c10(stream), &done));
    return done != 0;
  }

  void synchronizeStream(const c10::Stream& stream) const override {
    DIPU_CHECK(dipu_stream_synchronize(from_c10(stream)));
  }

  void synchronizeEvent(void* event) const override {
    if (event == nullptr) return;
    DIPU_CHECK(dipu_event_synchronize(as_event(event)));
  }

  void synchronizeDevice(const c10::DeviceIndex device_index) const override {
    DIPU_CHECK(dipu_device_synchronize(device_index < 0 ? current_device() : device_index));
  }

  double elapsedTime(void* start, void* end, const c10::DeviceIndex) const override {
    TORCH_CHECK(start != nullptr && end != nullptr,
                "both events must be recorded before elapsed_time");
    float ms = 0;
    DIPU_CHECK(dipu_event_elapsed_ms(as_event(start), as_event(end), &ms));
    return ms;
  }

  void recordDataPtrOnStream(const c10::DataPtr& data_ptr,
                             const c10::Stream& stream) const override {
    if (data_ptr.get() == nullptr) return;
    DIPU_CHECK(dipu_record_stream(data_ptr.get(), from_c10(stream)));
  }
};

}  // namespace

C10_REGISTER_GUARD_IMPL(PrivateUse1, DipuGuardImpl);

}  // namespace torch_dipu
