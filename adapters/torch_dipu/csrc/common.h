// Shared by every torch_dipu translation unit: errors of the C ABI as
// c10 exceptions, and c10::Stream <-> dipu_stream.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/Stream.h>
#include <c10/util/Exception.h>

#include <string>

#include "dipu_runtime.h"

namespace torch_dipu {

// The message of a failed call: "<what>: <status name>: <runtime message>".
std::string error_message(const char* what, dipu_status status);

// Throws the c10 exception for a failed call: OutOfMemoryError for
// DIPU_STATUS_OUT_OF_MEMORY (torch.OutOfMemoryError in Python), else
// c10::Error (RuntimeError in Python).
[[noreturn]] void throw_status(const char* what, dipu_status status);

}  // namespace torch_dipu

// Calls a dipu_* function and throws if it fails.
#define DIPU_CHECK(call)                                        \
  do {                                                          \
    dipu_status dipu_check_status_ = (call);                    \
    if (dipu_check_status_ != DIPU_OK) {                        \
      ::torch_dipu::throw_status(#call, dipu_check_status_);    \
    }                                                           \
  } while (0)

namespace torch_dipu {

constexpr c10::DeviceType kDipu = c10::DeviceType::PrivateUse1;

inline c10::Device dipu_device(int32_t index) {
  return c10::Device(kDipu, static_cast<c10::DeviceIndex>(index));
}

// The calling thread's current dipu device.
inline int32_t current_device() {
  int32_t d = 0;
  DIPU_CHECK(dipu_device_get(&d));
  return d;
}

// The index of `d`, or the current device when `d` has none.
inline int32_t device_index(c10::Device d) {
  return d.has_index() ? d.index() : current_device();
}

// A dipu stream as c10 keeps it: (device, id); the id is the runtime's.
inline c10::Stream to_c10(dipu_stream s) {
  return c10::Stream(c10::Stream::UNSAFE, dipu_device(s.device),
                     static_cast<c10::StreamId>(s.id));
}

// The dipu stream a c10::Stream names.
inline dipu_stream from_c10(c10::Stream s) {
  TORCH_CHECK(s.device_type() == kDipu, "expected a dipu stream, got one of ",
              s.device());
  TORCH_CHECK(s.id() >= 0 && s.id() <= static_cast<c10::StreamId>(UINT32_MAX),
              "stream id ", s.id(), " is not a dipu stream id");
  dipu_stream out{};
  DIPU_CHECK(dipu_stream_from_id(s.device_index(),
                                 static_cast<uint32_t>(s.id()), &out));
  return out;
}

// The calling thread's current stream on `device`.
inline dipu_stream current_stream(int32_t device) {
  dipu_stream s{};
  DIPU_CHECK(dipu_stream_current(device, &s));
  return s;
}

}  // namespace torch_dipu
