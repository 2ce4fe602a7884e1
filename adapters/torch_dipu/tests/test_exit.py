"""A process whose last backward ran on dipu exits cleanly (issue 39: it
sometimes aborted with "terminate called without an active exception").

exit_race.py, run as a child, forces the order that aborted it: dipu's
autograd thread drops the last reference to the backward's GraphTask,
whose Python objects need the GIL, just as the interpreter finalizes (its
doc has the steps). torch_dipu's exit hook makes the thread finish first;
without the hook the same order aborts, which shows the order is forced."""

import os
import signal
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = os.path.dirname(HERE)
# A child that hangs fails the test (subprocess.run kills it).
LIMIT = 300


def _run(*args):
    env = dict(os.environ, PYTHONPATH=PACKAGE + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, os.path.join(HERE, "exit_race.py"), *args], env=env,
                          capture_output=True, text=True, timeout=LIMIT)


def test_a_backward_released_as_the_interpreter_finalizes_exits_cleanly():
    # Both Python objects a GraphTask holds: the stashed context and a
    # queued callback.
    out = _run("--queue-callback")
    assert out.stdout.splitlines() == ["provoked", "finalizing: idle"], (out.stdout, out.stderr)
    assert out.returncode == 0, out.stderr
    assert "terminate called" not in out.stderr, out.stderr


def test_without_the_exit_hook_the_same_order_aborts():
    out = _run("--no-hook")
    assert out.stdout.splitlines() == ["provoked", "finalizing: gil"], (out.stdout, out.stderr)
    assert out.returncode == -signal.SIGABRT, (out.returncode, out.stderr)
    assert "terminate called without an active exception" in out.stderr, out.stderr
