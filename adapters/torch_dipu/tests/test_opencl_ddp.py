"""DDP on 2 processes on the OpenCL vendor (PoCL): ddp_train's tiny MLP
trained with the "dicl" backend on two ranks with DIPU_VENDOR naming the
OpenCL plugin and DIPU_DIOPI_LIBRARY its kernel library (both as cargo
built them in target/debug). OpenCL has no collective library, so the
process group stages every collective through pinned host memory
(docs/distributed.md). Each rank's parameters must match, under the
tolerance policy (docs/tolerance.md), those of one CPU process that
trained on the whole batch (ddp_train.train_reference).

The file run as a script is the launcher: it imports torch and DDP's
imports once, then runs torchrun's launcher (--standalone,
--nproc-per-node 2) with the fork start method, as test_fake_vendors_ddp
does; a rank sets the OpenCL environment and only then imports
torch_dipu, so its runtime and PoCL are its own. Skipped, saying why,
where PoCL is not installed (scripts/setup.sh installs it)."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
TARGET = os.path.join(ROOT, "target", "debug")
PLUGIN = os.path.join(TARGET, "libdipu_vendor_opencl.so")
LIBRARY = os.path.join(TARGET, "libdiopi_impl_opencl.so")
POCL_ICD = "/etc/OpenCL/vendors/pocl.icd"
WORLD = 2
# A test that hangs is a failure: the launcher and each collective are
# bounded.
LIMIT = 240
COLLECTIVE_TIMEOUT_S = 60

if __name__ == "__main__":
    sys.path[:0] = [HERE, os.path.dirname(HERE)]

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


def worker(out, env):
    """One rank: sets the OpenCL environment, then DDP-trains ddp_train's
    model on this rank's share of the batch on dipu:<local rank>; saves
    what it saw to <out>.<rank>."""
    import datetime

    os.environ.update(env)
    import ddp_train
    import torch_dipu  # noqa: F401  (registers "dipu" and "dicl")

    local = int(os.environ["LOCAL_RANK"])
    dist.init_process_group("dicl", timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S))
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = torch.device("dipu", local)
    torch.dipu.set_device(dev)
    ddp = torch.nn.parallel.DistributedDataParallel(ddp_train.model().to(dev))
    ddp_train.train(ddp, rank, world, dev)
    params = list(ddp.module.parameters())
    torch.save({
        "vendor": torch.dipu.vendor_name(),
        "param_devices": sorted({str(p.device) for p in params}),
        "params": [p.detach().cpu() for p in params],
    }, f"{out}.{rank}")
    dist.destroy_process_group()


def launch(out, env_json):
    """torchrun --standalone --nproc-per-node WORLD running worker(out,
    env); a launch that fails leaves its error in <out>.error."""
    import json
    import uuid

    import torch._dynamo  # noqa: F401  (what DDP imports: once, before the forks)
    import torch.nn.parallel  # noqa: F401
    from torch.distributed import run
    from torch.distributed.launcher.api import elastic_launch

    import ddp_train  # noqa: F401

    args = run.parse_args(["--standalone", "--nproc-per-node", str(WORLD), "--start-method", "fork",
                           os.path.abspath(__file__)])
    # What torchrun's run() does for --standalone.
    args.rdzv_backend, args.rdzv_endpoint = "c10d", "localhost:0"
    args.rdzv_id = str(uuid.uuid4())
    config, _, _ = run.config_from_args(args)
    try:
        elastic_launch(config, worker)(out, json.loads(env_json))
    except Exception as e:  # noqa: BLE001  (the test reports it)
        with open(f"{out}.error", "w") as f:
            f.write(f"{type(e).__name__}: {e}")


if __name__ == "__main__":
    launch(sys.argv[1], sys.argv[2])
    sys.exit(0)

import json  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402

import pytest  # noqa: E402

sys.path.insert(0, HERE)
import ddp_train  # noqa: E402
from dipu_tolerance import assert_trained_close  # noqa: E402

# Variables that would choose another vendor or change the OpenCL one.
FOREIGN = ["DIPU_VENDOR", "DIPU_VENDOR_PATH", "DIPU_DIOPI_LIBRARY", "DIPU_HOST_DEVICES",
           "DIPU_OPENCL_PLATFORM", "DIPU_OPENCL_SVM", "DIPU_OPENCL_MEMORY", "DIPU_COMM_STAGED_TRANSPORT"]


def test_ddp_on_two_processes_on_opencl_matches_one_cpu_process(tmp_path):
    if not os.path.exists(POCL_ICD):
        pytest.skip(f"PoCL is not installed ({POCL_ICD} is missing): scripts/setup.sh installs it")
    for lib in (PLUGIN, LIBRARY):
        assert os.path.exists(lib), f"{lib} is missing: run `cargo build --workspace`"
    env = {k: v for k, v in os.environ.items() if k not in FOREIGN}
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(HERE), os.environ.get("PYTHONPATH", "")])
    rank_env = {
        "DIPU_VENDOR": PLUGIN,
        "DIPU_DIOPI_LIBRARY": LIBRARY,
        "POCL_DEVICES": os.environ.get("POCL_DEVICES", "pthread pthread"),
        # Two ranks on CI's two cores: one PoCL worker each.
        "POCL_MAX_PTHREAD_COUNT": os.environ.get("POCL_MAX_PTHREAD_COUNT", "1"),
        "POCL_CACHE_DIR": os.environ.get("POCL_CACHE_DIR", os.path.join(ROOT, "target", "pocl-cache")),
    }
    out = str(tmp_path / "run")
    cmd = [sys.executable, os.path.abspath(__file__), out, json.dumps(rank_env)]
    # A session of its own: on a timeout the launcher and the ranks are
    # killed together.
    launcher = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)
    try:
        log, _ = launcher.communicate(timeout=LIMIT)
    except BaseException as e:
        os.killpg(launcher.pid, signal.SIGKILL)
        log, _ = launcher.communicate()
        if not isinstance(e, subprocess.TimeoutExpired):
            raise
        log += f"\nthe launcher did not finish within {LIMIT} s: killed"
    log = log[-6000:]
    if os.path.exists(f"{out}.error"):
        pytest.fail(open(f"{out}.error").read() + "\n" + log)
    assert launcher.returncode == 0, log

    reference = ddp_train.train_reference()
    k = ddp_train.STEP_REDUCTION * ddp_train.STEPS
    for rank in range(WORLD):
        got = torch.load(f"{out}.{rank}")
        assert got["vendor"] == "opencl", got["vendor"]
        assert got["param_devices"] == [f"dipu:{rank}"], got["param_devices"]
        assert len(got["params"]) == len(reference)
        for i, (p, want, p0) in enumerate(zip(got["params"], reference, ddp_train.initial())):
            assert_trained_close(p, want, p0, reduction_len=k, msg=f"rank {rank} parameter {i}")
