// The DIOPI dispatch's runtime side: the kernel library (opened through
// libdipu_runtime.so's dipu_diopi_* functions, found with dlsym so a runtime
// without them just leaves every op on the fallback), DIPU's variables,
// descriptors, the per-op Scope, and autocompare.
#include "diopi.h"

#include "generator.h"

#include <ATen/TensorIterator.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/allclose.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/sub.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros_like.h>
#include <ATen/ops/result_type.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <mutex>
#include <regex>
#include <sstream>

namespace torch_dipu {
// The boxed CPU fallback of fallback.cpp.
void dipu_fallback_boxed(const c10::OperatorHandle& op, torch::jit::Stack* stack);
}  // namespace torch_dipu

namespace torch_dipu::diopi {
namespace {

// The runtime's dipu_diopi_* functions (resolved by name: a runtime
// without them means no DIOPI).
struct Abi {
  dipu_status (*open)(const char*) = nullptr;
  dipu_status (*lookup)(const char*, void**) = nullptr;
  dipu_status (*context_create)(dipu_stream, diopiContextHandle_t*) = nullptr;
  dipu_status (*context_destroy)(diopiContextHandle_t) = nullptr;
  dipu_status (*generator)(int32_t, diopiGeneratorHandle_t*) = nullptr;
  dipu_status (*last_error)(char*, size_t, size_t*) = nullptr;
  dipu_status (*library_path)(char*, size_t, size_t*) = nullptr;
};

struct State {
  Abi abi;
  bool open = false;
  std::string error;
  int dump = -1;
  bool sync = false;
  std::vector<std::regex> force;
  std::vector<std::regex> compare;
  std::vector<std::string> keep;  // DIPU_KEEP_TORCHOP_DEFAULT_IMPL_OPS
};

// DIPU_KEEP_TORCHOP_DEFAULT_IMPL_OPS: exact op names, comma-separated.
std::vector<std::string> name_list(const char* var) {
  std::vector<std::string> out;
  const char* v = std::getenv(var);
  if (v == nullptr) return out;
  std::stringstream ss(v);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t b = item.find_first_not_of(" \t\r\n");
    size_t e = item.find_last_not_of(" \t\r\n");
    if (b != std::string::npos) out.push_back(item.substr(b, e - b + 1));
  }
  return out;
}

std::vector<std::regex> regex_list(const char* var, const char* file) {
  std::string text;
  if (const char* v = std::getenv(var)) text = v;
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) text += "," + line;
  std::vector<std::regex> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t b = item.find_first_not_of(" \t\r\n");
    size_t e = item.find_last_not_of(" \t\r\n");
    if (b == std::string::npos) continue;
    std::string pat = item.substr(b, e - b + 1);
    try {
      out.emplace_back(pat);
    } catch (const std::regex_error&) {
      std::cerr << "dipu: " << var << ": ignoring the bad regex '" << pat << "'" << std::endl;
    }
  }
  return out;
}

int read_dump_level() {
  const char* v = std::getenv("DIPU_DUMP_OP_ARGS");
  if (v == nullptr || *v == '\0') return -1;
  std::string s(v);
  if (s == "True" || s == "true" || s == "ON" || s == "on") return 1;
  char* end = nullptr;
  long n = std::strtol(v, &end, 10);
  return (end != nullptr && *end == '\0' && n >= 0) ? static_cast<int>(n) : 0;
}

template <typename F>
void resolve(void* h, const char* name, F& out) {
  out = reinterpret_cast<F>(dlsym(h, name));
}

State& state() {
  static State* s = [] {
    auto* st = new State();
    st->dump = read_dump_level();
    st->sync = std::getenv("DIPU_SYNC_EXEC_MODE") != nullptr;
    st->force = regex_list("DIPU_FORCE_FALLBACK_OPS_LIST", ".dipu_force_fallback_op_list.config");
    st->compare =
        regex_list("DIPU_AUTOCOMPARE_OPS_LIST", ".specified_autocompare_op_list.config");
    st->keep = name_list("DIPU_KEEP_TORCHOP_DEFAULT_IMPL_OPS");
    // DIPU's build switch, read at run time: DISABLE runs without a kernel
    // library, a path opens that library, INTERNAL (or unset) the default.
    const char* with_env = std::getenv("DIPU_WITH_DIOPI_LIBRARY");
    std::string with = with_env != nullptr ? with_env : "";
    const bool disabled = with == "DISABLE";
    const char* with_path = (with.empty() || with == "INTERNAL") ? nullptr : with_env;
    Dl_info info{};
    void* h = nullptr;
    if (dladdr(reinterpret_cast<void*>(&dipu_version), &info) != 0 && info.dli_fname) {
      h = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
    }
    Abi& a = st->abi;
    if (h != nullptr) {
      resolve(h, "dipu_diopi_open", a.open);
      resolve(h, "dipu_diopi_lookup", a.lookup);
      resolve(h, "dipu_diopi_context_create", a.context_create);
      resolve(h, "dipu_diopi_context_destroy", a.context_destroy);
      resolve(h, "dipu_diopi_generator", a.generator);
      resolve(h, "dipu_diopi_last_error", a.last_error);
      resolve(h, "dipu_diopi_library_path", a.library_path);
    }
    if (!a.open || !a.lookup || !a.context_create || !a.context_destroy || !a.last_error) {
      st->error = "libdipu_runtime.so has no dipu_diopi_* functions";
    } else if (disabled) {
      st->error = "DIPU_WITH_DIOPI_LIBRARY=DISABLE";
    } else {
      // DIPU_DIOPI_LIBRARY, when set, wins (torch_dipu warns when both name a library).
      const char* path = std::getenv("DIPU_DIOPI_LIBRARY") != nullptr ? nullptr : with_path;
      dipu_status rc = a.open(path);
      if (rc == DIPU_OK) {
        st->open = true;
      } else {
        st->error = error_message(path != nullptr ? "dipu_diopi_open(DIPU_WITH_DIOPI_LIBRARY)"
                                                  : "dipu_diopi_open(NULL)",
                                  rc);
      }
    }
    return st;
  }();
  return *s;
}

bool matches(const std::vector<std::regex>& list, const std::string& op) {
  for (const auto& r : list)
    if (std::regex_match(op, r)) return true;
  return false;
}

std::string library_error() {
  auto* f = state().abi.last_error;
  if (f == nullptr) return "";
  size_t needed = 0;
  if (f(nullptr, 0, &needed) != DIPU_OK && needed == 0) return "";
  std::string buf(needed + 1, '\0');
  if (f(buf.data(), buf.size(), &needed) != DIPU_OK) return "";
  buf.resize(std::min(needed, buf.size()));
  while (!buf.empty() && buf.back() == '\0') buf.pop_back();
  return buf;
}

}  // namespace

bool library_open() { return state().open; }
const std::string& open_error() { return state().error; }

std::string library_path() {
  auto* f = state().abi.library_path;
  if (!library_open() || f == nullptr) return "";
  size_t needed = 0;
  f(nullptr, 0, &needed);
  std::string buf(needed + 1, '\0');
  if (f(buf.data(), buf.size(), &needed) != DIPU_OK) return "";
  buf.resize(std::min(needed, buf.size()));
  while (!buf.empty() && buf.back() == '\0') buf.pop_back();
  return buf;
}

void* lookup(const char* name) {
  if (!library_open()) return nullptr;
  void* p = nullptr;
  if (state().abi.lookup(name, &p) != DIPU_OK) return nullptr;
  return p;
}

namespace {
// Set while dump_arg copies a tensor to the host: the ops that copy runs
// are not the user's, and printing theirs would recurse.
thread_local bool t_dumping = false;
}  // namespace

int dump_level() { return t_dumping ? -1 : state().dump; }
bool sync_mode() { return state().sync; }
bool force_fallback(const std::string& op) { return matches(state().force, op); }
bool autocompare(const std::string& op) { return matches(state().compare, op); }

int32_t dtype_of(at::ScalarType t) {
  switch (t) {
    case at::kBool: return diopi_dtype_bool;
    case at::kChar: return diopi_dtype_int8;
    case at::kByte: return diopi_dtype_uint8;
    case at::kShort: return diopi_dtype_int16;
    case at::kInt: return diopi_dtype_int32;
    case at::kLong: return diopi_dtype_int64;
    case at::kHalf: return diopi_dtype_float16;
    case at::kBFloat16: return diopi_dtype_bfloat16;
    case at::kFloat: return diopi_dtype_float32;
    case at::kDouble: return diopi_dtype_float64;
    case at::kComplexFloat: return diopi_dtype_complex64;
    case at::kComplexDouble: return diopi_dtype_complex128;
    default: return -1;
  }
}

T::T(const at::Tensor& t) : desc_{}, defined_(t.defined()) {
  if (!defined_) return;
  // The wrappers move CPU scalars to the device themselves: any other
  // non-dipu tensor is a mistake of the caller, reported as torch does.
  TORCH_CHECK(t.device().type() == kDipu,
              "Expected all tensors to be on the same device, but found at least two devices, ",
              t.device(), " and dipu!");
  desc_.magic = DIPU_DIOPI_TENSOR_MAGIC;
  desc_.dtype = dtype_of(t.scalar_type());
  if (desc_.dtype < 0) throw NeedsFallback{};  // a dtype DIOPI has no name for
  desc_.device = t.is_cpu() ? DIPU_DIOPI_HOST_DEVICE : t.device().index();
  desc_.ndim = static_cast<int32_t>(t.dim());
  const c10::Storage& st = t.storage();
  desc_.storage = st.data_ptr().get();
  desc_.storage_offset = t.storage_offset();
  desc_.storage_nbytes = st.nbytes();
  desc_.shape = desc_.ndim > 0 ? t.sizes().data() : nullptr;
  desc_.strides = desc_.ndim > 0 ? t.strides().data() : nullptr;
}

S::S(const at::Scalar& s) {
  if (s.isFloatingPoint()) {
    s_.stype = diopi_dtype_float64;
    s_.fval = s.toDouble();
  } else if (s.isIntegral(/*includeBool=*/true)) {
    s_.stype = diopi_dtype_int64;
    s_.ival = s.toLong();
  } else {
    throw NeedsFallback{};  // a complex scalar: DIOPI has none
  }
}

S::S(const std::optional<at::Scalar>& s) : S(s.value_or(at::Scalar(0))) {
  present_ = s.has_value();
}

TList::TList(const std::vector<at::Tensor>& ts) {
  descs_.reserve(ts.size());
  handles_.reserve(ts.size());
  for (const auto& t : ts) {
    TORCH_CHECK(t.defined(), "dipu: an undefined tensor in a DIOPI tensor list");
    T d(t);
    descs_.push_back(*static_cast<diopiTensorHandle_t>(d));
  }
  for (auto& d : descs_) handles_.push_back(&d);
}

diopiGeneratorHandle_t generator(int32_t device) {
  auto* f = state().abi.generator;
  TORCH_CHECK(f != nullptr, "dipu: the runtime has no dipu_diopi_generator");
  diopiGeneratorHandle_t g = nullptr;
  DIPU_CHECK(f(device, &g));
  return g;
}

Scope::Scope(const char* op, c10::Device device)
    : op_(op), guard_(device), device_(device.index()) {}

Scope::~Scope() {
  if (ctx_ != nullptr) (void)state().abi.context_destroy(ctx_);
}

diopiContextHandle_t Scope::ctx(const char* fn) {
  if (dump_level() >= 1) std::cerr << "[" << op_ << "]: " << fn << std::endl;
  if (ctx_ == nullptr) {
    stream_ = current_stream(device_);
    DIPU_CHECK(state().abi.context_create(stream_, &ctx_));
  }
  return ctx_;
}

void Scope::check(const char* fn, diopiError_t status) {
  if (status == diopiForceFallbackToCPU || status == diopiDtypeNotSupported) {
    throw NeedsFallback{};
  }
  if (status != diopiSuccess) {
    std::string msg = library_error();
    TORCH_CHECK(false, "dipu: ", op_, ": ", fn, " failed with diopiError_t ",
                static_cast<int>(status), msg.empty() ? "" : ": ", msg);
  }
  if (sync_mode()) DIPU_CHECK(dipu_stream_synchronize(stream_));
}

void dump_arg(const char* name, const c10::IValue& v) {
  std::ostringstream out;
  out << "  " << name << ": ";
  if (v.isTensor()) {
    const auto& t = v.toTensor();
    if (!t.defined()) {
      out << "undefined";
    } else {
      out << t.device() << " " << t.scalar_type() << t.sizes() << " strides " << t.strides()
          << " offset " << t.storage_offset();
      if (dump_level() >= 3) {
        t_dumping = true;
        try {
          out << "\n" << t.cpu();
        } catch (...) {
          t_dumping = false;
          throw;
        }
        t_dumping = false;
      }
    }
  } else {
    out << v;
  }
  std::cerr << out.str() << std::endl;
}

void fallback_boxed(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  dipu_fallback_boxed(op, stack);
}

c10::Device device_of(std::initializer_list<const at::Tensor*> ts) {
  for (const at::Tensor* t : ts)
    if (t != nullptr && t->defined() && t->device().type() == kDipu) return t->device();
  return dipu_device(current_device());
}

at::Tensor empty(c10::IntArrayRef size, at::ScalarType dtype, c10::Device device) {
  return at::empty(size, at::TensorOptions().dtype(dtype).device(device));
}

at::Tensor on_device(const at::Tensor& t, c10::Device device,
                     std::optional<at::ScalarType> dtype) {
  if (!t.defined()) return t;
  at::ScalarType want = dtype.value_or(t.scalar_type());
  if (t.device().type() != kDipu) {
    TORCH_CHECK(t.dim() == 0, "dipu: expected a dipu tensor, got one on ", t.device());
    return empty({}, want, device).fill_(t.item());
  }
  return t.scalar_type() == want ? t : t.to(want);
}

bool prepare_out(const at::Tensor& out, c10::IntArrayRef size, at::ScalarType dtype) {
  at::native::resize_output(out, size);
  return out.scalar_type() == dtype;
}


Dest::Dest(const at::Tensor& out, c10::IntArrayRef size, at::ScalarType dtype)
    : out_(out), direct_(prepare_out(out, size, dtype)) {
  if (!direct_) tmp_ = empty(size, dtype, out.device());
}

void Dest::finish() {
  if (!direct_) out_.copy_(tmp_);
}

at::Tensor elementwise_out(const at::Tensor& a, const at::Tensor& b) {
  at::Tensor out;
  // TensorIterator allocates the undefined output (on a's device, through
  // dipu's empty_strided) and launches nothing.
  auto iter = at::TensorIterator::binary_op(out, a, b);
  return iter.output();
}

std::array<int64_t, 2> pair(c10::IntArrayRef a, c10::IntArrayRef dflt) {
  if (a.empty()) a = dflt;
  TORCH_CHECK(a.size() == 1 || a.size() == 2, "dipu: expected 1 or 2 values, got ", a);
  return {a[0], a.size() == 2 ? a[1] : a[0]};
}

bool default_gen(const std::optional<at::Generator>& gen, int32_t device) {
  if (!gen.has_value() || !gen->defined()) return true;
  if (gen->device().type() != kDipu) return false;
  return gen->unsafeGetGeneratorImpl() ==
         default_generator(static_cast<c10::DeviceIndex>(device)).unsafeGetGeneratorImpl();
}

std::vector<int64_t> reduce_dims(const at::Tensor& self, at::OptionalIntArrayRef dim) {
  std::vector<int64_t> out;
  if (self.dim() == 0) return out;  // a 0-dim tensor: dim 0 / -1 is the tensor itself
  if (dim.has_value() && !dim->empty()) {
    for (int64_t d : *dim) out.push_back(c10::maybe_wrap_dim(d, self.dim()));
  } else {
    for (int64_t d = 0; d < self.dim(); ++d) out.push_back(d);
  }
  return out;
}

std::vector<int64_t> reduced_shape(const at::Tensor& self, c10::IntArrayRef dims, bool keepdim) {
  std::vector<int64_t> out;
  for (int64_t d = 0; d < self.dim(); ++d) {
    bool reduced = std::find(dims.begin(), dims.end(), d) != dims.end();
    if (!reduced) out.push_back(self.size(d));
    else if (keepdim) out.push_back(1);
  }
  return out;
}

void nll_total_weight(const at::Tensor& total_weight, const at::Tensor& target,
                      const std::optional<at::Tensor>& weight, int64_t reduction,
                      int64_t ignore_index) {
  at::native::resize_output(total_weight, {});
  if (reduction == 0) {
    total_weight.zero_();
    return;
  }
  at::Tensor keep = target.ne(ignore_index);
  if (!weight.has_value() || !weight->defined()) {
    total_weight.copy_(keep.sum());
    return;
  }
  at::Tensor safe = at::where(keep, target, at::zeros_like(target));
  at::Tensor w = weight->index_select(0, safe.flatten());
  total_weight.copy_(at::where(keep.flatten(), w, at::zeros_like(w)).sum());
}

void fused_adam(Scope& scope, at::TensorList params, at::TensorList grads,
                at::TensorList exp_avgs, at::TensorList exp_avg_sqs,
                at::TensorList max_exp_avg_sqs, at::TensorList state_steps, double lr,
                double beta1, double beta2, double weight_decay, double eps, bool amsgrad,
                AdamFn fn, const char* name) {
  if (params.empty()) return;
  at::Tensor steps = at::stack(state_steps.vec()).to(at::kCPU, at::kDouble);
  const double* step = steps.const_data_ptr<double>();
  for (size_t i = 0; i < params.size(); ++i) {
    at::Tensor max_sq = amsgrad ? max_exp_avg_sqs[i] : at::Tensor();
    diopiContextHandle_t ctx = scope.ctx(name);
    scope.check(name, fn(ctx, T(params[i]), T(grads[i]), T(exp_avgs[i]), T(exp_avg_sqs[i]),
                         T(max_sq), static_cast<float>(lr), static_cast<float>(beta1),
                         static_cast<float>(beta2), static_cast<float>(eps),
                         static_cast<float>(weight_decay), static_cast<int64_t>(step[i]),
                         amsgrad));
  }
}

std::vector<OpRecord>& records() {
  static std::vector<OpRecord> r;
  return r;
}

namespace {

// Ops whose values come from a random stream: the device's and the CPU's
// streams differ, so comparing them would only report noise.
bool random_op(const std::string& name) {
  static const char* const prefixes[] = {
      "normal",  "uniform_",    "random_",  "bernoulli",   "native_dropout.", "multinomial",
      "rand",    "exponential_", "geometric_", "log_normal_", "cauchy_",      "poisson"};
  if (name == "native_dropout") return true;
  for (const char* p : prefixes)
    if (name.rfind(p, 0) == 0) return true;
  return false;
}

// The random ops DIPU_AUTOCOMPARE_OPS_LIST matched (init() names them once).
std::vector<std::string>& random_skipped() {
  static std::vector<std::string> v;
  return v;
}

}  // namespace

std::string decide(const char* aten, std::initializer_list<const char*> fns,
                   std::initializer_list<bool> found) {
  std::string path = "diopi";
  std::string name(aten);
  if (!library_open()) {
    path = "no library";
  } else {
    auto f = found.begin();
    for (const char* fn : fns) {
      if (!*f++) {
        path = std::string("missing ") + fn;
        break;
      }
    }
    const auto& keep = state().keep;
    if (path == "diopi" && std::find(keep.begin(), keep.end(), name) != keep.end()) {
      path = "keep_default";
    }
    if (path == "diopi" && force_fallback(name)) path = "force_fallback";
    if (path == "diopi" && autocompare(name)) {
      if (random_op(name)) {
        random_skipped().push_back(name);
      } else {
        path = "autocompare";
      }
    }
  }
  if (dump_level() >= 0 && path != "diopi" && path != "no library") {
    if (path == "force_fallback") {
      std::cerr << "dipu: " << name << " is in DIPU_FORCE_FALLBACK_OPS_LIST: fallback to cpu"
                << std::endl;
    } else if (path == "keep_default") {
      std::cerr << "dipu: " << name
                << " is in DIPU_KEEP_TORCHOP_DEFAULT_IMPL_OPS: torch's own implementation"
                << std::endl;
    } else if (path != "autocompare") {
      std::cerr << "dipu: " << name << ": " << path.substr(8)
                << " is not in the kernel library: fallback to cpu" << std::endl;
    }
  }
  records().push_back({name, fns.size() > 0 ? *fns.begin() : "", path});
  return path;
}

// ---- autocompare ------------------------------------------------------------

namespace {

c10::IValue to_cpu(const c10::IValue& v) {
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    return t.defined() ? c10::IValue(t.cpu().clone()) : v;
  }
  if (v.isTensorList()) {
    std::vector<at::Tensor> out;
    for (const at::Tensor& t : v.toTensorVector()) out.push_back(t.cpu().clone());
    return c10::IValue(out);
  }
  if (v.isOptionalTensorList()) {
    c10::List<std::optional<at::Tensor>> out;
    for (const auto& ref : v.toOptionalTensorList()) {
      std::optional<at::Tensor> t = ref;
      out.push_back(t.has_value() && t->defined() ? std::optional<at::Tensor>(t->cpu().clone())
                                                  : t);
    }
    return c10::IValue(out);
  }
  if (v.isGenerator()) return c10::IValue();
  if (v.isDevice()) return c10::IValue(c10::Device(at::kCPU));
  return v;
}

void compare_tensor(const std::string& op, const std::string& name, const at::Tensor& dev,
                    const at::Tensor& cpu) {
  std::ostringstream out;
  out << "autocompare:\t" << op << "\t" << name << ":\t";
  if (!dev.defined() || !cpu.defined()) {
    out << (dev.defined() == cpu.defined() ? "allclose" : "not_close, one side undefined");
  } else if (dev.sizes() != cpu.sizes()) {
    out << "not_close, sizes " << dev.sizes() << " vs cpu " << cpu.sizes();
  } else {
    at::Tensor a = dev.cpu();
    at::Tensor b = cpu;
    if (a.scalar_type() != b.scalar_type()) {
      out << "(dtype " << a.scalar_type() << " vs cpu " << b.scalar_type() << ") ";
    }
    bool floating = at::isFloatingType(a.scalar_type()) || at::isFloatingType(b.scalar_type());
    at::ScalarType ct = floating ? at::kDouble : at::kLong;
    a = a.to(ct);
    b = b.to(ct);
    if (a.numel() == 0 || at::allclose(a, b, 1e-5, 1e-4, /*equal_nan=*/true)) {
      out << "allclose";
    } else {
      at::Tensor diff = at::sub(a, b).abs();
      out << "not_close, max diff: " << diff.max().item<double>()
          << ", MAE: " << diff.mean().item<double>() << "\n  dipu: " << dev.scalar_type()
          << dev.sizes() << " " << a.flatten().slice(0, 0, 10)
          << "\n  cpu: " << b.flatten().slice(0, 0, 10);
    }
  }
  std::cerr << out.str() << std::endl;
}

void compare_values(const std::string& op, const std::string& name, const c10::IValue& dev,
                    const c10::IValue& cpu) {
  if (dev.isTensor() && cpu.isTensor()) {
    compare_tensor(op, name, dev.toTensor(), cpu.toTensor());
  } else if (dev.isTensorList() && cpu.isTensorList()) {
    auto d = dev.toTensorVector();
    auto c = cpu.toTensorVector();
    for (size_t i = 0; i < d.size() && i < c.size(); ++i)
      compare_tensor(op, name + "[" + std::to_string(i) + "]", d[i], c[i]);
  }
}

// Set while autocompare runs an op: the ops it runs meanwhile are its own.
thread_local bool t_comparing = false;

struct ComparingGuard {
  ComparingGuard() { t_comparing = true; }
  ~ComparingGuard() { t_comparing = false; }
  ComparingGuard(const ComparingGuard&) = delete;
  ComparingGuard& operator=(const ComparingGuard&) = delete;
};

// Says once per op that its calls inside autocompare are not compared.
void note_nested(const std::string& name) {
  static std::mutex mu;
  static std::vector<std::string> said;
  std::lock_guard<std::mutex> lock(mu);
  if (std::find(said.begin(), said.end(), name) != said.end()) return;
  said.push_back(name);
  std::cerr << "autocompare:\t" << name
            << "\tnot compared when autocompare itself runs it (its copies, the compared op's "
               "inner ops)"
            << std::endl;
}

// Runs the op on the device (the wrapped kernel) and on the CPU (copies of
// the arguments), then prints the comparison of every output and every
// argument the op writes. Never throws for a mismatch or a CPU failure.
class Autocompare final : public c10::OperatorKernel {
 public:
  explicit Autocompare(c10::KernelFunction inner) : inner_(std::move(inner)) {}

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet ks,
                  torch::jit::Stack* stack) {
    const auto& schema = op.schema();
    const auto& args = schema.arguments();
    size_t n = args.size();
    std::string name = schema.operator_name().name.substr(6);  // past "aten::"
    if (!schema.overload_name().empty()) name += "." + schema.overload_name();
    if (t_comparing) {
      // An op autocompare itself runs (its copies to the host, the device
      // kernel's inner ops, the comparison): run, never compared, which
      // would recurse through the copies it makes.
      note_nested(name);
      inner_.callBoxed(op, ks, stack);
      return;
    }
    ComparingGuard guard;
    std::vector<c10::IValue> dev_args(stack->end() - static_cast<std::ptrdiff_t>(n),
                                      stack->end());
    torch::jit::Stack cpu;
    bool cpu_ok = true;
    try {
      for (const auto& v : dev_args) cpu.push_back(to_cpu(v));
    } catch (const std::exception& e) {
      cpu_ok = false;
      std::cerr << "autocompare:\t" << name << "\tcannot copy the arguments: " << e.what()
                << std::endl;
    }
    inner_.callBoxed(op, ks, stack);
    if (!cpu_ok) return;
    std::vector<c10::IValue> cpu_args(cpu.begin(), cpu.end());
    try {
      op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), &cpu);
    } catch (const std::exception& e) {
      std::cerr << "autocompare:\t" << name << "\tthe cpu run failed: " << e.what()
                << std::endl;
      return;
    }
    try {
      size_t nret = schema.returns().size();
      for (size_t i = 0; i < nret && i < cpu.size(); ++i) {
        const auto& r = schema.returns()[i];
        std::string rn = r.name().empty() ? "result" + std::to_string(i) : r.name();
        compare_values(name, rn, (*stack)[stack->size() - nret + i], cpu[i]);
      }
      for (size_t i = 0; i < n; ++i) {
        const auto* alias = args[i].alias_info();
        if (alias != nullptr && alias->isWrite()) {
          compare_values(name, args[i].name(), dev_args[i], cpu_args[i]);
        }
      }
    } catch (const std::exception& e) {
      std::cerr << "autocompare:\t" << name << "\tcomparison failed: " << e.what()
                << std::endl;
    }
  }

 private:
  c10::KernelFunction inner_;
};

}  // namespace

void register_generated(torch::Library& lib);

void init() {
  static std::once_flag once;
  std::call_once(once, [] {
    static auto* lib = new torch::Library(torch::Library::IMPL, "aten",
                                          c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
    if (!library_open() && dump_level() >= 0) {
      std::cerr << "dipu: no DIOPI kernel library (" << open_error()
                << "): every op falls back to the cpu" << std::endl;
    }
    register_generated(*lib);
    if (!random_skipped().empty()) {
      std::cerr << "dipu: autocompare skips random ops (the device's random stream is not the "
                   "cpu's):";
      for (const auto& n : random_skipped()) std::cerr << " " << n;
      std::cerr << std::endl;
    }
  });
}

torch::CppFunction autocompare_kernel(c10::KernelFunction inner) {
  return torch::CppFunction::makeFromBoxedFunctor(
      std::make_unique<Autocompare>(std::move(inner)));
}

}  // namespace torch_dipu::diopi
