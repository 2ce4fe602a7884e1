"""The layer comparison (ditorch's CompLayerAcc, DIPU's one-iteration
check): one training step of a model on the CPU and on a device from the
same weights and inputs; every module's forward output and every
parameter's gradient compared under the tolerance policy
(docs/tolerance.md); the first module that departs is named with by how
much. `fixed_input=True` feeds each module the CPU's input, so one faulty
module does not spread to the ones after it."""

import copy

import torch
from torch.utils._pytree import tree_flatten

from . import _common as c

COLUMNS = ["no.", "what", "name", "match", "detail"]


class _Substitute(torch.autograd.Function):
    """`value` in the forward, the gradient passed to `orig` in the backward:
    a module sees the CPU's input while the backward stays connected."""

    @staticmethod
    def forward(ctx, orig, value):  # noqa: ARG004
        return value.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def _tensors(x):
    return [t for t in tree_flatten(x)[0] if isinstance(t, torch.Tensor)]


def _own_len(module, inputs, outputs):
    """How many terms each output element of `module` sums (its own part of
    the chain of reductions): a weight's fan-in, a pooling's window, a
    normalisation's statistics."""
    ins = [t for t in _tensors(inputs) if t.is_floating_point()]
    outs = [t for t in _tensors(outputs) if t.is_floating_point()]
    weight = getattr(module, "weight", None)
    if isinstance(weight, torch.Tensor) and weight.dim() >= 2:
        return max(1, weight[0].numel())
    if isinstance(weight, torch.Tensor) and weight.numel() and ins:
        n = ins[0].numel()
        return max(1, weight.numel(), n // weight.numel())
    if ins and outs and outs[0].numel():
        return max(1, ins[0].numel() // outs[0].numel())
    return 1


class LayerReport:
    """The comparison's rows, in the order the modules ran (forward outputs)
    then the parameters' order (gradients): dicts with `what` ("forward" or
    "grad"), `name`, `match` and `detail` (why not, from the tolerance
    policy)."""

    def __init__(self, rows):
        self.rows = rows

    @property
    def first_mismatch(self):
        """The first row that departs (a forward output before any
        gradient), or None."""
        return next((r for r in self.rows if not r["match"]), None)

    @property
    def all_match(self):
        """True when every forward output and every gradient matches."""
        return self.first_mismatch is None

    def table(self):
        """The rows as a plain-text table."""
        return c.table(COLUMNS, [(i + 1, r["what"], r["name"], r["match"], r["detail"])
                                 for i, r in enumerate(self.rows)])


def _sum_loss(output):
    return sum(t.float().sum() for t in _tensors(output) if t.is_floating_point())


def _run(model, inputs, loss_fn, record, substitute=None):
    """One forward and backward of `model`; `record` gets
    (module name, call number, inputs, outputs, own reduction length) in the
    order the modules finish their forward."""
    calls = {}
    handles = []

    for name, module in model.named_modules():
        label = f"{name or '(model)'} ({type(module).__name__})"

        def pre(mod, args, label=label):
            n = calls.get(label, 0)
            calls[label] = n + 1
            if substitute is None:
                return None
            cpu_args = substitute.get((label, n))
            if cpu_args is None:
                return None

            def swap(a, v):
                if isinstance(a, torch.Tensor) and isinstance(v, torch.Tensor) and a.is_floating_point():
                    return _Substitute.apply(a, v.to(a.device, a.dtype))
                return a

            return tuple(swap(a, v) for a, v in zip(args, cpu_args))

        def post(mod, args, out, label=label):
            record(label, calls[label] - 1, args, out, _own_len(mod, args, out) if not list(mod.children()) else 0)

        handles.append(module.register_forward_pre_hook(pre))
        handles.append(module.register_forward_hook(post))
    try:
        out = model(*inputs)
        loss = loss_fn(out)
        loss.backward()
    finally:
        for h in handles:
            h.remove()
    return loss


def compare_layers(model, inputs, loss_fn=None, device="dipu", fixed_input=False, verbose=True):
    """Runs one forward and backward of `model` (whose weights are taken as
    they are, on any device) with `inputs` (a tensor or a tuple of them) on
    the CPU and on `device`, from copies of the same weights, and compares
    each module's forward outputs and each parameter's gradient with the
    tolerance policy. `loss_fn(output)` makes the loss (default: the sum of
    the output). `fixed_input=True` gives every module on `device` the
    input the CPU's module had. Prints the table and the first module that
    departs (with `verbose`); returns a LayerReport."""
    tol = c.tolerance_module()
    if isinstance(inputs, torch.Tensor):
        inputs = (inputs,)
    loss_fn = loss_fn or _sum_loss
    with c.hooks_off():
        cpu_model = copy.deepcopy(model).to("cpu")
        dev_model = copy.deepcopy(model).to(device)
        cpu_model.train(model.training)
        dev_model.train(model.training)
        cpu_seen, dev_seen = [], []

        def keep(into):
            def rec(label, n, args, out, own):
                into.append((label, n, c.detach_to(args, "cpu"), c.detach_to(out, "cpu"), own))
            return rec

        cpu_loss = _run(cpu_model, c.detach_to(inputs, "cpu"), loss_fn, keep(cpu_seen))
        substitute = {(label, n): args for label, n, args, _, _ in cpu_seen} if fixed_input else None
        dev_loss = _run(dev_model, c.detach_to(inputs, device), loss_fn, keep(dev_seen), substitute)

    rows = []
    chain = 0
    expected = {(label, n): (out, own) for label, n, _, out, own in cpu_seen}
    for label, n, _, out, own in dev_seen:
        name = label if n == 0 else f"{label}#{n}"
        cpu = expected.get((label, n))
        if cpu is None:
            rows.append(dict(what="forward", name=name, match=False, detail="not run on the CPU"))
            continue
        chain += own
        red = max(1, own if fixed_input else chain)
        rows.append(_row(tol, "forward", name, out, cpu[0], red))
    total = max(1, sum(own for *_, own in cpu_seen))
    rows.append(_row(tol, "loss", "(loss)", dev_loss.detach().cpu(), cpu_loss.detach(), total))
    cpu_params = dict(cpu_model.named_parameters())
    for pname, p in dev_model.named_parameters():
        q = cpu_params[pname]
        if q.grad is None and p.grad is None:
            continue
        if q.grad is None or p.grad is None:
            rows.append(dict(what="grad", name=pname, match=False,
                             detail=f"gradient only on {'the CPU' if p.grad is None else device}"))
            continue
        rows.append(_row(tol, "grad", pname, p.grad.detach().cpu(), q.grad, 2 * total + _batch_terms(inputs)))
    report = LayerReport(rows)
    if verbose:
        print(report.table())
        bad = report.first_mismatch
        if bad is None:
            print(f"op_tools: every module's output and every gradient on {device} matches the CPU's")
        else:
            print(f"op_tools: first departure on {device}: {bad['what']} of {bad['name']}: {bad['detail']}")
    return report


def _batch_terms(inputs):
    first = next(iter(_tensors(inputs)), None)
    return first.shape[0] if first is not None and first.dim() else 1


def _row(tol, what, name, actual, expected, reduction_len):
    why = None
    for a, e in zip(_tensors(actual), _tensors(expected)):
        if not e.is_floating_point() and not e.is_complex():
            why = tol.close_report(a, e)
        else:
            scale = max(1.0, float(e.detach().abs().max())) if e.numel() else 1.0
            why = tol.close_report(a, e, reduction_len=reduction_len, scale=scale)
        if why:
            break
    if why is None and len(_tensors(actual)) != len(_tensors(expected)):
        why = f"{len(_tensors(actual))} tensors vs the CPU's {len(_tensors(expected))}"
    return dict(what=what, name=name, match=why is None, detail=why or "")
