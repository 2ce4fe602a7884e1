"""OpTimeMeasure: each matched op's forward and backward time, measured
with device events recorded on the op's stream (no host synchronisation
around the call); the times are read when the events are done, at flush.
A summary table sorted by total time, and a CSV."""

import atexit
import csv
import os
import time
from collections import defaultdict

import torch
from torch.utils._pytree import tree_flatten

from . import _common as c

COLUMNS = ["name", "forward_id", "forward_elapsed", "backward_elapsed", "unit"]


def _event(device):
    return torch.Event(device=device, enable_timing=True)


def _record(device):
    ev = _event(device)
    torch.accelerator.current_stream(device).record_event(ev)
    return ev


class OpTimeMeasure(c.Tool):
    """Times matched ops (OP_TIME_MEASURE_LIST, OP_TIME_MEASURE_DISABLE_LIST).
    summary() returns (name, calls, forward ms, backward ms, total ms) rows,
    sorted by total."""

    VAR = "TIME_MEASURE"

    def __init__(self):
        super().__init__()
        self.entries = []  # [name, forward_id, (start, end), (start, end) or None, device]
        self._csv = None
        atexit.register(self.flush)

    def run(self, name, func, args, kwargs):
        fid = c.next_id()
        device = c.op_device(args, kwargs)
        if self._csv is None:  # where the run started, even if it changes directory later
            d = c.result_dir("op_time_measure_result")
            self._csv = os.path.join(
                d, f"op_elapsed_info_pid{os.getpid()}_{time.strftime('%Y-%m-%d-%H-%M-%S')}.csv")
        with c.hooks_off():
            start = _record(device)
        out = func(*args, **kwargs)
        with c.hooks_off():
            end = _record(device)
        entry = [name, fid, (start, end), None, device]
        self.entries.append(entry)
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.grad_fn is not None:
                node = t.grad_fn
                marks = {}

                def pre(grad_outputs):
                    with c.hooks_off():
                        marks["start"] = _record(device)

                def post(grad_inputs, grad_outputs):
                    with c.hooks_off():
                        entry[3] = (marks["start"], _record(device))
                    for h in handles:
                        h.remove()

                handles = [node.register_prehook(pre), node.register_hook(post)]
                break
        if len(self.entries) > int(c.get_option("OP_TOOLS_MAX_CACHE_SIZE", "5000")):
            self.flush()
        return out

    @staticmethod
    def _ms(pair):
        if pair is None:
            return None
        pair[1].synchronize()
        return pair[0].elapsed_time(pair[1])

    def rows(self):
        """(name, forward_id, forward ms, backward ms or "") per call so far."""
        out = []
        for name, fid, fwd, bwd, _dev in self.entries:
            b = self._ms(bwd)
            out.append([name, fid, self._ms(fwd), "" if b is None else b])
        return out

    def summary(self, rows=None):
        agg = defaultdict(lambda: [0, 0.0, 0.0])
        for name, _fid, f, b, *_ in rows if rows is not None else self.rows():
            a = agg[name]
            a[0] += 1
            a[1] += f
            a[2] += b or 0.0
        table = [[n, a[0], a[1], a[2], a[1] + a[2]] for n, a in agg.items()]
        return sorted(table, key=lambda r: -r[4])

    def flush(self):
        if not self.entries:
            return
        rows = self.rows()
        self.entries = []
        summary = self.summary(rows)
        print(c.table(["name", "calls", "forward_ms", "backward_ms", "total_ms"],
                      [[n, k, f"{f:.4f}", f"{b:.4f}", f"{t:.4f}"] for n, k, f, b, t in summary]),
              flush=True)
        if self._csv is None:
            d = c.result_dir("op_time_measure_result")
            self._csv = os.path.join(
                d, f"op_elapsed_info_pid{os.getpid()}_{time.strftime('%Y-%m-%d-%H-%M-%S')}.csv")
        new = not os.path.exists(self._csv)
        with open(self._csv, "a", newline="") as f:
            w = csv.writer(f)
            if new:
                w.writerow(COLUMNS)
            for name, fid, fwd, bwd in rows:
                w.writerow([name, fid, fwd, bwd, "ms"])
