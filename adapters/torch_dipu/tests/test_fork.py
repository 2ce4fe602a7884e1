"""Fork as on CUDA: counting devices and seeding start no runtime, so a
forked child can use dipu; a child forked after the parent used dipu gets
"Cannot re-initialize dipu in forked subprocess" (not a hang).

One fresh interpreter runs both cases: the pytest process has long
created its runtime."""

import os
import subprocess
import sys
import textwrap

PKG_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCRIPT = textwrap.dedent(
    r"""
    import os, signal, sys
    import torch
    import torch_dipu

    def in_child(body):
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            signal.alarm(120)  # a hang is a failure, not a stuck test
            code = 1
            try:
                body()
                code = 0
            except BaseException as e:
                print("child failed:", repr(e), flush=True)
            finally:
                sys.stdout.flush()
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        return os.waitstatus_to_exitcode(status)

    # Phase 1: only counting and seeding in the parent.
    assert torch.dipu.device_count() == 2
    assert torch.dipu.is_available()
    assert torch.accelerator.device_count() == 2
    torch.manual_seed(1234)
    assert not torch.dipu.is_initialized(), "counting or seeding started the runtime"

    def uses_dipu():
        assert not torch.dipu._is_in_bad_fork()
        x = torch.arange(4.0, device="dipu") * 2
        assert x.cpu().tolist() == [0.0, 2.0, 4.0, 6.0]
        assert torch.dipu.initial_seed() == 1234, "the queued seed applies"
        print("clean child used dipu", flush=True)

    assert in_child(uses_dipu) == 0

    # Phase 2: the parent uses dipu (queued work in flight), then forks.
    y = torch.ones(1 << 20, device="dipu").mul_(3)
    assert torch.dipu.is_initialized()

    def gets_the_error():
        assert torch.dipu._is_in_bad_fork()
        assert not torch.dipu.is_initialized()
        try:
            torch.ones(2, device="dipu")
        except RuntimeError as e:
            assert "Cannot re-initialize dipu in forked subprocess" in str(e), e
        else:
            raise AssertionError("no error in the forked child")
        # Past torch's lazy init, the runtime's own check answers.
        try:
            torch_dipu._C._device_count()
        except RuntimeError as e:
            assert "Cannot re-initialize dipu in forked subprocess" in str(e), e
        else:
            raise AssertionError("no error from the runtime")
        print("bad child got the error", flush=True)

    assert in_child(gets_the_error) == 0
    assert y.sum().item() == 3 * (1 << 20), "the parent is unaffected"
    print("fork ok")
    """
)


def test_fork_semantics():
    env = dict(os.environ, DIPU_HOST_DEVICES="2", PYTHONPATH=PKG_ROOT)
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "clean child used dipu" in out.stdout, out.stdout
    assert "bad child got the error" in out.stdout, out.stdout
    assert "fork ok" in out.stdout
