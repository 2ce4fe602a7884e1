// The boxed CPU fallback: every op without a dipu kernel runs on the CPU
// (at::native::cpu_fallback copies arguments over and results back).
// Random ops draw from a CPU generator seeded from the dipu generator's
// Philox seed and offset, so torch.manual_seed makes dipu runs repeatable.
// DIPU_DUMP_OP_ARGS (0-3) and DIPU_LOG_FALLBACK_INFO, read at each call,
// say what falls back.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/mse_loss.h>
#include <ATen/ops/zeros_like.h>
#include <torch/library.h>

#include <cstdlib>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

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

// DIPU_DUMP_OP_ARGS >= 1: "[add.out]: dipu_fallback" (DIPU's line, the
// same as a DIOPI call's "[add.out]: diopiAdd"), >= 2 with the arguments;
// DIPU_LOG_FALLBACK_INFO: "dipu: fallback to cpu: aten::add.out".
void log_call(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  int dump = env_level("DIPU_DUMP_OP_ARGS");
  int log = env_level("DIPU_LOG_FALLBACK_INFO");
  if (dump == 0 && log == 0) return;
  std::ostringstream out;
  const auto& name = op.schema().operator_name();
  if (log > 0) out << "dipu: fallback to cpu: " << name << (dump > 0 ? "\n" : "");
  if (dump > 0) {
    std::string n = name.name.rfind("aten::", 0) == 0 ? name.name.substr(6) : name.name;
    out << "[" << n << (name.overload_name.empty() ? "" : ".") << name.overload_name
        << "]: dipu_fallback";
  }
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

// native_batch_norm updates running_mean and running_var in training
// though its schema does not mark them written, so cpu_fallback would not
// copy them back: hand it CPU copies and write those back afterwards.
void batch_norm_on_cpu(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  size_t n = op.schema().arguments().size();
  size_t base = stack->size() - n;
  std::vector<std::pair<at::Tensor, at::Tensor>> back;
  for (size_t i : {size_t{3}, size_t{4}}) {  // running_mean, running_var
    c10::IValue& v = (*stack)[base + i];
    if (!v.isTensor() || !v.toTensor().defined() || v.toTensor().is_cpu()) continue;
    at::Tensor dev = v.toTensor();
    at::Tensor cpu = dev.cpu();
    back.emplace_back(dev, cpu);
    v = c10::IValue(cpu);
  }
  at::native::cpu_fallback(op, stack);
  for (auto& [dev, cpu] : back) dev.copy_(cpu);
}

// aten::mse_loss.out on the CPU writes the elementwise loss into `out`
// first, which warns when a reduced (0-dim) `out` is resized: run the
// functional op on CPU copies and copy its result into `out`.
void mse_loss_out_on_cpu(torch::jit::Stack* stack) {
  at::Tensor out = torch::jit::pop(*stack).toTensor();
  int64_t reduction = torch::jit::pop(*stack).toInt();
  at::Tensor target = torch::jit::pop(*stack).toTensor();
  at::Tensor self = torch::jit::pop(*stack).toTensor();
  at::Tensor result = at::mse_loss(self.cpu(), target.cpu(), reduction);
  if (out.sizes() != result.sizes()) out.resize_(result.sizes());
  out.copy_(result);
  torch::jit::push(*stack, out);
}

void dipu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  log_call(op, *stack);
  check_devices(op, *stack);
  swap_generators(op, stack);
  const auto& name = op.schema().operator_name();
  if (name.name == "aten::native_batch_norm" && name.overload_name.empty()) {
    batch_norm_on_cpu(op, stack);
    return;
  }
  if (name.name == "aten::mse_loss" && name.overload_name == "out") {
    mse_loss_out_on_cpu(stack);
    return;
  }
  at::native::cpu_fallback(op, stack);
}

// Convolutions reach a backend without its own as *_overrideable ops,
// which the CPU does not have: run them on the CPU as aten::convolution
// (the same arguments) and aten::convolution_backward (which also takes
// the bias' sizes, after the weight).
void convolution_on_cpu(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  static const auto conv =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::convolution", "");
  log_call(op, *stack);
  check_devices(op, *stack);
  at::native::cpu_fallback(conv, stack);
}

void convolution_backward_on_cpu(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  static const auto backward =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::convolution_backward", "");
  log_call(op, *stack);
  check_devices(op, *stack);
  // (grad_output, input, weight, stride, padding, dilation, transposed,
  //  output_padding, groups, output_mask)
  size_t n = op.schema().arguments().size();
  size_t base = stack->size() - n;
  const at::Tensor weight = (*stack)[base + 2].toTensor();
  bool transposed = (*stack)[base + 6].toBool();
  int64_t groups = (*stack)[base + 8].toSymInt().expect_int();
  int64_t channels = transposed ? weight.size(1) * groups : weight.size(0);
  std::vector<c10::SymInt> bias_sizes{c10::SymInt(channels)};
  stack->insert(stack->begin() + static_cast<std::ptrdiff_t>(base + 3),
                c10::IValue(c10::SymIntArrayRef(bias_sizes)));
  at::native::cpu_fallback(backward, stack);
}

// The fused LSTM cell that nn.LSTM uses on every device but the CPU, which
// has no kernel for it: written with ATen ops on the dipu tensors (each
// falls back). The workspace holds the activated gates (i, f, g, o).
std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_lstm_cell(
    const at::Tensor& input_gates, const at::Tensor& hidden_gates, const at::Tensor& cx,
    const std::optional<at::Tensor>& input_bias, const std::optional<at::Tensor>& hidden_bias) {
  at::Tensor gates = input_gates + hidden_gates;
  if (input_bias && input_bias->defined()) gates = gates + *input_bias;
  if (hidden_bias && hidden_bias->defined()) gates = gates + *hidden_bias;
  auto chunks = gates.chunk(4, 1);
  at::Tensor i = chunks[0].sigmoid();
  at::Tensor f = chunks[1].sigmoid();
  at::Tensor g = chunks[2].tanh();
  at::Tensor o = chunks[3].sigmoid();
  at::Tensor cy = f * cx + i * g;
  at::Tensor hy = o * cy.tanh();
  return {hy, cy, at::cat({i, f, g, o}, 1)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_lstm_cell_backward(
    const std::optional<at::Tensor>& grad_hy, const std::optional<at::Tensor>& grad_cy,
    const at::Tensor& cx, const at::Tensor& cy, const at::Tensor& workspace, bool has_bias) {
  bool has_hy = grad_hy && grad_hy->defined();
  bool has_cy = grad_cy && grad_cy->defined();
  if (!has_hy && !has_cy) return {at::Tensor(), at::Tensor(), at::Tensor()};
  auto w = workspace.chunk(4, 1);
  const at::Tensor &i = w[0], &f = w[1], &g = w[2], &o = w[3];
  at::Tensor tanh_cy = cy.tanh();
  at::Tensor zeros = at::zeros_like(cy);
  at::Tensor ghy = has_hy ? *grad_hy : zeros;
  at::Tensor gcy = (has_cy ? *grad_cy : zeros) + ghy * o * (1 - tanh_cy * tanh_cy);
  at::Tensor gi = gcy * g * i * (1 - i);
  at::Tensor gf = gcy * cx * f * (1 - f);
  at::Tensor gg = gcy * i * (1 - g * g);
  at::Tensor go = ghy * tanh_cy * o * (1 - o);
  at::Tensor grad_gates = at::cat({gi, gf, gg, go}, 1);
  at::Tensor grad_bias = has_bias ? grad_gates.sum(0) : at::Tensor();
  return {grad_gates, gcy * f, grad_bias};
}

// The fused GRU cell that nn.GRU and nn.GRUCell use on every device but
// the CPU, which has no kernel for it, likewise. With r, z, n the reset,
// update and new gates: hy = n + z * (hx - n). The workspace holds r, z,
// n, the hidden n gate (bias included) and hx, for the backward.
std::tuple<at::Tensor, at::Tensor> fused_gru_cell(
    const at::Tensor& input_gates, const at::Tensor& hidden_gates, const at::Tensor& hx,
    const std::optional<at::Tensor>& input_bias, const std::optional<at::Tensor>& hidden_bias) {
  at::Tensor ig = input_gates;
  at::Tensor hg = hidden_gates;
  if (input_bias && input_bias->defined()) ig = ig + *input_bias;
  if (hidden_bias && hidden_bias->defined()) hg = hg + *hidden_bias;
  auto i = ig.chunk(3, 1);
  auto h = hg.chunk(3, 1);
  at::Tensor r = (i[0] + h[0]).sigmoid();
  at::Tensor z = (i[1] + h[1]).sigmoid();
  at::Tensor n = (i[2] + r * h[2]).tanh();
  at::Tensor hy = n + z * (hx - n);
  return {hy, at::cat({r, z, n, h[2], hx}, 1)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> fused_gru_cell_backward(
    const at::Tensor& grad_hy, const at::Tensor& workspace, bool has_bias) {
  auto w = workspace.chunk(5, 1);
  const at::Tensor &r = w[0], &z = w[1], &n = w[2], &hn = w[3], &hx = w[4];
  at::Tensor gz = grad_hy * (hx - n) * z * (1 - z);
  at::Tensor gn = grad_hy * (1 - z) * (1 - n * n);
  at::Tensor gr = gn * hn * r * (1 - r);
  at::Tensor grad_input_gates = at::cat({gr, gz, gn}, 1);
  at::Tensor grad_hidden_gates = at::cat({gr, gz, gn * r}, 1);
  at::Tensor grad_hx = grad_hy * z;
  at::Tensor grad_input_bias = has_bias ? grad_input_gates.sum(0) : at::Tensor();
  at::Tensor grad_hidden_bias = has_bias ? grad_hidden_gates.sum(0) : at::Tensor();
  return {grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias, grad_hidden_bias};
}

}  // namespace

void dipu_fallback_boxed(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  dipu_fallback(op, stack);
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&dipu_fallback>());
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("convolution_overrideable",
         torch::CppFunction::makeFromBoxedFunction<&convolution_on_cpu>());
  m.impl("convolution_backward_overrideable",
         torch::CppFunction::makeFromBoxedFunction<&convolution_backward_on_cpu>());
  m.impl("_thnn_fused_lstm_cell", fused_lstm_cell);
  m.impl("_thnn_fused_lstm_cell_backward_impl", fused_lstm_cell_backward);
  m.impl("_thnn_fused_gru_cell", fused_gru_cell);
  m.impl("_thnn_fused_gru_cell_backward", fused_gru_cell_backward);
}

}  // namespace torch_dipu
