"""DIOPI dispatch: every ATen op of diopi_functions.yaml against the CPU
(saying which path ran), training a CNN and an MLP with at most 10 % of op
calls falling back, and DIPU's variables (dump, force fallback,
autocompare, sync mode, a missing library)."""

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest
import torch

import torch_dipu
from dipu_tolerance import assert_close, assert_equal

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import diopi_samples  # noqa: E402

# What the generator lists: the YAML's ATen ops and their DIOPI functions.
YAML_OPS = dict(
    (line.split()[0], line.split()[1:])
    for line in subprocess.run(
        [sys.executable, os.path.join(PKG, "gen_diopi.py"), "--list"],
        capture_output=True, text=True, check=True,
    ).stdout.splitlines()
)
RECORDS = {aten: path for aten, _fn, path in torch_dipu._C._diopi_ops()}


def _run(code, env=None, timeout=300):
    e = dict(os.environ)
    e.pop("DIPU_DUMP_OP_ARGS", None)
    # The package, and adapters/ for the tolerance policy's helper.
    e["PYTHONPATH"] = os.pathsep.join([PKG, os.path.dirname(PKG), e.get("PYTHONPATH", "")])
    e.update(env or {})
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=e,
                          capture_output=True, text=True, timeout=timeout, cwd=HERE)


def test_library_is_open_and_every_yaml_op_was_considered():
    path, error = torch_dipu._C._diopi_library()
    assert path.endswith("libdiopi_impl_host.so"), (path, error)
    assert set(RECORDS) == set(YAML_OPS)
    assert set(diopi_samples.SAMPLES) == set(YAML_OPS), "one sample per YAML op"
    dispatched = [op for op, p in RECORDS.items() if p == "diopi"]
    print(f"\n{len(dispatched)} of {len(RECORDS)} ops dispatch to DIOPI; "
          f"the rest: {sorted((op, p) for op, p in RECORDS.items() if p != 'diopi')}")
    assert dispatched


@pytest.fixture(scope="module")
def sample_run():
    """All samples in one process with DIPU_DUMP_OP_ARGS=1: per op, its
    result and the dump lines of its dipu run."""
    run = subprocess.run(
        [sys.executable, os.path.join(HERE, "diopi_samples.py")],
        env={**os.environ, "DIPU_DUMP_OP_ARGS": "1",
             "PYTHONPATH": PKG + os.pathsep + os.environ.get("PYTHONPATH", "")},
        capture_output=True, text=True, timeout=600, cwd=HERE,
    )
    results = {}
    for line in run.stdout.splitlines():
        if line.startswith("{"):
            d = json.loads(line)
            if "op" in d:
                results[d["op"]] = d
    lines = {}
    current = None
    for line in run.stderr.splitlines():
        if line.startswith("@@ "):
            current = line[3:]
            lines[current] = []
        elif current is not None:
            lines[current].append(line)
    return results, lines, run


@pytest.mark.parametrize("op", sorted(YAML_OPS))
def test_op_matches_cpu(op, sample_run):
    results, lines, run = sample_run
    assert op in results, run.stderr[-3000:]
    path = RECORDS[op]
    calls = [ln for ln in lines.get(op, []) if ln.startswith(f"[{op}]: ")]
    ran = sorted({ln.split(": ", 1)[1] for ln in calls})
    print(f"\n{op}: registered path {path}; calls seen: {ran}")
    assert results[op]["ok"], f"{op} ({path}, ran {ran}): {results[op]['msg']}"
    if path == "diopi":
        # The op ran as its DIOPI function (some samples also hit a case the
        # wrapper hands to the fallback, e.g. a half_to_float softmax).
        assert any(fn.startswith("diopi") for fn in ran), (op, lines.get(op))
        assert YAML_OPS[op][0] in ran or op in ("zero_",), (op, ran)
    else:
        assert not any(fn.startswith("diopi") for fn in ran), (op, ran)


TRAIN = r"""
import json, sys, torch, torch_dipu
from torch import nn
from dipu_tolerance import assert_trained_close, close_report

STEPS = 5
# One step's chain of reductions (docs/tolerance.md). The CNN: fan-ins 27,
# 72 and 16, batch norm statistics over 8 x 12 x 12, pooling over 6 x 6,
# the loss over 10 classes and 8 samples, weight gradients over 8 x 12 x 12,
# 8 x 6 x 6 and 8 positions. The MLP: fan-ins 12, 32 and 32, the layer norm
# over 32, the loss over 10 and 16, weight gradients over the batch (3 x 16).
STEP_REDUCTION = {"cnn": 27 + 72 + 16 + 1152 + 36 + 18 + 1152 + 288 + 8,
                  "mlp": 12 + 32 + 32 + 32 + 26 + 3 * 16}

def cnn():
    # No bias before the batch norm: its gradient is zero in exact arithmetic,
    # and Adam turns rounding noise there into full-size steps.
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))

def mlp():
    return nn.Sequential(nn.Linear(12, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 32),
                         nn.Tanh(), nn.Dropout(0.0), nn.Linear(32, 10))

def train(make, shape, device, opt_cls, steps=STEPS, **kw):
    torch.manual_seed(0)
    model = make().to(device)
    initial = [p.detach().cpu().clone() for p in model.parameters()]
    opt = opt_cls(model.parameters(), **kw)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(*shape, generator=g).to(device)
    y = torch.randint(0, 10, (shape[0],), generator=g).to(device)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach().cpu() for p in model.parameters()], initial

out = {}
for name, make, shape, opt_cls, kw in [
        ("cnn", cnn, (8, 3, 12, 12), torch.optim.AdamW, dict(lr=1e-2, weight_decay=1e-2)),
        ("mlp", mlp, (16, 12), torch.optim.SGD, dict(lr=0.1, momentum=0.9))]:
    ref = train(make, shape, "cpu", opt_cls, **kw)
    print("@@ " + name, file=sys.stderr, flush=True)
    got = train(make, shape, "dipu", opt_cls, **kw)
    torch.dipu.synchronize()
    print("@@ done", file=sys.stderr, flush=True)
    k = STEP_REDUCTION[name] * STEPS
    mismatches = [close_report(got[0], ref[0], "float32", k)]
    for i, (p, q, p0) in enumerate(zip(got[1], ref[1], ref[2])):
        try:
            assert_trained_close(p, q, p0, reduction_len=k, msg=f"parameter {i}")
        except AssertionError as e:
            mismatches.append(str(e))
    out[name] = dict(losses=got[0], cpu_losses=ref[0], mismatches=[m for m in mismatches if m])
print(json.dumps(out))
"""


def _count(lines):
    calls = [ln for ln in lines if re.match(r"^\[[^\]]+\]: \S+$", ln)]
    fallback = [ln for ln in calls if ln.endswith(": dipu_fallback")]
    return calls, fallback


def test_training_cnn_and_mlp_match_cpu_with_few_fallbacks():
    run = _run(TRAIN, env={"DIPU_DUMP_OP_ARGS": "1"}, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    res = json.loads(run.stdout.strip().splitlines()[-1])
    segments, current = {}, None
    for line in run.stderr.splitlines():
        if line.startswith("@@ "):
            current = line[3:]
            segments.setdefault(current, [])
        elif current:
            segments[current].append(line)
    report = []
    for name in ("cnn", "mlp"):
        r = res[name]
        calls, fallback = _count(segments[name])
        ops = {}
        for ln in fallback:
            ops[ln] = ops.get(ln, 0) + 1
        ratio = len(fallback) / max(len(calls), 1)
        report.append(f"{name}: {len(calls)} op calls, {len(fallback)} fell back "
                      f"({ratio:.1%}): {sorted(ops.items(), key=lambda kv: -kv[1])}")
        assert r["cpu_losses"][-1] < r["cpu_losses"][0], "the model learns"
        assert not r["mismatches"], (name, r)
        res[name]["ratio"] = ratio
    print("\n" + "\n".join(report))
    for name in ("cnn", "mlp"):
        assert res[name]["ratio"] <= 0.10, "\n".join(report)


def test_dump_levels():
    code = """
        import torch, torch_dipu
        x = torch.ones(2, 3, device="dipu")
        y = x * 2
        y.cumsum(0)
        torch.dipu.synchronize()
    """
    one = _run(code, env={"DIPU_DUMP_OP_ARGS": "1"})
    assert one.returncode == 0, one.stderr
    assert "[mul.out]: diopiMulScalar" in one.stderr.splitlines()
    assert "[cumsum.out]: dipu_fallback" in one.stderr.splitlines()
    assert "  self: dipu:0" not in one.stderr
    three = _run(code, env={"DIPU_DUMP_OP_ARGS": "3"})
    err = three.stderr.splitlines()
    assert "  self: dipu:0 Float[2, 3] strides [3, 1] offset 0" in err, three.stderr
    assert "  value: 1." in err, three.stderr  # a Scalar argument
    assert " 1  1  1" in err, three.stderr  # level 3: the values of x
    # Unset: no lines (test_autocompare's run checks that too).


def test_force_fallback_list():
    code = """
        import torch, torch_dipu
        x = torch.ones(2, 3, device="dipu")
        print((x + x).sum().item(), (x * 3).sum().item(), torch.sqrt(x * 4).sum().item(),
              (x / 4).sum().item())
        paths = dict((a, p) for a, _f, p in torch_dipu._C._diopi_ops())
        print(paths["add.out"], paths["div.out"], paths["mul.out"])
    """
    # DIPU_KEEP_TORCHOP_DEFAULT_IMPL_OPS: exact names whose kernels are not
    # registered (torch's own implementation: here the CPU fallback).
    run = _run(code, env={"DIPU_DUMP_OP_ARGS": "1",
                          "DIPU_FORCE_FALLBACK_OPS_LIST": "add.out, s.*t\\.out",
                          "DIPU_KEEP_TORCHOP_DEFAULT_IMPL_OPS": "div.out, mul"})
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["12.0", "18.0", "12.0", "1.5", "force_fallback", "keep_default", "diopi"]
    err = run.stderr.splitlines()
    assert "[div.out]: dipu_fallback" in err
    assert "dipu: div.out is in DIPU_KEEP_TORCHOP_DEFAULT_IMPL_OPS: torch's own implementation" in err
    assert "[add.out]: dipu_fallback" in err and "[sqrt.out]: dipu_fallback" in err
    assert "[mul.out]: diopiMulScalar" in err
    assert "dipu: add.out is in DIPU_FORCE_FALLBACK_OPS_LIST: fallback to cpu" in err
    # A full match: "sub.out" is not "s.*t\.out" ... but "sqrt.out" is; "add" alone is no op.
    assert not any(ln.startswith("dipu: sub.out is in") for ln in err)


def test_autocompare():
    code = """
        import torch, torch_dipu
        x = torch.arange(6.0, device="dipu").reshape(2, 3)
        y = x + 1
        x.mul_(2)
        torch.empty(1000, device="dipu").uniform_()
        print(y.sum().item(), x.sum().item())
    """
    run = _run(code, env={"DIPU_AUTOCOMPARE_OPS_LIST": "add.out,mul.out,uniform_"})
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["21.0", "30.0"]
    err = run.stderr.splitlines()
    assert not any(re.match(r"^\[[^\]]+\]: \S+$", ln) for ln in err), "no dump lines when unset"
    assert "autocompare:\tadd.out\tout:\tallclose" in err, err
    assert "autocompare:\tmul.out\tout:\tallclose" in err, err  # the in-place form: out is self
    # Random numbers differ from the CPU's: skipped, and said once.
    assert not any(ln.startswith("autocompare:\tuniform_") for ln in err), err
    skips = [ln for ln in err if ln.startswith("dipu: autocompare skips random ops")]
    if RECORDS.get("uniform_") == "diopi":
        assert len(skips) == 1 and skips[0].endswith(" uniform_"), err


@pytest.mark.parametrize("ops", [".*", "copy.*"])
def test_autocompare_of_its_own_copies_never_recurses(ops):
    # Autocompare copies the arguments to the host with copy_: compared, that
    # copy would compare itself again, without end (a segfault before).
    code = """
        import torch, torch_dipu
        x = torch.randn(64, 64, device="dipu")
        print((x @ x).relu().sum().cpu().item())
        torch.empty(8, device="dipu").normal_()
    """
    run = _run(code, env={"DIPU_AUTOCOMPARE_OPS_LIST": ops})
    assert run.returncode == 0, (run.returncode, run.stderr[-2000:])
    err = run.stderr.splitlines()
    # The user's copies (to the host) are compared; autocompare's own are not, and it says so.
    assert "autocompare:\tcopy_\tself:\tallclose" in err, err
    nested = [ln for ln in err if "not compared when autocompare itself runs it" in ln]
    assert nested and nested[0].startswith("autocompare:\tcopy_\t"), err
    assert not any("not_close" in ln for ln in err), err
    if ops == ".*":
        assert "autocompare:\tmm.out\tout:\tallclose" in err, err
        assert not any(ln.startswith("autocompare:\tnormal_") for ln in err), err
        if RECORDS.get("normal_") == "diopi":
            assert sum(ln.startswith("dipu: autocompare skips random ops") for ln in err) == 1


SYNC = """
    import torch, torch_dipu
    s = torch.dipu.Stream()
    x = torch.ones(1000, device="dipu")
    s.wait_stream(torch.dipu.current_stream())  # x is filled on the current stream
    with torch.dipu.stream(s):
        y = (x * 3 + 1).sqrt()
    s.synchronize()
    print(y.sum().item())
"""


def test_streams_and_sync_mode():
    # Queued on a side stream without waiting, then synchronised.
    exec(textwrap.dedent(SYNC).replace("print(", "result = ("), globals(), ns := {})
    assert ns["result"] == 2000.0
    run = _run(SYNC, env={"DIPU_SYNC_EXEC_MODE": "1"})
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["2000.0"]


def test_missing_library_falls_back():
    code = """
        import torch, torch_dipu
        x = torch.ones(2, 3, device="dipu")
        print((x + x).sum().item(), torch_dipu._C._diopi_library()[0] == "")
    """
    run = _run(code, env={"DIPU_DUMP_OP_ARGS": "1", "DIPU_DIOPI_LIBRARY": "/nonexistent/libdiopi_impl.so"})
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["12.0", "True"]
    notes = [ln for ln in run.stderr.splitlines() if ln.startswith("dipu: no DIOPI kernel library")]
    assert len(notes) == 1 and "/nonexistent/libdiopi_impl.so" in notes[0], run.stderr
    assert "[add.out]: dipu_fallback" in run.stderr.splitlines()


def test_unsupported_dtype_falls_back():
    # The host library has no complex kernels: diopiDtypeNotSupported hands
    # the call to the CPU fallback, as DIPU does with diopiForceFallbackToCPU.
    run = _run("""
        import torch, torch_dipu
        x = torch.ones(2, 3, device="dipu", dtype=torch.complex64)
        print((x * 2).sum().item())
    """, env={"DIPU_DUMP_OP_ARGS": "1"})
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["(12+0j)"]
    assert "[fill_.Scalar]: diopiFill" in run.stderr.splitlines()
    assert "[fill_.Scalar]: dipu_fallback" in run.stderr.splitlines()


def test_strided_out_and_inplace_views():
    a = torch.arange(24.0).reshape(4, 6)
    d = a.to("dipu")
    d[:, ::2].mul_(2)
    a[:, ::2].mul_(2)
    torch.add(d[1:3, 1:4], 10, out=d[1:3, 1:4])
    a[1:3, 1:4].add_(10)
    out = torch.empty(6, 4, device="dipu").t()
    torch.sub(d, d[0], out=out)
    # Small integers, scaled by 2 and -1: exact, so bitwise (docs/tolerance.md).
    assert torch.equal(d.cpu(), a)
    assert torch.equal(out.cpu(), a - a[0])
    v = d.t()
    v.neg_()
    assert torch.equal(d.cpu(), -a)
    z = torch.zeros((), device="dipu")
    z.add_(torch.tensor(3.0))
    assert z.item() == 3.0 and z.dim() == 0


def test_everything_forced_to_the_fallback():
    # ".*" leaves every op on the CPU fallback; the fallback must also write
    # native_batch_norm's running stats back (its schema does not mark them
    # written). The DIOPI path's running stats are checked by the samples.
    code = """
        import torch, torch_dipu
        torch.manual_seed(0)
        x = torch.randn(4, 3, 5, 5)
        bn = torch.nn.BatchNorm2d(3).to("dipu")
        y = bn(x.to("dipu")) * 2
        ref = torch.nn.BatchNorm2d(3)
        want = ref(x) * 2
        from dipu_tolerance import close_report
        # The statistics sum 4 * 5 * 5 values per channel (docs/tolerance.md).
        k = 4 * 5 * 5
        print(close_report(bn.running_mean.cpu(), ref.running_mean, reduction_len=k) is None,
              close_report(bn.running_var.cpu(), ref.running_var, reduction_len=k) is None,
              close_report(y.cpu(), want, reduction_len=k) is None)
    """
    run = _run(code, env={"DIPU_DUMP_OP_ARGS": "1", "DIPU_FORCE_FALLBACK_OPS_LIST": ".*"})
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["True", "True", "True"]
    assert "[native_batch_norm]: dipu_fallback" in run.stderr.splitlines()
    assert not re.search(r"\]: diopi", run.stderr)


def test_second_device_uses_its_own_stream():
    a = torch.arange(12.0).reshape(3, 4)
    d = a.to("dipu:1")
    with torch.dipu.device(0):
        y = (d * 2 + 1).sum(0)
        z = torch.mm(d, d.t())
    assert y.device == torch.device("dipu:1") and z.device == torch.device("dipu:1")
    # Small integers: every sum is exact, so bitwise (docs/tolerance.md).
    assert torch.equal(y.cpu(), (a * 2 + 1).sum(0))
    assert torch.equal(z.cpu(), a @ a.t())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_elementwise_matmul_softmax(dtype):
    g = torch.Generator().manual_seed(0)
    a = torch.randn(8, 16, generator=g).to(dtype)
    b = torch.randn(16, 8, generator=g).to(dtype)
    da, db = a.to("dipu"), b.to("dipu")
    # (result, CPU reference, reduction length): the product sums 16 terms,
    # softmax normalises over 8 (docs/tolerance.md).
    for got, want, k in [
        (da + db.t(), a + b.t(), 1),
        (da * 2.5, a * 2.5, 1),
        ((da - 1).relu(), (a - 1).relu(), 1),
        (torch.sigmoid(da), torch.sigmoid(a), 1),
        (da @ db, (a.float() @ b.float()).to(dtype), 16),
        (da.softmax(-1), a.float().softmax(-1).to(dtype), 8),
    ]:
        assert got.dtype == want.dtype
        assert_close(got.cpu(), want, reduction_len=k, msg=f"{dtype}")
    # A widening cast rounds nothing: bitwise.
    assert_equal(da.to(torch.float32).cpu(), a.to(torch.float32))


def test_a_cpu_tensor_in_a_dipu_op_is_an_error():
    d = torch.ones(2, 3, device="dipu")
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.mm(d, torch.ones(3, 2))
    with pytest.raises(RuntimeError, match="same device"):
        d.index_select(0, torch.tensor([0, 1]))
    # A CPU scalar (0-dim) is an operand like a number.
    assert torch.equal((d * torch.tensor(2.0)).cpu(), torch.full((2, 3), 2.0))
