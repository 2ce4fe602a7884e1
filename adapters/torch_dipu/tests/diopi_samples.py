"""One sample per ATen op of diopi_functions.yaml, run on dipu and on the CPU.

Run as a script (test_diopi.py does, with DIPU_DUMP_OP_ARGS=1): for every
sample it writes `@@ <op>` to stderr before the dipu run (so the dump lines
that follow belong to it) and a JSON line `{"op", "ok", "msg"}` to stdout
after comparing the dipu results with the CPU's. The last stdout line is
`{"records": [...]}`: what became of every op at import.

A sample is `fn(dev) -> tensor or list of tensors`, built from inputs made on
the CPU with a fixed seed and moved to `dev`; random samples return
properties (range, mean, mask agreement) instead of values. Many use strided
views, `out=` (also aliasing an input), in-place forms and CPU scalars.
Results are compared under the tolerance policy (docs/tolerance.md).
"""

import json
import os
import sys

import torch
import torch.nn.functional as F

# adapters/: the tolerance policy's helper.
sys.path.append(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from dipu_tolerance import close_report  # noqa: E402

DIPU = "dipu"
# The most elements of one input a sample made (r, ri): no reduction sums
# more terms than the largest tensor it reads, so this bounds the sample's
# reduction length.
_LARGEST = [1]


def _made(t):
    _LARGEST[0] = max(_LARGEST[0], t.numel())
    return t


def r(*shape, seed=0, dev="cpu", lo=-1.0, hi=1.0, grad=False):
    g = torch.Generator().manual_seed(seed)
    t = _made((torch.rand(*shape, generator=g) * (hi - lo) + lo).to(dev))
    return t.requires_grad_() if grad else t


def ri(hi, *shape, seed=0, dev="cpu"):
    g = torch.Generator().manual_seed(seed)
    return _made(torch.randint(0, hi, shape, generator=g).to(dev))


def grads(loss, *ts):
    loss.backward()
    return [t.grad for t in ts]


def binary(fn):
    def sample(d):
        a, b = r(3, 4, dev=d), r(4, seed=1, dev=d, lo=0.5, hi=2)
        out = torch.empty(3, 4, device=d)
        c = a.clone()
        res = [fn(a, b), fn(a.t(), r(4, 3, seed=2, dev=d, lo=0.5, hi=2)), fn(a, torch.tensor(1.5)),
               fn(a, b, out=out), out]
        fn(c, b, out=c)  # out aliasing an input
        return res + [c, fn(ri(5, 3, 4, dev=d), b)]
    return sample


def compare(fn):
    def tensor_sample(d):
        a, b = r(3, 4, dev=d), r(4, seed=1, dev=d)
        out = torch.empty(3, 4, dtype=torch.bool, device=d)
        return [fn(a, b), fn(a.t(), b[:3]), fn(a, b, out=out), out, fn(a, a[0])]

    def scalar_sample(d):
        a = r(3, 4, dev=d)
        c = a.clone()
        getattr(c, fn.__name__ + "_")(0.25)
        return [fn(a, 0.1), fn(a[:, ::2], -0.2), c]

    return tensor_sample, scalar_sample


def unary(fn, lo=-1.0, hi=1.0):
    def sample(d):
        a = r(3, 5, dev=d, lo=lo, hi=hi)
        out = torch.empty(3, 5, device=d)
        c = a.clone()
        fn(c, out=c)
        return [fn(a), fn(a.t()), fn(a, out=out), out, c, fn(a[1:, ::2])]
    return sample


def conv_sample(d):
    x, w, b = r(2, 3, 8, 8, dev=d, grad=True), r(4, 3, 3, 3, seed=1, dev=d, grad=True), \
        r(4, seed=2, dev=d, grad=True)
    y = F.conv2d(x, w, b, stride=2, padding=1)
    return [y] + grads((y * y).sum(), x, w, b)


def conv_nobias(d):
    x, w = r(1, 4, 7, 6, dev=d, grad=True), r(4, 2, 3, 3, seed=1, dev=d, grad=True)
    y = F.conv2d(x, w, None, padding=2, dilation=2, groups=2)
    return [y] + grads((y * y).sum(), x, w)


def batch_norm(train):
    def sample(d):
        x = r(4, 3, 5, 5, dev=d, grad=True)
        w, b = r(3, seed=1, dev=d, grad=True), r(3, seed=2, dev=d, grad=True)
        rm, rv = torch.zeros(3, device=d), torch.ones(3, device=d)
        y = F.batch_norm(x, rm, rv, w, b, training=train, momentum=0.1, eps=1e-5)
        return [y, rm, rv] + grads((y * y).sum(), x, w, b)
    return sample


def layer_norm(d):
    x = r(2, 3, 8, dev=d, grad=True)
    w, b = r(8, seed=1, dev=d, grad=True), r(8, seed=2, dev=d, grad=True)
    y = F.layer_norm(x, (8,), w, b)
    return [y] + grads((y * y).sum(), x, w, b)


def rms_norm(d):
    x = r(2, 3, 8, dev=d, grad=True)
    w = r(8, seed=1, dev=d, grad=True)
    y = F.rms_norm(x, (8,), w, 1e-5)
    # no weight, eps None (the dtype's epsilon), a strided input
    z = F.rms_norm(r(4, 6, seed=2, dev=d).t(), (4,))
    return [y, z] + grads((y * y).sum(), x, w)


def max_pool(d):
    x = r(2, 3, 7, 7, dev=d, grad=True)
    y = F.max_pool2d(x, 3, stride=2, padding=1)
    return [y] + grads((y * y).sum(), x)


def avg_pool(d):
    x = r(2, 3, 7, 7, dev=d, grad=True)
    y = F.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=False)
    return [y] + grads((y * y).sum(), x)


def adaptive(d):
    x = r(2, 3, 6, 6, dev=d, grad=True)
    y = F.adaptive_avg_pool2d(x, (2, 3))
    return [y] + grads((y * y).sum(), x)


def nll(d):
    x = r(6, 5, dev=d, grad=True)
    t = ri(5, 6, dev=d)
    t[2] = -100
    w = r(5, seed=3, dev=d, lo=0.5, hi=1.5)
    out = [F.cross_entropy(x, t), F.nll_loss(x.log_softmax(1), t, weight=w, reduction="sum"),
           F.nll_loss(x, t, reduction="none")]
    return out + grads(out[0] + out[1], x)


def embedding(d):
    w = r(10, 4, dev=d, grad=True)
    idx = ri(10, 3, 5, dev=d)
    y = F.embedding(idx, w, padding_idx=0)
    return [y] + grads((y * y).sum(), w)


def softmax(d):
    x = r(3, 7, dev=d, grad=True)
    y = x.softmax(1)
    return [y, x.t().softmax(0)] + grads((y * y).sum(), x)


def log_softmax(d):
    x = r(3, 7, dev=d, grad=True)
    y = x.log_softmax(-1)
    return [y] + grads((y * y).sum(), x)


def act_backward(fn, lo=-1.0, hi=1.0):
    def sample(d):
        x = r(4, 6, dev=d, lo=lo, hi=hi, grad=True)
        y = fn(x)
        return [y] + grads((y * y).sum(), x)
    return sample


def dropout(d):
    x = torch.ones(20000, device=d, requires_grad=True)
    y = F.dropout(x, 0.5)
    (g,) = grads(y.sum(), x)
    kept = y != 0
    return [((y == 0) | (y == 2)).all(), (g == y).all(), ((kept.float().mean() - 0.5).abs() < 0.05)]


def uniform(d):
    t = torch.empty(10000, device=d).uniform_(2, 5)
    return [(t >= 2).all(), (t < 5).all(), ((t.mean() - 3.5).abs() < 0.1)]


def normal(d):
    t = torch.empty(10000, device=d).normal_(1, 2)
    return [((t.mean() - 1).abs() < 0.1), ((t.std() - 2).abs() < 0.1)]


def random_from(d):
    t = torch.empty(10000, dtype=torch.int64, device=d).random_(3, 9)
    return [(t >= 3).all(), (t < 9).all(), torch.tensor(len(t.unique()) == 6)]


def random_to(d):
    t = torch.empty(10000, dtype=torch.int64, device=d).random_(7)
    return [(t >= 0).all(), (t < 7).all()]


def optim(cls, **kw):
    def sample(d):
        torch.manual_seed(0)
        ps = [r(4, 3, seed=i, dev=d).requires_grad_() for i in range(3)]
        opt = cls(ps, **kw)
        for step in range(3):
            opt.zero_grad()
            loss = sum(((p * (step + 1)) ** 2).sum() for p in ps)
            loss.backward()
            opt.step()
        return [p.detach() for p in ps]
    return sample


def fill(d):
    a = r(3, 4, dev=d)
    a[:, 1].fill_(2.5)
    b = torch.full((2, 3), 7, device=d)
    c = r(3, 4, dev=d)
    c[1].zero_()
    return [a, b, c, torch.zeros(5, device=d)]


def copy(d):
    a = r(3, 4, dev=d)
    b = torch.empty(4, 3, device=d)
    b.copy_(a.t())
    c = torch.empty(3, 4, dtype=torch.float16, device=d)
    c.copy_(a)
    e = torch.empty(2, 4, device=d)
    e.copy_(a[0])
    return [b, c.float(), a.t().contiguous(), a.to(torch.int64), e, a[:, 1:3].clone()]


def reductions_sum(d):
    a = r(3, 4, 5, dev=d)
    out = torch.empty(3, device=d)
    return [a.sum(), a.sum(1), a.sum((0, 2), keepdim=True), a.transpose(0, 1).sum(0), torch.sum(a, (1, 2), out=out),
            ri(4, 3, 4, dev=d).sum(1)]


def reductions_mean(d):
    a = r(3, 4, 5, dev=d)
    return [a.mean(), a.mean(1), a.mean((0, 2), keepdim=True), a.transpose(0, 2).mean(-1)]


def max_dim(d):
    a = r(3, 4, 5, dev=d)
    return list(a.max(1)) + list(a.max(-1, keepdim=True)) + list(a.transpose(0, 2).max(0))


def min_dim(d):
    a = r(3, 4, 5, dev=d)
    return list(a.min(1)) + list(a.min(0, keepdim=True))


def matmul(d):
    a, b = r(3, 4, dev=d), r(4, 5, seed=1, dev=d)
    out = torch.empty(3, 5, device=d)
    return [a @ b, a.t().t() @ b, torch.mm(a, b, out=out), out, b.t() @ a.t()]


def bmm(d):
    a, b = r(2, 3, 4, dev=d), r(2, 4, 5, seed=1, dev=d)
    return [torch.bmm(a, b), a @ b, torch.matmul(a, b[0])]


def addmm(d):
    x, w, b = r(3, 4, dev=d), r(5, 4, seed=1, dev=d), r(5, seed=2, dev=d)
    c = r(3, 5, seed=3, dev=d)
    return [F.linear(x, w, b), torch.addmm(c, x, w.t(), beta=0.5, alpha=2), c.addmm_(x, w.t())]


def baddbmm(d):
    c, a, b = r(2, 3, 5, dev=d), r(2, 3, 4, seed=1, dev=d), r(2, 4, 5, seed=2, dev=d)
    return [torch.baddbmm(c, a, b, beta=0.5, alpha=1.5), torch.baddbmm(c[0], a, b)]


def pow_scalar(d):
    a = r(3, 4, dev=d, lo=0.1, hi=2)
    c = a.clone()
    c.pow_(3)
    return [a ** 2, a.pow(0.5), c, a.t() ** -1]


def pow_tensor(d):
    a, b = r(3, 4, dev=d, lo=0.1, hi=2), r(4, seed=1, dev=d)
    return [a ** b, torch.pow(a, b.expand(3, 4))]


def addc(name):
    def sample(d):
        a, b, c = r(3, 4, dev=d), r(4, seed=1, dev=d), r(3, 1, seed=2, dev=d, lo=0.5, hi=2)
        e = a.clone()
        getattr(e, name + "_")(b, c, value=0.5)
        return [getattr(torch, name)(a, b, c), getattr(torch, name)(a, b, c, value=-2), e]
    return sample


def lerp(d):
    a, b = r(3, 4, dev=d), r(3, 4, seed=1, dev=d)
    c = a.clone()
    c.lerp_(b, 0.3)
    return [torch.lerp(a, b, 0.25), c, torch.lerp(a.t(), b.t(), 0.9)]


def clamp(d):
    a = r(3, 4, dev=d)
    c = a.clone()
    c.clamp_(-0.5, 0.5)
    return [a.clamp(-0.2, 0.3), a.clamp(min=0), a.clamp(max=0.1), c]


def clamp_tensor(d):
    a, lo, hi = r(3, 4, dev=d), r(4, seed=1, dev=d, lo=-1, hi=0), r(3, 1, seed=2, dev=d, lo=0, hi=1)
    return [torch.clamp(a, lo, hi), torch.clamp(a, min=lo)]


def relu(d):
    a = r(3, 4, dev=d)
    c = a.clone()
    c.relu_()
    return [a.relu(), a.t().relu(), c, F.relu(a[:, 1:], inplace=False)]


def gelu(d):
    a = r(3, 4, dev=d, lo=-3, hi=3)
    return [F.gelu(a), F.gelu(a, approximate="tanh"), F.gelu(a.t())]


def gelu_backward(d):
    x = r(3, 4, dev=d, lo=-3, hi=3, grad=True)
    y = F.gelu(x) + F.gelu(x, approximate="tanh")
    return [y] + grads((y * y).sum(), x)


def index_select(d):
    a = r(5, 4, dev=d)
    i = ri(4, 3, dev=d)
    out = torch.empty(3, 4, device=d)
    return [a.index_select(0, i), a.index_select(1, i), torch.index_select(a, 0, i, out=out), out,
            a.t().index_select(0, i)]


def cat(d):
    a, b = r(2, 3, dev=d), r(4, 3, seed=1, dev=d)
    return [torch.cat([a, b]), torch.cat([a.t(), b.t()], 1), torch.cat([a, a], -1),
            torch.cat([a, torch.empty(0, device=d)])]


def where(d):
    a, b = r(3, 4, dev=d), r(4, seed=1, dev=d)
    out = torch.empty(3, 4, device=d)
    return [torch.where(a > 0, a, b), torch.where(a > 0, a, 0.0), torch.where(a > 0, a, b, out=out), out]


def where_out(d):
    a, b = r(3, 4, dev=d), r(3, 4, seed=1, dev=d)
    out = torch.empty(3, 4, device=d)
    torch.where(a > b, a, b, out=out)
    return [out]


def masked_fill_scalar(d):
    a = r(3, 4, dev=d)
    m = a > 0
    c = a.clone()
    c.masked_fill_(m[0], -1.0)
    return [a.masked_fill(m, 0.5), c]


def masked_fill_tensor(d):
    a = r(3, 4, dev=d)
    c = a.clone()
    c.masked_fill_(a > 0, torch.tensor(3.0))
    e = a.clone()
    e.masked_fill_(a < 0, torch.tensor(2.0, device=d))
    return [c, e]


def tri(name):
    def sample(d):
        a = r(4, 5, dev=d)
        return [getattr(a, name)(), getattr(a, name)(1), getattr(a.t(), name)(-1), getattr(r(2, 3, 3, dev=d), name)()]
    return sample


def argmax(d):
    a = r(3, 4, 5, dev=d)
    return [a.argmax(), a.argmax(1), a.argmax(-1, keepdim=True), a.transpose(1, 2).argmax(0)]


def max_all(d):
    a = r(3, 4, dev=d)
    return [a.max(), a.t().max()]


def min_all(d):
    a = r(3, 4, dev=d)
    return [a.min(), a[:, 1:].min()]


def _silu(a, out=None):
    return torch._C._nn.silu(a) if out is None else torch._C._nn.silu(a, out=out)


SAMPLES = {
    "add.out": binary(torch.add),
    "sub.out": binary(torch.sub),
    "mul.out": binary(torch.mul),
    "div.out": binary(torch.div),
    "maximum.out": lambda d: [torch.maximum(r(3, 4, dev=d), r(4, seed=1, dev=d)),
                              torch.maximum(r(3, 4, dev=d).t(), r(4, 3, seed=1, dev=d))],
    "minimum.out": lambda d: [torch.minimum(r(3, 4, dev=d), r(3, 1, seed=1, dev=d))],
    "sqrt.out": unary(torch.sqrt, 0.1, 2),
    "rsqrt.out": unary(torch.rsqrt, 0.1, 2),
    "exp.out": unary(torch.exp),
    "log.out": unary(torch.log, 0.1, 2),
    "neg.out": unary(torch.neg),
    "abs.out": unary(torch.abs),
    "sign.out": unary(torch.sign),
    "reciprocal.out": unary(torch.reciprocal, 0.5, 2),
    "erf.out": unary(torch.erf),
    "sigmoid.out": unary(torch.sigmoid, -4, 4),
    "tanh.out": unary(torch.tanh, -3, 3),
    "silu.out": unary(_silu, -3, 3),
    "fill_.Scalar": fill,
    "zero_": fill,
    "copy_": copy,
    "pow.Tensor_Scalar_out": pow_scalar,
    "pow.Tensor_Tensor_out": pow_tensor,
    "addcmul.out": addc("addcmul"),
    "addcdiv.out": addc("addcdiv"),
    "lerp.Scalar_out": lerp,
    "clamp.out": clamp,
    "clamp.Tensor_out": clamp_tensor,
    "relu": relu,
    "relu_": relu,
    "gelu.out": gelu,
    "gelu_backward.grad_input": gelu_backward,
    "threshold_backward.grad_input": act_backward(torch.relu),
    "silu_backward.grad_input": lambda d: [torch.ops.aten.silu_backward.grad_input(
        r(4, 6, seed=1, dev=d), r(4, 6, dev=d), grad_input=torch.empty(4, 6, device=d))],
    "silu_backward": act_backward(F.silu, -3, 3),
    "sigmoid_backward.grad_input": act_backward(torch.sigmoid, -3, 3),
    "tanh_backward.grad_input": act_backward(torch.tanh, -2, 2),
    "_softmax.out": softmax,
    "_log_softmax.out": log_softmax,
    "_softmax_backward_data.out": softmax,
    "_log_softmax_backward_data.out": log_softmax,
    "sum.IntList_out": reductions_sum,
    "mean.out": reductions_mean,
    "max.dim_max": max_dim,
    "min.dim_min": min_dim,
    "max": max_all,
    "min": min_all,
    "argmax.out": argmax,
    "mm.out": matmul,
    "bmm.out": bmm,
    "addmm.out": addmm,
    "baddbmm.out": baddbmm,
    "convolution": conv_sample,
    "convolution_backward": conv_nobias,
    "native_batch_norm": batch_norm(True),
    "native_batch_norm_backward": batch_norm(False),
    "native_layer_norm": layer_norm,
    "native_layer_norm_backward": layer_norm,
    "_fused_rms_norm": rms_norm,
    "_fused_rms_norm_backward": rms_norm,
    "max_pool2d_with_indices.out": max_pool,
    "max_pool2d_with_indices_backward.grad_input": max_pool,
    "avg_pool2d.out": avg_pool,
    "avg_pool2d_backward.grad_input": avg_pool,
    "_adaptive_avg_pool2d": adaptive,
    "_adaptive_avg_pool2d_backward": adaptive,
    "nll_loss_forward.output": nll,
    "nll_loss_backward.grad_input": nll,
    "embedding_dense_backward": embedding,
    "index_select": index_select,
    "index_select.out": index_select,
    "cat.out": cat,
    "where.self": where,
    "where.self_out": where_out,
    "masked_fill_.Scalar": masked_fill_scalar,
    "masked_fill_.Tensor": masked_fill_tensor,
    "tril.out": tri("tril"),
    "triu.out": tri("triu"),
    "native_dropout": dropout,
    "native_dropout_backward": dropout,
    "uniform_": uniform,
    "normal_": normal,
    "random_.from": random_from,
    "random_.to": random_to,
    "_fused_sgd_": optim(torch.optim.SGD, lr=0.1, momentum=0.9, weight_decay=0.01, fused=True),
    "_fused_adam_": optim(torch.optim.Adam, lr=0.1, weight_decay=0.01, fused=True),
    "_fused_adamw_": optim(torch.optim.AdamW, lr=0.1, weight_decay=0.01, fused=True),
}
for _name in ("eq", "ne", "lt", "le", "gt", "ge"):
    SAMPLES[_name + ".Tensor_out"], SAMPLES[_name + ".Scalar_out"] = compare(getattr(torch, _name))


def _as_list(x):
    if isinstance(x, (list, tuple)):
        return list(x)
    return [x]


def check(name):
    """(ok, message) for the sample of op `name`."""
    fn = SAMPLES[name]
    _LARGEST[0] = 1
    expected = _as_list(fn("cpu"))
    reduction_len = _LARGEST[0]
    got = _as_list(fn(DIPU))
    if len(expected) != len(got):
        return False, f"{len(got)} results, cpu has {len(expected)}"
    for i, (g, e) in enumerate(zip(got, expected)):
        if e is None or g is None:
            if (e is None) != (g is None):
                return False, f"result {i}: {g} vs cpu {e}"
            continue
        g = g.detach().cpu()
        e = e.detach()
        if g.dtype != e.dtype or g.shape != e.shape:
            return False, f"result {i}: {g.dtype}{list(g.shape)} vs cpu {e.dtype}{list(e.shape)}"
        why = close_report(g, e, reduction_len=reduction_len)
        if why:
            return False, f"result {i}: {why}"
    return True, ""


def main(names):
    import torch_dipu  # noqa: F401

    for name in names or SAMPLES:
        print("@@ " + name, file=sys.stderr, flush=True)
        try:
            ok, msg = check(name)
        except Exception as e:  # reported, the next sample runs
            ok, msg = False, f"{type(e).__name__}: {e}"
        torch.dipu.synchronize()
        print(json.dumps({"op": name, "ok": ok, "msg": msg}), flush=True)
    print("@@ end", file=sys.stderr, flush=True)
    print(json.dumps({"records": torch_dipu._C._diopi_ops()}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
