#!/usr/bin/env bash
# The whole test suite: format, lints, unit/integration/doc tests (which
# also build and load the C vendor and compile the C headers), and the CLI
# end to end. This is what CI runs (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."

# Each step's heading shows the time since the start (m:ss), so a slow CI
# run tells where its minutes went, and the CPU seconds of the processes
# finished so far, which tell the steps that keep both cores busy from
# those that mostly wait (`times` runs in this shell: in a
# subshell it would count nothing).
cpu_log="$(mktemp)"
step() {
  times >"$cpu_log"
  local cpu
  cpu=$(awk 'NR == 2 { t = 0; for (i = 1; i <= 2; i++) { split($i, p, /[ms]/); t += p[1] * 60 + p[2] } printf "%d", t }' "$cpu_log")
  printf '\n==> [%d:%02d, cpu %ss] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$cpu" "$*"
}

# What the suite runs on, first, so that a failure can be traced to a
# machine: kernels pick their inner loops by the processor's vector
# extensions, and a long suite can go round the process ids.
machine() {
  local flags ext=()
  flags=$(grep -m1 '^flags' /proc/cpuinfo || true)
  for f in sse4_2 avx avx2 fma avx512f avx512bw avx512_bf16 amx_tile; do
    grep -qw "$f" <<<"$flags" && ext+=("$f")
  done
  echo "processor: $(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//') ($(uname -m))"
  echo "vector extensions: ${ext[*]:-none of sse4_2 avx avx2 fma avx512f avx512bw avx512_bf16 amx_tile}"
  echo "cores: $(nproc); memory: $(awk '/^MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo); kernel.pid_max: $(cat /proc/sys/kernel/pid_max)"
  echo "rustc: $(rustc --version 2>/dev/null || echo 'not installed yet (scripts/setup.sh installs it)')"
  echo "python: $(python3 --version 2>&1); PYTHONDONTWRITEBYTECODE: ${PYTHONDONTWRITEBYTECODE:-unset} (the venvs carry compiled bytecode either way)"
  echo "torch: $(sed -n 's/^torch=torch==//p' scripts/torch-env.sh) (scripts/torch-env.sh; in .venv-torch: $(.venv-torch/bin/python -c 'import importlib.metadata as m; print(m.version("torch"))' 2>/dev/null || echo 'not yet'))"
  echo "paddle: $(sed -n 's/^paddle=paddlepaddle==//p' scripts/paddle-env.sh) (scripts/paddle-env.sh; in .venv-paddle: $(.venv-paddle/bin/python -c 'import importlib.metadata as m; print(m.version("paddlepaddle"))' 2>/dev/null || echo 'not yet'))"
}
# Every build here starts from a clean clone in CI: incremental compilation
# only adds its caches' cost there (a developer's own setting is kept).
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}

step "the machine"
machine

step "the toolchain (scripts/setup.sh --build)"
./scripts/setup.sh --build

step "background jobs keep their exit status whatever happens to process ids (scripts/jobs-test.sh)"
./scripts/jobs-test.sh 2>/dev/null
# shellcheck source=scripts/jobs.sh
. scripts/jobs.sh
JOBS_DIR="$(mktemp -d)"
pylogs="$JOBS_DIR"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$JOBS_DIR" "$cpu_log"' EXIT

step "in the background: the system tools the tests use (scripts/setup.sh --tests: cmake, valgrind, pkg-config, chromium, PoCL and the OpenCL loader and headers)"
job_start system-tools ./scripts/setup.sh --tests

# The Python environments download ~2.8 GB: they install in the background
# while Rust compiles, and the tests wait for them.
step "in the background: NVIDIA wheels for the CUDA vendor's tests (.venv) and PyTorch for the TCPStore interop tests (.venv-torch)"
job_start cuda-env ./scripts/cuda-env.sh
job_start torch-env ./scripts/torch-env.sh

step "in the background: the CANN headers of two torch-npu wheels, for the Ascend binding check (.cann-headers)"
job_start cann-headers ./scripts/cann-headers.sh

step "in the background: PaddlePaddle 3.3.1 for the Paddle plugin's tests (.venv-paddle)"
job_start paddle-env env PADDLE_ENV_NO_PLUGIN=1 ./scripts/paddle-env.sh

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy (all targets, warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "cargo build (the vendor plugins' .so files included)"
cargo build --workspace --locked

step "waiting for the Python environments"
job_finish cuda-env
job_finish torch-env
job_finish cann-headers
job_finish paddle-env
echo "installed: torch $(.venv-torch/bin/python -c 'import importlib.metadata as m; print(m.version("torch"))'), paddlepaddle $(.venv-paddle/bin/python -c 'import importlib.metadata as m; print(m.version("paddlepaddle"))')"
# The CNRT prototypes for the Cambricon check come from a PyPI download
# (through .venv, ready now): fetched while the Rust tests run.
job_start cambricon-prototypes ./scripts/cambricon-prototypes.sh

# The PyTorch adapter's C++ extension compiles (ninja, 2 jobs) while the
# Rust tests run: it needs only the runtime and kernel library built above
# and .venv-torch, and the tests leave cores idle while they wait.
step "in the background: the PyTorch adapter's C++ extension (adapters/torch_dipu/build.sh)"
job_start torch-build sh -c 'DIPU_NO_BUILD=1 ./adapters/torch_dipu/build.sh 2>&1 >"$0"' "$JOBS_DIR/torch-build.out"

step "cargo test --no-run: every test binary (unit, integration, doc tests build when they run)"
# The binaries' list, a line each: the package's folder and the executable.
# The steps below run them again under other settings through these, not
# through `cargo test -p`, which resolves features for one package alone and
# so rebuilds it and its dependencies.
cargo test --workspace --locked --no-run --message-format=json | python3 -c '
import json, os, sys
root = os.getcwd()
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(os.path.relpath(os.path.dirname(m["manifest_path"]), root), m["executable"])
' >"$pylogs/test-bins"

# From here on the Python suites run in two lanes beside the Rust tests:
# both mostly wait on processes, ranks and streams, so together they keep
# the two cores busy. Each lane's log, with its own step times, shows when
# it is finished with.
step "in the background: lane 1, torch_dipu (its pytest suite, then torch.distributed's dicl backend and 26 of PyTorch's own distributed tests); lane 2, the pip wheel check, then the Paddle plugin's suite"
# The dev-profile libdipu_runtime.so of the cargo build above; ninja and
# MAX_JOBS=2 compiled the C++ extension (about 25 translation units, behind
# one precompiled header) while the test binaries built.
job_finish torch-build
torch_python=$(cat "$pylogs/torch-build.out")
# A heading inside a lane, with the time since the suite started.
lane_step() {
  printf '\n--> [%d:%02d] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*"
}
torch_lane() {
  lane_step "torch_dipu: pytest suite"
  # pytest exits 0 when every test passed, 1 when some failed, 2-5 for an
  # interrupted run, a usage error or no tests collected: all but 0 fail CI.
  (cd adapters/torch_dipu && "$torch_python" -m pytest -q -p no:cacheprovider tests --ignore=tests/test_distributed.py)

  # ATen's CPU kernels on other instruction sets (its inner loops, so the
  # CPU's last bits, follow ATEN_CPU_CAPABILITY): the files that compare
  # with the CPU most, within docs/tolerance.md's bounds. `default` is the
  # scalar build; on a processor with AVX-512, AVX2 runs too.
  local caps=(default)
  grep -qw avx512f /proc/cpuinfo && caps+=(avx2)
  local cap
  for cap in "${caps[@]}"; do
    lane_step "torch_dipu: CPU comparisons with ATEN_CPU_CAPABILITY=$cap"
    (cd adapters/torch_dipu && ATEN_CPU_CAPABILITY=$cap "$torch_python" -m pytest -q -p no:cacheprovider \
      tests/test_tolerance.py tests/test_training.py \
      "tests/test_device_generic.py::TestDipuModulesDIPU::test_forward_and_backward_match_cpu_nn_MultiheadAttention_eval_mode_dipu_float32" \
      "tests/test_device_generic.py::TestDipuOpsPRIVATEUSE1::test_backward_matches_cpu_nn_functional_layer_norm_dipu_float32" \
      "tests/test_device_generic.py::TestDipuOpsPRIVATEUSE1::test_forward_matches_cpu_matmul_dipu_float32")
  done

  lane_step "torch_dipu: torch.distributed's dicl backend on 2 ranks (pytest)"
  # Every collective over file:// (env:// and tcp:// too), a HashStore, DDP
  # and FSDP2 under torchrun against one CPU process, and the faults.
  DIPU_HOST_DEVICES=2 PYTHONPATH=adapters/torch_dipu "$torch_python" -m pytest -q -p no:cacheprovider \
    adapters/torch_dipu/tests/test_distributed.py

  lane_step "torch_dipu: 26 of PyTorch's own distributed tests on dicl, accel mode (forked ranks, most of the time importing torch)"
  # A fixed selection that passes: collectives, profiler events, send/recv
  # from any source, coalesced all-gather, subgroups and DDP on dipu
  # devices. docs/torch-distributed-results.md has the whole file (285).
  local suite=adapters/torch_dipu/tests/torch_distributed_suite.py
  local cases=(
    test_all_reduce_sum
    test_all_reduce_sum_async
    test_all_reduce_product
    test_all_reduce_sum_complex
    test_all_reduce_complex_unsupported_ops
    test_broadcast
    test_reduce_sum
    test_all_gather
    test_all_gather_coalesced_simple
    test_all_gather_coalesced_with_empty
    test_all_gather_object_default_pg
    test_gather
    test_scatter
    test_barrier
    test_send_recv
    test_send_recv_with_tag
    test_isend
    test_irecv
    test_send_recv_any_source
    test_send_recv_any_source_torch_profiler
    test_send_recv_autograd_profiler
    test_new_subgroups_group_size_exceeds_world_size
    test_DistributedDataParallelCPU
    test_ddp_device
    test_ddp_zero_output_features
    test_stateless_api_with_ddp
  )
  DIPU_HOST_DEVICES=2 DICL_SUITE_MODE=accel PYTHONPATH=adapters/torch_dipu "$torch_python" -m pytest -q \
    -p no:cacheprovider "${cases[@]/#/$suite::TestDiclWithFork::}"
}
wheel_and_paddle() {
  lane_step "torch_dipu: the pip wheel in a fresh virtual environment, outside the repository, without PYTHONPATH (scripts/torch-wheel-check.sh)"
  ./scripts/torch-wheel-check.sh
  lane_step "paddle_dipu: the PaddlePaddle plugin (adapters/paddle_dipu/build.sh) and its pytest suite, the three fakes and two launched ranks included"
  # From the repository root: inside adapters/paddle_dipu the source
  # package would shadow the installed one.
  paddle_python=$(DIPU_NO_BUILD=1 ./adapters/paddle_dipu/build.sh)
  "$paddle_python" -m pytest -q -p no:cacheprovider adapters/paddle_dipu/tests
  # oneDNN's and MKL's kernels one instruction set below the processor's
  # (AVX2 under AVX-512, else SSE4.1): the training comparisons still hold.
  local isa=SSE41 mkl=SSE4_2
  grep -qw avx512f /proc/cpuinfo && isa=AVX2 mkl=AVX2
  lane_step "paddle_dipu: training against the CPU with ONEDNN_MAX_CPU_ISA=$isa MKL_ENABLE_INSTRUCTIONS=$mkl"
  ONEDNN_MAX_CPU_ISA=$isa MKL_ENABLE_INSTRUCTIONS=$mkl "$paddle_python" -m pytest -q -p no:cacheprovider \
    adapters/paddle_dipu/tests/test_train.py
}
job_start torch-lane torch_lane
job_start wheel-and-paddle wheel_and_paddle

# The loom models build in their own target dir (no lock shared with the
# steps below).
step "in the background: the loom models (separate target dir, preemption bound 2)"
job_start loom env RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 \
  cargo test --profile loom --locked --target-dir target/loom -p dipu-stream -p dipu-generator -p dipu-allocator -p dipu-comm --lib loom

step "cargo test (unit, integration, C vendor and header, doc tests)"
cargo test --workspace --locked

# The test executables of the package in folder $1 (all, or the one named $2).
test_bins() {
  local bins
  bins=$(awk -v dir="$1" -v name="${2:-}" '$1 == dir && (name == "" || index($2, "/" name "-")) { print $2 }' "$pylogs/test-bins")
  [ -n "$bins" ] || { echo "no test binary ${2:-} in $1" >&2; return 1; }
  echo "$bins"
}
# Each assigned on its own line, so a missing binary stops the run.
runtime_bins=$(test_bins runtime)
group_collectives_bin=$(test_bins comm group_collectives)
group_faults_bin=$(test_bins comm group_faults)
group_processes_bin=$(test_bins comm group_processes)
guard_bins=$(test_bins runtime memcheck_guards)
poison_bins=$(test_bins runtime memcheck_poison)
cambricon_lib_bin=$(test_bins vendors/cambricon dipu_vendor_cambricon)
# Runs "$@" (a test binary, maybe behind env) in the package folder $1,
# where cargo runs its tests, and shows its result line; fails as it fails.
in_package() {
  local dir=$1
  shift
  (cd "$dir" && "$@" 2>&1 | grep "test result")
}

step "the runtime's whole suite under the memory checker (guard bytes and poisoned frees on every allocation)"
for bin in $(grep -v /memcheck_replay- <<<"$runtime_bins"); do
  in_package runtime env DIPU_MEM_CHECK=1 DIPU_MEM_CHECK_GUARD_BYTES=64 DIPU_MEM_CHECK_POISON=1 "$bin" -q
done

step "C API: scripts/install.sh into a scratch prefix, build and run the example with pkg-config"
tmp="$(mktemp -d)"
DIPU_BUILD_PROFILE=dev DIPU_NO_BUILD=1 ./scripts/install.sh "$tmp"
cc -std=c11 -Wall -Wextra -Werror ffi/tests/c/example.c \
  $(PKG_CONFIG_PATH="$tmp/lib/pkgconfig" pkg-config --cflags --libs dipu_runtime) \
  -Wl,-rpath,"$tmp/lib" -o "$tmp/example"
"$tmp/example"
rm -rf "$tmp"


step "dipu selftest: built-in host vendor, then the host vendor as a plugin"
./target/debug/dipu selftest
./target/debug/dipu selftest --vendor ./target/debug/libdipu_vendor_host.so

step "the process group on a vendor without collectives (the host vendor's hidden, DIPU_HOST_COLLECTIVES=0): dipu selftest finds them absent; the host-staged collectives, faults and process ranks over shared memory, then over TCP"
DIPU_HOST_COLLECTIVES=0 ./target/debug/dipu selftest >"$pylogs/staged-selftest"
tail -n 1 "$pylogs/staged-selftest"
grep -q "collectives: not reported: every collective method returns Unsupported" "$pylogs/staged-selftest"
for transport in shm tcp; do
  for bin in "$group_collectives_bin" "$group_faults_bin" "$group_processes_bin"; do
    in_package comm env DIPU_HOST_COLLECTIVES=0 DIPU_COMM_STAGED_TRANSPORT="$transport" "$bin" -q
  done
done

step "dipu diopi-test: the host vendor's DIOPI kernel library against CPU references (every operator, strided, aliased, another stream, a busy stream)"
./target/debug/dipu diopi-test | tail -n 1
# The same kernels on one rayon thread (their sums split differently):
# within docs/tolerance.md's bounds too.
echo "on 1 thread: $(RAYON_NUM_THREADS=1 ./target/debug/dipu diopi-test | tail -n 1)"
in_package vendors/host/diopi env RAYON_NUM_THREADS=1 "$(test_bins vendors/host/diopi diopi_impl_host)" -q

step "dipu selftest: the CUDA vendor on the .venv wheels (without a GPU: the device-free check)"
DIPU_CUDA_HOME="$PWD/.venv" ./target/debug/dipu selftest --vendor cuda | tail -n 1

# ---- CUDA vendor on the fake NVIDIA libraries (vendors/cuda/fake) ----------
# libdipu_fake_cuda.so laid out as libcudart.so.13, libcuda.so.1 and
# libnccl.so.2 in a test-only folder; the vendor finds it through its normal
# search (DIPU_CUDA_HOME, and LD_LIBRARY_PATH for the driver), never knowing
# it is a fake. The same tests run unchanged on a GPU machine (docs/cuda.md).
step "CUDA vendor on the fake libraries: dipu selftest (every check runs and passes, also on the older-libraries build), the GPU tests, the process group on 2 and 4 ranks, the C ABI"
fake="$PWD/target/debug/fake-cuda"
mkdir -p "$fake/lib64"
for name in libcudart.so.13 libcuda.so.1 libnccl.so.2; do
  ln -sfn "$PWD/target/debug/libdipu_fake_cuda.so" "$fake/lib64/$name"
done
on_fakes() { DIPU_CUDA_HOME="$fake" LD_LIBRARY_PATH="$fake/lib64" "$@"; }
summary="$(on_fakes ./target/debug/dipu selftest --vendor cuda | tail -n 1)"
echo "$summary"
case "$summary" in *" 0 failed, 0 skipped "*) ;; *) echo "selftest on the fakes: not every check ran and passed" >&2; exit 1 ;; esac
# The same on older libraries (vendors/cuda/fake-old: no driver virtual
# memory, no peer access, no ncclCommInitRankConfig): every check still runs
# and passes, virtual memory by answering Unsupported.
old_fake="$PWD/target/debug/fake-cuda-old"
mkdir -p "$old_fake/lib64"
for name in libcudart.so.13 libcuda.so.1 libnccl.so.2; do
  ln -sfn "$PWD/target/debug/libdipu_fake_cuda_old.so" "$old_fake/lib64/$name"
done
summary="$(DIPU_CUDA_HOME="$old_fake" LD_LIBRARY_PATH="$old_fake/lib64" ./target/debug/dipu selftest --vendor cuda | tail -n 1)"
echo "older libraries: $summary"
case "$summary" in *" 0 failed, 0 skipped "*) ;; *) echo "selftest on the older fakes: not every check ran and passed" >&2; exit 1 ;; esac
on_fakes cargo test --workspace --locked --test gpu -- --ignored --test-threads=1
# I16 included: NCCL has no 16-bit integer type, so the process group
# widens it to I32 on the communication stream and narrows the result back.
on_fakes env DIPU_VENDOR="$PWD/target/debug/libdipu_vendor_cuda.so" DIPU_FAKE_DEVICES=4 \
  cargo test --workspace --locked --test group_collectives
# The memory checker's guard bytes and poisoned frees on the CUDA vendor
# (DIPU_TEST_EXPECT_VENDOR fails the tests if another vendor loaded).
for bin in $guard_bins $poison_bins; do
  in_package runtime env DIPU_CUDA_HOME="$fake" LD_LIBRARY_PATH="$fake/lib64" \
    DIPU_VENDOR="$PWD/target/debug/libdipu_vendor_cuda.so" DIPU_TEST_EXPECT_VENDOR=cuda "$bin" -q
done
# The C ABI on CUDA: the C test programs of one process (allreduce.c needs
# two processes, which the fake NCCL, ranks as threads, does not join).
ctmp="$(mktemp -d)"
DIPU_BUILD_PROFILE=dev DIPU_NO_BUILD=1 ./scripts/install.sh "$ctmp" >/dev/null
for prog in example roundtrip threads; do
  cc -std=c11 -Wall -Wextra -Werror -pthread -Iffi/tests/c "ffi/tests/c/$prog.c" \
    $(PKG_CONFIG_PATH="$ctmp/lib/pkgconfig" pkg-config --cflags --libs dipu_runtime) \
    -Wl,-rpath,"$ctmp/lib" -o "$ctmp/$prog"
  on_fakes env DIPU_VENDOR="$PWD/target/debug/libdipu_vendor_cuda.so" "$ctmp/$prog" | tail -n 1
done
rm -rf "$ctmp"

step "Cambricon vendor on fake libcnrt, libcncl and libcndrv: dipu selftest, the C ABI with DIPU_VENDOR=cambricon, the not-found error without Neuware, the CNRT signatures against the 161 prototypes of PyPI's bangc-mcp-server 0.3.7 (its Rust tests, collectives on 2 and 4 ranks and every allocator algorithm included, ran under cargo test)"
neuware="$PWD/target/fake-neuware"
mkdir -p "$neuware/lib64"
for lib in cnrt cncl cndrv; do
  ln -sf "$PWD/target/debug/libdipu_fake_cambricon.so" "$neuware/lib64/lib$lib.so"
done
NEUWARE_HOME="$neuware" ./target/debug/dipu selftest --vendor cambricon | tail -n 1
# Every type and operator of the process group on 4 ranks, fp64 included
# (CNCL has none: the group gathers it and reduces on the host).
NEUWARE_HOME="$neuware" DIPU_VENDOR=cambricon DIPU_VENDOR_PATH="$PWD/target/debug" DIPU_FAKE_DEVICES=4 \
  cargo test --workspace --locked -q --test group_collectives 2>&1 | grep "test result"
for bin in $guard_bins $poison_bins; do
  in_package runtime env NEUWARE_HOME="$neuware" DIPU_VENDOR=cambricon DIPU_VENDOR_PATH="$PWD/target/debug" \
    DIPU_TEST_EXPECT_VENDOR=cambricon "$bin" -q
done
tmp="$(mktemp -d)"
DIPU_BUILD_PROFILE=dev DIPU_NO_BUILD=1 ./scripts/install.sh "$tmp" >/dev/null
for prog in example threads; do
  cc -std=c11 -Wall -Wextra -Werror -pthread -I ffi/tests/c "ffi/tests/c/$prog.c" \
    $(PKG_CONFIG_PATH="$tmp/lib/pkgconfig" pkg-config --cflags --libs dipu_runtime) \
    -Wl,-rpath,"$tmp/lib" -o "$tmp/$prog"
  NEUWARE_HOME="$neuware" DIPU_VENDOR=cambricon DIPU_VENDOR_PATH="$PWD/target/debug" "$tmp/$prog" >/dev/null
done
if NEUWARE_HOME="$tmp/no-neuware" ./target/debug/dipu info --vendor cambricon 2>"$tmp/err"; then
  echo "the Cambricon vendor started without Neuware" >&2
  exit 1
fi
grep -q "libcnrt.so not found; looked in: $tmp/no-neuware/lib64 (NEUWARE_HOME)" "$tmp/err" || { cat "$tmp/err" >&2; exit 1; }
rm -rf "$tmp"
job_finish cambricon-prototypes
in_package vendors/cambricon "$cambricon_lib_bin" published --ignored
step "Ascend on the fake CANN (dipu-fake-ascend, new and old-CANN builds): selftest, every allocator algorithm and expandable segments, the process group on 2 and 4 ranks, the C API; then no CANN at all"
cann="$(mktemp -d)"
DIPU_BUILD_PROFILE=dev DIPU_NO_BUILD=1 ./scripts/install.sh "$cann/prefix" >/dev/null
for program in example roundtrip threads leaks; do
  cc -std=c11 -Wall -Wextra -Werror -pthread -I ffi/tests/c "ffi/tests/c/$program.c" \
    $(PKG_CONFIG_PATH="$cann/prefix/lib/pkgconfig" pkg-config --cflags --libs dipu_runtime) \
    -Wl,-rpath,"$cann/prefix/lib" -o "$cann/$program"
done
for build in new old; do
  fake=libdipu_fake_ascend.so
  [ "$build" = old ] && fake=libdipu_fake_ascend_old.so
  mkdir -p "$cann/$build/lib64"
  ln -s "$PWD/target/debug/$fake" "$cann/$build/lib64/libascendcl.so"
  ln -s "$PWD/target/debug/$fake" "$cann/$build/lib64/libhccl.so"
  echo "-- $build: selftest, replay (every algorithm), process group, C API"
  ASCEND_HOME_PATH="$cann/$build" ./target/debug/dipu selftest --vendor ascend | tail -n 1
  ASCEND_HOME_PATH="$cann/$build" DIPU_FAKE_MEMORY=2147483648 \
    ./target/debug/dipu replay --all --streams 2 --vendor ascend allocator/traces/resnet18.trace | sed -n '/^algorithm/,/^$/p'
  DIPU_VENDOR=ascend DIPU_VENDOR_PATH="$PWD/target/debug" ASCEND_HOME_PATH="$cann/$build" DIPU_FAKE_DEVICES=4 \
    cargo test --workspace --locked -q --test group_collectives 2>&1 | grep "test result"
  for bin in $guard_bins $poison_bins; do
    in_package runtime env DIPU_VENDOR=ascend DIPU_VENDOR_PATH="$PWD/target/debug" ASCEND_HOME_PATH="$cann/$build" \
      DIPU_TEST_EXPECT_VENDOR=ascend "$bin" -q
  done
  for program in example roundtrip threads leaks; do
    DIPU_VENDOR=ascend DIPU_VENDOR_PATH="$PWD/target/debug" ASCEND_HOME_PATH="$cann/$build" "$cann/$program" >/dev/null
  done
  echo "C API (example, roundtrip, threads, leaks) on DIPU_VENDOR=ascend: ok"
done
echo "-- no CANN: dipu info --vendor ascend must fail, naming every place searched"
if nocann=$(env -u ASCEND_HOME_PATH -u ASCEND_TOOLKIT_HOME -u LD_LIBRARY_PATH ./target/debug/dipu info --vendor ascend 2>&1); then
  echo "dipu info --vendor ascend succeeded without CANN" >&2
  exit 1
fi
echo "$nocann"
grep -q "libascendcl.so not found; looked in: " <<<"$nocann"
rm -rf "$cann"

step "OpenCL vendor on PoCL (two pthread devices, 2 worker threads, kernel cache in target/): dipu selftest with fine- and coarse-grained SVM, every allocator algorithm on 2 streams, the memory checker's guards read back through vendor copies, the runtime trace and the C API; then no OpenCL platform at all"
# PoCL 3.1's names; `pthread pthread` gives two devices on one platform.
pocl=(POCL_DEVICES="pthread pthread" POCL_MAX_PTHREAD_COUNT=2 POCL_CACHE_DIR="$PWD/target/pocl-cache")
on_opencl=(env "${pocl[@]}" DIPU_VENDOR=opencl DIPU_VENDOR_PATH="$PWD/target/debug")
for svm in auto coarse; do
  summary="$(env "${pocl[@]}" DIPU_OPENCL_SVM=$svm ./target/debug/dipu selftest --vendor opencl | tail -n 1)"
  echo "DIPU_OPENCL_SVM=$svm: $summary"
  case "$summary" in *" 0 failed, 0 skipped "*) ;; *) echo "selftest on PoCL: not every check ran and passed" >&2; exit 1 ;; esac
done
env "${pocl[@]}" ./target/debug/dipu replay --all --streams 2 --vendor opencl allocator/traces/resnet18.trace | sed -n '/^algorithm/,/^$/p'
# Coarse-grained SVM is not host-accessible: the guards are read back
# through the vendor's copies, as on a discrete GPU. The two binaries mostly
# wait on streams: they run side by side.
n=0
for bin in $guard_bins $poison_bins; do
  n=$((n + 1))
  job_start "opencl-memcheck-$n" in_package runtime "${on_opencl[@]}" DIPU_OPENCL_SVM=coarse DIPU_TEST_EXPECT_VENDOR=opencl "$bin" -q
done
for i in $(seq "$n"); do job_finish "opencl-memcheck-$i"; done
ocl="$(mktemp -d)"
DIPU_BUILD_PROFILE=dev DIPU_NO_BUILD=1 ./scripts/install.sh "$ocl/prefix" >/dev/null
for program in example threads leaks profiler; do
  cc -std=c11 -Wall -Wextra -Werror -pthread -I ffi/tests/c "ffi/tests/c/$program.c" \
    $(PKG_CONFIG_PATH="$ocl/prefix/lib/pkgconfig" pkg-config --cflags --libs dipu_runtime) \
    -Wl,-rpath,"$ocl/prefix/lib" -o "$ocl/$program"
done
for program in example threads leaks; do
  "${on_opencl[@]}" "$ocl/$program" >/dev/null
done
"${on_opencl[@]}" "$ocl/profiler" "$ocl/trace.json" >/dev/null
# The trace has the copy and the event's record and wait at device time
# (measured with the vendor's profiling events) and the flow between them.
python3 - "$ocl/trace.json" <<'EOF'
import json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
device = {e["name"] for e in events if e.get("ph") == "X" and e.get("pid", 0) >= 1 << 24}
flows = [e for e in events if e.get("ph") in ("s", "f")]
assert {"memcpy_async", "event_record", "stream_wait_event"} <= device, device
assert len(flows) >= 2, flows
EOF
echo "C API (example, threads, leaks) and the runtime trace (profiler) on DIPU_VENDOR=opencl: ok"
mkdir "$ocl/no-icd"
if noplatform=$(OCL_ICD_VENDORS="$ocl/no-icd" ./target/debug/dipu info --vendor opencl 2>&1); then
  echo "dipu info --vendor opencl succeeded without an OpenCL platform" >&2
  exit 1
fi
grep -q "found no platform (CL_PLATFORM_NOT_FOUND_KHR (-1001))" <<<"$noplatform" || { echo "$noplatform" >&2; exit 1; }
rm -rf "$ocl"

step "the loom models (started in the background after the test binaries built)"
job_finish loom

step "lane 1: torch_dipu (its pytest suite, torch.distributed's dicl backend, 26 of PyTorch's own distributed tests)"
job_finish torch-lane

step "lane 2: the pip wheel check and paddle_dipu's suite"
job_finish wheel-and-paddle

step "all checks passed"
