#!/usr/bin/env bash
# TCPStore servers under the same load (`dipu bench store`: our client,
# many connections from one process): dipu's server beside torch's libuv
# server (torch.distributed's default) and its legacy one, one after the
# other, alternated over two passes. Builds `dipu` in release and installs
# PyTorch into .venv-torch (scripts/torch-env.sh, idempotent) first.
#
# Usage: scripts/bench-store.sh [--clients N] [--cycles N] (passed to every
# run; defaults 32 clients, 200 cycles). CARGO_TARGET_DIR is honoured.
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=scripts/bench-setup.sh
source scripts/bench-setup.sh "$@"

# Runs `dipu bench store` against a torch server of back end $1 (libuv or
# legacy), started in Python for the run and stopped after it.
torch_server() {
  local fifo port line
  fifo=$(mktemp -u)
  mkfifo "$fifo"
  "$python" -W ignore -c '
import sys, datetime, torch.distributed as d
s = d.TCPStore("127.0.0.1", 0, None, True, datetime.timedelta(seconds=300),
               wait_for_workers=False, use_libuv=(sys.argv[1] == "libuv"))
print("PORT", s.port, flush=True)
sys.stdin.read()
' "$1" <"$fifo" >"$fifo.out" &
  local pid=$!
  exec 3>"$fifo"
  for _ in $(seq 100); do
    line=$(head -n1 "$fifo.out" 2>/dev/null || true)
    [ -n "$line" ] && break
    sleep 0.1
  done
  port=${line#PORT }
  "$dipu" bench store --server "127.0.0.1:$port" "${@:2}"
  exec 3>&-
  wait "$pid" || true
  rm -f "$fifo" "$fifo.out"
}

for pass in 1 2; do
  echo
  echo "== pass $pass: dipu's server"
  "$dipu" bench store "$@"
  echo
  echo "== pass $pass: torch's libuv server"
  torch_server libuv "$@"
  echo
  echo "== pass $pass: torch's legacy server"
  torch_server legacy "$@"
done
