"""apply_feature: one tool's hook on named functions, by monkeypatching them
(so it works on any Python function, torch's or not)."""

import importlib
import sys

from . import _common as c

FEATURES = {
    "op_capture": "OpCapture", "autocompare": "OpAutoCompare", "fallback": "OpFallback",
    "measure_op_time": "OpTimeMeasure", "cast_dtype": "OpDtypeCast", "dump_op_args": "OpObserve",
    "overflow_check": "OpOverflowCheck",
}
_applied = {}


def _resolve(dotted):
    parts = dotted.split(".")
    for i in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        owner = obj
        for p in parts[i:-1]:
            owner = getattr(owner, p)
        return owner, parts[-1]
    raise ValueError(f"apply_feature: cannot find {dotted!r}")


def apply_feature(ops, feature, condition_func=lambda *args, **kwargs: True):
    """Wraps each of `ops` (a dotted name, a function, or a list of them) with
    `feature` (one of FEATURES' keys); `condition_func(*args, **kwargs)`
    gates each call, and the tool's LIST variables still apply. A second
    feature on the same op replaces the first, with a warning."""
    if feature not in FEATURES:
        raise ValueError(f"apply_feature: unknown feature {feature!r} (known: {sorted(FEATURES)})")
    tool = getattr(sys.modules[__package__], FEATURES[feature])()
    for op in ops if isinstance(ops, (list, tuple)) else [ops]:
        if isinstance(op, str):
            owner, attr = _resolve(op)
            name = op
        else:
            owner = importlib.import_module(op.__module__)
            attr, name = op.__name__, f"{op.__module__}.{op.__name__}"
        current = getattr(owner, attr)
        original = getattr(current, "__op_tools_original__", current)
        if name in _applied:
            c.say_once(f"apply_feature: {name} had {_applied[name]}, now {feature}")
        _applied[name] = feature

        def wrapper(*args, __orig=original, __name=name, **kwargs):
            if not c.hooks_active() or not condition_func(*args, **kwargs):
                return __orig(*args, **kwargs)
            if not c.is_enabled(__name, tool.VAR):
                return __orig(*args, **kwargs)
            return tool.run(__name, __orig, args, kwargs)

        wrapper.__op_tools_original__ = original
        wrapper.__name__ = attr
        setattr(owner, attr, wrapper)
    return tool
