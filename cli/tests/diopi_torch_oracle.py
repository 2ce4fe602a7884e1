#!/usr/bin/env python3
"""Checks `dipu diopi-test`'s references against PyTorch (float64).

    target/debug/dipu diopi-test --dump-cases /tmp/cases.json
    .venv-torch/bin/python cli/tests/diopi_torch_oracle.py /tmp/cases.json

Recomputes the expected outputs of the ops whose references are the least
obvious (convolution, normalisation, pooling, losses, embedding and
index_select backward, softmax, reductions, the matmul family, GELU,
Div's round modes, the elementwise and index/shape ops, SGD/Adam/AdamW through torch.optim's functional forms) with PyTorch in
float64 (gradients by autograd) and compares them with the runner's:
float32 expectations to 1e-6, half-precision ones to their own rounding.
Prints one line per op and exits non-zero on any mismatch. Not run by CI
(it needs PyTorch); run it after changing a reference.
"""
import json
import re
import sys

import torch
import torch.nn.functional as Fn
from torch.optim.adam import adam as adam_step
from torch.optim.sgd import sgd as sgd_step

torch.set_default_dtype(torch.float64)

ARG = re.compile(
    r"(Tensors|Null|OptS|ZPtr|OptI|Str|Gen|Required|T|C|S|Z|I|D|F|B|E)"
    r"(\((?:[^()]|\([^()]*\))*\))?"
)


def parse_args(text):
    return [(k, b[1:-1] if b else "") for k, b in ARG.findall(text)]


def num(body):
    return float(re.search(r"-?[\d.]+(?:e-?\d+)?", body).group(0))


def ints(body):
    return [int(x) for x in re.findall(r"-?\d+", body)]


def tensor(t):
    data = [float("nan") if v is None else v for v in t["data"]]
    return torch.tensor(data, dtype=torch.float64).reshape(t["shape"])


def vjp(f, xs, go):
    xs = [x.clone().requires_grad_(True) for x in xs]
    return torch.autograd.grad(f(*xs), xs, go, allow_unused=True)


def loss(op, a, t, off):
    x, tgt = t(1 + off), t(2 + off).long()
    w = None if a[3 + off][0] == "Null" else t(3 + off)
    red = ["none", "mean", "sum"][int(num(a[4 + off][1]))]
    ii = int(num(a[5 + off][1]))
    if "Cross" in op:
        ls = num(a[6 + off][1])
        return x, lambda x: Fn.cross_entropy(x, tgt, w, ignore_index=ii, reduction=red, label_smoothing=ls)
    return x, lambda x: Fn.nll_loss(x, tgt, w, ignore_index=ii, reduction=red)


def compute(op, a, t):
    """PyTorch's values for the expected outputs, in order (None: skip)."""
    if op == "diopiConvolution2d":
        b = None if a[3][0] == "Null" else t(3)
        return [Fn.conv2d(t(1), t(2), b, ints(a[4][1]), ints(a[5][1]), ints(a[6][1]), int(num(a[7][1])))]
    if op == "diopiConvolution2dBackward":
        go, x, w = t(3), t(4), t(5)
        st, pd, dl, g = ints(a[7][1]), ints(a[8][1]), ints(a[9][1]), int(num(a[10][1]))
        gx, gw, gb = vjp(lambda x, w, b: Fn.conv2d(x, w, b, st, pd, dl, g), [x, w, torch.zeros(w.shape[0])], go)
        return [gx, gw, gb if a[6][1] != "None" else None]
    if op == "diopiBatchNorm":
        x = t(3)
        w = None if a[4][0] == "Null" else t(4)
        b = None if a[5][0] == "Null" else t(5)
        rm, rv = t(6).clone(), t(7).clone()
        training, mom, eps = a[8][1] == "true", num(a[9][1]), num(a[10][1])
        y = Fn.batch_norm(x, rm, rv, w, b, training, mom, eps)
        if not training:
            return [y, rm, rv]
        dims = [0] + list(range(2, x.dim()))
        return [y, x.mean(dims), 1 / torch.sqrt(x.var(dims, unbiased=False) + eps), rm, rv]
    if op == "diopiBatchNormBackward":
        go, x, w, rm, rv = t(3), t(4), t(5), t(6), t(7)
        training, eps = a[10][1] == "true", num(a[11][1])
        f = lambda x, w, b: Fn.batch_norm(x, rm.clone(), rv.clone(), w, b, training, 0.1, eps)
        return list(vjp(f, [x, w, torch.zeros_like(w)], go))
    if op == "diopiLayerNorm":
        x = t(3)
        w = None if a[4][0] == "Null" else t(4)
        b = None if a[5][0] == "Null" else t(5)
        ns, eps = ints(a[6][1]), num(a[7][1])
        dims = list(range(x.dim() - len(ns), x.dim()))
        return [
            Fn.layer_norm(x, ns, w, b, eps),
            x.mean(dims),
            1 / torch.sqrt(x.var(dims, unbiased=False) + eps),
        ]
    if op == "diopiLayerNormBackward":
        ns = ints(a[9][1])
        return list(vjp(lambda x, w, b: Fn.layer_norm(x, ns, w, b, 1e-5), [t(4), t(5), t(6)], t(3)))
    if op in ("diopiMaxPool2dWithIndices", "diopiMaxPool2d"):
        idx = op.endswith("Indices")
        k0 = 3 if idx else 2
        k, s, p, d = (ints(a[k0 + j][1]) for j in range(4))
        v, i = Fn.max_pool2d(t(k0 - 1), k, s, p, d, a[k0 + 4][1] == "true", return_indices=True)
        return [v, i.double()] if idx else [v]
    if op == "diopiMaxPool2dBackward":
        k, s, p, d = (ints(a[3 + j][1]) for j in range(4))
        return list(vjp(lambda x: Fn.max_pool2d(x, k, s, p, d, a[7][1] == "true"), [t(2)], t(1)))
    if op in ("diopiAvgPool2d", "diopiAvgPool2dBackward"):
        off = 1 if op.endswith("Backward") else 0
        k, s, p = (ints(a[2 + off + j][1]) for j in range(3))
        ceil, cip = a[5 + off][1] == "true", a[6 + off][1] == "true"
        dv = None if a[7 + off][1] == "None" else ints(a[7 + off][1])[0]
        f = lambda x: Fn.avg_pool2d(x, k, s, p, ceil, cip, dv)
        return list(vjp(f, [t(2)], t(1))) if off else [f(t(1))]
    if op == "diopiAdaptiveAvgPool2d":
        return [Fn.adaptive_avg_pool2d(t(1), ints(a[2][1]))]
    if op == "diopiAdaptiveAvgPool2dBackward":
        go = t(1)
        return list(vjp(lambda x: Fn.adaptive_avg_pool2d(x, list(go.shape[2:])), [t(2)], go))
    if op in ("diopiNLLLoss", "diopiCrossEntropyLoss"):
        x, f = loss(op, a, t, 0)
        return [f(x)]
    if op in ("diopiNLLLossBackward", "diopiCrossEntropyLossBackward"):
        x, f = loss(op, a, t, 1)
        return list(vjp(f, [x], t(1)))
    if op == "diopiEmbeddingBackward":
        g, idx, nw, pad = t(1), t(2).long(), int(num(a[3][1])), int(num(a[4][1]))
        sc = a[5][1] == "true"
        f = lambda w: Fn.embedding(idx, w, padding_idx=None if pad < 0 else pad, scale_grad_by_freq=sc)
        return list(vjp(f, [torch.zeros(nw, g.shape[-1])], g))
    if op == "diopiIndexSelectBackward":
        dim, idx = int(num(a[3][1])), t(4).long()
        return list(vjp(lambda x: torch.index_select(x, dim, idx), [torch.zeros(ints(a[2][1]))], t(1)))
    if op == "diopiGeluBackward":
        approx = re.search(r'"(\w+)"', a[3][1]).group(1)
        return list(vjp(lambda x: Fn.gelu(x, approximate=approx), [t(2)], t(1)))
    if op == "diopiMatmulBackward":
        return list(vjp(torch.matmul, [t(3), t(4)], t(2)))
    if op == "diopiErf":
        return [torch.erf(t(1))]
    if op == "diopiGelu":
        approx = re.search(r'"(\w+)"', a[2][1]).group(1)
        return [Fn.gelu(t(1), approximate=approx)]
    if op in ("diopiSoftmax", "diopiLogSoftmax"):
        f = Fn.log_softmax if "Log" in op else Fn.softmax
        return [f(t(1), int(num(a[2][1])))]
    if op in ("diopiSoftmaxBackward", "diopiLogSoftmaxBackward"):
        # The runner gives the forward output; invert it to the input up to
        # a constant per row, which neither softmax form depends on.
        y, dim = t(2), int(num(a[3][1]))
        x = y if "Log" in op else torch.log(y)
        f = Fn.log_softmax if "Log" in op else Fn.softmax
        return list(vjp(lambda x: f(x, dim), [x], t(1)))
    if op in ("diopiSum", "diopiMean"):
        x, dims = t(1), ints(a[2][1])
        keep = len(c_shape(a, 0)) == x.dim() and x.dim() > 0
        f = torch.sum if op == "diopiSum" else torch.mean
        return [f(x, dim=dims or None, keepdim=keep) if dims else f(x)]
    if op in ("diopiMax", "diopiMin"):
        x, dim = t(2), int(num(a[3][1]))
        keep = len(c_shape(a, 0)) == x.dim()
        v, i = (torch.max if op == "diopiMax" else torch.min)(x, dim, keepdim=keep)
        return [v, i.double()]
    if op == "diopiArgmax":
        x = t(1)
        dim = None if a[2][1] == "None" else ints(a[2][1])[0]
        return [torch.argmax(x, dim, keepdim=a[3][1] == "true").double()]
    if op == "diopiAddmm":
        return [torch.addmm(t(1), t(2), t(3), beta=num(a[4][1]), alpha=num(a[5][1]))]
    if op == "diopiBaddbmm":
        return [torch.baddbmm(t(1), t(2), t(3), beta=num(a[4][1]), alpha=num(a[5][1]))]
    if op == "diopiLinear":
        return [Fn.linear(t(1), t(2), None if a[3][0] == "Null" else t(3))]
    if op == "diopiLinearBackward":
        go, x, w = t(3), t(4), t(5)
        gx, gw, gb = vjp(lambda x, w, b: Fn.linear(x, w, b), [x, w, torch.zeros(w.shape[0])], go)
        return [gx, gw, gb if a[2][0] != "Null" else None]
    if op in ("diopiAdam", "diopiAdamW"):
        p, g, m, v, vm = (t(k).clone() for k in range(5))
        lr, b1, b2, eps, wd = (num(a[k][1]) for k in range(5, 10))
        step, ams = int(num(a[10][1])), a[11][1] == "true"
        # torch counts the step itself: give it the one before.
        adam_step(
            [p], [g], [m], [v], [vm], [torch.tensor(float(step - 1))],
            decoupled_weight_decay=op == "diopiAdamW", amsgrad=ams,
            beta1=b1, beta2=b2, lr=lr, weight_decay=wd, eps=eps, maximize=False,
        )
        return [p, m, v, vm]
    if op == "diopiSgd":
        p, g, buf = t(0).clone(), t(1), t(2).clone()
        lr, mom, damp, wd = (num(a[k][1]) for k in range(3, 7))
        sgd_step(
            [p], [g], [buf if mom != 0 else None],
            weight_decay=wd, momentum=mom, lr=lr, dampening=damp,
            nesterov=a[7][1] == "true", maximize=False,
        )
        return [p, g, buf]
    if op in UNARY and [k for k, _ in a] == ["T", "C"]:
        return [UNARY[op](t(1))]
    if op in BINARY and [k for k, _ in a] == ["T", "C", "C"]:
        return [BINARY[op](t(1), t(2))]
    if op in ("diopiAdd", "diopiSub") and len(a) == 4 and a[2][0] == "C":
        f = torch.add if op == "diopiAdd" else torch.sub
        return [f(t(1), t(2), alpha=num(a[3][1]))]
    if op in ("diopiAddcmul", "diopiAddcdiv"):
        f = torch.addcmul if op == "diopiAddcmul" else torch.addcdiv
        return [f(t(1), t(2), t(3), value=num(a[4][1]))]
    if op == "diopiWhere":
        return [torch.where(t(1).bool(), t(2), t(3))]
    if op == "diopiMaskedFillScalar":
        return [t(1).masked_fill(t(2).bool(), num(a[3][1]))]
    if op in ("diopiTril", "diopiTriu"):
        f = torch.tril if op == "diopiTril" else torch.triu
        return [f(t(1), int(num(a[2][1])))]
    if op == "diopiEmbedding":
        return [Fn.embedding(t(2).long(), t(1))]
    if op == "diopiIndexSelect":
        return [torch.index_select(t(1), int(num(a[2][1])), t(3).long())]
    if op in ("diopiCat", "diopiStack"):
        ts = [TENSORS[i] for i in ints(a[1][1])]
        f = torch.cat if op == "diopiCat" else torch.stack
        return [f(ts, int(num(a[3][1])))]
    if op == "diopiTranspose":
        return [t(1).transpose(int(num(a[2][1])), int(num(a[3][1])))]
    if op == "diopiPermute":
        return [t(1).permute(ints(a[2][1]))]
    if op == "diopiDiv":
        mode = [None, "trunc", "floor"][int(num(a[3][1]))]
        return [torch.div(t(1), t(2), rounding_mode=mode)]
    return None


UNARY = {
    "diopiSqrt": torch.sqrt,
    "diopiRsqrt": torch.rsqrt,
    "diopiExp": torch.exp,
    "diopiLog": torch.log,
    "diopiNeg": torch.neg,
    "diopiAbs": torch.abs,
    "diopiSign": torch.sign,
    "diopiReciprocal": torch.reciprocal,
    "diopiSigmoid": torch.sigmoid,
    "diopiTanh": torch.tanh,
    "diopiSilu": Fn.silu,
    "diopiRelu": torch.relu,
}
BINARY = {
    "diopiMul": torch.mul,
    "diopiMaximum": torch.maximum,
    "diopiMinimum": torch.minimum,
    "diopiPowTensor": torch.pow,
    "diopiEq": torch.eq,
    "diopiNe": torch.ne,
    "diopiLt": torch.lt,
    "diopiLe": torch.le,
    "diopiGt": torch.gt,
    "diopiGe": torch.ge,
}
SHAPES = {}
TENSORS = []


def c_shape(a, k):
    """The shape of the tensor of argument `k` (set per case by main)."""
    return SHAPES[int(a[k][1])]


def main(path):
    cases = json.load(open(path))
    results, failed = {}, 0
    for c in cases:
        a = parse_args(c["args"])
        ts = [tensor(x) for x in c["tensors"]]
        TENSORS[:] = ts
        SHAPES.clear()
        SHAPES.update({i: x["shape"] for i, x in enumerate(c["tensors"])})
        t = lambda k: ts[int(a[k][1])]
        outs = compute(c["op"], a, t)
        if outs is None:
            continue
        bad = []
        for e, got in zip(c["expected"], outs):
            if got is None:
                continue
            want = tensor(e["tensor"])
            half = e["tensor"]["dtype"] in ("float16", "bfloat16")
            tol = (1e-2, 1e-2) if half else (1e-6, 1e-6)
            got = got.detach().to(torch.float64).reshape(want.shape)
            if not torch.allclose(got, want, atol=tol[0], rtol=tol[1], equal_nan=True):
                bad.append((e["index"], (got - want).abs().max().item()))
        r = results.setdefault(c["op"], [0, 0])
        r[0] += 1
        if bad:
            r[1] += 1
            failed += 1
            print(f"MISMATCH {c['op']} {c['label']}: (tensor, max diff) {bad}")
    for op, (n, b) in sorted(results.items()):
        print(f"{op}: {n} cases, {b} mismatches")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
