"""torch.dipu.profiler: the runtime trace of dipu-rs (DIPU_PROFILE).

Vendor calls with host and device times, allocator events, stream and
event operations with flow arrows, collectives and host callbacks, kept
in a ring of the last DIPU_PROFILE_EVENTS events and written in Chrome's
trace event format (chrome://tracing, Perfetto). See docs/observability.md.

    torch.dipu.profiler.start()
    ...
    torch.dipu.profiler.stop()
    torch.dipu.profiler.dump("trace.json")

With torch.profiler.profile(activities=[ProfilerActivity.CPU,
ProfilerActivity.PrivateUse1]) the same events go into torch's own trace.
"""

import contextlib
import os

from .. import _C

__all__ = ["start", "stop", "clear", "dump", "events", "set_capacity", "profile"]


def start() -> None:
    """Starts recording (events already held are kept)."""
    _C._profiler_start()


def stop() -> None:
    """Stops recording; the events stay for dump()."""
    _C._profiler_stop()


def clear() -> None:
    """Forgets every recorded event."""
    _C._profiler_clear()


def set_capacity(events: int) -> None:
    """Keeps at most the last `events` events (as DIPU_PROFILE_EVENTS)."""
    if events <= 0:
        raise ValueError(f"the trace must keep at least one event, not {events}")
    _C._profiler_set_capacity(events)


def dump(path: "str | os.PathLike[str]") -> None:
    """Writes the recorded events to `path` (Chrome trace event format)."""
    _C._profiler_dump(os.fspath(path))


def events() -> int:
    """How many events the ring holds."""
    return _C._profiler_events()


@contextlib.contextmanager
def profile(path: "str | os.PathLike[str] | None" = None):
    """Records the block (after clearing the ring) and dumps it to `path`
    when given."""
    clear()
    start()
    try:
        yield
    finally:
        stop()
        if path is not None:
            dump(path)
