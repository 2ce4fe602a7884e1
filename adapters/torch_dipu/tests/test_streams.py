"""Streams and events as on CUDA: torch.Stream(device="dipu") comes from
the runtime's pools (bounded), priority_range, ExternalStream over a raw
vendor handle, and torch.dipu.Event is a torch.Event."""

import torch


def test_new_streams_come_from_the_pools():
    ids = set()
    for _ in range(100_000):
        s = torch.Stream(device="dipu")
        ids.add(s.stream_id)
    # 32 normal-priority pool streams per device: 100 000 creations hold
    # no more vendor streams than that.
    assert 1 < len(ids) <= 32, len(ids)
    high = {torch.Stream(device="dipu", priority=-1).stream_id for _ in range(1000)}
    assert len(high) <= 32 and not (high & ids)
    assert {torch.dipu.Stream().stream_id for _ in range(1000)} <= ids


def test_priority_range():
    least, greatest = torch.dipu.Stream.priority_range()
    assert least == 0 and greatest <= least
    assert torch.dipu.Stream(priority=-1).priority == greatest
    assert torch.dipu.Stream().priority == least


def test_external_stream_runs_work_on_the_raw_handle():
    made = torch.dipu.Stream()
    raw = made.dipu_stream
    assert raw != 0
    ext = torch.dipu.ExternalStream(raw)
    assert isinstance(ext, torch.Stream)
    assert ext.dipu_stream == raw and ext.device_index == 0
    assert torch.dipu.ExternalStream(raw).stream_id == ext.stream_id
    with torch.dipu.stream(ext):
        x = torch.full((1000,), 2.0, device="dipu") * 3
        assert torch.dipu.current_stream().stream_id == ext.stream_id
    ext.synchronize()
    assert x.sum().item() == 6000.0


def test_dipu_event_is_a_torch_event():
    e = torch.dipu.Event()
    assert isinstance(e, torch.Event) and e.device.type == "dipu"
    # torch.accelerator's streams take it as they take any torch.Event.
    torch.accelerator.current_stream().wait_event(torch.dipu.Event())
    s = torch.dipu.Stream()
    x = torch.ones(256, 256, device="dipu")
    e.record()
    s.wait_event(e)
    with torch.dipu.stream(s):
        y = x @ x
    done = s.record_event()
    assert isinstance(done, torch.dipu.Event)
    done.synchronize()
    assert done.query()
    assert y[0, 0].item() == 256.0
    start, end = torch.dipu.Event(enable_timing=True), torch.dipu.Event(enable_timing=True)
    start.record()
    x @ x
    end.record()
    end.synchronize()
    assert start.elapsed_time(end) >= 0.0


def test_accelerator_streams_and_dipu_events_mix():
    # torch.Stream.record_event and torch.Event.elapsed_time take only
    # torch.Event objects; torch.dipu.Event's are, and a plain torch.Event
    # on dipu is a torch.dipu.Event.
    assert issubclass(torch.dipu.Event, torch.Event)
    assert isinstance(torch.Event(device="dipu"), torch.dipu.Event)
    assert not isinstance(torch.Event(device="cpu"), torch.dipu.Event)
    x = torch.ones(128, 128, device="dipu")
    start = torch.accelerator.current_stream().record_event(torch.dipu.Event(enable_timing=True))
    assert isinstance(start, torch.dipu.Event)
    s = torch.dipu.Stream()
    s.wait_event(start)
    end = torch.Event(device="dipu", enable_timing=True)
    with torch.dipu.stream(s):
        y = x @ x
    assert s.record_event(end) is end
    torch.accelerator.current_stream().wait_event(end)
    z = y + 1  # on the current stream, after `end`
    end.synchronize()
    assert end.query() and start.query()
    forward = start.elapsed_time(end)
    assert forward >= 0.0 and end.elapsed_time(start) == -forward
    assert z[0, 0].item() == 129.0
