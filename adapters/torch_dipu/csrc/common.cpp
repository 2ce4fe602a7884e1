#include "common.h"

#include <c10/util/Exception.h>

namespace torch_dipu {

std::string error_message(const char* what, dipu_status status) {
  std::string msg = what;
  msg += ": ";
  msg += dipu_status_str(status);
  msg += ": ";
  msg += dipu_last_error_message();
  return msg;
}

void throw_status(const char* what, dipu_status status) {
  std::string msg = error_message(what, status);
  if (status == DIPU_STATUS_OUT_OF_MEMORY) {
    TORCH_CHECK_WITH(OutOfMemoryError, false, "dipu out of memory: ", msg);
  }
  if (status == DIPU_STATUS_INVALID_DEVICE) {
    int32_t count = 0;
    dipu_device_count(&count);
    TORCH_CHECK(false, msg, " (dipu has ", count, " devices)");
  }
  TORCH_CHECK(false, msg);
}

}  // namespace torch_dipu
