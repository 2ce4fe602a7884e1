"""PyTorch's own device-generic tests (OpInfo and ModuleInfo, from the
wheel's torch.testing._internal) instantiated for dipu: every op runs on
dipu and on the CPU from the same inputs, forward and backward, and the
results must agree under the tolerance policy (docs/tolerance.md): ops
that only move or select values bitwise, the others within
dipu_tolerance.tolerance for their reduction length. Which ops and
modules, and what is skipped and why, is listed in docs/torch.md."""

import copy
import math

import torch
from dipu_tolerance import assert_close, assert_equal
from torch.testing._internal.common_device_type import (
    instantiate_device_type_tests,
    ops,
)
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_modules import module_db, modules
from torch.testing._internal.common_utils import TestCase

# (name, variant) of the ops compared with the CPU.
COMPARED = [
    ("add", ""), ("sub", ""), ("mul", ""), ("div", "no_rounding_mode"), ("neg", ""),
    ("abs", ""), ("exp", ""), ("log", ""), ("sqrt", ""), ("rsqrt", ""), ("sin", ""),
    ("cos", ""), ("tanh", ""), ("sigmoid", ""), ("pow", ""), ("clamp", ""),
    ("maximum", ""), ("minimum", ""), ("where", ""), ("lerp", ""), ("addcmul", ""),
    ("reciprocal", ""),
    ("sum", ""), ("mean", ""), ("prod", ""), ("amax", ""), ("amin", ""),
    ("max", "reduction_with_dim"), ("argmax", ""), ("std", ""), ("var", ""),
    ("logsumexp", ""), ("cumsum", ""),
    ("matmul", ""), ("mm", ""), ("bmm", ""), ("addmm", ""), ("dot", ""), ("mv", ""),
    ("nn.functional.conv1d", ""), ("nn.functional.conv2d", ""),
    ("nn.functional.conv_transpose2d", ""),
    ("nn.functional.max_pool2d", ""), ("nn.functional.avg_pool2d", ""),
    ("nn.functional.adaptive_avg_pool2d", ""),
    ("softmax", ""), ("log_softmax", ""), ("nn.functional.relu", ""),
    ("nn.functional.gelu", ""), ("nn.functional.silu", ""), ("nn.functional.leaky_relu", ""),
    ("nn.functional.layer_norm", ""), ("nn.functional.batch_norm", ""),
    ("nn.functional.group_norm", ""),
    ("index_select", ""), ("gather", ""), ("scatter", ""), ("index_add", ""), ("take", ""),
    ("masked_fill", ""), ("masked_select", ""), ("nonzero", ""), ("cat", ""), ("stack", ""),
    ("flip", ""), ("roll", ""), ("transpose", ""), ("permute", ""), ("narrow", ""),
    ("repeat", ""), ("expand", ""), ("squeeze", ""), ("unsqueeze", ""), ("reshape", ""),
    ("view", ""), ("tril", ""), ("triu", ""), ("topk", ""), ("sort", ""),
    ("nn.functional.embedding", ""), ("nn.functional.cross_entropy", ""),
    ("nn.functional.mse_loss", ""),
]
# Ops that only move, select or sign-flip their input's values: no rounding
# happens, so the policy requires bitwise equality with the CPU.
MOVING = {
    "abs", "neg", "clamp", "maximum", "minimum", "where", "amax", "amin", "max", "argmax",
    "nn.functional.max_pool2d", "nn.functional.relu", "index_select", "gather", "scatter",
    "take", "masked_fill", "masked_select", "nonzero", "cat", "stack", "flip", "roll",
    "transpose", "permute", "narrow", "repeat", "expand", "squeeze", "unsqueeze", "reshape",
    "view", "tril", "triu", "topk", "sort",
}
# Ops whose output elements each sum (or multiply, or normalise over) many
# terms; the others round once per element (reduction length 1).
REDUCING = {
    "sum", "mean", "prod", "std", "var", "logsumexp", "cumsum", "matmul", "mm", "bmm", "addmm",
    "dot", "mv", "nn.functional.conv1d", "nn.functional.conv2d", "nn.functional.conv_transpose2d",
    "nn.functional.avg_pool2d", "nn.functional.adaptive_avg_pool2d", "softmax", "log_softmax",
    "nn.functional.layer_norm", "nn.functional.batch_norm", "nn.functional.group_norm",
    "index_add", "nn.functional.cross_entropy", "nn.functional.mse_loss",
    "nn.functional.embedding",  # max_norm rescales rows by their norm
}
assert not MOVING & REDUCING


def _reduction_len(*values):
    """An upper bound on the terms one result element sums: each term of a
    reduction reads its own element of some input, so no reduction is
    longer than the largest tensor it reads (docs/tolerance.md)."""
    flat = [list(v.values()) if isinstance(v, dict) else v for v in values]
    return max([t.numel() for t in _tensors(flat)] + [1])


# Random ops: compared with themselves under one seed (repeatability), and
# for shape and dtype with the CPU.
RANDOM = [
    ("bernoulli", ""), ("normal", ""), ("nn.functional.dropout", ""), ("multinomial", ""),
    ("uniform", ""), ("exponential", ""), ("rand_like", ""), ("randn_like", ""),
]


def _select(pairs):
    wanted = set(pairs)
    found = [op for op in op_db if (op.name, op.variant_test_name) in wanted]
    assert len(found) == len(wanted), wanted - {(o.name, o.variant_test_name) for o in found}
    return found


def _cpu(x):
    if isinstance(x, torch.Tensor):
        y = x.detach().cpu()
        return y.requires_grad_(x.requires_grad) if x.is_floating_point() else y
    if isinstance(x, (list, tuple)):
        return type(x)(_cpu(v) for v in x)
    if isinstance(x, dict):
        return {k: _cpu(v) for k, v in x.items()}
    return x


def _tensors(out):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _tensors(o)]
    return []


def _grad_inputs(sample):
    return [t for t in _tensors([sample.input, list(sample.args), list(sample.kwargs.values())])
            if t.requires_grad]


# OpInfo's samples of an op with many options are their product:
# max_pool2d has 1440 (kernel, stride, padding, dilation, ceil_mode,
# return_indices and six shapes), each a few microseconds of arithmetic and
# milliseconds of dispatch. Such an op is compared on every k-th sample, k
# prime to 2 and 3 so that each option's nested loop still varies (k = 13
# there gives 111 samples and every value of every option).
MAX_SAMPLES = 120


def _spread(samples):
    samples = list(samples)
    step = -(-len(samples) // MAX_SAMPLES)
    while step > 1 and math.gcd(step, 6) != 1:
        step += 1
    return samples[::step]


class TestDipuOps(TestCase):
    @ops(_select(COMPARED), allowed_dtypes=(torch.float32,))
    def test_forward_matches_cpu(self, device, dtype, op):
        for sample in _spread(op.sample_inputs(device, dtype, requires_grad=False)):
            actual = op(sample.input, *sample.args, **sample.kwargs)
            expected = op(_cpu(sample.input), *_cpu(sample.args), **_cpu(sample.kwargs))
            for t in _tensors(actual):
                self.assertEqual(t.device.type, "dipu")
            what = f"{op.name} {sample}"
            if op.name in MOVING:
                assert_equal(_cpu(actual), expected, msg=what)
            else:
                k = _reduction_len(sample.input, sample.args, sample.kwargs) if op.name in REDUCING else 1
                assert_close(_cpu(actual), expected, reduction_len=k, msg=what)

    @ops([op for op in _select(COMPARED) if op.supports_autograd], allowed_dtypes=(torch.float32,))
    def test_backward_matches_cpu(self, device, dtype, op):
        for sample in _spread(op.sample_inputs(device, dtype, requires_grad=True)):
            inputs = _grad_inputs(sample)
            if not inputs:
                continue
            cpu_sample = sample.transform(_cpu)
            cpu_inputs = _grad_inputs(cpu_sample)
            outs = [t for t in _tensors(op(sample.input, *sample.args, **sample.kwargs))
                    if t.requires_grad]
            cpu_outs = [t for t in _tensors(op(cpu_sample.input, *cpu_sample.args,
                                               **cpu_sample.kwargs)) if t.requires_grad]
            if not outs:
                continue
            grads = torch.autograd.grad(sum(o.sum() for o in outs), inputs, allow_unused=True)
            cpu_grads = torch.autograd.grad(sum(o.sum() for o in cpu_outs), cpu_inputs,
                                            allow_unused=True)
            for g, cg in zip(grads, cpu_grads):
                if g is None:
                    self.assertIsNone(cg)
                    continue
                self.assertEqual(g.device.type, "dipu")
                # A gradient sums over whatever its input was broadcast or
                # reduced against, and some backward formulas reach dipu as
                # composite kernels (layer_norm's math_native_layer_norm)
                # where the CPU has a fused one: any op's backward is a
                # reduction, bounded by its largest tensor.
                k = _reduction_len(sample.input, sample.args, sample.kwargs, outs)
                assert_close(g.cpu(), cg, reduction_len=k, msg=f"{op.name} grad {sample}")

    @ops(_select(RANDOM), allowed_dtypes=(torch.float32,))
    def test_random_is_repeatable(self, device, dtype, op):
        for sample in op.sample_inputs(device, dtype, requires_grad=False):
            torch.manual_seed(42)
            first = op(sample.input, *sample.args, **sample.kwargs)
            torch.manual_seed(42)
            second = op(sample.input, *sample.args, **sample.kwargs)
            # The same Philox stream replayed from the same seed on the same
            # device: the same bits (docs/tolerance.md).
            assert_equal(_cpu(first), _cpu(second), msg=op.name)
            expected = op(_cpu(sample.input), *_cpu(sample.args), **_cpu(sample.kwargs))
            for t, e in zip(_tensors(first), _tensors(expected)):
                if "device" not in sample.kwargs:  # rand_like(x, device="cpu") is on the CPU
                    self.assertEqual(t.device.type, "dipu")
                self.assertEqual(t.shape, e.shape)
                self.assertEqual(t.dtype, e.dtype)


MODULES = {"Linear", "Conv2d", "BatchNorm2d", "LayerNorm", "Embedding", "LSTM", "GRU", "GRUCell",
           "MultiheadAttention"}


class TestDipuModules(TestCase):
    @modules([m for m in module_db if m.module_cls.__name__ in MODULES],
             allowed_dtypes=(torch.float32,))
    def test_forward_and_backward_match_cpu(self, device, dtype, module_info, training):
        inputs = module_info.module_inputs_func(module_info, device="cpu", dtype=dtype,
                                                requires_grad=True, training=training)
        for module_input in inputs:
            if module_input.forward_input is None:
                continue
            args, kwargs = module_input.constructor_input.args, module_input.constructor_input.kwargs
            torch.manual_seed(0)
            cpu_module = module_info.module_cls(*args, **kwargs).to(dtype)
            cpu_module.train(training)
            module = copy.deepcopy(cpu_module).to(device)
            fargs, fkwargs = module_input.forward_input.args, module_input.forward_input.kwargs

            def on(dev, x):
                if isinstance(x, torch.Tensor):
                    y = x.detach().to(dev)
                    return y.requires_grad_(x.requires_grad)
                if isinstance(x, (list, tuple)):
                    return type(x)(on(dev, v) for v in x)
                if isinstance(x, dict):
                    return {k: on(dev, v) for k, v in x.items()}
                return x

            out = module(*on(device, fargs), **on(device, fkwargs))
            cpu_out = cpu_module(*on("cpu", fargs), **on("cpu", fkwargs))
            # Every reduction of the forward and backward (a Linear's fan-in,
            # its weight gradient's sum over the batch, a recurrent cell's
            # hidden size) is bounded by the largest input or parameter.
            k = _reduction_len(fargs, fkwargs, list(cpu_module.parameters()))
            what = f"{module_info.name} {module_input.forward_input}"
            assert_close(_cpu(out), cpu_out, reduction_len=k, msg=what)
            outs = [t for t in _tensors(out) if t.requires_grad]
            cpu_outs = [t for t in _tensors(cpu_out) if t.requires_grad]
            if outs:
                sum(o.sum() for o in outs).backward()
                sum(o.sum() for o in cpu_outs).backward()
                for (name, p), cp in zip(module.named_parameters(), cpu_module.parameters()):
                    self.assertEqual(p.device.type, "dipu", msg=name)
                    assert_close(_cpu(p.grad), cp.grad, reduction_len=k, msg=f"{what}: {name}.grad")


instantiate_device_type_tests(TestDipuOps, globals(), only_for="dipu")
instantiate_device_type_tests(TestDipuModules, globals(), only_for="dipu")
