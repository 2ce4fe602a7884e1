"""memory_stats' small_pool and large_pool keys mean what they mean on CUDA:
requests of at most 1 MiB are served from (and counted in) the small pool,
larger ones in the large pool, and the pools add up to `all`.

The CUDA figures below are what CUDACachingAllocator reports for the same
sequence from an empty cache: small requests round to 512 bytes inside
2 MiB segments; a 4 MiB request gets a 20 MiB segment (requests of 1-10 MiB
do) split into the 4 MiB block and a 16 MiB inactive split."""

import json
import os
import subprocess
import sys
import textwrap

import torch

KIB, MIB = 1 << 10, 1 << 20
STATS = ("allocation", "segment", "active", "inactive_split", "allocated_bytes", "reserved_bytes",
         "active_bytes", "inactive_split_bytes", "requested_bytes")


def _assert_pools_add_up(stats):
    for name in STATS:
        for field in ("current", "allocated", "freed"):
            small = stats[f"{name}.small_pool.{field}"]
            large = stats[f"{name}.large_pool.{field}"]
            assert small + large == stats[f"{name}.all.{field}"], (name, field)
        for pool in ("small_pool", "large_pool"):
            assert stats[f"{name}.{pool}.current"] <= stats[f"{name}.{pool}.peak"], (name, pool)


def _delta(after, before, key):
    return after[key] - before[key]


def test_small_and_large_tensors_count_in_their_pools():
    """The default allocator (BF): the pool of each tensor, frees and peaks
    as CUDA reports them (sizes and counts; BF's segment sizes differ), in a
    fresh process: best fit serves a request from any segment with room, so
    the tensors and cached segments of earlier tests in this process could
    put a 4 KiB tensor in a large segment, and so in the large pool."""
    env = dict(os.environ)
    env.pop("DIPU_DEVICE_MEMCACHING_ALGORITHM", None)
    tests = os.path.dirname(os.path.abspath(__file__))
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import torch, torch_dipu, test_memory_pools as t; "
            "t._bf_sequence(); print('pools ok')")
    out = subprocess.run([sys.executable, "-c", code, tests], env=env, cwd=os.path.dirname(tests),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "pools ok" in out.stdout, out.stderr


def _bf_sequence():
    """The body of test_small_and_large_tensors_count_in_their_pools."""
    torch.dipu.synchronize()
    torch.dipu.empty_cache()
    before = torch.dipu.memory_stats()
    a = torch.empty(4 * KIB, dtype=torch.uint8, device="dipu")
    b = torch.empty(4 * MIB, dtype=torch.uint8, device="dipu")
    c = torch.empty(100 * KIB, dtype=torch.uint8, device="dipu")
    s = torch.dipu.memory_stats()
    _assert_pools_add_up(s)
    assert _delta(s, before, "allocation.small_pool.current") == 2
    assert _delta(s, before, "allocation.large_pool.current") == 1
    assert _delta(s, before, "requested_bytes.small_pool.current") == 104 * KIB
    assert _delta(s, before, "requested_bytes.large_pool.current") == 4 * MIB
    assert _delta(s, before, "allocated_bytes.small_pool.current") == 104 * KIB  # 512-byte multiples
    assert _delta(s, before, "allocated_bytes.large_pool.current") == 4 * MIB
    assert s["reserved_bytes.small_pool.current"] >= s["allocated_bytes.small_pool.current"]
    assert s["reserved_bytes.large_pool.current"] >= 4 * MIB
    del a
    freed = torch.dipu.memory_stats()
    _assert_pools_add_up(freed)
    assert _delta(freed, s, "allocation.small_pool.freed") == 1
    assert _delta(freed, s, "allocated_bytes.small_pool.current") == -4 * KIB
    assert _delta(freed, s, "allocation.large_pool.freed") == 0
    assert freed["allocated_bytes.small_pool.peak"] >= before["allocated_bytes.small_pool.current"] + 104 * KIB
    torch.dipu.reset_peak_memory_stats()
    reset = torch.dipu.memory_stats()
    assert reset["allocated_bytes.large_pool.peak"] == reset["allocated_bytes.large_pool.current"]
    del b, c
    end = torch.dipu.memory_stats()
    _assert_pools_add_up(end)
    assert end["allocation.small_pool.current"] == before["allocation.small_pool.current"]
    assert end["allocation.large_pool.current"] == before["allocation.large_pool.current"]


# A CUDA script (run with DIPU_MOCK_CUDA=True): the stats after a sequence
# of allocations, and the Python frames torch.cuda.memory's history keeps.
_CUDA_SEQUENCE = textwrap.dedent(
    """
    import json, pickle, sys, torch, torch_dipu
    torch.cuda.empty_cache()
    torch.cuda.memory._record_memory_history(stacks="python", max_entries=100)
    def make(n):
        return torch.empty(n, dtype=torch.uint8, device="cuda")
    a = make(4096)
    b = make(4 << 20)
    c = make(100 << 10)
    del a
    stats = torch.cuda.memory_stats()
    torch.cuda.memory._dump_snapshot(sys.argv[1])
    torch.cuda.memory._record_memory_history(enabled=None)
    with open(sys.argv[1], "rb") as f:
        trace = pickle.load(f)["device_traces"][0]
    names = sorted({f["name"] for e in trace if e["action"] == "alloc" for f in e["frames"]})
    print(json.dumps({"stats": stats, "frame_names": names}))
    """
)

# What torch.cuda.memory_stats() reports after _CUDA_SEQUENCE on CUDA
# (current and peak of each key; `all` is the sum of the two pools).
_CUDA_EXPECTED = {
    "allocation.small_pool": (1, 2),
    "allocation.large_pool": (1, 1),
    "segment.small_pool": (1, 1),
    "segment.large_pool": (1, 1),
    "active.small_pool": (1, 2),
    "allocated_bytes.small_pool": (100 * KIB, 104 * KIB),
    "allocated_bytes.large_pool": (4 * MIB, 4 * MIB),
    "requested_bytes.small_pool": (100 * KIB, 104 * KIB),
    "reserved_bytes.small_pool": (2 * MIB, 2 * MIB),
    "reserved_bytes.large_pool": (20 * MIB, 20 * MIB),
    # The freed 4 KiB block and the small segment's tail; the large tail.
    "inactive_split.small_pool": (2, 2),
    "inactive_split.large_pool": (1, 1),
    "inactive_split_bytes.small_pool": (2 * MIB - 100 * KIB, 2 * MIB - 4 * KIB),
    "inactive_split_bytes.large_pool": (16 * MIB, 16 * MIB),
}


def test_torch_algorithm_reports_cudas_figures(tmp_path):
    """With PyTorch's policy (DIPU_DEVICE_MEMCACHING_ALGORITHM=TORCH) a CUDA
    script under DIPU_MOCK_CUDA sees CUDA's figures, in a fresh process (an
    empty cache); torch.cuda.memory's history is dipu's, with Python frames."""
    env = dict(os.environ, DIPU_DEVICE_MEMCACHING_ALGORITHM="TORCH", DIPU_MOCK_CUDA="True")
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", _CUDA_SEQUENCE, str(tmp_path / "s.pickle")], env=env,
                         cwd=here, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    stats = result["stats"]
    _assert_pools_add_up(stats)
    got = {k: (stats[f"{k}.current"], stats[f"{k}.peak"]) for k in _CUDA_EXPECTED}
    assert got == _CUDA_EXPECTED
    assert "make" in result["frame_names"], result["frame_names"]
