// The native kernels' helpers shared between units.
#pragma once

#include <c10/core/StorageImpl.h>

#include <cstddef>

namespace torch_dipu {

// Gives `storage` `nbytes` bytes of new dipu memory, keeping the old
// contents (up to the smaller size) with a device-to-device copy on the
// current stream. The generic resize copies with host memcpy, which device
// memory does not allow.
void resize_storage_bytes(c10::StorageImpl* storage, size_t nbytes);

}  // namespace torch_dipu
