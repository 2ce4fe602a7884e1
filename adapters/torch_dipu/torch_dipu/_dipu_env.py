"""DIPU's environment variables that torch_dipu reads only to say what
becomes of them: the ones dipu-rs does not act on (docs/configuration.md
says why for each), and the values of acted-on ones that cannot take
effect. Each such variable that is set is named in one warning at import,
never ignored in silence."""

import os
import warnings

# DIPU's variable -> why dipu-rs does not act on it (and what to use instead).
NOT_APPLIED = {
    "DIPU_IMMEDIATE_REGISTER_OP": "torch_dipu registers its ops once, at import",
    "DIPU_PATCH_CUDA_CACHED_ALLOCATOR": "dipu-rs does not replace torch's CUDA allocator; "
    "dipu tensors use dipu-rs's allocator on every vendor",
    "DIPU_DEBUG_ALLOCATOR": "dipu-rs's allocator has no log mask: use torch.dipu.memory_stats(), "
    "memory_snapshot() or DIPU_MEM_HISTORY",
    "DIPU_MAX_EXTEND_SIZE": "dipu-rs's BF allocator grows by request, not by an extend size; "
    "see DIPU_ALLOC_CONF (max_split_size_mb, roundup_power2_divisions)",
    "DIPU_BS_ALLOCATOR_MIN_ALLOCATE_SIZE": "dipu-rs's BS allocator has fixed size classes; "
    "see DIPU_ALLOC_CONF",
    "DIPU_BS_MORE_ADAPTABLE": "dipu-rs's BS allocator has fixed size classes; see DIPU_ALLOC_CONF",
    "DIPU_CPU_AFFINITY": "dipu-rs does not pin threads to cores (use taskset or numactl)",
    "DIPU_CUDA_EVENT_TIMING": "dipu-rs's events time only when asked (enable_timing=True)",
    "DIPU_DISABLE_FLUSH_READY_EVENT": "dipu-rs's profiler has no event pool to flush",
    "DIPU_FLUSH_READY_EVENT_INTERVAL": "dipu-rs's profiler has no event pool to flush",
    "DIPU_MAX_ASYNC_RESOURCE_POOL_LENGTH": "dipu-rs's allocator frees a block used on another "
    "stream when that stream's event completes, with no pool length",
    "DIPU_DISABLE_FORCE_FALLBACK_COPY_TENSOR": "the CPU fallback always writes mutated "
    "arguments back (DIPU reads the variable but never uses it)",
    "DIPU_FORCE_FALLBACK_ASCEND_P2P_COPY": "dipu-rs's Ascend vendor uses peer access where "
    "ACL grants it and goes through the host otherwise",
}

_TRUE = ("1", "true", "on", "yes")


def _problems(environ):
    out = [f"{name} ({why})" for name, why in NOT_APPLIED.items() if name in environ]
    check = environ.get("DIPU_CHECK_TENSOR_DEVICE")
    if check is not None and check.strip() in ("", "0"):
        out.append("DIPU_CHECK_TENSOR_DEVICE=0 (dipu-rs always checks that an op's "
                   "tensors are on dipu)")
    as_cuda = environ.get("DIPU_PYTHON_DEVICE_AS_CUDA")
    mock = environ.get("DIPU_MOCK_CUDA", "").lower() in _TRUE
    if as_cuda is not None and as_cuda.lower() in _TRUE and not mock:
        out.append("DIPU_PYTHON_DEVICE_AS_CUDA (acts only with DIPU_MOCK_CUDA=True)")
    with_lib = environ.get("DIPU_WITH_DIOPI_LIBRARY", "")
    lib = environ.get("DIPU_DIOPI_LIBRARY")
    if with_lib not in ("", "INTERNAL", "DISABLE") and lib is not None and lib != with_lib:
        out.append(f"DIPU_WITH_DIOPI_LIBRARY={with_lib} (DIPU_DIOPI_LIBRARY={lib} is "
                   "opened instead)")
    return out


def warn_unapplied(environ=None):
    """Warns once (a UserWarning) naming every DIPU variable set in
    `environ` (default os.environ) that has no effect here, and why;
    returns the names and reasons warned about."""
    found = _problems(os.environ if environ is None else environ)
    if found:
        warnings.warn("torch_dipu: DIPU variables set but not acted on: " + "; ".join(found),
                      UserWarning, stacklevel=2)
    return found
