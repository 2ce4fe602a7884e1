"""dipu-rs's tolerance policy for comparing device results with the CPU's
(docs/tolerance.md): the one table and the one comparison both adapters'
test suites use. It needs numpy only, so it imports under any framework
(torch, paddle) or none; torch and paddle tensors are read through their
own `.numpy()`.

    tolerance(dtype, reduction_len=1, scale=1.0) -> (atol, rtol)
    assert_close(actual, expected, dtype=None, reduction_len=1, scale=1.0, msg="")
    assert_trained_close(actual, expected, initial, reduction_len, msg="")
    assert_equal(actual, expected, msg="")   # bitwise: where no arithmetic differs

A value passes when |actual - expected| <= atol + rtol * |expected|, NaN
matching NaN and an infinity only itself. Integer and bool results are
compared exactly, whatever the arguments.
"""

import math

import numpy as np

__all__ = ["BASE", "EXACT", "tolerance", "assert_close", "assert_trained_close", "assert_equal",
           "close_report", "dtype_name"]

# (atol, rtol) of a result that went through one rounding in its dtype (an
# elementwise op, a copy with a cast): PyTorch's defaults for
# torch.testing.assert_close and TestCase.assertEqual.
BASE = {
    "float64": (1e-7, 1e-7),
    "float32": (1e-5, 1.3e-6),
    "bfloat16": (1e-5, 1.6e-2),
    "float16": (1e-5, 1e-3),
    "complex128": (1e-7, 1e-7),
    "complex64": (1e-5, 1.3e-6),
}

# Compared exactly: no rounding happens in them.
EXACT = frozenset(
    ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"]
)


def dtype_name(dtype):
    """The policy's name of `dtype`: a name ("float32"), a numpy dtype, or a
    framework dtype whose str() ends with the name ("torch.float32",
    "paddle.float32"); "float"/"half"/"double"/"bf16" and paddle's
    "bool_"-style spellings are accepted."""
    if isinstance(dtype, np.dtype) or (isinstance(dtype, type) and issubclass(dtype, np.generic)):
        name = np.dtype(dtype).name
    else:
        name = str(dtype).rsplit(".", 1)[-1].lower()
    aliases = {"float": "float32", "half": "float16", "double": "float64", "bf16": "bfloat16",
               "fp32": "float32", "fp16": "float16", "fp64": "float64", "bool_": "bool",
               "cfloat": "complex64", "cdouble": "complex128", "long": "int64", "int": "int32"}
    name = aliases.get(name, name)
    if name not in BASE and name not in EXACT:
        raise ValueError(f"no tolerance for dtype {dtype!r} (known: {sorted(BASE) + sorted(EXACT)})")
    return name


def tolerance(dtype, reduction_len=1, scale=1.0):
    """(atol, rtol) for a result of `dtype` whose elements each sum at most
    `reduction_len` terms (1: elementwise; a chain of reductions, such as the
    layers of a model or the steps of a training run, adds up its lengths),
    terms of magnitude about `scale` (1: data of unit size).

    Both grow as sqrt(reduction_len) (docs/tolerance.md says why). The
    absolute part is relative to the terms, not to the (maybe cancelled)
    result: it is proportional to `scale`, and for a reduction at least the
    dtype's relative precision times it. Integer and bool dtypes give (0, 0)."""
    name = dtype_name(dtype)
    if name in EXACT:
        return 0.0, 0.0
    if int(reduction_len) < 1 or not scale >= 0:
        raise ValueError(f"reduction_len must be at least 1 ({reduction_len}), scale at least 0 ({scale})")
    atol, rtol = BASE[name]
    if reduction_len > 1:
        atol = max(atol, rtol)
    growth = math.sqrt(reduction_len)
    return atol * growth * float(scale), rtol * growth


def _framework_dtype(x):
    d = getattr(x, "dtype", None)
    return None if d is None else str(d)


def _to_numpy(x):
    """`x` (numpy array, CPU torch or paddle tensor, Python number) as a
    numpy array and the dtype name it came with."""
    if isinstance(x, np.ndarray):
        return x, dtype_name(x.dtype)
    if isinstance(x, (bool, np.bool_)):
        return np.asarray(x), "bool"
    if isinstance(x, (int, np.integer)):
        return np.asarray(x, dtype=np.int64), "int64"
    if isinstance(x, (float, np.floating)):
        a = np.asarray(x)
        return a, dtype_name(a.dtype)
    fw = _framework_dtype(x)
    if fw is None:
        raise TypeError(f"cannot compare a {type(x).__name__}")
    name = dtype_name(fw)
    if type(x).__module__.startswith("torch"):  # no autograd, host memory, numpy has no bfloat16
        x = x.detach()
        if x.device.type != "cpu":
            raise ValueError(f"compare host copies: got a tensor on {x.device}")
        if name == "bfloat16":
            x = x.float()
        return np.asarray(x.numpy()), name
    a = np.asarray(x.numpy())
    if name == "bfloat16" and a.dtype == np.uint16:  # paddle gives bfloat16's bits
        a = (a.astype(np.uint32) << 16).view(np.float32)
    return a, name


def _is_seq(x):
    return isinstance(x, (list, tuple))


def close_report(actual, expected, dtype=None, reduction_len=1, scale=1.0, exact=False):
    """None when `actual` matches `expected` under the policy, else why not
    (the first differing part of a nested structure: count, worst element,
    its index and the bound there)."""
    if _is_seq(actual) or _is_seq(expected):
        if not (_is_seq(actual) and _is_seq(expected)) or len(actual) != len(expected):
            return f"structure differs: {type(actual).__name__} of {_len(actual)} vs " \
                   f"{type(expected).__name__} of {_len(expected)}"
        for i, (a, e) in enumerate(zip(actual, expected)):
            why = close_report(a, e, dtype, reduction_len, scale, exact)
            if why:
                return f"[{i}] {why}"
        return None
    if isinstance(actual, dict) or isinstance(expected, dict):
        if not (isinstance(actual, dict) and isinstance(expected, dict)) or actual.keys() != expected.keys():
            return "dict keys differ"
        for k in expected:
            why = close_report(actual[k], expected[k], dtype, reduction_len, scale, exact)
            if why:
                return f"[{k!r}] {why}"
        return None
    if actual is None or expected is None:
        return None if actual is expected else f"{actual!r} vs {expected!r}"
    a, a_name = _to_numpy(actual)
    e, e_name = _to_numpy(expected)
    if a.shape != e.shape:
        return f"shape {list(a.shape)} vs expected {list(e.shape)}"
    number = isinstance(expected, (int, float))  # a Python number: take actual's dtype
    if a_name != e_name and not number:
        return f"dtype {a_name} vs expected {e_name}"
    name = dtype_name(dtype) if dtype is not None else (a_name if number else e_name)
    shape = a.shape
    a, e = a.reshape(-1), e.reshape(-1)
    if exact:
        what = "bitwise"
        atol = rtol = 0.0
        # The same bytes: a NaN's payload and the sign of zero count too.
        ab = np.ascontiguousarray(a).view(np.uint8).reshape(a.size, a.itemsize)
        eb = np.ascontiguousarray(e.astype(a.dtype)).view(np.uint8).reshape(e.size, a.itemsize)
        bad = (ab != eb).any(axis=1)
    elif name in EXACT or a.dtype.kind in "biu":
        what = f"exact ({name})"
        atol = rtol = 0.0
        bad = a != e
    else:
        atol, rtol = tolerance(name, reduction_len, scale)
        what = f"{name}, reduction_len {reduction_len}, scale {scale:.3g}: atol {atol:.3g}, rtol {rtol:.3g}"
        wide = np.complex128 if a.dtype.kind == "c" or e.dtype.kind == "c" else np.float64
        a64, e64 = a.astype(wide), e.astype(wide)
        with np.errstate(invalid="ignore", over="ignore"):
            close = np.abs(a64 - e64) <= atol + rtol * np.abs(e64)
            close &= np.isfinite(a64) & np.isfinite(e64)  # an infinity matches only itself
            bad = ~((a64 == e64) | (np.isnan(a64) & np.isnan(e64)) | close)
    count = int(np.count_nonzero(bad))
    if count == 0:
        return None
    with np.errstate(invalid="ignore", over="ignore"):
        a64 = a.astype(np.complex128 if a.dtype.kind == "c" else np.float64)
        e64 = e.astype(a64.dtype)
        diff = np.abs(a64 - e64)
        bound = atol + rtol * np.abs(e64)
        excess = np.where(np.isfinite(diff), diff - bound, np.inf)
    flat = int(np.flatnonzero(bad)[np.argmax(excess[bad])])
    index = tuple(int(i) for i in np.unravel_index(flat, shape)) if shape else ()
    head = f"{count} of {a.size} elements differ ({what}); worst at index {index}: " \
           f"actual {a[flat].item()!r}, expected {e[flat].item()!r}"
    if atol == rtol == 0.0:
        return head
    return f"{head}, |diff| {float(diff[flat]):.3g} > bound {float(bound[flat]):.3g}"


def _len(x):
    return len(x) if _is_seq(x) else "-"


def assert_close(actual, expected, dtype=None, reduction_len=1, scale=1.0, msg=""):
    """Raises AssertionError unless `actual` (a device result, copied to the
    host) matches `expected` (the CPU's) within tolerance(dtype,
    reduction_len, scale); `dtype` defaults to `expected`'s. Nested lists,
    tuples and dicts are compared part by part; shapes and dtypes must
    match; integer and bool parts must be equal."""
    why = close_report(actual, expected, dtype, reduction_len, scale)
    if why:
        raise AssertionError(f"{msg}: {why}" if msg else why)


def assert_trained_close(actual, expected, initial, reduction_len, msg=""):
    """Raises AssertionError unless the parameter `actual`, trained on the
    device, matches `expected`, trained on the CPU from the same `initial`
    value: within the tolerance for `reduction_len` (the run's chain of
    reductions: its steps times the reductions of one step) whose absolute
    part is scaled to the largest update `expected - initial`, not to the
    parameter. A run whose updates are wrong (too small, too large, none)
    fails however small its steps are beside the parameters."""
    e, name = _to_numpy(expected)
    i, _ = _to_numpy(initial)
    if i.shape != e.shape:
        raise AssertionError(f"{msg}: initial shape {list(i.shape)} vs expected {list(e.shape)}")
    moved = np.abs(e.astype(np.float64) - i.astype(np.float64))
    scale = float(moved.max()) if moved.size else 0.0
    why = close_report(actual, expected, name, reduction_len, scale)
    if why:
        raise AssertionError(f"{msg}: {why}" if msg else why)


def assert_equal(actual, expected, msg=""):
    """Raises AssertionError unless `actual` and `expected` hold the same
    bytes: for results the policy requires bitwise (copies, views, moves of
    the same bytes, integer ops, replays of one random stream)."""
    why = close_report(actual, expected, exact=True)
    if why:
        raise AssertionError(f"{msg}: {why}" if msg else why)
