"""OpAutoCompare: every matched op runs again on the CPU on copies of its
inputs; forward outputs, mutated inputs and backward gradients are compared
under the tolerance policy (docs/tolerance.md) of each result's own dtype,
unless a tolerance variable says otherwise."""

import atexit
import csv
import math
import os
import time

import torch
from torch.utils._pytree import tree_flatten, tree_map

from . import _common as c

# Ops whose values come from a random stream (the device's is not the CPU's)
# or are uninitialised memory: never compared.
RANDOM_OPS = (
    r"torch\.(rand|randn|randint|randperm|rand_like|randn_like|randint_like|bernoulli|"
    r"multinomial|normal|poisson|empty|empty_like|empty_strided|dropout|alpha_dropout|"
    r"feature_alpha_dropout|native_dropout)",
    r"torch\.Tensor\.(random_|uniform_|normal_|bernoulli_?|exponential_|geometric_|"
    r"log_normal_|cauchy_|multinomial|new_empty|new_empty_strided)",
    r"torch\.nn\.init\..*",
    r"torch\.nn\.functional\.(dropout|dropout1d|dropout2d|dropout3d|alpha_dropout|"
    r"feature_alpha_dropout|gumbel_softmax|rrelu)",
)
# Contractions: each result element sums the last dimension of the first input.
CONTRACTIONS = ("linear", "matmul", "mm", "bmm", "addmm", "baddbmm", "addbmm", "einsum",
                "__matmul__", "__rmatmul__", "tensordot", "inner", "dot", "mv", "addmv")
COLUMNS = ["name", "allclose", "cosine_similarity", "max_abs_diff", "max_relative_diff", "atol",
           "rtol", "error_info"]


def is_random(name):
    return any(c.is_opname_match(name, p) for p in RANDOM_OPS)


def env_tolerance(name, dtype):
    """(atol, rtol) from <SUFFIX>_AUTOCOMPARE_ERROR_TOLERANCE_<DTYPE>,
    AUTOCOMPARE_ERROR_TOLERANCE_<DTYPE> or AUTOCOMPARE_ERROR_TOLERANCE
    (each "atol,rtol"); None when none is set. SUFFIX is the op name's last
    dotted part in upper case (LINEAR, ADD)."""
    suffix = name.rsplit(".", 1)[-1].strip("_").upper()
    dt = str(dtype).rsplit(".", 1)[-1].upper()
    for var in (f"{suffix}_AUTOCOMPARE_ERROR_TOLERANCE_{dt}",
                f"AUTOCOMPARE_ERROR_TOLERANCE_{dt}", "AUTOCOMPARE_ERROR_TOLERANCE"):
        v = os.environ.get(var)
        if v:
            try:
                atol, rtol = (float(x) for x in v.split(","))
                return atol, rtol
            except ValueError:
                c.say_once(f"op_tools: {var}={v!r} is not 'atol,rtol': ignored")
    return None


def reduction(name, args, out_numel):
    """(reduction_len, scale) of an op's results: how many terms each result
    element sums (a contraction's inner dimension, else the input's numel
    over the output's) and their magnitude."""
    tensors = [t for t in tree_flatten(args)[0]
               if isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel() > 0]
    if not tensors:
        return 1, 1.0
    mags = sorted((float(t.detach().abs().max()) for t in tensors), reverse=True)
    last = name.rsplit(".", 1)[-1]
    if last in CONTRACTIONS or "conv" in last:
        a = tensors[0]
        k = a.shape[-1] if a.dim() else 1
        if "conv" in last and len(tensors) > 1:
            w = tensors[1]
            k = w[0].numel()
        scale = mags[0] * (mags[1] if len(mags) > 1 else 1.0)
        return max(1, int(k)), max(scale, 1.0)
    ratio = max(t.numel() for t in tensors) // max(1, out_numel)
    return max(1, int(ratio)), max(mags[0], 1.0)


def compare(name, dev, cpu, reduction_len, scale):
    """One result row per tensor pair of `dev` (device results, on the
    host) and `cpu` (the CPU's), as dicts with COLUMNS' keys."""
    tol = c.tolerance_module()
    rows = []

    def one(label, d, e):
        row = dict(name=label, allclose=True, cosine_similarity="", max_abs_diff="",
                   max_relative_diff="", atol="", rtol="", error_info="")
        if isinstance(d, torch.Tensor) and isinstance(e, torch.Tensor):
            if d.shape != e.shape:
                row.update(allclose=False, error_info=f"shape {list(d.shape)} vs cpu {list(e.shape)}")
                return row
            override = env_tolerance(name, d.dtype)
            exact = not (d.is_floating_point() or d.is_complex())
            if override is not None:
                atol, rtol = override
            elif exact:
                atol, rtol = 0.0, 0.0
            else:
                atol, rtol = tol.tolerance(d.dtype, reduction_len, scale)
            a = d.detach().to(torch.float64 if not d.is_complex() else torch.complex128)
            # The CPU's result (maybe computed wider) rounded to the device's dtype.
            b = e.detach().to(d.dtype).to(a.dtype)
            diff = (a - b).abs()
            both_nan = a.isnan() & b.isnan()
            ok = (a == b) | both_nan | ((diff <= atol + rtol * b.abs()) & a.isfinite() & b.isfinite())
            row.update(atol=f"{atol:.3g}", rtol=f"{rtol:.3g}")
            if a.numel():
                finite = diff[~both_nan] if (~both_nan).any() else diff.new_zeros(1)
                row["max_abs_diff"] = f"{float(finite.max()):.6g}"
                rel = finite / (a.abs()[~both_nan] + 1e-6) if (~both_nan).any() else finite
                row["max_relative_diff"] = f"{float(rel.max()):.6g}"
                if not d.is_complex():
                    cos = torch.nn.functional.cosine_similarity(
                        torch.nan_to_num(a.flatten()), torch.nan_to_num(b.flatten()), dim=0, eps=1e-12)
                    row["cosine_similarity"] = f"{float(cos):.6f}"
            bad = int((~ok).sum())
            if bad:
                row.update(allclose=False,
                           error_info=f"{bad} of {a.numel()} elements beyond atol + rtol*|cpu|")
        elif isinstance(d, torch.Tensor) or isinstance(e, torch.Tensor):
            row.update(allclose=False, error_info=f"{type(d).__name__} vs cpu {type(e).__name__}")
        elif isinstance(d, float) and isinstance(e, float):
            row["allclose"] = math.isclose(d, e, rel_tol=1e-6, abs_tol=1e-6) or (d != d and e != e)
        elif isinstance(d, (int, bool, type(None), str, torch.dtype, torch.Size)):
            row["allclose"] = d == e
        else:
            return None
        return row

    dl, _ = tree_flatten(dev)
    cl, _ = tree_flatten(cpu)
    if len(dl) != len(cl):
        return [dict(name=name, allclose=False, cosine_similarity="", max_abs_diff="",
                     max_relative_diff="", atol="", rtol="",
                     error_info=f"{len(dl)} results vs cpu {len(cl)}")]
    for i, (d, e) in enumerate(zip(dl, cl)):
        r = one(f"{name}[{i}]" if len(dl) > 1 else name, d, e)
        if r is not None:
            rows.append(r)
    return rows


class OpAutoCompare(c.Tool):
    """Reruns each matched op on the CPU on copies of its inputs and compares
    (environment: OP_AUTOCOMPARE_LIST, OP_AUTOCOMPARE_DISABLE_LIST, the
    AUTOCOMPARE_ERROR_TOLERANCE* variables, OP_TOOLS_MAX_CACHE_SIZE).
    `results` holds every row of the run (with forward_id)."""

    VAR = "AUTOCOMPARE"
    SKIP = frozenset(["torch.Tensor.cpu", "torch.Tensor.to", "torch.Tensor.item", "torch.Tensor.tolist",
                      "torch.Tensor.numpy", "torch.Tensor.__torch_function__"])

    def __init__(self):
        super().__init__()
        self.results = []
        self._rows = []
        self._csv = None
        atexit.register(self.flush)

    def run(self, name, func, args, kwargs):
        if is_random(name):
            c.say_once(f"autocompare: skipping random op {name} (the device's random stream "
                       "is not the cpu's)")
            return func(*args, **kwargs)
        fid = c.next_id()
        inplace = c.is_inplace(name, kwargs)
        with c.hooks_off():
            cpu_args, cpu_kwargs, leaves = self._cpu_copies(args, kwargs, inplace)
            saved_inputs = c.detach_to((args, kwargs), "cpu")
        wrapped_args, wrapped_kwargs, dev_inputs = args, kwargs, []
        grad = torch.is_grad_enabled() and not inplace and leaves
        if grad:
            # Each input that requires grad goes through an alias whose hook
            # sees the gradient with respect to it.
            def alias(t):
                if isinstance(t, torch.Tensor) and t.requires_grad:
                    a = t.view_as(t)
                    dev_inputs.append(a)
                    return a
                return t

            wrapped_args, wrapped_kwargs = tree_map(alias, (args, kwargs))
        out = func(*wrapped_args, **wrapped_kwargs)
        with c.hooks_off():
            try:
                cpu_out = func(*cpu_args, **cpu_kwargs)
            except Exception as e:  # noqa: BLE001
                if self._is_half(cpu_args):
                    cpu_args32, cpu_kwargs32 = self._widen((cpu_args, cpu_kwargs))
                    cpu_out = func(*cpu_args32, **cpu_kwargs32)
                else:
                    c.stderr(f"autocompare    {name} forward_id: {fid}    the cpu run failed: {e}")
                    return out
            dev_host = c.detach_to(out, "cpu")
            n_out = max([t.numel() for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)] or [1])
            red = reduction(name, saved_inputs[0], n_out)
            rows = compare(f"{name} output", dev_host, cpu_out, *red)
            if inplace:
                rows += compare(f"{name} inputs", c.detach_to((args, kwargs), "cpu"),
                                (cpu_args, cpu_kwargs), *red)
            self._report(name, fid, "forward", rows, args, kwargs, out, saved_inputs, cpu_out)
        if grad:
            self._hook_backward(name, fid, out, cpu_out, dev_inputs, leaves, red)
        return out

    @staticmethod
    def _is_half(x):
        return any(isinstance(t, torch.Tensor) and t.dtype in (torch.float16, torch.bfloat16)
                   for t in tree_flatten(x)[0])

    @staticmethod
    def _widen(x):
        return tree_map(lambda t: t.float() if isinstance(t, torch.Tensor)
                        and t.dtype in (torch.float16, torch.bfloat16) else t, x)

    @staticmethod
    def _cpu_copies(args, kwargs, inplace):
        leaves = []

        def f(t):
            if isinstance(t, torch.Tensor):
                copy = t.detach().to("cpu", copy=True)
                if t.requires_grad and not inplace:
                    copy.requires_grad_(True)
                    leaves.append(copy)
                    return copy.view_as(copy)
                return copy
            if isinstance(t, torch.device) or (isinstance(t, str) and c.is_device(t)):
                return torch.device("cpu")
            return t

        cpu_args, cpu_kwargs = tree_map(f, (args, kwargs))
        return cpu_args, cpu_kwargs, leaves

    def _hook_backward(self, name, fid, out, cpu_out, dev_inputs, leaves, red):
        outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        couts = [t for t in tree_flatten(cpu_out)[0] if isinstance(t, torch.Tensor)]
        pairs = [(o, co) for o, co in zip(outs, couts) if o.requires_grad and co.requires_grad]
        if not pairs or len(dev_inputs) != len(leaves):
            return
        state = {"grad_out": [None] * len(pairs), "cpu_grads": None, "got": {}}

        def on_out(i):
            def hook(g):
                state["grad_out"][i] = g.detach().to("cpu", copy=True)
            return hook

        def on_in(j):
            def hook(g):
                with c.hooks_off():
                    if state["cpu_grads"] is None:
                        go = [g_ if g_ is not None else torch.zeros_like(co)
                              for g_, (_o, co) in zip(state["grad_out"], pairs)]
                        go = [x.to(co.dtype) for x, (_o, co) in zip(go, pairs)]
                        state["cpu_grads"] = torch.autograd.grad(
                            [co for _o, co in pairs], leaves, go, allow_unused=True)
                    state["got"][j] = g.detach().to("cpu", copy=True)
                    if len(state["got"]) == len(dev_inputs):
                        dev = [state["got"][k] for k in range(len(dev_inputs))]
                        cpu = [x if x is not None else torch.zeros_like(d)
                               for x, d in zip(state["cpu_grads"], dev)]
                        rows = []
                        for k, (d, e) in enumerate(zip(dev, cpu)):
                            rows += compare(f"{name} grad[{k}]", d, e, *red)
                        self._report(name, fid, "backward", rows, state["grad_out"], {}, dev, None, cpu)
            return hook

        for i, (o, _co) in enumerate(pairs):
            o.register_hook(on_out(i))
        for j, a in enumerate(dev_inputs):
            a.register_hook(on_in(j))

    def _report(self, name, fid, phase, rows, args, kwargs, out, saved_inputs, cpu_out):
        ok = all(r["allclose"] is True for r in rows)
        print(f"autocompare    {name} forward_id: {fid}    {phase}", flush=True)
        if not ok:
            print(c.call_site(), flush=True)
        print(c.table(COLUMNS, [[r[k] for k in COLUMNS] for r in rows]), flush=True)
        if self._csv is None:  # where the run started, even if it changes directory later
            d = c.result_dir("op_autocompare_result")
            self._csv = os.path.join(
                d, f"op_autocompare_info_pid{os.getpid()}_{time.strftime('%Y-%m-%d-%H-%M-%S')}.csv")
        for r in rows:
            self.results.append(dict(r, forward_id=fid))
            self._rows.append(dict(r, forward_id=fid))
        if not ok and phase == "forward" and saved_inputs is not None:
            self._save_repro(name, fid, saved_inputs, out, cpu_out)
        if len(self._rows) > int(c.get_option("OP_TOOLS_MAX_CACHE_SIZE", "1000")):
            self.flush()

    def _save_repro(self, name, fid, saved_inputs, out, cpu_out):
        stamp = time.strftime("%Y-%m-%d-%H-%M-%S")
        base = c.result_dir("op_capture_results", name, str(os.getpid()), "autocompare",
                            str(fid), stamp)
        from .capture import save_call  # noqa: PLC0415

        a, k = saved_inputs
        save_call(os.path.join(base, "device"), name, a, k, c.detach_to(out, "cpu"))
        save_call(os.path.join(base, "cpu"), name, a, k, cpu_out)
        print(f"autocompare    {name}: inputs saved for replay in {base}", flush=True)

    def flush(self):
        if not self._rows:
            return
        if self._csv is None:
            d = c.result_dir("op_autocompare_result")
            self._csv = os.path.join(
                d, f"op_autocompare_info_pid{os.getpid()}_{time.strftime('%Y-%m-%d-%H-%M-%S')}.csv")
        new = not os.path.exists(self._csv)
        with open(self._csv, "a", newline="") as f:
            w = csv.DictWriter(f, fieldnames=["forward_id"] + COLUMNS)
            if new:
                w.writeheader()
            w.writerows(self._rows)
        self._rows = []
