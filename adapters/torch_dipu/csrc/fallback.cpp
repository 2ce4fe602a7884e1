// The boxed CPU fallback: every op without a dipu kernel runs on the CPU
// (at::native::cpu_fallback copies arguments over and results back).
// Random ops draw from a CPU generator seeded from the dipu generator's
// Philox seed and offset, so torch.manual_seed makes dipu runs repeatable.
// DIPU_DUMP_OP_ARGS (0-3) and DIPU_LOG_FALLBACK_INFO, read at each call,
// say what falls back.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/CPUFallback.h>
#include <torch/library.h>

#include <cstdlib>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>

#include "common.h"
#include "generator.h"

namespace torch_dipu {
namespace {

int env_level(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return 0;
  std::string s(v);
  if (s == "True" || s == "true" || s == "ON" || s == "on") return 1;
  char* end = nullptr;
  long n = std::strtol(v, &end, 10);
  return (end != nullptr && *end == '\0' && n > 0) ? static_cast<int>(n) : 0;
}

void describe(std::ostream& out, const c10::IValue& v, int level) {
  if (v.isTensor()) {
    const auto& t = v.toTensor();
    if (!t.defined()) {
      out << "undefined";
      return;
    }
    out << t.device() << " " << t.scalar_type() << t.sizes();
    if (level >= 3) out << " strides " << t.strides() << " offset " << t.storage_offset();
  } else if (v.isTensorList()) {
    out << "[";
    for (const auto& t : v.toTensorList()) {
      describe(out, c10::IValue(at::Tensor(t)), level);
      out << ", ";
    }
    out << "]";
  } else if (level >= 3) {
    out << v;
  } else {
    out << v.tagKind();
  }
}

void log_call(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  int dump = env_level("DIPU_DUMP_OP_ARGS");
  int log = env_level("DIPU_LOG_FALLBACK_INFO");
  if (dump == 0 && log == 0) return;
  std::ostringstream out;
  out << "dipu: fallback to cpu: " << op.schema().operator_name();
  if (dump >= 2) {
    const auto& args = op.schema().arguments();
    size_t n = args.size();
    for (size_t i = 0; i < n; ++i) {
      out << "\n  " << args[i].name() << ": ";
      describe(out, torch::jit::peek(stack, i, n), dump);
    }
  }
  std::cerr << out.str() << std::endl;
}

// The devices of the op's tensor arguments must agree: dipu tensors of one
// device, plus CPU scalars (0-dim), as on CUDA.
void check_devices(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  size_t n = op.schema().arguments().size();
  std::optional<c10::Device> dipu;
  std::optional<c10::Device> other;
  auto visit = [&](const at::Tensor& t) {
    if (!t.defined()) return;
    if (t.device().type() == kDipu) {
      if (!dipu) dipu = t.device();
      else if (*dipu != t.device()) other = t.device();
    } else if (!(t.is_cpu() && t.dim() == 0)) {
      other = t.device();
    }
  };
  for (size_t i = 0; i < n; ++i) {
    const auto& v = torch::jit::peek(stack, i, n);
    if (v.isTensor()) visit(v.toTensor());
    else if (v.isTensorList())
      for (const auto& ref : v.toTensorList()) visit(ref);
    else if (v.isOptionalTensorList())
      for (const auto& ref : v.toOptionalTensorList()) {
        std::optional<at::Tensor> t = ref;
        if (t.has_value()) visit(*t);
      }
  }
  TORCH_CHECK(!(dipu && other),
              "Expected all tensors to be on the same device, but found at least two devices, ",
              *dipu, " and ", other.value_or(*dipu), "! (in ", op.schema().operator_name(), ")");
}

// The dipu device of the op's first dipu tensor argument, if any.
std::optional<c10::DeviceIndex> first_dipu_device(const c10::OperatorHandle& op,
                                                  const torch::jit::Stack& stack) {
  size_t n = op.schema().arguments().size();
  for (size_t i = 0; i < n; ++i) {
    const auto& v = torch::jit::peek(stack, i, n);
    if (v.isTensor() && v.toTensor().defined() && v.toTensor().device().type() == kDipu)
      return v.toTensor().device().index();
    if (v.isTensorList())
      for (const auto& ref : v.toTensorList()) {
        at::Tensor t = ref;
        if (t.device().type() == kDipu) return t.device().index();
      }
  }
  return std::nullopt;
}

// Replaces a dipu (or absent) generator argument with a CPU generator
// seeded from the dipu generator's Philox inputs.
void swap_generators(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& args = op.schema().arguments();
  size_t n = args.size();
  for (size_t i = 0; i < n; ++i) {
    const auto& type = args[i].real_type();
    bool is_gen = type->kind() == c10::TypeKind::GeneratorType ||
                  (type->kind() == c10::TypeKind::OptionalType &&
                   type->castRaw<c10::OptionalType>()->getElementType()->kind() ==
                       c10::TypeKind::GeneratorType);
    if (!is_gen) continue;
    c10::IValue& v = (*stack)[stack->size() - n + i];
    at::Generator gen;
    if (v.isGenerator()) {
      gen = v.toGenerator();
      if (gen.device().type() != kDipu) continue;  // a CPU generator stays
    } else {
      auto device = first_dipu_device(op, *stack);
      if (!device) continue;  // no dipu tensor: the CPU default generator
      gen = default_generator(*device);
    }
    auto [seed, offset] = gen.get<DipuGeneratorImpl>()->philox_inputs(4);
    auto cpu = at::detail::createCPUGenerator(seed ^ (offset * 0x9E3779B97F4A7C15ULL));
    v = c10::IValue(cpu);
  }
}

void dipu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  log_call(op, *stack);
  check_devices(op, *stack);
  swap_generators(op, stack);
  at::native::cpu_fallback(op, stack);
}

}  // namespace

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&dipu_fallback>());
}

}  // namespace torch_dipu
