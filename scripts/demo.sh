#!/usr/bin/env bash
# The main job on the embedded host vendor: build dipu, describe the
# vendor and its devices, run the conformance suite against it (built in
# and loaded as a plugin), then two ranks as processes all-reducing through
# the DICL process group (docs/distributed.md), the host vendor's DIOPI
# kernel library through `dipu diopi-test` (docs/diopi.md), and a few lines
# of PyTorch on device="dipu", its ops running on those kernels
# (docs/torch.md; installs .venv-torch on first use).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh >/dev/null
cargo build --release --locked -p dipu-cli -p dipu-vendor-host -p dipu-diopi-host -p dipu-ffi
cargo build --release --locked -p dipu-comm --example allreduce
./target/release/dipu info
./target/release/dipu selftest
./target/release/dipu selftest --vendor ./target/release/libdipu_vendor_host.so

echo
echo "two ranks, one process each, all-reduce 4 MiB on the host vendor:"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" WORLD_SIZE=2
RANK=0 ./target/release/examples/allreduce &
rank0=$!
RANK=1 ./target/release/examples/allreduce
wait "$rank0"

echo
echo "the host vendor's DIOPI kernel library against CPU references (dipu diopi-test):"
./target/release/dipu diopi-test | sed -n '$p'

echo
echo "PyTorch on dipu (pip install ./adapters/torch_dipu into .venv-torch):"
python=$(./scripts/torch-env.sh)
# The release runtime and kernels built above (DIPU_NO_BUILD=1: no cargo);
# --no-build-isolation builds against the torch installed (docs/torch.md).
DIPU_NO_BUILD=1 MAX_JOBS=${MAX_JOBS:-2} "$python" -m pip install -q --disable-pip-version-check --root-user-action=ignore \
  --no-build-isolation ./adapters/torch_dipu
"$python" - <<'PY'
import torch, torch_dipu
x = torch.ones(4, device="dipu") + 1
print("torch.ones(4, device='dipu') + 1 =", x.cpu().tolist(), "on", x.device)
model = torch.nn.Linear(8, 2).to("dipu")
loss = model(torch.randn(16, 8, device="dipu")).square().mean()
loss.backward()
print(f"a Linear's loss {loss.item():.4f}; {torch.dipu.memory_allocated()} bytes on",
      torch.dipu.get_device_name(), f"of {torch.dipu.device_count()}")
PY
# The same lines with DIPU_DUMP_OP_ARGS=1: each op names the DIOPI function
# it ran (or dipu_fallback).
echo "which kernels ran (DIPU_DUMP_OP_ARGS=1), counted:"
DIPU_DUMP_OP_ARGS=1 "$python" - 2>&1 <<'PY' | sed -n 's/^\[\(.*\)\]: \(.*\)$/\2/p' | sort | uniq -c | sort -rn | sed -n 1,12p
import torch, torch_dipu
model = torch.nn.Linear(8, 2).to("dipu")
loss = model(torch.randn(16, 8, device="dipu")).square().mean()
loss.backward()
torch.dipu.synchronize()
PY
