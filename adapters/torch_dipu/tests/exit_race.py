"""Child process of test_exit.py: forces the order in which a backward on
dipu aborted a process at exit with "terminate called without an active
exception".

The race: dipu's autograd thread (pt_autograd_<device>) finishes a
backward, wakes the thread that called backward() and only then drops its
reference to the backward's GraphTask. If the caller has returned first,
the autograd thread's reference is the last one, and ~GraphTask releases
what the task captured from Python: the thread-local snapshot holding the
contextvars.Context that torch's _engine_run_backward stashes, and any
callback queued with queue_callback. Each release takes the GIL inside a
destructor. If the interpreter has started to finalize by then, taking
the GIL ends the thread (pthread_exit), whose unwinding through that
noexcept destructor calls std::terminate.

The order, made certain on one CPU:
1. every dipu autograd thread is started (a backward on each device);
2. pt_autograd_0 gets the SCHED_IDLE policy: a thread it wakes preempts
   it at once, and it runs only while every other thread of the CPU is
   blocked;
3. a backward on dipu:0: the main thread, woken, runs before the autograd
   thread drops its reference, and drops its own first;
4. the main thread, holding the GIL, blocks in usleep (ctypes.PyDLL keeps
   the GIL) until the autograd thread, now on the CPU, waits for the GIL
   inside ~GraphTask (a futex wait with a timeout; sys.setswitchinterval
   is so long that the waiter never asks the holder to let go). Then it
   prints "provoked" and the script ends;
5. the interpreter finalizes; while it clears __main__, Yield.__del__
   blocks in time.sleep, which lets the GIL go: the autograd thread takes
   it in a finalizing interpreter.

With torch_dipu's exit hook (torch_dipu._finish_autograd_at_exit) the
autograd thread has finished at step 5: the hook runs before the
interpreter finalizes and waits, without the GIL, until every dipu
autograd thread has run a task queued after everything before it. With
`--no-hook` the hook is unregistered and the process aborts at step 5.
With `--queue-callback` the backward also queues a Python callback (what
FSDP2 and DDP's static graph do), the other Python reference a GraphTask
holds.

Prints "provoked" once steps 3 and 4 happened in that order, and at step
5 "finalizing: gil" (the autograd thread waits for the GIL: the abort
follows) or "finalizing: idle" (it waits for work: the hook ran). Exit
status 3 with "not provoked": the autograd thread dropped its reference
before the main thread did, so the order was not forced."""

import ctypes
import os
import resource
import sys

# The deliberate abort leaves no core file.
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
# One CPU, before any thread exists: every thread of the process inherits it.
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})

import atexit  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402

import torch_dipu  # noqa: E402

LIBC = ctypes.PyDLL(None)  # calls through PyDLL keep the GIL
FUTEX = {"x86_64": 202, "aarch64": 98}[os.uname().machine]  # the syscall's number
FUTEX_CMD_MASK = 0x7F
FUTEX_WAITS = (0, 9)  # FUTEX_WAIT, FUTEX_WAIT_BITSET


def state(tid, _libc=LIBC, _buf=ctypes.create_string_buffer(256)):
    """What thread `tid` is doing, read with the GIL held: "gil" while it
    waits with a timeout (take_gil's wait; the autograd thread's other
    wait, for its next task, has none), "idle" in an untimed futex wait,
    "other" otherwise."""
    fd = _libc.open(b"/proc/self/task/%d/syscall" % tid, 0)
    if fd < 0:
        return "other"
    n = _libc.read(fd, _buf, 255)
    _libc.close(fd)
    fields = _buf.raw[:max(n, 0)].split()
    if len(fields) < 5 or fields[0] != str(FUTEX).encode():
        return "other"
    if int(fields[2], 16) & FUTEX_CMD_MASK not in FUTEX_WAITS:
        return "other"
    return "gil" if int(fields[4], 16) != 0 else "idle"


def autograd_thread(device):
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/comm") as f:
            if f.read().strip() == f"pt_autograd_{device}":
                return int(tid)
    raise SystemExit(f"no pt_autograd_{device} thread")


class Yield:
    """While the interpreter finalizes: prints "finalizing: <state>" (the
    autograd thread's), then lets the GIL go for as long as that thread
    waits for it (not at all once the exit hook ran)."""

    def __init__(self, tid):
        self.tid = tid

    def __del__(self, _sleep=time.sleep, _state=state, _write=LIBC.write):
        seen = _state(self.tid).encode()
        _write(1, b"finalizing: " + seen + b"\n", 13 + len(seen))
        while _state(self.tid) == "gil":
            _sleep(0.001)


if "--no-hook" in sys.argv:
    atexit.unregister(torch_dipu._finish_autograd_at_exit)

# 1. Every dipu autograd thread started and past its start-up.
for d in range(torch.dipu.device_count()):
    x = torch.ones(2, device=f"dipu:{d}", requires_grad=True)
    (x * 2).sum().backward()
tid = autograd_thread(0)
# 2.
os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
sys.setswitchinterval(1000.0)

w = torch.ones(4, device="dipu:0", requires_grad=True)
loss = (w * 3).sum()
if "--queue-callback" in sys.argv:
    class Queue(torch.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            return t.clone()

        @staticmethod
        def backward(ctx, g):
            # A builtin: a function of this script would keep __main__'s
            # globals, and with them Yield, alive past finalization.
            torch.autograd.Variable._execution_engine.queue_callback(tuple)
            return g

    loss = Queue.apply(loss)
# 3.
loss.backward()
del loss
# 4.
while (s := state(tid)) != "gil":
    if s == "idle":
        LIBC.write(1, b"not provoked\n", 13)
        LIBC._exit(3)
    LIBC.usleep(1000)
LIBC.write(1, b"provoked\n", 9)
# 5.
_yield = Yield(tid)
