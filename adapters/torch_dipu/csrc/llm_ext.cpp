// torch_dipu's own operators for DIOPI's fused LLM functions that have no
// ATen op (torch.ops.torch_dipu.*, wrapped with autograd by torch_dipu.ext):
// apply_rotary runs diopiRotaryEmbedding on the tensor's device stream.
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

#include "diopi.h"

namespace torch_dipu::diopi {
namespace {

using RotaryFn = decltype(&::diopiRotaryEmbedding);

// The library's diopiRotaryEmbedding, or nullptr.
RotaryFn rotary_fn() {
  static RotaryFn fn =
      library_open() ? reinterpret_cast<RotaryFn>(lookup("diopiRotaryEmbedding")) : nullptr;
  return fn;
}

at::Tensor apply_rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                        bool conj, bool interleaved) {
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) % 2 == 0,
              "apply_rotary: x's last dimension must have an even length, x has shape ",
              x.sizes());
  TORCH_CHECK(cos.device() == x.device() && sin.device() == x.device(),
              "apply_rotary: x, cos and sin must be on one device, got ", x.device(), ", ",
              cos.device(), " and ", sin.device());
  RotaryFn fn = rotary_fn();
  TORCH_CHECK(fn != nullptr, "apply_rotary: ",
              library_open() ? std::string("the DIOPI kernel library lacks diopiRotaryEmbedding")
                             : "no DIOPI kernel library: " + open_error());
  at::Tensor out = at::empty_like(x, at::MemoryFormat::Contiguous);
  if (x.numel() == 0) return out;
  Scope scope("torch_dipu::apply_rotary", x.device());
  try {
    invoke(scope, "diopiRotaryEmbedding", fn, T(out), T(x), T(cos), T(sin), conj, interleaved);
  } catch (const NeedsFallback&) {
    TORCH_CHECK(false, "apply_rotary: diopiRotaryEmbedding does not support x ",
                x.scalar_type(), ", cos ", cos.scalar_type(), ", sin ", sin.scalar_type());
  }
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(torch_dipu, m) {
  m.def("apply_rotary(Tensor x, Tensor cos, Tensor sin, bool conj=False, "
        "bool interleaved=False) -> Tensor");
}

TORCH_LIBRARY_IMPL(torch_dipu, PrivateUse1, m) {
  m.impl("apply_rotary", TORCH_FN(apply_rotary));
}

}  // namespace torch_dipu::diopi
