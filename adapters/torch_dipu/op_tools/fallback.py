"""OpFallback: matched ops run on the CPU and their results return to the
device; in-place and out= ops write back into the caller's device tensors,
and autograd stays connected (the CPU copies are made with .to(), which
autograd differentiates)."""

import torch
from torch.utils._pytree import tree_flatten, tree_map

from . import _common as c


class OpFallback(c.Tool):
    """Runs matched ops on the CPU (OP_FALLBACK_LIST, OP_FALLBACK_DISABLE_LIST)."""

    VAR = "FALLBACK"
    SKIP = frozenset(["torch.Tensor.cpu", "torch.Tensor.to", "torch.Tensor.item",
                      "torch.Tensor.tolist", "torch.Tensor.numpy"])

    def run(self, name, func, args, kwargs):
        fid = c.next_id()
        target = c.op_device(args, kwargs)
        inplace = c.is_inplace(name, kwargs)
        originals = {}
        # The tensors the op writes: an in-place op's self, out= tensors.
        written = {id(t) for t in tree_flatten(kwargs.get("out"))[0] if isinstance(t, torch.Tensor)}
        if inplace and kwargs.get("out") is None and args and isinstance(args[0], torch.Tensor):
            written.add(id(args[0]))

        def to_cpu(t):
            if isinstance(t, torch.Tensor) and c.is_device(t):
                if id(t) in written:
                    # Maybe written by the op: a copy autograd follows, copied back below.
                    cp = t.to("cpu", copy=True)
                    originals[id(cp)] = (t, cp)
                    return cp
                return t.to("cpu")
            if isinstance(t, torch.device) or (isinstance(t, str) and c.is_device(t)):
                return torch.device("cpu")
            return t

        with c.hooks_off():
            cpu_args, cpu_kwargs = tree_map(to_cpu, (args, kwargs))
            out = func(*cpu_args, **cpu_kwargs)
            print(f"fallback    {name}    forward_id: {fid}", flush=True)
            if inplace:
                result = out
                for dev_t, cp in originals.values():
                    dev_t.copy_(cp)
                # The op's result is one of its arguments: give back the device tensor.
                def back(o):
                    if isinstance(o, torch.Tensor):
                        for dev_t, cp in originals.values():
                            if o is cp:
                                return dev_t
                        return o.to(target) if target is not None else o
                    return o
                return tree_map(back, result)
            return tree_map(lambda o: o.to(target) if isinstance(o, torch.Tensor) and target is not None
                            else o, out)
