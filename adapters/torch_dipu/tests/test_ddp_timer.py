"""DDP's time stats on dipu (the reducer's Timer registered for
PrivateUse1): after a few steps in a world of one, the logging data has
forward, backward-compute and backward-comm times."""

import torch
import torch.distributed as dist


def test_ddp_time_stats_are_collected_on_dipu():
    dist.init_process_group("dicl", store=dist.HashStore(), rank=0, world_size=1)
    try:
        model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
        ddp = torch.nn.parallel.DistributedDataParallel(model.to("dipu"))
        x = torch.randn(16, 32, device="dipu")
        for _ in range(3):
            ddp(x).sum().backward()
        data = ddp._get_ddp_logging_data()
        assert data["avg_forward_compute_time"] > 0, data
        assert data["avg_backward_compute_time"] > 0, data
        assert data["avg_backward_comm_time"] > 0, data
        assert data["avg_backward_compute_comm_overlap_time"] >= 0, data
    finally:
        dist.destroy_process_group()
