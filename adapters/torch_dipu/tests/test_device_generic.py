"""PyTorch's own device-generic tests (OpInfo and ModuleInfo, from the
wheel's torch.testing._internal) instantiated for dipu: every op runs on
dipu and on the CPU from the same inputs, forward and backward, and the
results must agree. Which ops and modules, and what is skipped and why,
is listed in docs/torch.md."""

import copy

import torch
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


class TestDipuOps(TestCase):
    @ops(_select(COMPARED), allowed_dtypes=(torch.float32,))
    def test_forward_matches_cpu(self, device, dtype, op):
        for sample in op.sample_inputs(device, dtype, requires_grad=False):
            actual = op(sample.input, *sample.args, **sample.kwargs)
            expected = op(_cpu(sample.input), *_cpu(sample.args), **_cpu(sample.kwargs))
            for t in _tensors(actual):
                self.assertEqual(t.device.type, "dipu")
            self.assertEqual(_cpu(actual), expected)

    @ops([op for op in _select(COMPARED) if op.supports_autograd], allowed_dtypes=(torch.float32,))
    def test_backward_matches_cpu(self, device, dtype, op):
        for sample in op.sample_inputs(device, dtype, requires_grad=True):
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
                # Some backward formulas reach dipu as composite kernels
                # (e.g. layer_norm's math_native_layer_norm) where the CPU has
                # a fused one: the same math, summed in another order.
                self.assertEqual(g.cpu(), cg, atol=1e-4, rtol=1e-4)

    @ops(_select(RANDOM), allowed_dtypes=(torch.float32,))
    def test_random_is_repeatable(self, device, dtype, op):
        for sample in op.sample_inputs(device, dtype, requires_grad=False):
            torch.manual_seed(42)
            first = op(sample.input, *sample.args, **sample.kwargs)
            torch.manual_seed(42)
            second = op(sample.input, *sample.args, **sample.kwargs)
            self.assertEqual(_cpu(first), _cpu(second))
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
            self.assertEqual(_cpu(out), cpu_out)
            outs = [t for t in _tensors(out) if t.requires_grad]
            cpu_outs = [t for t in _tensors(cpu_out) if t.requires_grad]
            if outs:
                sum(o.sum() for o in outs).backward()
                sum(o.sum() for o in cpu_outs).backward()
                for (name, p), cp in zip(module.named_parameters(), cpu_module.parameters()):
                    self.assertEqual(p.device.type, "dipu", msg=name)
                    self.assertEqual(_cpu(p.grad), cp.grad, msg=name)


instantiate_device_type_tests(TestDipuOps, globals(), only_for="dipu")
instantiate_device_type_tests(TestDipuModules, globals(), only_for="dipu")
