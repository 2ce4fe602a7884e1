"""OpDtypeCast, OpObserve and OpOverflowCheck."""


import torch
from torch.utils._pytree import tree_flatten, tree_map

from . import _common as c

VIEW_OPS = frozenset(
    "view view_as reshape reshape_as expand expand_as permute transpose t squeeze unsqueeze "
    "narrow select flatten unflatten contiguous detach __getitem__ split chunk unbind".split())
CONVERSIONS = frozenset("to type float half double bfloat16 int long bool short char byte".split())


def _dtype(text):
    d = getattr(torch, text.strip().split(".")[-1], None)
    if not isinstance(d, torch.dtype):
        raise ValueError(f"{text!r} is no torch dtype")
    return d


def cast_dict():
    """OP_DTYPE_CAST_DICT ("torch.float16->torch.float32,...") as a dict."""
    text = c.get_option("OP_DTYPE_CAST_DICT", "torch.float16->torch.float32,torch.bfloat16->torch.float32")
    out = {}
    for item in text.split(","):
        if "->" in item:
            a, b = item.split("->")
            out[_dtype(a)] = _dtype(b)
    return out


class OpDtypeCast(c.Tool):
    """Runs matched ops in a wider dtype and casts the results back
    (OP_DTYPE_CAST_LIST, OP_DTYPE_CAST_DISABLE_LIST, OP_DTYPE_CAST_DICT)."""

    VAR = "DTYPE_CAST"

    def run(self, name, func, args, kwargs):
        last = name.rsplit(".", 1)[-1]
        leaves = tree_flatten((args, kwargs))[0]
        if (last in VIEW_OPS or last in CONVERSIONS or "dtype" in kwargs
                or any(isinstance(v, torch.dtype) for v in leaves) or c.is_inplace(name, kwargs)):
            return func(*args, **kwargs)
        table = cast_dict()
        rows, seen = [], []

        def cast(t):
            if isinstance(t, torch.Tensor) and t.dtype in table:
                rows.append([name, f"input[{len(rows)}]", f"{t.dtype} -> {table[t.dtype]}"])
                seen.append(t.dtype)
                return t.to(table[t.dtype])  # autograd returns the grad in t's dtype
            return t

        with c.hooks_off():
            cargs, ckwargs = tree_map(cast, (args, kwargs))
        if not seen:
            return func(*args, **kwargs)
        out = func(*cargs, **ckwargs)
        back = {v: k for k, v in table.items() if k in seen}
        with c.hooks_off():
            def uncast(t):
                if isinstance(t, torch.Tensor) and t.dtype in back:
                    rows.append([name, "output", f"{t.dtype} -> {back[t.dtype]}"])
                    return t.to(back[t.dtype])
                return t
            out = tree_map(uncast, out)
            print(c.table(["name", "target", "action"], rows), flush=True)
        return out


class OpObserve(c.Tool):
    """Prints every matched op, its call site and its arguments
    (OP_OBSERVE_LIST, OP_OBSERVE_DISABLE_LIST)."""

    VAR = "OBSERVE"

    def __init__(self):
        super().__init__()
        self.reports = []  # (op, forward_id, output row) where a NaN or Inf appeared

    def run(self, name, func, args, kwargs):
        fid = c.next_id()
        out = func(*args, **kwargs)
        with c.hooks_off():
            print(f"{name}    {fid}", flush=True)
            site = c.call_site()
            print(site, flush=True)
            print(c.arg_table(name, args, kwargs, out), flush=True)
            rows = _stats(name, args, kwargs, out)
            inputs_bad = any(r[1] for r in rows if " inputs" in r[0])
            for r in rows:
                if r[1] and " outputs" in r[0] and not inputs_bad:
                    self.reports.append((name, fid, r[0]))
                    print(f"op_observe    {name} forward_id: {fid}    {r[0]}: produced inf or nan"
                          f"    at {site}", flush=True)
        return out


def _stats(name, args, kwargs, out):
    rows = []

    def one(label, t):
        if isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex()):
            x = t.detach().to("cpu", torch.float32 if not t.is_complex() else torch.complex64)
            bad = bool((~x.isfinite()).any()) if x.numel() else False
            if x.numel() and not t.is_complex():
                f = x[x.isfinite()] if bad else x
                if f.numel():
                    rows.append([label, bad, float(f.min()), float(f.max()), float(f.mean()),
                                 float(f.std()) if f.numel() > 1 else 0.0, float(f.norm())])
                    return
            rows.append([label, bad, "", "", "", "", ""])
        elif isinstance(t, torch.Tensor):
            rows.append([label, False, "", "", "", "", ""])

    for i, a in enumerate(tree_flatten(args)[0]):
        one(f"{name} inputs[{i}]", a)
    for k, v in kwargs.items():
        for a in tree_flatten(v)[0]:
            one(f"{name} inputs {k}", a)
    for i, a in enumerate(tree_flatten(out)[0]):
        one(f"{name} outputs[{i}]", a)
    return rows


def _out_of_range(t):
    """True when a finite value of `t` is at the edge of its dtype's range
    (an overflow that saturated)."""
    if not isinstance(t, torch.Tensor) or not t.is_floating_point() or not t.numel():
        return False
    info = torch.finfo(t.dtype)
    x = t.detach().to("cpu", torch.float64)
    return bool((x.abs() >= info.max).any())


class OpOverflowCheck(c.Tool):
    """Reports NaN/Inf and values at the edge of the dtype's range per op,
    with min, max, mean, std and norm (OP_OVERFLOW_CHECK_LIST,
    OP_OVERFLOW_CHECK_DISABLE_LIST). `reports` lists (op, forward_id, row name)
    of every flagged value."""

    VAR = "OVERFLOW_CHECK"

    def __init__(self):
        super().__init__()
        self.reports = []

    def run(self, name, func, args, kwargs):
        fid = c.next_id()
        out = func(*args, **kwargs)
        with c.hooks_off():
            rows = _stats(name, args, kwargs, out)
            flagged = [r[0] for r in rows if r[1]]
            flagged += [f"{name} outputs[{i}]" for i, t in enumerate(tree_flatten(out)[0])
                        if _out_of_range(t) and f"{name} outputs[{i}]" not in flagged]
            print(f"overflow_check    {name} forward_id: {fid}", flush=True)
            print(c.table(["name", "inf_or_nan", "min", "max", "mean", "std", "norm"], rows), flush=True)
            for r in flagged:
                self.reports.append((name, fid, r))
                print(f"overflow_check    {name} forward_id: {fid}    {r}: inf, nan or out of "
                      f"range    at {c.call_site()}", flush=True)
        return out


