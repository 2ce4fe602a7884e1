"""Replays captured op calls: `python -m op_tools.run_op_from_data DIR
[--run_times N] [--only_run_forward] [--sync_time_measure] [--acc_check]
[--device dipu]`. DIR is one call's directory (input.pth) or any directory
above many; each call's inputs go to the device, the op runs, and its
outputs are compared with the captured output.pth under the tolerance
policy. --acc_check also reruns it on the CPU (OpAutoCompare);
--sync_time_measure times it (OpTimeMeasure); backward runs when
grad_outputs.pth was captured, unless --only_run_forward. Exits 1 when a
replayed output differs from the captured one."""

import argparse
import importlib
import os
import sys

import torch
from torch.utils._pytree import tree_flatten, tree_map

import torch_dipu  # noqa: F401

from . import _common as c
from .autocompare import OpAutoCompare, compare, reduction
from .measure import OpTimeMeasure


def resolve(name):
    """The function a captured name (torch.Tensor.add, torch.nn.functional.linear) denotes."""
    parts = name.split(".")
    for i in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for p in parts[i:]:
            obj = getattr(obj, p)
        return obj
    raise ValueError(f"cannot resolve {name!r}")


class OpRunner:
    """One captured call: load(), run() the forward (and backward), check()
    against the captured outputs."""

    def __init__(self, directory, device):
        self.dir = directory
        self.device = device
        data = torch.load(os.path.join(directory, "input.pth"), map_location="cpu", weights_only=False)
        self.name = data["name"]
        self.func = resolve(self.name)
        self.saved = (data["args"], data["kwargs"])
        out = os.path.join(directory, "output.pth")
        self.expected = torch.load(out, map_location="cpu", weights_only=False)["args"] \
            if os.path.exists(out) else None
        gout = os.path.join(directory, "grad_outputs.pth")
        self.grad_outputs = torch.load(gout, map_location="cpu", weights_only=False)["args"] \
            if os.path.exists(gout) else None

    def _inputs(self):
        def f(t):
            if isinstance(t, torch.Tensor):
                d = t.to(self.device)
                return d.requires_grad_(True) if (t.requires_grad and d.is_leaf) else d
            if isinstance(t, torch.device) or (isinstance(t, str) and c.is_device(t)):
                return torch.device(self.device)
            return t
        return tree_map(f, self.saved)

    def run(self, backward=True):
        args, kwargs = self._inputs()
        out = self.func(*args, **kwargs)
        if backward and self.grad_outputs is not None:
            outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor) and t.requires_grad]
            grads = [g.to(self.device) for g in self.grad_outputs if isinstance(g, torch.Tensor)]
            if outs and len(grads) >= len(outs):
                torch.autograd.backward(outs, grads[:len(outs)])
        return out

    def check(self, out):
        """Result rows comparing `out` with the captured outputs (empty when none)."""
        if self.expected is None:
            return []
        got = c.detach_to(out if isinstance(out, (list, tuple)) else (out,), "cpu")
        n = max([t.numel() for t in tree_flatten(got)[0] if isinstance(t, torch.Tensor)] or [1])
        return compare(f"{self.name} replay", tuple(got), tuple(self.expected),
                       *reduction(self.name, self.saved[0], n))


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m op_tools.run_op_from_data", description=__doc__)
    p.add_argument("dir")
    p.add_argument("--run_times", type=int, default=1)
    p.add_argument("--only_run_forward", action="store_true")
    p.add_argument("--sync_time_measure", action="store_true")
    p.add_argument("--acc_check", action="store_true")
    p.add_argument("--device", default="dipu")
    a = p.parse_args(argv)
    dirs = sorted(root for root, _d, files in os.walk(a.dir) if "input.pth" in files)
    if not dirs:
        print(f"run_op_from_data: no input.pth under {a.dir}", file=sys.stderr)
        return 2
    failed = 0
    for d in dirs:
        try:
            runner = OpRunner(d, a.device)
        except Exception as e:  # noqa: BLE001
            print(f"replay    ?    {d}    cannot replay: {e}", flush=True)
            failed += 1
            continue
        tools = []
        if a.acc_check:
            tools.append(OpAutoCompare())
        if a.sync_time_measure:
            tools.append(OpTimeMeasure())
        for t in tools:
            t.start()
        try:
            for _ in range(max(1, a.run_times)):
                out = runner.run(backward=not a.only_run_forward)
        finally:
            for t in reversed(tools):
                t.stop()
        rows = runner.check(out)
        bad = [r for r in rows if r["allclose"] is not True]
        failed += bool(bad)
        print(f"replay    {runner.name}    {d}    {'differs' if bad else 'matches'} the captured output"
              if rows else f"replay    {runner.name}    {d}    ran (no output.pth)", flush=True)
        for r in bad:
            print(f"    {r['name']}: {r['error_info']} (max_abs_diff {r['max_abs_diff']})", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
