#!/usr/bin/env bash
# Runs scripts/torch_exit_workload.py (SGD steps on dipu, then exit) many
# times per case and counts the runs that did not exit cleanly, above all
# those that aborted with "terminate called without an active exception"
# (issue 39; adapters/torch_dipu/tests/test_exit.py forces the order that
# caused it, this counts how often it happens by itself). Every process
# runs on one CPU, where it showed most.
#
# Usage: scripts/torch-exit-stress.sh [runs per case] [case ...]
#   cases: plain (the host vendor), callback (a backward that queues a
#   Python callback), cuda-memcheck (the CUDA vendor on the fake NVIDIA
#   libraries, DIPU_MEM_CHECK=1), ddp (DistributedDataParallel over a
#   one-rank dicl group); default: 100 runs of each.
# Needs the torch adapter built (adapters/torch_dipu/build.sh) and, for
# cuda-memcheck, `cargo build --workspace` (the fake and the vendor
# plugin). TORCH_AUTOGRAD_SHUTDOWN_WAIT_LIMIT=0 turns torch_dipu's exit
# hook off: the figures without the fix. Exits non-zero if any run failed.
set -uo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
python=${DIPU_TORCH_PYTHON:-$repo/.venv-torch/bin/python}
runs=${1:-100}
shift || true
cases=("$@")
[ ${#cases[@]} -gt 0 ] || cases=(plain callback cuda-memcheck ddp)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The fake NVIDIA libraries under their real names, as scripts/test.sh
# lays them out.
mkdir -p "$work/cuda/lib64"
for name in libcudart.so.13 libcuda.so.1 libnccl.so.2; do
  ln -s "$repo/target/debug/libdipu_fake_cuda.so" "$work/cuda/lib64/$name"
done
# The deliberate abort of a run leaves no core file.
ulimit -c 0

failed_cases=0
for what in "${cases[@]}"; do
  env=(PYTHONPATH="$repo/adapters/torch_dipu" DIPU_HOST_DEVICES=2)
  args=(--one-cpu)
  case $what in
    plain) ;;
    callback) args+=(--queue-callback) ;;
    cuda-memcheck)
      env+=(DIPU_VENDOR=cuda DIPU_VENDOR_PATH="$repo/target/debug" DIPU_CUDA_HOME="$work/cuda"
            LD_LIBRARY_PATH="$work/cuda/lib64" DIPU_FAKE_DEVICES=2 DIPU_MEM_CHECK=1) ;;
    ddp) args+=(--ddp) ;;
    *) echo "unknown case: $what" >&2; exit 2 ;;
  esac
  failed=0 aborted=0
  for i in $(seq 1 "$runs"); do
    env "${env[@]}" "$python" "$repo/scripts/torch_exit_workload.py" "${args[@]}" \
      >"$work/out" 2>"$work/err"
    rc=$?
    if [ $rc -ne 0 ] || [ "$(cat "$work/out")" != ok ]; then
      failed=$((failed + 1))
      grep -q "terminate called" "$work/err" && aborted=$((aborted + 1))
      echo "$what run $i: exit status $rc: $(tail -c 400 "$work/err")"
    fi
  done
  echo "$what: $runs runs, $failed failed, $aborted aborted with \"terminate called\""
  [ $failed -eq 0 ] || failed_cases=$((failed_cases + 1))
done
[ $failed_cases -eq 0 ]
