"""OpCapture: the inputs, outputs and, in backward, the gradients of every
matched op, saved under op_tools_results/op_capture_results/<op>/<pid>/
<forward_id>/<time>/ as .pth files, each with a .pth.json sidecar (the
metadata, the rank and the devices)."""

import json
import os
import time

import torch
from torch.utils._pytree import tree_flatten

from . import _common as c


def save_pth(path, name, args, kwargs, extra=None):
    """torch.save({name, args, kwargs, identifier}) plus a JSON sidecar."""
    payload = {"name": name, "args": tuple(args), "kwargs": dict(kwargs or {}),
               "identifier": os.path.basename(path)}
    try:
        torch.save(payload, path)
        meta = {"op": name, "rank": c.rank(), "pid": os.getpid(),
                "devices": c.devices_of((args, kwargs)),
                "args": [c.describe(a) for a in tree_flatten(args)[0]],
                "kwargs": {k: c.describe(v) for k, v in (kwargs or {}).items()}}
        meta.update(extra or {})
        with open(path + ".json", "w") as f:
            json.dump(meta, f, indent=1, default=str)
    except Exception as e:  # noqa: BLE001
        c.stderr(f"op_capture: cannot save {path}: {e}")


def save_call(directory, name, args, kwargs, outputs, extra=None):
    os.makedirs(directory, exist_ok=True)
    save_pth(os.path.join(directory, "input.pth"), name, args, kwargs, extra)
    outs = outputs if isinstance(outputs, (list, tuple)) else (outputs,)
    save_pth(os.path.join(directory, "output.pth"), name, outs, {}, extra)


class OpCapture(c.Tool):
    """Saves every matched op's arguments (OP_CAPTURE_LIST,
    OP_CAPTURE_DISABLE_LIST); `directories` lists where each call went."""

    VAR = "CAPTURE"

    def __init__(self):
        super().__init__()
        self.directories = []

    def run(self, name, func, args, kwargs):
        fid = c.next_id()
        directory = c.result_dir("op_capture_results", name, str(os.getpid()), str(fid),
                                 time.strftime("%Y-%m-%d-%H-%M-%S"))
        self.directories.append(directory)
        extra = {"forward_id": fid, "device": str(c.op_device(args, kwargs))}
        with c.hooks_off():
            save_pth(os.path.join(directory, "input.pth"), name, *c.detach_to((args, kwargs), "cpu"),
                     extra)
        out = func(*args, **kwargs)
        with c.hooks_off():
            outs = out if isinstance(out, (list, tuple)) else (out,)
            save_pth(os.path.join(directory, "output.pth"), name, c.detach_to(tuple(outs), "cpu"),
                     {}, extra)
            print(f"op_capture    {name} forward_id: {fid}    {directory}", flush=True)
            print(c.arg_table(name, args, kwargs, out), flush=True)
        self._hook_backward(name, out, directory, extra)
        return out

    @staticmethod
    def _hook_backward(name, out, directory, extra):
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.grad_fn is not None:
                handle = []

                def hook(grad_inputs, grad_outputs):
                    with c.hooks_off():
                        save_pth(os.path.join(directory, "grad_inputs.pth"), name,
                                 c.detach_to(tuple(grad_inputs), "cpu"), {}, extra)
                        save_pth(os.path.join(directory, "grad_outputs.pth"), name,
                                 c.detach_to(tuple(grad_outputs), "cpu"), {}, extra)
                    handle[0].remove()

                handle.append(t.grad_fn.register_hook(hook))
                return
