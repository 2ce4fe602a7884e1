// DIOPI dispatch: ATen ops on dipu tensors run as a vendor's DIOPI kernels
// (libdiopi_impl_<vendor>.so, opened through the runtime at import). The
// generated registrations (gen_diopi.py over diopi_functions.yaml) use the
// helpers here: a stack descriptor per tensor argument, scalars and sizes in
// DIOPI's form, and one Scope per wrapped ATen op that guards the device,
// makes the DIOPI context on the current stream when the first DIOPI
// function is called, checks every status and prints DIPU_DUMP_OP_ARGS.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ExpandUtils.h>
#include <ATen/core/ivalue.h>
#include <ATen/ops/result_type.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/ArrayRef.h>

#include <torch/library.h>

#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "common.h"
#include "diopi/dipu_diopi.h"
#include "diopi/functions.h"
#include "diopi/functions_ext.h"

namespace torch_dipu::diopi {

// ---- the library and the variables ----------------------------------------

// Opens the kernel library (dipu_diopi_open(NULL)) once; false when there is
// none (then every op stays on the fallback; the reason is in open_error()).
bool library_open();
const std::string& open_error();
// The path of the open library ("" when none).
std::string library_path();
// The library's `name`, or nullptr (missing: the op falls back).
void* lookup(const char* name);
// DIPU_DUMP_OP_ARGS, read once (-1 when unset).
int dump_level();
// DIPU_SYNC_EXEC_MODE set.
bool sync_mode();
// Whether `op` (e.g. "add.out") fully matches a regex of the comma list in
// DIPU_FORCE_FALLBACK_OPS_LIST / DIPU_AUTOCOMPARE_OPS_LIST (or their files).
bool force_fallback(const std::string& op);
bool autocompare(const std::string& op);

// ---- arguments -------------------------------------------------------------

// Thrown when the library answers diopiForceFallbackToCPU or
// diopiDtypeNotSupported, or an argument has no DIOPI form: the generated
// wrapper then runs the op on the CPU fallback.
struct NeedsFallback {};

// The diopiDtype_t of an ATen dtype (-1 for one DIOPI lacks: uint16/32/64,
// float8, ...; a descriptor of one sends the op to the fallback).
int32_t dtype_of(at::ScalarType t);

// A tensor descriptor on the caller's stack, for one call: `T(x)` converts to
// a (const) diopiTensorHandle_t; an undefined tensor is NULL.
class T {
 public:
  explicit T(const at::Tensor& t);
  explicit T(const std::optional<at::Tensor>& t)
      : T(t.has_value() ? *t : at::Tensor()) {}
  operator diopiTensorHandle_t() { return defined_ ? &desc_ : nullptr; }
  operator diopiConstTensorHandle_t() { return defined_ ? &desc_ : nullptr; }

 private:
  diopiTensor desc_;
  bool defined_;
};

// A scalar for one call: `S(x)` converts to const diopiScalar_t*; an absent
// optional is NULL.
class S {
 public:
  explicit S(const at::Scalar& s);
  explicit S(const std::optional<at::Scalar>& s);
  operator const diopiScalar_t*() const { return present_ ? &s_ : nullptr; }

 private:
  diopiScalar_t s_{};
  bool present_ = true;
};

// An int list by value (borrowed for the call).
inline diopiSize_t Z(c10::IntArrayRef a) {
  return diopiSize_t{a.data(), static_cast<int64_t>(a.size())};
}

// The descriptors of a list of defined tensors, contiguous, for Cat.
class TList {
 public:
  explicit TList(const std::vector<at::Tensor>& ts);
  // Mutable, as DIOPI's list parameters are (diopiCat, diopiStack).
  diopiConstTensorHandle_t* data() { return handles_.data(); }
  int64_t size() const { return static_cast<int64_t>(handles_.size()); }

 private:
  std::vector<diopiTensor> descs_;
  std::vector<diopiConstTensorHandle_t> handles_;
};

// The default generator of `device` as DIOPI's handle.
diopiGeneratorHandle_t generator(int32_t device);

// ---- one wrapped ATen op ---------------------------------------------------

// One wrapped ATen op: guards `device`; at the first DIOPI call (ctx())
// prints the level-1 dump line and makes the context on the device's current
// stream; destroys it when the wrapper returns (the kernels stay queued).
class Scope {
 public:
  Scope(const char* op, c10::Device device);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

  // Checks the status of DIOPI function `fn` (throws with the library's
  // last error, or NeedsFallback) and syncs in DIPU_SYNC_EXEC_MODE.
  void check(const char* fn, diopiError_t status);
  // The context for a call of `fn` (printed at DIPU_DUMP_OP_ARGS >= 1).
  diopiContextHandle_t ctx(const char* fn);
  int32_t device() const { return device_; }
  const char* op() const { return op_; }

 private:
  const char* op_;
  c10::DeviceGuard guard_;
  int32_t device_;
  diopiContextHandle_t ctx_ = nullptr;
  dipu_stream stream_{};
};

// Calls DIOPI function `fn` (pointer `p`) with the scope's context.
template <typename F, typename... A>
inline void invoke(Scope& scope, const char* fn, F p, A&&... args) {
  diopiContextHandle_t ctx = scope.ctx(fn);
  scope.check(fn, p(ctx, std::forward<A>(args)...));
}

// Prints one argument at DIPU_DUMP_OP_ARGS >= 2.
void dump_arg(const char* name, const c10::IValue& v);

// Runs `op` (its boxed stack) on the CPU through the boxed fallback.
void fallback_boxed(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// ---- helpers for the wrappers ------------------------------------------------

// The dipu device of the first defined dipu tensor of `ts`.
c10::Device device_of(std::initializer_list<const at::Tensor*> ts);
// `t` as an argument of a DIOPI call on `device`: a CPU 0-dim tensor becomes
// a dipu tensor (filled on the device, no wait), `dtype` casts.
at::Tensor on_device(const at::Tensor& t, c10::Device device,
                     std::optional<at::ScalarType> dtype = std::nullopt);
// A CPU 0-dim tensor (a scalar operand as ATen passes it).
inline bool is_cpu_scalar(const at::Tensor& t) {
  return t.defined() && t.is_cpu() && t.dim() == 0;
}
// A new dipu tensor.
at::Tensor empty(c10::IntArrayRef size, at::ScalarType dtype, c10::Device device);
// Makes `out` `size` (resize_output's rules) and says whether it can take
// the result directly (dtype `dtype`); otherwise the wrapper computes into a
// temporary and copies.
bool prepare_out(const at::Tensor& out, c10::IntArrayRef size, at::ScalarType dtype);

// ---- output handling and the families' shapes -------------------------------

// Where a DIOPI function writes a result of `size` and `dtype` for `out`:
// `out` itself when its dtype is `dtype` (after resize_output), else a
// temporary copied into `out` by finish().
class Dest {
 public:
  Dest(const at::Tensor& out, c10::IntArrayRef size, at::ScalarType dtype);
  const at::Tensor& tensor() const { return direct_ ? out_ : tmp_; }
  void finish();

 private:
  const at::Tensor& out_;
  at::Tensor tmp_;
  bool direct_;
};

// An elementwise binary op into `out`: inputs cast to out's dtype (compare:
// to their common dtype, out bool), CPU scalars handed to `run_scalar`
// (returns false when the library lacks the Scalar function) or moved to
// the device, inputs expanded to the broadcast shape.
template <typename FT, typename FS>
const at::Tensor& binary_out(Scope& scope, const at::Tensor& self, const at::Tensor& other,
                             const at::Tensor& out, bool compare, FT run, FS run_scalar) {
  c10::Device dev(kDipu, static_cast<c10::DeviceIndex>(scope.device()));
  at::ScalarType common = at::result_type(self, other);
  at::ScalarType ct = compare ? common : out.scalar_type();
  at::ScalarType rt = compare ? at::kBool : ct;
  if constexpr (!std::is_same_v<FS, std::nullptr_t>) {
    if (is_cpu_scalar(other) && !is_cpu_scalar(self)) {
      at::Tensor a = on_device(self, dev, ct);
      Dest d(out, a.sizes(), rt);
      if (a.numel() == 0) return out;
      if (run_scalar(d.tensor(), a, other.item())) {
        d.finish();
        return out;
      }
    }
  }
  at::Tensor a = on_device(self, dev, ct);
  at::Tensor b = on_device(other, dev, ct);
  auto shape = at::infer_size_dimvector(a.sizes(), b.sizes());
  Dest d(out, shape, rt);
  if (d.tensor().numel() == 0) return out;
  run(d.tensor(), a.expand(shape), b.expand(shape));
  d.finish();
  return out;
}

// A tensor-and-Scalar op into `out` (compare: bool out).
template <typename F>
const at::Tensor& scalar_out(Scope& scope, const at::Tensor& self, const at::Scalar& other,
                             const at::Tensor& out, bool compare, F run) {
  c10::Device dev(kDipu, static_cast<c10::DeviceIndex>(scope.device()));
  at::ScalarType ct = compare ? at::result_type(self, other) : out.scalar_type();
  at::Tensor a = on_device(self, dev, ct);
  Dest d(out, a.sizes(), compare ? at::kBool : ct);
  if (a.numel() == 0) return out;
  run(d.tensor(), a, other);
  d.finish();
  return out;
}

// A unary op into `out`, computed in out's dtype.
template <typename F>
const at::Tensor& unary_out(Scope& scope, const at::Tensor& self, const at::Tensor& out, F run) {
  c10::Device dev(kDipu, static_cast<c10::DeviceIndex>(scope.device()));
  at::Tensor a = on_device(self, dev, out.scalar_type());
  Dest d(out, a.sizes(), out.scalar_type());
  if (a.numel() == 0) return out;
  run(d.tensor(), a);
  d.finish();
  return out;
}

// SymInt lists and values as plain ints.
inline c10::IntArrayRef ints(c10::SymIntArrayRef a) { return C10_AS_INTARRAYREF_SLOW(a); }
inline int64_t ival(const c10::SymInt& s) { return s.expect_int(); }
// A 2-element pooling parameter: `a` (1 or 2 values), `dflt` when empty.
std::array<int64_t, 2> pair(c10::IntArrayRef a, c10::IntArrayRef dflt);
// A new output of an elementwise op of `a` and `b`: the broadcast size,
// the common dtype and the strides ATen's TensorIterator gives it (the
// memory format of the inputs, the first one's first).
at::Tensor elementwise_out(const at::Tensor& a, const at::Tensor& b);
// The memory format of a 2-d convolution's output and gradients: channels
// last when the input or the weight is (ATen's rule for its CPU and CUDA
// backends), else contiguous.
inline at::MemoryFormat conv_memory_format(const at::Tensor& input, const at::Tensor& weight) {
  bool cl = input.suggest_memory_format() == at::MemoryFormat::ChannelsLast ||
            weight.suggest_memory_format() == at::MemoryFormat::ChannelsLast;
  return cl ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
}
// Whether `gen` is absent or the default generator of `device`.
bool default_gen(const std::optional<at::Generator>& gen, int32_t device);

// The scope's device.
inline c10::Device scope_device(const Scope& s) {
  return c10::Device(kDipu, static_cast<c10::DeviceIndex>(s.device()));
}
// The dims a reduction over `dim` (None or empty: all) covers, wrapped.
std::vector<int64_t> reduce_dims(const at::Tensor& self, at::OptionalIntArrayRef dim);
// `self`'s shape reduced over `dims`.
std::vector<int64_t> reduced_shape(const at::Tensor& self, c10::IntArrayRef dims, bool keepdim);
// nll_loss's total_weight: the summed weight of the targets not ignored
// (0 for reduction none), computed with ATen ops on the device.
void nll_total_weight(const at::Tensor& total_weight, const at::Tensor& target,
                      const std::optional<at::Tensor>& weight, int64_t reduction,
                      int64_t ignore_index);
// _fused_adam_ / _fused_adamw_: one DIOPI call per parameter (the step
// counts are read from the device once).
using AdamFn = decltype(&::diopiAdam);
void fused_adam(Scope& scope, at::TensorList params, at::TensorList grads,
                at::TensorList exp_avgs, at::TensorList exp_avg_sqs,
                at::TensorList max_exp_avg_sqs, at::TensorList state_steps, double lr,
                double beta1, double beta2, double weight_decay, double eps, bool amsgrad,
                AdamFn fn, const char* name);

// ---- registration ---

// Opens the library and registers the ops of the YAML (once; at import).
void init();

// What became of one ATen op of the YAML at import.
struct OpRecord {
  std::string aten;
  std::string diopi;
  std::string path;  // "diopi", "autocompare", "force_fallback", "keep_default",
                     // "missing <fn>", "no library"
};
std::vector<OpRecord>& records();

// The boxed autocompare kernel around `inner`.
torch::CppFunction autocompare_kernel(c10::KernelFunction inner);

// The registration decision for `aten` whose DIOPI functions `fns` were
// looked up (`found`): returns the path and prints DIPU's one-time notes.
std::string decide(const char* aten, std::initializer_list<const char*> fns,
                   std::initializer_list<bool> found);

template <typename F>
void reg(torch::Library& lib, const char* aten, std::initializer_list<const char*> fns,
         std::initializer_list<bool> found, F fn) {
  std::string path = decide(aten, fns, found);
  try {
    if (path == "diopi") {
      lib.impl(aten, fn);
    } else if (path == "autocompare") {
      lib.impl(aten, autocompare_kernel(c10::KernelFunction::makeFromUnboxedFunction(fn)));
    }
  } catch (const std::exception& e) {
    // A registration torch refuses leaves the op on the fallback.
    records().back().path = std::string("not registered: ") + e.what();
  }
}

// Prints one argument at DIPU_DUMP_OP_ARGS >= 2 (anything an IValue holds).
template <typename X>
void dump(const char* name, const X& x) {
  if constexpr (std::is_constructible_v<c10::IValue, const X&>) {
    dump_arg(name, c10::IValue(x));
  } else if constexpr (std::is_convertible_v<const X&, std::string_view>) {
    dump_arg(name, c10::IValue(std::string(std::string_view(x))));
  } else {
    dump_arg(name, c10::IValue("?"));
  }
}

}  // namespace torch_dipu::diopi

// Calls DIOPI function NAME through the pointer the registration looked up.
#define DIOPI_CALL(scope, NAME, ...) \
  ::torch_dipu::diopi::invoke(scope, #NAME, fn_##NAME, __VA_ARGS__)
