"""Fused functions of large language models on dipu, run as single DIOPI
kernels (docs/torch.md, "torch_dipu.ext").

- ``rms_norm(x, weight, eps)``: RMS normalisation over the last dimension
  (``torch.nn.functional.rms_norm`` on dipu takes the same path:
  ``aten._fused_rms_norm``, one ``diopiRMSNorm`` forward and one
  ``diopiRMSNormBackward`` backward).
- ``apply_rotary(x, cos, sin, conj=False, interleaved=False)``: rotary
  position embedding of ``x``'s last dimension (``diopiRotaryEmbedding``).

Both are differentiable with respect to ``x`` (and ``weight``); tensors
must be on a dipu device.
"""

import torch

from . import _C  # noqa: F401  (registers torch.ops.torch_dipu.*)

__all__ = ["rms_norm", "apply_rotary"]


def rms_norm(x, weight=None, eps=1e-6):
    """``x / sqrt(mean(x**2, -1) + eps) * weight`` over the last dimension;
    ``weight`` (shape ``[x.shape[-1]]``) may be None."""
    if weight is not None and weight.shape != x.shape[-1:]:
        raise ValueError(f"rms_norm: weight has shape {tuple(weight.shape)}, "
                         f"expected ({x.shape[-1]},)")
    out, _ = torch.ops.aten._fused_rms_norm(x, [x.shape[-1]], weight, float(eps))
    return out


class _Rotary(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, cos, sin, conj, interleaved):
        ctx.save_for_backward(cos, sin)
        ctx.conj, ctx.interleaved = conj, interleaved
        return torch.ops.torch_dipu.apply_rotary(x, cos, sin, conj, interleaved)

    @staticmethod
    def backward(ctx, grad):
        cos, sin = ctx.saved_tensors
        # The rotation is orthogonal: its gradient is the opposite rotation.
        gx = torch.ops.torch_dipu.apply_rotary(grad.contiguous(), cos, sin,
                                               not ctx.conj, ctx.interleaved)
        return gx, None, None, None, None


def apply_rotary(x, cos, sin, conj=False, interleaved=False):
    """Rotates the pairs of ``x``'s last dimension ``D`` by the angles whose
    cosines and sines are ``cos`` and ``sin`` (last dimension ``D/2``,
    broadcast against ``x[..., :D/2]``, e.g. ``[seq, 1, D/2]`` for ``x``
    ``[batch, seq, heads, D]``). Pairs are ``(x[i], x[i + D/2])``
    (GPT-NeoX), or ``(x[2i], x[2i+1])`` with ``interleaved`` (GPT-J);
    ``conj`` rotates by the opposite angles."""
    if x.dim() == 0 or x.shape[-1] % 2:
        raise ValueError(f"apply_rotary: x's last dimension must have an even length, "
                         f"x has shape {tuple(x.shape)}")
    return _Rotary.apply(x, cos, sin, bool(conj), bool(interleaved))
