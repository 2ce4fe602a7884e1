"""torch_dipu's benchmarks, each as a ratio to the CPU in the same run:
torch.empty + del at 4 KiB and 16 MiB, a small op (mul of 1024 floats) as
dispatched and forced onto the CPU fallback, a training step of
tests/test_training.py's CNN and one of a transformer block (d_model 256,
4 heads, seq 128, batch 8, AdamW).

Run: PYTHONPATH=adapters/torch_dipu .venv-torch/bin/python adapters/torch_dipu/bench.py
(after DIPU_BUILD_PROFILE=release adapters/torch_dipu/build.sh: the dev
runtime is unoptimised). Prints one line per benchmark:
median time per call on dipu and on the CPU, and dipu/CPU (training steps:
medians of 5 runs per device, alternating).
"""

import os
import statistics
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "tests"))

import torch_dipu  # noqa: E402,F401


def median_us(fn, calls, repeats=7):
    fn()  # warm the caches
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(times)


def report(name, dipu_us, cpu_us):
    print(f"{name:<32} dipu {dipu_us:10.2f} us   cpu {cpu_us:10.2f} us   dipu/cpu {dipu_us / cpu_us:6.2f}")


def main():
    for label, n in (("empty+del 4 KiB", 4096), ("empty+del 16 MiB", 16 << 20)):
        d = median_us(lambda: torch.empty(n, dtype=torch.uint8, device="dipu"), 2000)
        c = median_us(lambda: torch.empty(n, dtype=torch.uint8), 2000)
        report(label, d, c)
    xd = torch.ones(1024, device="dipu")
    xc = torch.ones(1024)
    cpu_mul = median_us(lambda: xc * 2, 500)
    report("small op: mul 1024 floats", median_us(lambda: xd * 2, 500), cpu_mul)
    if os.environ.get("DIPU_FORCE_FALLBACK_OPS_LIST") is None:
        # The same op through the boxed CPU fallback (a copy to the host,
        # the CPU kernel, a copy back), in a child process where mul is
        # forced onto it.
        env = dict(os.environ, DIPU_FORCE_FALLBACK_OPS_LIST="mul.*")
        subprocess.run([sys.executable, __file__, "--fallback-op"], env=env, check=True)

    from test_training import _train  # the CNN of the training test

    def cnn_step_us(device):
        t0 = time.perf_counter()
        _train(device)
        return (time.perf_counter() - t0) / 20 * 1e6

    report("training step (CNN, AdamW)", *alternating_medians(cnn_step_us))
    report("training step (transformer block)", *alternating_medians(_transformer_step_us))


def alternating_medians(step_us, rounds=5):
    """Medians of `step_us(device)` over `rounds` runs per device, the two
    devices alternating (after one warm-up run each), as (dipu, cpu)."""
    for device in ("cpu", "dipu"):
        step_us(device)
    runs = {"cpu": [], "dipu": []}
    for _ in range(rounds):
        for device in ("cpu", "dipu"):
            runs[device].append(step_us(device))
    return statistics.median(runs["dipu"]), statistics.median(runs["cpu"])


def fallback_op():
    """The small op forced onto the CPU fallback."""
    xd = torch.ones(1024, device="dipu")
    xc = torch.ones(1024)
    report("fallback op: mul 1024 floats", median_us(lambda: xd * 2, 500), median_us(lambda: xc * 2, 500))



def _transformer_step_us(device, steps=5):
    """Microseconds per training step of one transformer encoder block."""
    torch.manual_seed(0)
    block = torch.nn.TransformerEncoderLayer(
        d_model=256, nhead=4, dim_feedforward=1024, dropout=0.1, batch_first=True
    ).to(device)
    opt = torch.optim.AdamW(block.parameters(), lr=1e-3)
    x = torch.randn(8, 128, 256).to(device)

    def step():
        opt.zero_grad()
        loss = block(x).square().mean()
        loss.backward()
        opt.step()
        return loss

    step().item()  # warm up
    t0 = time.perf_counter()
    for _ in range(steps):
        loss = step()
    loss.item()
    return (time.perf_counter() - t0) / steps * 1e6


if __name__ == "__main__":
    if sys.argv[1:] == ["--fallback-op"]:
        fallback_op()
    else:
        main()
