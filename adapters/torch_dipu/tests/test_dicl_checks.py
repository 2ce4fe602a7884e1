"""dicl's argument checks that need no second process: alltoall_base's
split sizes as NCCL's checkSplitSizes checks them (a bad split is a clear
error before anything is sent), and a world of one running the folded
collectives."""

import datetime

import pytest
import torch
import torch.distributed as dist

import torch_dipu


def _backend(size):
    # The communicator is made lazily: a bad call fails before any peer is needed.
    return torch_dipu._C._dicl_create(dist.HashStore(), 0, size, datetime.timedelta(seconds=10))


@pytest.mark.parametrize(
    "out_splits,in_splits,message",
    [
        ([3, 2], [2, 2], "output split sizes sum to 5, not the tensor's dim 0 size \\(4\\)"),
        ([2, 2], [1, 2], "input split sizes sum to 3"),
        ([4], [2, 2], "1 output split sizes for 2 ranks"),
        ([5, -1], [2, 2], "negative output split size -1"),
    ],
)
def test_alltoall_base_split_sizes_are_checked(out_splits, in_splits, message):
    b = _backend(2)
    out = torch.empty(4, 3, device="dipu")
    inp = torch.ones(4, 3, device="dipu")
    with pytest.raises(RuntimeError, match=message):
        b.alltoall_base(out, inp, out_splits, in_splits, dist.AllToAllOptions())


def test_alltoall_base_without_splits_needs_equal_parts():
    b = _backend(2)
    out = torch.empty(3, device="dipu")
    with pytest.raises(RuntimeError, match="dim 0 \\(3\\) does not divide equally across the group size \\(2\\)"):
        b.alltoall_base(out, torch.ones(3, device="dipu"), [], [], dist.AllToAllOptions())


def test_a_world_of_one_runs_the_collectives():
    b = _backend(1)
    x = torch.arange(4.0, device="dipu")
    out = torch.empty(4, device="dipu")
    b.alltoall_base(out, x, [4], [4], dist.AllToAllOptions()).wait()
    assert out.cpu().tolist() == [0.0, 1.0, 2.0, 3.0]
    y = torch.full((3,), 2.0, device="dipu")
    b.allreduce([y]).wait()
    assert y.cpu().tolist() == [2.0, 2.0, 2.0]
    gathered = [torch.empty(4, device="dipu")]
    b.allgather([gathered], [x]).wait()
    assert torch.equal(gathered[0].cpu(), x.cpu())
    rs = torch.empty(4, device="dipu")
    b.reduce_scatter([rs], [[x]], dist.ReduceScatterOptions()).wait()
    assert torch.equal(rs.cpu(), x.cpu())
    g = [torch.empty(4, device="dipu")]
    b.gather([g], [x], dist.GatherOptions()).wait()
    assert torch.equal(g[0].cpu(), x.cpu())
    s = torch.empty(4, device="dipu")
    b.scatter([s], [[x]], dist.ScatterOptions()).wait()
    assert torch.equal(s.cpu(), x.cpu())
