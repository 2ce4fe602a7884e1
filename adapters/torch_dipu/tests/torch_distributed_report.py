"""Runs torch_distributed_suite.py (PyTorch's distributed_test on dicl, 2
ranks) in both of its modes and writes docs/torch-distributed-results.md:
every case with its outcome in each mode, torch's reason for a skip, and
ours for a failure (FAILURES below; a failure without an entry shows the
first line of its error, so nothing is hidden).

    DIPU_HOST_DEVICES=2 .venv-torch/bin/python adapters/torch_dipu/tests/torch_distributed_report.py

Options: --modes shipped,accel; --xml-dir DIR keeps pytest's JUnit files
there; --from-xml reuses them instead of running (to rewrite the page
only); --out PATH (default docs/torch-distributed-results.md).
"""

import argparse
import datetime
import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
SUITE = os.path.join(HERE, "torch_distributed_suite.py")

# Why a case fails on dicl, by test name (a regular expression matched
# against the whole name). Kept in step with docs/torch.md.
FAILURES = {
    r"test_.*sync_batch_norm.*|test_DistributedDataParallel_SyncBatchNorm.*": (
        "SyncBatchNorm calls `batch_norm_stats`/`batch_norm_gather_stats_with_counts`, "
        "which have CUDA kernels only: torch_dipu's CPU fallback has no CPU kernel to "
        "fall back to"
    ),
    r"test_ddp_logging_data_cpu": (
        "DDP's logger reports the backend of a backend registered from outside "
        "torch as \"custom\" (ProcessGroup::getBackendName), the case expects "
        "dist.get_backend() (\"dicl\"); a torch limitation for every plugin backend"
    ),
    (r"test_ddp_apply_optim_in_backward.*|test_ddp_native_mixed_precision.*"
     r"|test_get_data_parallel_params"): (
        "the case calls torch.cuda directly (torch.cuda.set_device, .cuda()) and is "
        "gated on the accelerator count only: it needs CUDA whatever the backend "
        "(forked: \"Cannot re-initialize CUDA in forked subprocess\"; spawned: no CUDA)"
    ),
    r"test_barrier_cuda|test_periodic_model_averager_param_group": (
        "the case puts its tensors on torch.cuda devices (\"Invalid device, must be "
        "cuda device\"), gated on the accelerator count only: it needs CUDA whatever "
        "the backend"
    ),
    r"test_.*compile.*|test_ddp_.*dynamo.*": (
        "torch.compile is not supported on dipu (docs/torch.md, Not supported yet)"
    ),
    r"test_.*sync_bn.*|test_.*SyncBatchNorm.*|test_.*sync_batch_norm.*": (
        "SyncBatchNorm needs batch_norm_stats / batch_norm_gather_stats_with_counts, "
        "which have CUDA kernels only: torch_dipu's CPU fallback has none to fall back to"
    ),
}


# Why a case fails, by its error (checked before FAILURES: these come first).
MESSAGES = {
    "Cannot re-initialize CUDA in forked subprocess": (
        "the case calls torch.cuda itself (torch.cuda.set_device, .cuda(), ...) and is "
        "gated on the accelerator count only, so it needs CUDA whatever the backend "
        "(spawned, it fails for want of CUDA instead)"
    ),
    "Invalid device, must be cuda device": (
        "the case puts its tensors on torch.cuda devices, gated on the accelerator "
        "count only: it needs CUDA whatever the backend"
    ),
    "nccl2 requires at least one CUDA device": (
        "the case makes an nccl group itself (new_group(backend=nccl))"
    ),
}


def run_mode(mode, xml):
    env = dict(os.environ)
    env.setdefault("DIPU_HOST_DEVICES", "2")
    env["DICL_SUITE_MODE"] = mode
    env["PYTHONPATH"] = os.path.join(REPO, "adapters", "torch_dipu") + os.pathsep + env.get(
        "PYTHONPATH", ""
    )
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
           f"--junitxml={xml}", SUITE]
    start = time.monotonic()
    proc = subprocess.run(cmd, env=env, cwd=REPO)
    took = time.monotonic() - start
    if proc.returncode not in (0, 1):  # 1: some cases failed, which the page reports
        raise SystemExit(f"{mode}: pytest exited with {proc.returncode}")
    return took


def first_line(text):
    for line in (text or "").splitlines():
        line = line.strip()
        if line:
            return line[:300]
    return ""


def parse(xml):
    """{case name: (outcome, reason)} from a JUnit file."""
    cases = {}
    for tc in ET.parse(xml).getroot().iter("testcase"):
        name = tc.get("name")
        failed = tc.find("failure")
        if failed is None:
            failed = tc.find("error")
        skipped = tc.find("skipped")
        if failed is not None:
            reason = failure_reason(name, (failed.get("message") or "") + (failed.text or ""))
            cases[name] = ("fail", reason)
        elif skipped is not None:
            msg = skipped.get("message") or skipped.text or ""
            cases[name] = ("skip", first_line(msg))
        else:
            cases[name] = ("pass", "")
    return cases


def failure_reason(name, message):
    for text, why in MESSAGES.items():
        if text in (message or ""):
            return why
    for pattern, why in FAILURES.items():
        if re.fullmatch(pattern, name):
            return why
    return "error: " + first_line(message).replace("|", "\\|")


def counts(cases):
    out = {"pass": 0, "skip": 0, "fail": 0}
    for outcome, _ in cases.values():
        out[outcome] += 1
    return out


def write(out, results, took):
    modes = list(results)
    names = sorted(set().union(*[set(c) for c in results.values()]))
    lines = [
        "# PyTorch's distributed tests on dicl",
        "",
        "`torch.testing._internal.distributed.distributed_test` (shipped in the torch "
        "wheel) on torch_dipu's `dicl` backend, `WORLD_SIZE=2`, `DIPU_HOST_DEVICES=2` "
        "(the host vendor), ranks forked per case. Written by "
        "`adapters/torch_dipu/tests/torch_distributed_report.py` on "
        f"{datetime.date.today().isoformat()}; see docs/torch.md for the modes and the "
        "failures.",
        "",
        "```sh",
        "adapters/torch_dipu/build.sh",
        "DIPU_HOST_DEVICES=2 .venv-torch/bin/python adapters/torch_dipu/tests/torch_distributed_report.py",
        "```",
        "",
        "| mode | cases | pass | skip | fail | time (loaded 2-core machine) |",
        "|---|---|---|---|---|---|",
    ]
    for mode in modes:
        c = counts(results[mode])
        t = f"{took[mode]:.0f} s" if took.get(mode) is not None else "-"
        lines.append(f"| {mode} | {len(results[mode])} | {c['pass']} | {c['skip']} | "
                     f"{c['fail']} | {t} |")
    lines += [
        "",
        "- **shipped**: the suite as torch ships it; cases that name their backends "
        "(nccl, gloo, ...) skip for any other.",
        "- **accel**: dicl also entered in the suite's \"gpu\", \"ddp\", \"subgroup\" and "
        "\"plugin\" feature sets and its lists of backends whose profiler events it checks, "
        "so the cases written for an accelerator run on dipu devices. Most of its failures "
        "are cases that call torch.cuda themselves.",
        "",
        "| case | " + " | ".join(modes) + " | reason |",
        "|---|" + "---|" * len(modes) + "---|",
    ]
    for name in names:
        outcomes, reasons = [], []
        for mode in modes:
            outcome, reason = results[mode].get(name, ("-", ""))
            outcomes.append(outcome)
            if reason and reason not in reasons:
                reasons.append(f"{mode}: {reason}" if len(modes) > 1 else reason)
        lines.append(f"| `{name}` | " + " | ".join(outcomes) + " | "
                     + "; ".join(reasons).replace("\n", " ") + " |")
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modes", default="shipped,accel")
    ap.add_argument("--xml-dir", default="/tmp/torch-distributed-report")
    ap.add_argument("--from-xml", action="store_true")
    ap.add_argument("--took", default="", help="with --from-xml: mode=seconds,... of that run")
    ap.add_argument("--out", default=os.path.join(REPO, "docs", "torch-distributed-results.md"))
    args = ap.parse_args()
    os.makedirs(args.xml_dir, exist_ok=True)
    results, took = {}, {}
    for mode in args.modes.split(","):
        xml = os.path.join(args.xml_dir, f"{mode}.xml")
        took[mode] = None if args.from_xml else run_mode(mode, xml)
        if args.from_xml and args.took:
            took[mode] = dict(kv.split("=") for kv in args.took.split(",")).get(mode)
            took[mode] = float(took[mode]) if took[mode] else None
        results[mode] = parse(xml)
        c = counts(results[mode])
        print(f"{mode}: {len(results[mode])} cases, {c['pass']} pass, {c['skip']} skip, "
              f"{c['fail']} fail" + (f", {took[mode]:.0f} s" if took[mode] else ""))
    write(args.out, results, took)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
