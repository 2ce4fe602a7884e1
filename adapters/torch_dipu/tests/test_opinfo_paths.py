"""Which path PyTorch's OpInfo samples take on dipu: the DIOPI kernels of
the loaded library, or the CPU fallback.

test_device_generic.py compares the OpInfo ops with the CPU; this test runs
the same ops' float32 samples in a child process with DIPU_DUMP_OP_ARGS=1,
prints per OpInfo op the DIOPI functions and the fallback ops that ran, and
fails if an op whose kernels the YAML dispatches never reached DIOPI."""

import collections
import os
import re
import subprocess
import sys
import textwrap

# OpInfo ops whose ATen kernels diopi_functions.yaml dispatches: each must
# run at least one DIOPI function on its samples.
DISPATCHED = [
    "add", "sub", "mul", "div", "neg", "abs", "exp", "log", "sqrt", "rsqrt", "tanh",
    "sigmoid", "pow", "clamp", "maximum", "minimum", "where", "addcmul", "reciprocal",
    "sum", "mean", "argmax", "max", "matmul", "mm", "bmm", "addmm",
    "nn.functional.conv2d", "nn.functional.max_pool2d", "nn.functional.avg_pool2d",
    "nn.functional.adaptive_avg_pool2d", "softmax", "log_softmax", "nn.functional.relu",
    "nn.functional.gelu", "nn.functional.silu", "nn.functional.layer_norm",
    "nn.functional.batch_norm", "index_select", "masked_fill", "cat", "tril", "triu",
    "nn.functional.embedding",
]

CHILD = """
import itertools
import sys
import torch
import torch_dipu  # noqa: F401
from test_device_generic import COMPARED, _select

for op in _select(COMPARED):
    # Making the samples on dipu runs ops too: they count for no OpInfo op.
    sys.stderr.write("@@ (samples)\\n")
    sys.stderr.flush()
    samples = list(itertools.islice(op.sample_inputs("dipu", torch.float32), 8))
    for sample in samples:
        sys.stderr.write(f"@@ {op.name}\\n")
        sys.stderr.flush()
        op(sample.input, *sample.args, **sample.kwargs)
torch.dipu.synchronize()
sys.stderr.write("@@ done\\n")
"""

DUMP = re.compile(r"^\[(?P<aten>[^\]]+)\]: (?P<fn>\S+)$")


def test_opinfo_samples_run_the_diopi_path(capsys):
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, DIPU_DUMP_OP_ARGS="1",
               # tests/, the adapter, and adapters/ (dipu_tolerance, the
               # tolerance policy's helper that test_device_generic imports).
               PYTHONPATH=os.pathsep.join([here, os.path.dirname(here),
                                           os.path.dirname(os.path.dirname(here))]))
    run = subprocess.run([sys.executable, "-c", textwrap.dedent(CHILD)], env=env, cwd=here,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    assert "@@ done" in run.stderr, run.stderr[-4000:]
    diopi = collections.defaultdict(collections.Counter)
    fallback = collections.defaultdict(collections.Counter)
    current = None
    for line in run.stderr.splitlines():
        if line.startswith("@@ "):
            current = line[3:]
            continue
        m = DUMP.match(line)
        if m and current not in (None, "(samples)"):
            if m["fn"] == "dipu_fallback":
                fallback[current][m["aten"]] += 1
            else:
                diopi[current][m["fn"]] += 1
    names = sorted(set(diopi) | set(fallback))
    with capsys.disabled():
        print("\nOpInfo samples on dipu (float32, up to 8 per op): DIOPI calls / fallback calls")
        for name in names:
            d, f = diopi[name], fallback[name]
            print(f"  {name:<36} {sum(d.values()):>4} / {sum(f.values()):<4}"
                  f" DIOPI: {', '.join(sorted(d)) or '-'}; fallback: {', '.join(sorted(f)) or '-'}")
        total_d = sum(sum(c.values()) for c in diopi.values())
        total_f = sum(sum(c.values()) for c in fallback.values())
        print(f"  all: {total_d} DIOPI calls, {total_f} fallback calls")
    missing = [n for n in DISPATCHED if not diopi[n]]
    assert not missing, f"these OpInfo ops never reached a DIOPI function: {missing}"
