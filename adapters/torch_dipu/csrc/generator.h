// Random generators of dipu devices (Philox seed and offset).
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

#include <cstdint>
#include <mutex>
#include <utility>

namespace torch_dipu {

// A dipu generator. The default generator of a device is the runtime's
// (dipu_generator_*), shared with every C user of the process; other
// generators (torch.Generator(device="dipu")) keep their own seed and
// offset. The state is 16 bytes: seed and offset, little-endian u64.
class DipuGeneratorImpl : public c10::GeneratorImpl {
 public:
  DipuGeneratorImpl(c10::DeviceIndex device, bool is_default);

  void set_current_seed(uint64_t seed) override;
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override;
  uint64_t current_seed() const override;
  uint64_t seed() override;
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;

  // Reserves `increment` Philox values: (seed, start offset).
  std::pair<uint64_t, uint64_t> philox_inputs(uint64_t increment);

  static c10::DeviceType device_type();

 private:
  DipuGeneratorImpl* clone_impl() const override;

  bool is_default_;
  mutable std::mutex mutex_;
  uint64_t seed_ = 67280421310721ULL;
  uint64_t offset_ = 0;
};

// The default generator of `device` (-1: the current device).
const at::Generator& default_generator(c10::DeviceIndex device);

// A new generator of `device` (-1: the current device).
at::Generator new_generator(c10::DeviceIndex device);

}  // namespace torch_dipu
