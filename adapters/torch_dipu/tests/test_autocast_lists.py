"""PyTorch's own autocast op lists for CUDA (torch.testing._internal.
autocast_test_lists.AutocastTestLists), run on dipu the way test/test_cuda.py
runs them: every op's output dtype under autocast, and bitwise equality with
the op run on inputs cast by hand. dipu registers CUDA's lists, so the
expectations are CUDA's unchanged."""

import pytest
import torch
from torch.testing._internal.autocast_test_lists import AutocastTestLists, TestAutocast

# For collection only (op names and indices); each test makes the dipu
# tensors afresh (`lists`), so none outlives it.
LISTS = AutocastTestLists("cpu")


@pytest.fixture
def lists():
    return AutocastTestLists("dipu")


def _split(op_with_args):
    op, args = op_with_args[0], op_with_args[1]
    kwargs = op_with_args[2] if len(op_with_args) == 3 and isinstance(op_with_args[2], dict) else {}
    return op, args, kwargs


# Known failures, kept visible (strict: they fail the run once they pass).
XFAIL = {
    # The helper's hand-cast turns einsum's equation string into a
    # generator's repr (a str is iterable): a bug of the shared helper,
    # not of autocast (the autocast output dtype is checked before).
    "einsum": "torch's _run_autocast_outofplace cannot hand-cast a str argument",
}


def _cases(name, dtypes):
    ops = getattr(LISTS, name)
    return [
        pytest.param(
            name,
            i,
            dtype,
            id=f"{name}-{_split(o)[0]}-{str(dtype)[6:]}",
            marks=[pytest.mark.xfail(strict=True, reason=XFAIL[_split(o)[0]])]
            if _split(o)[0] in XFAIL
            else [],
        )
        for i, o in enumerate(ops)
        for dtype in dtypes
        # The third element of a torch_fp16 entry is "skip on ROCm" (a
        # bool); cudnn_* ops have CUDA kernels only (not even CPU ones).
        if not (len(o) == 3 and o[2] is True) and not _split(o)[0].startswith("cudnn_")
    ]


LOW = [torch.float16, torch.bfloat16]

# (list, module: None for the Tensor method only, the dtype it runs as:
# None for the autocast dtype)
KINDS = {
    "torch_fp16": (torch, None),
    "nn_fp16": (torch._C._nn, None),
    "linalg_fp16": (torch._C._linalg, None),
    "methods_fp16": (None, None),
    "torch_fp32": (torch, torch.float32),
    "nn_fp32": (torch._C._nn, torch.float32),
    "methods_fp32": (None, torch.float32),
    "torch_need_autocast_promote": (torch, torch.float32),
}


class _Runner(TestAutocast):
    def runTest(self):  # unittest needs one to build an instance
        pass


@pytest.mark.parametrize(
    "name,index,dtype",
    [c for name in KINDS for c in _cases(name, LOW if KINDS[name][1] is None else [torch.float16])],
)
def test_cuda_autocast_list_on_dipu(lists, name, index, dtype):
    module, run_as = KINDS[name]
    op, args, kwargs = _split(getattr(lists, name)[index])
    _Runner()._run_autocast_outofplace(
        op, args, run_as or dtype, "dipu", module=module, add_kwargs=kwargs, amp_dtype=dtype
    )


@pytest.mark.parametrize("module_name", ["torch", "methods"])
def test_expect_builtin_promote(lists, module_name):
    cases = lists.torch_expect_builtin_promote if module_name == "torch" else lists.methods_expect_builtin_promote
    for op, args, out_type in cases:
        _Runner()._run_autocast_outofplace(
            op, args, torch.float32, "dipu", out_type=out_type,
            module=torch if module_name == "torch" else None, amp_dtype=torch.float16,
        )


def test_banned_ops_raise(lists):
    with torch.autocast("dipu", dtype=torch.float16):
        for op, args, module in lists.banned:
            with pytest.raises(RuntimeError):
                getattr(module, op)(*args)
