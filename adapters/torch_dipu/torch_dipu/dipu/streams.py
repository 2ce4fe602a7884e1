"""torch.dipu's streams and events: torch.Stream and torch.Event on
dipu, through the device guard."""

from typing import Optional

import torch

from .. import _C
from ._utils import _device_index, _device_t


# c10::DeviceType::PrivateUse1, which torch.Stream carries as an int.
_PRIVATE_USE1 = 20


class Stream(torch.Stream):
    """A dipu stream from the runtime's pool: `priority` 0 is normal,
    negative is high priority. `Stream(stream_id=, device_index=)`
    rebuilds an existing one."""

    def __new__(cls, device: _device_t = None, priority: int = 0, **kwargs):
        if "stream_id" in kwargs:
            kwargs.setdefault("device_type", _PRIVATE_USE1)
            return super().__new__(cls, **kwargs)
        # From the runtime's pools (32 streams each, round-robin), as
        # torch.cuda.Stream does: streams are never destroyed.
        stream_id, index = _C._pool_stream(_device_index(device), priority < 0)
        return super().__new__(cls, stream_id=stream_id, device_index=index, device_type=_PRIVATE_USE1)

    @property
    def priority(self) -> int:
        """The stream's priority."""
        return _C._stream_priority(self.device_index, self.stream_id)

    @staticmethod
    def priority_range(device: _device_t = None) -> tuple:
        """(least, greatest) priority of the vendor's streams: the default
        (usually 0) and the most urgent (the smallest number)."""
        return _C._stream_priority_range(_device_index(device))

    @property
    def dipu_stream(self) -> int:
        """The vendor's handle of this stream (0 for the default stream)."""
        return _C._stream_raw(self.device_index, self.stream_id)

    def wait_event(self, event: "Event") -> None:
        """Later work on this stream waits for `event`."""
        event.wait(self)

    def wait_stream(self, stream: torch.Stream) -> None:
        """Later work on this stream waits for the work queued on `stream` so far."""
        self.wait_event(stream.record_event())

    def record_event(self, event: Optional["Event"] = None) -> "Event":
        """Records `event` (a new one if None) on this stream."""
        event = event if event is not None else Event()
        event.record(self)
        return event

    def __repr__(self):
        return f"<torch.dipu.Stream device=dipu:{self.device_index} id={self.stream_id:#x}>"


class ExternalStream(Stream):
    """A dipu stream for a vendor stream handle made outside dipu-rs
    (e.g. a cudaStream_t of another library, as an int). dipu-rs never
    destroys it: keep it alive while it is used."""

    def __new__(cls, stream_ptr: int, device: _device_t = None, **kwargs):
        stream_id, index = _C._stream_from_raw(_device_index(device), int(stream_ptr))
        return torch.Stream.__new__(cls, stream_id=stream_id, device_index=index, device_type=_PRIVATE_USE1)


class _EventMeta(type):
    """Makes `torch.dipu.Event(...)` a plain torch.Event on dipu.

    torch.Stream.record_event and torch.Event.elapsed_time accept only an
    object whose type is exactly torch.Event; an instance of a subclass is
    refused ("expected event to be a torch.Event object"). So the events
    torch.dipu.Event makes are torch.Event objects, and every torch.Event
    on dipu counts as a torch.dipu.Event."""

    def __call__(cls, *args, **kwargs):
        if cls is not Event:  # a user's subclass keeps its own type
            return super().__call__(*args, **kwargs)
        return _new_event(*args, **kwargs)

    def __instancecheck__(cls, obj):
        if cls is not Event:
            return super().__instancecheck__(obj)
        return isinstance(obj, torch.Event) and obj.device.type == "dipu"


def _new_event(enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> torch.Event:
    return torch.Event(device="dipu", enable_timing=enable_timing, blocking=blocking, interprocess=interprocess)


class Event(torch.Event, metaclass=_EventMeta):
    """A dipu event (a torch.Event on dipu, as torch.cuda.Event is one on
    CUDA); `enable_timing=True` for elapsed_time. Its `record()` and
    `wait()` use the current stream when given none. Any torch.Event on
    dipu is an instance, and the events it makes are torch.Event objects,
    so torch.accelerator's streams and torch.Event.elapsed_time take them."""


def _wrap(s: torch.Stream) -> Stream:
    return Stream(stream_id=s.stream_id, device_index=s.device_index, device_type=s.device_type)


def current_stream(device: _device_t = None) -> Stream:
    """The calling thread's current stream on `device`."""
    return _wrap(torch.accelerator.current_stream(_device_index(device)))


def default_stream(device: _device_t = None) -> Stream:
    """`device`'s default stream."""
    s = torch.accelerator.current_stream(_device_index(device))
    return Stream(stream_id=0, device_index=s.device_index, device_type=s.device_type)


def set_stream(stream: torch.Stream) -> None:
    """Makes `stream` the current stream of its device."""
    if stream is not None:
        torch.accelerator.set_stream(stream)


class StreamContext:
    """Context manager that makes `stream` current on its device, and its
    device current, restoring both afterwards."""

    def __init__(self, stream: Optional[torch.Stream]):
        self.stream = stream
        self.prev_stream = None
        self.prev_device = None

    def __enter__(self):
        if self.stream is None:
            return self
        self.prev_device = torch.accelerator.current_device_index()
        if self.stream.device_index != self.prev_device:
            torch.accelerator.set_device_index(self.stream.device_index)
        self.prev_stream = torch.accelerator.current_stream(self.stream.device_index)
        torch.accelerator.set_stream(self.stream)
        return self

    def __exit__(self, *args):
        if self.stream is None:
            return False
        torch.accelerator.set_stream(self.prev_stream)
        torch.accelerator.set_device_index(self.prev_device)
        return False


def stream(stream: Optional[torch.Stream]) -> StreamContext:
    """Context manager: `with torch.dipu.stream(s):` runs on `s`."""
    return StreamContext(stream)
