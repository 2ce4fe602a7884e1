// The dipu device allocator (c10::DeviceAllocator over dipu_malloc on the
// current stream) and the pinned-host allocator, for the other units.
#pragma once

#include <c10/core/Allocator.h>

namespace torch_dipu {

// The device allocator registered for PrivateUse1.
c10::Allocator* device_allocator();

// The pinned-host allocator (pin_memory, pinned copies).
c10::Allocator* host_allocator();

}  // namespace torch_dipu
