"""A copy between devices keeps its source alive: `y = x.to("dipu:1",
non_blocking=True); del x`, then at once a new allocation on dipu:0
written over (which reuses x's block), must leave y intact. 20 trials,
none corrupted."""

import torch


def test_cross_device_copy_survives_freeing_its_source():
    n = 1 << 20  # 4 MiB: modest, so the 20 trials take well under a second
    corrupted = 0
    for trial in range(20):
        value = float(trial + 1)
        x = torch.full((n,), value, device="dipu:0")
        # Work queued on the destination's stream ahead of the copy makes
        # the copy late there (where the old code queued it).
        with torch.dipu.device(1):
            busy = torch.ones(256, 256, device="dipu:1")
            for _ in range(4):
                busy = busy @ busy / 256
        y = x.to("dipu:1", non_blocking=True)
        del x
        # Reuses the freed block on dipu:0's stream straight away.
        z = torch.empty(n, device="dipu:0")
        z.fill_(-1.0)
        if not torch.equal(y.cpu(), torch.full((n,), value)):
            corrupted += 1
        del z, y, busy
    assert corrupted == 0, f"{corrupted} of 20 trials corrupted"


def test_cross_device_copy_waits_for_earlier_users_of_the_destination():
    with torch.dipu.device(1):
        dst = torch.zeros(1 << 16, device="dipu:1")
        dst.add_(5.0)  # queued on dipu:1's stream before the copy
    src = torch.full((1 << 16,), 2.0, device="dipu:0")
    dst.copy_(src, non_blocking=True)
    with torch.dipu.device(1):
        dst.mul_(3.0)  # queued after: must see the copy
    assert torch.equal(dst.cpu(), torch.full((1 << 16,), 6.0))
