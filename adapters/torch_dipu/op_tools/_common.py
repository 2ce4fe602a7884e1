"""The machinery every op tool shares: options read from the environment,
the *_LIST / *_DISABLE_LIST regex lists, op names, the skip rules, the
call site, tables, and the TorchFunctionMode base class whose objects are
both context managers and start()/stop() objects."""

import importlib.util
import itertools
import os
import re
import sys
import threading
import traceback

import torch
from torch.overrides import TorchFunctionMode, resolve_name
from torch.utils._pytree import tree_flatten, tree_map

RESULTS = "op_tools_results"

# Calls no tool looks at: accessors and bookkeeping, not computations.
ALWAYS_SKIP = frozenset(
    "data_ptr backward has_names numel size __repr__ __format__ type dim requires_grad_ "
    "is_contiguous stride storage_offset untyped_storage element_size __len__ __bool__ "
    "__index__ __int__ __float__ __hash__ __iter__ __contains__ __array__ dim_order device".split()
)

_said = set()
_guard = threading.local()
_ids = itertools.count(1)


def tolerance_module():
    """The tolerance policy's helper (docs/tolerance.md): torch_dipu.tolerance
    in an installed wheel (setup.py ships adapters/dipu_tolerance.py as it),
    adapters/dipu_tolerance.py in the source tree."""
    try:
        from torch_dipu import tolerance  # noqa: PLC0415

        return tolerance
    except ImportError:
        pass
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, "..", "..", "dipu_tolerance.py")
    if os.path.exists(path):
        spec = importlib.util.spec_from_file_location("dipu_tolerance", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    import dipu_tolerance  # noqa: PLC0415

    return dipu_tolerance


def get_option(name, default):
    """os.environ[name], or `default` (written back, as ditorch does)."""
    value = os.environ.get(name)
    if value is None:
        os.environ[name] = value = default
        say_once(f"option: {name}={value}")
    return value


def say_once(text):
    if text not in _said:
        _said.add(text)
        print(text, flush=True)


def is_opname_match(name, patterns):
    """True when `name` is one of the comma-separated items of `patterns`,
    each an exact name or a regex matching the whole name. None matches
    nothing; so does an empty string."""
    if name is None or not patterns:
        return False
    for item in patterns.split(","):
        item = item.strip()
        if not item:
            continue
        if item == name:
            return True
        try:
            if re.fullmatch(item, name):
                return True
        except re.error:
            say_once(f"op_tools: ignoring the bad regex {item!r}")
    return False


def is_enabled(name, var):
    """The disable list OP_<var>_DISABLE_LIST wins over OP_<var>_LIST
    (default `.*`); both are re-read per call."""
    if is_opname_match(name, os.environ.get(f"OP_{var}_DISABLE_LIST", "")):
        return False
    return is_opname_match(name, get_option(f"OP_{var}_LIST", ".*"))


def op_name(func):
    name = resolve_name(func)
    if name is None:
        mod = getattr(func, "__module__", None) or ""
        qual = getattr(func, "__qualname__", None) or getattr(func, "__name__", repr(func))
        name = f"{mod}.{qual}" if mod else qual
    return name


def is_device(x):
    if isinstance(x, torch.Tensor):
        return x.device.type not in ("cpu", "meta")
    if isinstance(x, torch.device):
        return x.type not in ("cpu", "meta")
    if isinstance(x, str):
        try:
            return torch.device(x).type not in ("cpu", "meta")
        except (RuntimeError, ValueError):
            return False
    return False


def touches_device(args, kwargs):
    leaves, _ = tree_flatten((args, kwargs))
    return any(is_device(x) for x in leaves)


class hooks_off:
    """Inside, no tool looks at any call (the tools' own work)."""

    def __enter__(self):
        _guard.depth = getattr(_guard, "depth", 0) + 1

    def __exit__(self, *exc):
        _guard.depth -= 1


def hooks_active():
    return getattr(_guard, "depth", 0) == 0


def next_id():
    return next(_ids)


def call_site():
    """`file:line func: text` of the innermost frame outside op_tools and torch."""
    here = os.path.dirname(os.path.abspath(__file__))
    torch_dir = os.path.dirname(os.path.abspath(torch.__file__))
    for frame in reversed(traceback.extract_stack()[:-1]):
        f = os.path.abspath(frame.filename)
        if f.startswith(here) or f.startswith(torch_dir):
            continue
        return f"{frame.filename}:{frame.lineno} {frame.name}: {frame.line or ''}"
    return "?"


def print_stack():
    if os.environ.get("OP_TOOLS_PRINT_STACK", "0") not in ("0", ""):
        traceback.print_stack()


def table(columns, rows):
    """A plain-text table (the first row names the columns)."""
    cells = [[str(c) for c in columns]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    line = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    out = [line]
    for n, r in enumerate(cells):
        out.append("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |")
        if n == 0:
            out.append(line)
    out.append(line)
    return "\n".join(out)


def describe(x):
    """A tensor's metadata row (name, device, dtype, numel, shape, stride,
    requires_grad, layout, data_ptr) as a dict; other values as `value`."""
    if isinstance(x, torch.Tensor):
        return {
            "device": str(x.device), "dtype": str(x.dtype), "numel": x.numel(),
            "shape": list(x.shape), "stride": list(x.stride()) if x.layout == torch.strided else "",
            "requires_grad": x.requires_grad, "layout": str(x.layout), "data_ptr": x.data_ptr(),
        }
    return {"value": repr(x)[:80]}


ARG_COLUMNS = ["name", "device", "dtype", "numel", "shape", "stride", "requires_grad", "layout",
               "data_ptr", "value"]


def arg_rows(prefix, args, kwargs=None):
    rows = []
    for i, a in enumerate(args if isinstance(args, (list, tuple)) else (args,)):
        rows += _rows(f"{prefix}[{i}]", a)
    for k, v in (kwargs or {}).items():
        rows += _rows(f"{prefix} {k}", v)
    return rows


def _rows(name, x):
    if isinstance(x, (list, tuple)) and any(isinstance(t, torch.Tensor) for t in x):
        return [r for i, t in enumerate(x) for r in _rows(f"{name}[{i}]", t)]
    d = describe(x)
    return [[name] + [d.get(c, "") for c in ARG_COLUMNS[1:]]]


def arg_table(name, args, kwargs, outputs=None):
    rows = arg_rows(f"{name} inputs", args, kwargs)
    if outputs is not None:
        rows += _rows(f"{name} outputs", outputs)
    return table(ARG_COLUMNS, rows)


def detach_to(x, device):
    """A detached copy of every tensor of `x` on `device` (devices and
    device strings point there too)."""

    def f(t):
        if isinstance(t, torch.Tensor):
            return t.detach().to(device, copy=True)
        if isinstance(t, torch.device) or (isinstance(t, str) and is_device(t)):
            return torch.device(device)
        return t

    return tree_map(f, x)


def is_inplace(name, kwargs):
    last = name.rsplit(".", 1)[-1]
    return (
        (last.endswith("_") and not last.startswith("__"))
        or (last.startswith("__i") and last.endswith("__") and last not in ("__index__", "__int__", "__invert__", "__iter__"))
        or last == "__setitem__"
        or kwargs.get("out") is not None
    )


class Tool(TorchFunctionMode):
    """One op tool: `with Tool(): ...` or `t = Tool(); t.start(); ...; t.stop()`.
    Subclasses set VAR (OP_<VAR>_LIST) and implement run(name, func, args, kwargs)."""

    VAR = ""
    SKIP = frozenset()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not hooks_active():
            return func(*args, **kwargs)
        name = op_name(func)
        last = name.rsplit(".", 1)[-1]
        private = last.startswith("_") and not last.startswith("__")  # torch's own helpers
        if (last in ALWAYS_SKIP or private or name.endswith(".__get__") or name.endswith(".__set__")
                or name in self.SKIP or not touches_device(args, kwargs)):
            return func(*args, **kwargs)
        cls = type(self).__name__
        if not is_enabled(name, self.VAR):
            say_once(f"skip {cls} on {name}")
            return func(*args, **kwargs)
        say_once(f"apply {cls} on {name}")
        print_stack()
        return self.run(name, func, args, kwargs)

    def run(self, name, func, args, kwargs):
        raise NotImplementedError

    def start(self):
        """Turns the tool on until stop()."""
        self.__enter__()
        return self

    def stop(self):
        """Turns the tool off (flushing what it writes)."""
        self.__exit__(None, None, None)
        self.flush()

    def flush(self):
        """Writes what the tool keeps in memory (its CSV)."""


def result_dir(*parts):
    path = os.path.join(os.getcwd(), RESULTS, *parts)
    os.makedirs(path, exist_ok=True)
    return path


def rank():
    try:
        import torch.distributed as dist  # noqa: PLC0415

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank()
    except (ImportError, RuntimeError):
        pass
    return int(os.environ.get("RANK", "0"))


def op_device(args, kwargs):
    """The device an op runs on: its first non-CPU tensor's, else the
    device argument's (a factory's device=); None for a CPU op."""
    leaves = tree_flatten((args, kwargs))[0]
    for t in leaves:
        if isinstance(t, torch.Tensor) and is_device(t):
            return t.device
    for v in leaves:
        if isinstance(v, (torch.device, str)) and is_device(v):
            return torch.device(v)
    return None


def devices_of(x):
    leaves, _ = tree_flatten(x)
    return sorted({str(t.device) for t in leaves if isinstance(t, torch.Tensor)})


def stderr(text):
    print(text, file=sys.stderr, flush=True)
