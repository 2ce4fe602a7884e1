// at::PrivateUse1HooksInterface: what ATen asks of the accelerator
// (availability, generators, pointers, pinned memory, storage resize).
#include <ATen/core/Tensor.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>

#include "allocator.h"
#include "common.h"
#include "generator.h"
#include "ops.h"

namespace torch_dipu {
namespace {

dipu_pointer_attributes attributes(const void* ptr) {
  dipu_pointer_attributes a{};
  DIPU_CHECK(dipu_pointer_get_attributes(ptr, &a));
  return a;
}

struct DipuHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }

  bool isAvailable() const override { return deviceCount() > 0; }

  const at::Generator& getDefaultGenerator(c10::DeviceIndex device) const override {
    return default_generator(device);
  }

  at::Generator getNewGenerator(c10::DeviceIndex device) const override {
    return new_generator(device);
  }

  at::Device getDeviceFromPtr(void* data) const override {
    dipu_pointer_attributes a = attributes(data);
    TORCH_CHECK(a.memory_type == DIPU_MEMORY_DEVICE, "pointer ", data,
                " is not dipu device memory");
    return dipu_device(a.device);
  }

  bool isPinnedPtr(const void* data) const override {
    int32_t init = 0;
    // Asking creates no runtime: nothing is pinned before there is one.
    if (dipu_is_initialized(&init) != DIPU_OK || init == 0) return false;
    return attributes(data).memory_type == DIPU_MEMORY_PINNED;
  }

  c10::Allocator* getPinnedMemoryAllocator() const override { return host_allocator(); }

  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }

  void init() const override {
    int32_t n = 0;
    DIPU_CHECK(dipu_device_count(&n));
  }

  // Counting starts no runtime (a process may fork afterwards).
  c10::DeviceIndex deviceCount() const override {
    int32_t n = 0;
    return dipu_device_count_without_init(&n) == DIPU_OK ? static_cast<c10::DeviceIndex>(n) : 0;
  }

  void setCurrentDevice(c10::DeviceIndex device) const override {
    DIPU_CHECK(dipu_device_set(device));
  }

  c10::DeviceIndex getCurrentDevice() const override {
    return static_cast<c10::DeviceIndex>(current_device());
  }

  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    int32_t old = current_device();
    if (device >= 0 && device != old) DIPU_CHECK(dipu_device_set(device));
    return static_cast<c10::DeviceIndex>(old);
  }

  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override {
    return exchangeDevice(device);
  }

  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    resize_storage_bytes(storage.unsafeGetStorageImpl(), newsize);
  }
};

struct Register {
  Register() {
    static DipuHooks hooks;
    at::RegisterPrivateUse1HooksInterface(&hooks);
  }
};
Register g_register;

}  // namespace
}  // namespace torch_dipu
