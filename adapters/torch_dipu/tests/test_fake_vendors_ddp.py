"""DDP on 4 ranks as processes on each fake vendor (CUDA's NCCL, Ascend's
HCCL, Cambricon's CNCL), launched by torchrun's launcher with DIPU_VENDOR
naming the vendor and the fake libraries laid out under their real names in
a temporary folder (as scripts/test.sh does). Each rank's parameters after
training must match, under the tolerance policy (docs/tolerance.md), those
of one CPU process that trained on the whole batch
(ddp_train.train_reference), and each rank must have run on
the fake vendor: torch.dipu.vendor_name() names it and the fake's own call
trace shows the vendor's all-reduce called on that rank.

Needs `cargo build --workspace` (the fakes and vendor plugins in
target/debug). The ops have no DIOPI kernel library on these vendors, so
they fall back to the CPU through copies; the collectives run on the fake
vendor's communicator.

How the ranks start (CI has 2 cores, and importing torch and what DDP
imports, torch._dynamo, costs seconds of CPU per process): the file run as
a script is the launcher. It imports torch and DDP's imports once, then for
each vendor in turn runs torchrun's launcher (torch.distributed.run's
arguments --standalone --nproc-per-node 4, then elastic_launch) with the
fork start method, so the 4 ranks share those imports. A rank sets its
vendor's environment (DIPU_VENDOR, the install folder, DIPU_FAKE_DEVICES)
and only then imports torch_dipu, so its runtime, vendor and communicator
are its own, as under `DIPU_VENDOR=... torchrun script.py`. The launcher
hides CUDA from torch's own availability probe (torchrun's launcher asks
torch.accelerator.is_available()): that probe would initialise the CUDA
driver, here the fake's (found on LD_LIBRARY_PATH), and a child forked
after that cannot use CUDA, on the fake as on NVIDIA's. With
PYTORCH_NVML_BASED_CUDA_CHECK=1 and no visible device, torch answers
without the driver; each rank removes both variables again.
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
TARGET = os.path.join(ROOT, "target", "debug")
WORLD = 4
# A test that hangs is a failure: the launcher and each collective are
# bounded.
LIMIT = 300
COLLECTIVE_TIMEOUT_S = 60

# Per vendor: the fake library, the names it is laid out under (in lib64),
# the variable naming the install folder, whether the driver is found on
# the dynamic linker's path (CUDA's libcuda.so.1 is), and the all-reduce
# entry point the fake traces.
FAKES = {
    "cuda": ("libdipu_fake_cuda.so", ["libcudart.so.13", "libcuda.so.1", "libnccl.so.2"],
             "DIPU_CUDA_HOME", True, "ncclAllReduce"),
    "ascend": ("libdipu_fake_ascend.so", ["libascendcl.so", "libhccl.so"],
               "ASCEND_HOME_PATH", False, "HcclAllReduce"),
    "cambricon": ("libdipu_fake_cambricon.so", ["libcnrt.so", "libcncl.so", "libcndrv.so"],
                  "NEUWARE_HOME", False, "cnclAllReduce"),
}

# What the launcher sets so that torch's CUDA probe stays off the driver.
HIDE_CUDA = {"PYTORCH_NVML_BASED_CUDA_CHECK": "1", "CUDA_VISIBLE_DEVICES": ""}

if __name__ == "__main__":
    os.environ.update(HIDE_CUDA)
    sys.path[:0] = [HERE, os.path.dirname(HERE)]

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


def worker(out, env):
    """One rank: sets the vendor's environment, then DDP-trains ddp_train's
    model on this rank's share of the batch on the dipu device of its local
    rank; saves what it saw to <out>.<rank>."""
    import datetime

    local = int(os.environ["LOCAL_RANK"])
    for var in HIDE_CUDA:
        os.environ.pop(var, None)
    os.environ.update(env)
    # One trace per rank (the fake opens it at its first call).
    os.environ["DIPU_FAKE_TRACE"] = f"{out}.trace.{local}"
    import ddp_train
    import torch_dipu  # noqa: F401  (registers "dipu" and "dicl")

    dist.init_process_group("dicl", timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S))
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = torch.device("dipu", local)
    torch.dipu.set_device(dev)
    ddp = torch.nn.parallel.DistributedDataParallel(ddp_train.model().to(dev))
    ddp_train.train(ddp, rank, world, dev)
    params = list(ddp.module.parameters())
    torch.save({
        "vendor": torch.dipu.vendor_name(),
        "devices": torch.dipu.device_count(),
        "param_devices": sorted({str(p.device) for p in params}),
        "params": [p.detach().cpu() for p in params],
    }, f"{out}.{rank}")
    dist.destroy_process_group()


def launch(jobs):
    """For each (vendor, out, env) of the JSON file `jobs`: torchrun
    --standalone --nproc-per-node WORLD running worker(out, env)
    (see the module's doc); a launch that fails leaves its error in
    <out>.error."""
    import json
    import uuid

    import torch._dynamo  # noqa: F401  (what DDP imports: once, before the forks)
    import torch.nn.parallel  # noqa: F401
    from torch.distributed import run
    from torch.distributed.launcher.api import elastic_launch

    import ddp_train  # noqa: F401

    for _vendor, out, env in json.load(open(jobs)):
        args = run.parse_args(["--standalone", "--nproc-per-node", str(WORLD), "--start-method",
                               "fork", os.path.abspath(__file__)])
        # What torchrun's run() does for --standalone.
        args.rdzv_backend, args.rdzv_endpoint = "c10d", "localhost:0"
        args.rdzv_id = str(uuid.uuid4())
        config, _, _ = run.config_from_args(args)
        try:
            elastic_launch(config, worker)(out, env)
        except Exception as e:  # noqa: BLE001  (the test reports it)
            with open(f"{out}.error", "w") as f:
                f.write(f"{type(e).__name__}: {e}")


if __name__ == "__main__":
    launch(sys.argv[1])
    sys.exit(0)

import json  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402

import pytest  # noqa: E402

sys.path.insert(0, HERE)
import ddp_train  # noqa: E402
from dipu_tolerance import assert_trained_close  # noqa: E402


def lay_out(vendor, folder):
    """The fake of `vendor` under its real names in folder/lib64, and the
    environment that makes the vendor find it; or why it cannot run."""
    library, names, home, _, _ = FAKES[vendor]
    built = os.path.join(TARGET, library)
    plugin = os.path.join(TARGET, f"libdipu_vendor_{vendor}.so")
    for path in (built, plugin):
        if not os.path.exists(path):
            return f"{path} is not built (cargo build --workspace builds it)"
    lib64 = folder / "lib64"
    lib64.mkdir(parents=True)
    for name in names:
        os.symlink(built, lib64 / name)
    return {home: str(folder), "DIPU_VENDOR": vendor, "DIPU_VENDOR_PATH": TARGET,
            "DIPU_FAKE_DEVICES": str(WORLD)}


# Variables that would point a vendor at other libraries than the fakes, or
# change what the fakes do.
FOREIGN = ["CUDA_HOME", "VIRTUAL_ENV", "CONDA_PREFIX", "ASCEND_TOOLKIT_HOME", "ASCEND_OPP_PATH",
           "NEUWARE_HOME", "DIPU_CUDA_HOME", "ASCEND_HOME_PATH", "LD_LIBRARY_PATH",
           "DIPU_FAKE_FAULTS", "DIPU_FAKE_TRACE", "DIPU_FAKE_LATENCY_US", "DIPU_FAKE_MEMORY",
           "DIPU_HOST_DEVICES", "DIPU_VENDOR", "DIPU_VENDOR_PATH", "CUDA_VISIBLE_DEVICES",
           "PYTORCH_NVML_BASED_CUDA_CHECK"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One launcher for the three vendors, one after the other: per vendor,
    ("run", its output prefix) or ("skip", why not); and the launcher's exit
    code and output."""
    base = tmp_path_factory.mktemp("fake_ddp")
    env = {k: v for k, v in os.environ.items() if k not in FOREIGN}
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(HERE), os.environ.get("PYTHONPATH", "")])
    jobs, results = [], {}
    for vendor, (_, _, _, loader, _) in sorted(FAKES.items()):
        got = lay_out(vendor, base / vendor)
        if isinstance(got, str):
            results[vendor] = ("skip", got)
            continue
        if loader:
            # The dynamic linker reads it at start-up only: set for the
            # launcher, so for every rank (the other fakes never look).
            env["LD_LIBRARY_PATH"] = str(base / vendor / "lib64")
        out = str(base / vendor / "run")
        jobs.append((vendor, out, got))
        results[vendor] = ("run", out)
    (base / "jobs.json").write_text(json.dumps(jobs))
    # A session of its own: on a timeout the launcher and the ranks are
    # killed together.
    cmd = [sys.executable, os.path.abspath(__file__), str(base / "jobs.json")]
    launcher = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)
    try:
        log, _ = launcher.communicate(timeout=LIMIT)
    except subprocess.TimeoutExpired:
        os.killpg(launcher.pid, signal.SIGKILL)
        log, _ = launcher.communicate()
        log += f"\nthe launcher did not finish within {LIMIT} s: killed"
    return results, (launcher.returncode, log)


@pytest.fixture(scope="module")
def reference():
    return ddp_train.train_reference()


@pytest.mark.parametrize("vendor", sorted(FAKES))
def test_ddp_on_four_processes_matches_one_cpu_process(vendor, runs, reference):
    results, (code, log) = runs
    what, out = results[vendor]
    if what == "skip":
        pytest.skip(out)
    log = log[-6000:]
    if os.path.exists(f"{out}.error"):
        pytest.fail(open(f"{out}.error").read() + "\n" + log)
    assert code == 0, log

    all_reduce = FAKES[vendor][4]
    for rank in range(WORLD):
        got = torch.load(f"{out}.{rank}")
        assert got["vendor"] == vendor, got["vendor"]
        assert got["devices"] == WORLD, got["devices"]
        assert got["param_devices"] == [f"dipu:{rank}"], got["param_devices"]
        with open(f"{out}.trace.{rank}") as f:
            calls = [line.split(" ", 1)[0] for line in f]
        # DDP's bucket all-reduces (one per step, and its start-up checks)
        # went through the fake vendor's collective library on every rank.
        assert calls.count(all_reduce) >= ddp_train.STEPS, (rank, sorted(set(calls)))
        assert len(got["params"]) == len(reference)
        k = ddp_train.STEP_REDUCTION * ddp_train.STEPS
        for i, (p, want, p0) in enumerate(zip(got["params"], reference, ddp_train.initial())):
            assert_trained_close(p, want, p0, reduction_len=k, msg=f"rank {rank} parameter {i}")
