// The C API from C++17: RAII wrappers over a device buffer and an event,
// a round trip through the device on pooled streams.
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "dipu_runtime.h"

namespace {

void check(dipu_status s, const char *what) {
  if (s != DIPU_OK) {
    throw std::runtime_error(std::string(what) + ": " + dipu_status_str(s) + ": " +
                             dipu_last_error_message());
  }
}

struct DeviceFree {
  void operator()(void *p) const noexcept { (void)dipu_free(p); }
};
using DeviceBuffer = std::unique_ptr<void, DeviceFree>;

struct EventDestroy {
  void operator()(dipu_event *e) const noexcept { (void)dipu_event_destroy(e); }
};
using Event = std::unique_ptr<dipu_event, EventDestroy>;

DeviceBuffer device_alloc(std::size_t bytes, dipu_stream stream) {
  void *p = nullptr;
  check(dipu_malloc(bytes, stream, &p), "dipu_malloc");
  return DeviceBuffer(p);
}

Event make_event() {
  dipu_event *e = nullptr;
  check(dipu_event_create(0, &e), "dipu_event_create");
  return Event(e);
}

}  // namespace

int main() {
  try {
    dipu_stream a{}, b{};
    check(dipu_stream_from_pool(0, 0, &a), "pool");
    check(dipu_stream_create(0, -1, &b), "create");
    std::vector<float> in(4096), out(4096, 0.0f);
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i) * 0.5f;
    const std::size_t bytes = in.size() * sizeof(float);
    {
      DeviceBuffer buf = device_alloc(bytes, a);
      Event ready = make_event();
      check(dipu_memcpy_async(buf.get(), in.data(), bytes, DIPU_COPY_HOST_TO_DEVICE, a),
            "h2d");
      check(dipu_event_record(ready.get(), a), "record");
      check(dipu_event_block(ready.get(), b), "block");
      check(dipu_record_stream(buf.get(), b), "record_stream");
      check(dipu_memcpy_async(out.data(), buf.get(), bytes, DIPU_COPY_DEVICE_TO_HOST, b),
            "d2h");
      check(dipu_stream_synchronize(b), "sync");
    }
    if (std::memcmp(in.data(), out.data(), bytes) != 0) throw std::runtime_error("data differ");
    dipu_shutdown_report report{};
    check(dipu_shutdown(&report), "shutdown");
    if (report.live_allocations != 0) throw std::runtime_error("leak");
  } catch (const std::exception &e) {
    std::fprintf(stderr, "roundtrip.cpp: %s\n", e.what());
    return 1;
  }
  std::printf("roundtrip.cpp ok\n");
  return 0;
}
