// Autocast on dipu (DispatchKey::AutocastPrivateUse1): the op lists and
// cast policies torch.autocast("cuda") uses, through ATen's own macros
// and wrappers, so `torch.autocast("dipu", dtype=float16 or bfloat16)`
// runs matmuls and convolutions in the lower precision and keeps
// reductions, norms and losses in float32, as on CUDA.
#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace torch_dipu {
namespace {

using at::IntArrayRef;
using at::Scalar;
using at::ScalarType;
using at::Tensor;

// binary_cross_entropy is unsafe under autocast (as on CUDA).
Tensor binary_cross_entropy_banned(const Tensor&, const Tensor&, const std::optional<Tensor>&,
                                   int64_t) {
  TORCH_CHECK(false,
              "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to "
              "autocast on dipu (as on CUDA): use binary_cross_entropy_with_logits or "
              "BCEWithLogitsLoss, which are safe, or disable autocast around the loss");
}

}  // namespace

#define DIPU_AUTOCAST_LOW(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define DIPU_AUTOCAST_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define DIPU_AUTOCAST_FP32_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define DIPU_AUTOCAST_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
#define DIPU_AUTOCAST_REDISPATCH(FUNC, NAME, SIGNATURE, REDISPATCH, POLICY) \
  KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE(FUNC, NAME, SIGNATURE, REDISPATCH, POLICY)

// Ops outside the lists run unchanged (torch registers this fallthrough
// for its built-in autocast keys, not for PrivateUse1).
TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  AT_FORALL_LOWER_PRECISION_FP(DIPU_AUTOCAST_LOW)
  AT_FORALL_FP32(DIPU_AUTOCAST_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(DIPU_AUTOCAST_FP32_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(DIPU_AUTOCAST_REDISPATCH)
  AT_FORALL_PROMOTE(DIPU_AUTOCAST_PROMOTE)
  m.impl(TORCH_SELECTIVE_NAME("aten::binary_cross_entropy"),
         TORCH_FN(binary_cross_entropy_banned));
}

}  // namespace torch_dipu
