// The c10::GeneratorImpl of dipu devices.
#include "generator.h"

#include <ATen/Utils.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include <cstring>
#include <deque>
#include <random>
#include <vector>

#include "common.h"

namespace torch_dipu {

DipuGeneratorImpl::DipuGeneratorImpl(c10::DeviceIndex device, bool is_default)
    : c10::GeneratorImpl{dipu_device(device), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)},
      is_default_(is_default) {}

c10::DeviceType DipuGeneratorImpl::device_type() { return kDipu; }

void DipuGeneratorImpl::set_current_seed(uint64_t seed) {
  if (is_default_) {
    DIPU_CHECK(dipu_generator_manual_seed(device().index(), seed));
    return;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  seed_ = seed;
  offset_ = 0;
}

void DipuGeneratorImpl::set_offset(uint64_t offset) {
  TORCH_CHECK(offset % 4 == 0, "a dipu generator's offset is a multiple of 4, not ", offset);
  if (is_default_) {
    DIPU_CHECK(dipu_generator_set_offset(device().index(), offset));
    return;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  offset_ = offset;
}

uint64_t DipuGeneratorImpl::get_offset() const {
  if (is_default_) {
    uint64_t out = 0;
    DIPU_CHECK(dipu_generator_get_offset(device().index(), &out));
    return out;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  return offset_;
}

uint64_t DipuGeneratorImpl::current_seed() const {
  if (is_default_) {
    uint64_t out = 0;
    DIPU_CHECK(dipu_generator_initial_seed(device().index(), &out));
    return out;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  return seed_;
}

uint64_t DipuGeneratorImpl::seed() {
  if (is_default_) {
    uint64_t out = 0;
    DIPU_CHECK(dipu_generator_seed(device().index(), &out));
    return out;
  }
  uint64_t s = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  set_current_seed(s);
  return s;
}

c10::intrusive_ptr<c10::TensorImpl> DipuGeneratorImpl::get_state() const {
  uint64_t words[2] = {current_seed(), get_offset()};
  auto state = at::empty({16}, at::TensorOptions().dtype(at::kByte).device(at::kCPU));
  std::memcpy(state.data_ptr(), words, sizeof words);
  return state.getIntrusivePtr();
}

void DipuGeneratorImpl::set_state(const c10::TensorImpl& new_state) {
  at::detail::check_rng_state(new_state);
  TORCH_CHECK(new_state.numel() == 16,
              "a dipu generator state is 16 bytes (seed, offset), not ", new_state.numel());
  uint64_t words[2];
  std::memcpy(words, new_state.data(), sizeof words);
  TORCH_CHECK(words[1] % 4 == 0, "invalid dipu generator state: offset ", words[1],
              " is not a multiple of 4");
  set_current_seed(words[0]);
  set_offset(words[1]);
}

std::pair<uint64_t, uint64_t> DipuGeneratorImpl::philox_inputs(uint64_t increment) {
  if (is_default_) {
    uint64_t seed = 0, offset = 0;
    DIPU_CHECK(dipu_generator_philox_inputs(device().index(), increment, &seed, &offset));
    return {seed, offset};
  }
  std::lock_guard<std::mutex> lock(mutex_);
  uint64_t start = offset_;
  offset_ += (increment + 3) / 4 * 4;
  return {seed_, start};
}

DipuGeneratorImpl* DipuGeneratorImpl::clone_impl() const {
  auto* gen = new DipuGeneratorImpl(device().index(), false);
  gen->seed_ = current_seed();
  gen->offset_ = get_offset();
  return gen;
}

const at::Generator& default_generator(c10::DeviceIndex device) {
  static std::once_flag once;
  static std::vector<at::Generator> generators;
  std::call_once(once, [] {
    int32_t n = 0;
    DIPU_CHECK(dipu_device_count(&n));
    for (int32_t d = 0; d < n; ++d) {
      generators.push_back(at::make_generator<DipuGeneratorImpl>(
          static_cast<c10::DeviceIndex>(d), true));
    }
  });
  int32_t d = device < 0 ? current_device() : device;
  TORCH_CHECK(d < static_cast<int32_t>(generators.size()), "dipu device index ", d,
              " is out of range (dipu has ", generators.size(), " devices)");
  return generators[d];
}

at::Generator new_generator(c10::DeviceIndex device) {
  int32_t d = device < 0 ? current_device() : device;
  int32_t n = 0;
  DIPU_CHECK(dipu_device_count(&n));
  TORCH_CHECK(d < n, "dipu device index ", d, " is out of range (dipu has ", n, " devices)");
  return at::make_generator<DipuGeneratorImpl>(static_cast<c10::DeviceIndex>(d), false);
}

}  // namespace torch_dipu
