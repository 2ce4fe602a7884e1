"""The op tools (op_tools, docs/op-tools.md) on the CNN and the MLP of these
tests: a capture replays to the same outputs, autocompare finds every op
matching, time measure lists every op that ran; with a kernel library whose
add ignores alpha (tests/c/diopi_add_ignores_alpha.c), autocompare names that
op and only it, the layer comparison names the module that uses it, and
OpFallback on it makes the training step match the CPU;
OpObserve reports a NaN at the op that produced it."""

import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch
from dipu_tolerance import assert_close
from torch import nn
from torch.overrides import TorchFunctionMode

import op_tools
from op_tools import _common

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.dirname(HERE)
REPO = os.path.dirname(os.path.dirname(PKG))


def _cnn():
    return nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(4 * 4 * 4, 5))


def _mlp():
    return nn.Sequential(nn.Linear(12, 16), nn.Tanh(), nn.Linear(16, 5))


MODELS = {"cnn": (_cnn, (6, 3, 8, 8)), "mlp": (_mlp, (6, 12))}


def _step(name, device="dipu"):
    """One forward and backward of a model from fixed weights and inputs."""
    make, shape = MODELS[name]
    torch.manual_seed(0)
    model = make().to(device)
    x = torch.randn(shape).to(device)
    y = torch.arange(shape[0]).remainder(5).to(device)
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    return loss


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for var in list(os.environ):
        if var.startswith("OP_") or "AUTOCOMPARE_ERROR_TOLERANCE" in var:
            monkeypatch.delenv(var)
    return tmp_path


class _Seen(TorchFunctionMode):
    """Every function called on dipu tensors (names as op_tools gives them)."""

    def __init__(self):
        super().__init__()
        self.names = set()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if _common.touches_device(args, kwargs):
            self.names.add(_common.op_name(func))
        return func(*args, **kwargs)


def _run(code, env=None, cwd=None, timeout=240):
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([PKG, os.path.dirname(PKG), HERE])
    e.update(env or {})
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=e, cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


def test_both_import_names_are_one_package():
    import torch_dipu.op_tools as again

    assert again is op_tools
    for tool in ("OpCapture", "OpAutoCompare", "OpFallback", "OpTimeMeasure", "OpDtypeCast",
                 "OpObserve", "OpOverflowCheck"):
        t = getattr(op_tools, tool)()
        assert callable(t.start) and callable(t.stop) and hasattr(t, "__enter__")


def test_lists_disable_wins_and_empty_matches_nothing(in_tmp, monkeypatch):
    assert op_tools.is_opname_match("torch.Tensor.add", "torch.Tensor.a.*")
    assert not op_tools.is_opname_match("torch.Tensor.add", "Tensor.add")  # whole name
    assert not op_tools.is_opname_match("torch.Tensor.add", "")
    monkeypatch.setenv("OP_OBSERVE_LIST", "torch.Tensor.*")
    monkeypatch.setenv("OP_OBSERVE_DISABLE_LIST", "torch.Tensor.mul")
    x = torch.ones(3, device="dipu")
    with op_tools.OpObserve() as obs:
        (x * 2).add(1)
    seen = {r for r in _common._said if r.startswith(("apply OpObserve", "skip OpObserve"))}
    assert "apply OpObserve on torch.Tensor.add" in seen
    assert "skip OpObserve on torch.Tensor.mul" in seen
    assert obs.reports == []


@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_autocompare_matches_and_time_measure_lists_every_op(model, in_tmp):
    ac = op_tools.OpAutoCompare()
    ac.start()
    _step(model)
    ac.stop()
    names = {r["name"] for r in ac.results}
    assert any(n.startswith("torch.nn.functional.linear grad") for n in names), names
    bad = [r for r in ac.results if r["allclose"] is not True]
    assert not bad, bad
    (csv_name,) = os.listdir(in_tmp / "op_tools_results" / "op_autocompare_result")
    lines = (in_tmp / "op_tools_results" / "op_autocompare_result" / csv_name).read_text().splitlines()
    assert lines[0].startswith("forward_id,name,allclose") and len(lines) == len(ac.results) + 1

    seen = _Seen()
    tm = op_tools.OpTimeMeasure()
    with seen:
        tm.start()
        _step(model)
        tm.stop()  # stop() flushes: the CSV and the summary
    (csv_name,) = os.listdir(in_tmp / "op_tools_results" / "op_time_measure_result")
    text = (in_tmp / "op_tools_results" / "op_time_measure_result" / csv_name).read_text()
    measured = {line.split(",")[0] for line in text.splitlines()[1:]}
    expected = {n for n in seen.names if n.rsplit(".", 1)[-1] not in _common.ALWAYS_SKIP
                and not n.endswith((".__get__", ".__set__"))
                and not re.match(r"_[^_]", n.rsplit(".", 1)[-1])}
    assert expected and measured == expected, (expected ^ measured)
    # Forward times come from device events: non-negative numbers.
    assert all(float(line.split(",")[2]) >= 0 for line in text.splitlines()[1:])


@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_capture_replays_to_the_same_outputs(model, in_tmp, capsys):
    with op_tools.OpCapture() as cap:
        _step(model)
    assert cap.directories
    first = cap.directories[0]
    assert sorted(f for f in os.listdir(first) if f.endswith(".pth")) >= ["input.pth", "output.pth"]
    import json

    meta = json.loads(open(os.path.join(first, "input.pth.json")).read())
    assert meta["rank"] == 0 and meta["device"].startswith("dipu") and meta["op"]
    assert any(os.path.exists(os.path.join(d, "grad_inputs.pth")) for d in cap.directories)
    capsys.readouterr()
    from op_tools import run_op_from_data

    status = run_op_from_data.main(["op_tools_results", "--run_times", "2"])
    out = capsys.readouterr().out
    replays = [ln for ln in out.splitlines() if ln.startswith("replay ")]
    assert status == 0, [ln for ln in out.splitlines() if "differs" in ln or "cannot" in ln]
    assert len(replays) == len(cap.directories), out[-2000:]
    assert all("matches the captured output" in ln for ln in replays), replays


def test_replay_fails_on_a_different_output(in_tmp):
    with op_tools.OpCapture() as cap:
        torch.ones(4, device="dipu").mul(3)
    d = cap.directories[-1]
    assert "torch.Tensor.mul" in d
    saved = torch.load(os.path.join(d, "output.pth"), weights_only=False)
    saved["args"] = (saved["args"][0] + 1,)
    torch.save(saved, os.path.join(d, "output.pth"))
    from op_tools import run_op_from_data

    assert run_op_from_data.main([str(in_tmp / "op_tools_results")]) == 1


def test_observe_reports_nan_at_the_op_that_made_it(in_tmp, capsys):
    x = torch.tensor([-1.0, 4.0], device="dipu")
    with op_tools.OpObserve() as obs:
        y = x.sqrt()
        (y * 2).sum()
    assert [r[0] for r in obs.reports] == ["torch.Tensor.sqrt"], obs.reports
    out = capsys.readouterr().out
    assert "torch.Tensor.sqrt forward_id" in out and "test_op_tools.py" in out


def test_overflow_check_and_dtype_cast(in_tmp, capsys):
    x = torch.full((3,), 60000.0, dtype=torch.float16, device="dipu")
    with op_tools.OpOverflowCheck() as oc:
        x * 2
    assert [r[0] for r in oc.reports] == ["torch.Tensor.mul"], oc.reports
    capsys.readouterr()
    # OpObserve outside OpDtypeCast sees the call OpDtypeCast makes.
    with op_tools.OpObserve(), op_tools.OpDtypeCast():
        y = x.div(3)
    assert y.dtype == torch.float16 and y.cpu().tolist() == [20000.0] * 3
    out = capsys.readouterr().out
    assert "torch.float16 -> torch.float32" in out
    observed = [ln for ln in out.splitlines() if ln.startswith("| torch.Tensor.div inputs[0]")]
    assert observed and "torch.float32" in observed[0], out


def test_fallback_writes_inplace_results_back_and_keeps_autograd(in_tmp):
    a = torch.ones(4, device="dipu", requires_grad=True)
    out = torch.zeros(4, device="dipu")
    with op_tools.OpFallback():
        b = a * 3
        b.add_(1)
        torch.add(b.detach(), 1, out=out)
        b.sum().backward()
    assert b.device.type == "dipu" and b.cpu().tolist() == [4.0] * 4
    assert out.cpu().tolist() == [5.0] * 4
    assert a.grad.device.type == "dipu" and a.grad.cpu().tolist() == [3.0] * 4



@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_layer_comparison_matches_with_the_correct_library(model, capsys):
    make, shape = MODELS[model]
    torch.manual_seed(0)
    net, x = make(), torch.randn(shape)
    y = torch.arange(shape[0]).remainder(5)
    for fixed in (False, True):
        report = op_tools.compare_layers(
            net, x, loss_fn=lambda o: nn.functional.cross_entropy(o, y.to(o.device)), fixed_input=fixed)
        assert report.all_match, report.table()
        names = [r["name"] for r in report.rows]
        # Every module's output (the leaves, then the model) and every gradient.
        assert [n for n in names if n.endswith(")")][:len(net)] == [
            f"{i} ({type(m).__name__})" for i, m in enumerate(net)]
        assert [r["name"] for r in report.rows if r["what"] == "grad"] == [n for n, _ in net.named_parameters()]
    assert "matches the CPU's" in capsys.readouterr().out


BAD_STEP = """
    import torch, op_tools
    from torch import nn

    def step(device):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(12, 16), nn.Tanh(), nn.Linear(16, 5)).to(device)
        x = torch.randn(6, 12).to(device)
        y = torch.arange(6).remainder(5).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.5, foreach=False)
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        return [p.detach().cpu() for p in model.parameters()]
"""


@pytest.fixture(scope="module")
def bad_library(tmp_path_factory):
    cc = os.environ.get("CC", "cc")
    if shutil.which(cc) is None:
        pytest.fail(f"no C compiler ({cc}) to build the deliberately wrong kernel library")
    out = tmp_path_factory.mktemp("bad") / "libdiopi_add_ignores_alpha.so"
    subprocess.run([cc, "-std=c11", "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-I",
                    os.path.join(REPO, "include"), os.path.join(HERE, "c", "diopi_add_ignores_alpha.c"),
                    "-o", str(out)], check=True)
    return str(out)


def test_a_wrong_add_is_named_alone_and_fallback_fixes_the_step(bad_library, tmp_path):
    code = BAD_STEP + """
    import pickle, sys
    cpu = step("cpu")
    ac = op_tools.OpAutoCompare()
    ac.start()
    broken = step("dipu")
    ac.stop()
    bad = sorted({r["name"].split(" ")[0] for r in ac.results if r["allclose"] is not True})
    fb = op_tools.OpFallback()
    import os
    os.environ["OP_FALLBACK_LIST"] = "torch.Tensor.add_"
    with fb:
        fixed = step("dipu")
    class HalfResidual(nn.Module):
        def forward(self, x):
            return torch.add(x, torch.tanh(x), alpha=0.5)

    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(12, 16), nn.ReLU(), HalfResidual(), nn.Linear(16, 5))
    layers = [op_tools.compare_layers(net, torch.randn(6, 12), fixed_input=f).rows for f in (False, True)]
    pickle.dump((cpu, broken, fixed, bad, layers), open("result.pkl", "wb"))
    """
    run = _run(code, env={"DIPU_DIOPI_LIBRARY": bad_library}, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    import pickle

    cpu, broken, fixed, bad, (chained, fixed_input) = pickle.load(open(tmp_path / "result.pkl", "rb"))
    # The layer comparison names the first module whose forward uses the wrong add...
    departed = [r["name"] for r in chained if not r["match"]]
    assert departed[0] == "2 (HalfResidual)", chained
    assert [r["name"] for r in chained[:2]] == ["0 (Linear)", "1 (ReLU)"] and chained[0]["match"]
    assert "3 (Linear)" in departed and "(loss)" in departed, "the error spreads without fixed_input"
    # ...and with each module fed the CPU's input, that module alone departs.
    assert [r["name"] for r in fixed_input if not r["match"]] == ["2 (HalfResidual)"], fixed_input
    assert bad == ["torch.Tensor.add_"], bad
    # The wrong add is real: the step departs from the CPU's without the fallback...
    assert any(not torch.allclose(a, b) for a, b in zip(broken, cpu))
    # ...and matches it with the fallback (one step: the forward, backward and update chain).
    for i, (a, b) in enumerate(zip(fixed, cpu)):
        assert_close(a, b, reduction_len=12 + 16 + 6 + 6, msg=f"parameter {i}")
    assert list((tmp_path / "op_tools_results" / "op_capture_results").glob(
        "torch.Tensor.add_/*/autocompare/*/*/device/input.pth")), "the mismatch's inputs are saved"
