#!/usr/bin/env bash
# TCPStore servers under the same load (`dipu bench store`: many clients
# from one process, driven without blocking by a few threads): dipu's
# server beside torch's libuv server (torch.distributed's default) and its
# legacy one, one after the other, in two passes (the second in the reverse
# order, as the machine's load drifts), at 256, 1024 and 4096 clients (fewer
# cycles per client as the clients grow, so that a round does about the
# same work). Raises the descriptor limit to the hard one. Builds `dipu` in release and installs PyTorch into .venv-torch
# (scripts/torch-env.sh, idempotent) first.
#
# Usage: scripts/bench-store.sh [--clients N] [--cycles N] [--threads N]
# (--clients: that count only; other options are passed to every run).
# CARGO_TARGET_DIR is honoured.
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=scripts/bench-setup.sh
source scripts/bench-setup.sh "$@"

ulimit -n "$(ulimit -Hn)"

# The client counts, and the options other than --clients.
counts=(256 1024 4096)
opts=()
while [ $# -gt 0 ]; do
  case $1 in
  --clients)
    counts=("$2")
    shift 2
    ;;
  *)
    opts+=("$1")
    shift
    ;;
  esac
done

# Cycles per client at $1 clients, unless --cycles was given.
cycles_for() {
  case " ${opts[*]-} " in
  *" --cycles "*) ;;
  *) echo "--cycles $((51200 / $1 > 8 ? 51200 / $1 : 8))" ;;
  esac
}

# Runs `dipu bench store` against a torch server of back end $1 (libuv or
# legacy), started in Python for the run and stopped after it.
#
# The server is handed a socket listening on 127.0.0.1 only
# (`master_listen_fd`). Left to itself, torch listens on `::`, sees every
# client as `::ffff:127.0.0.1` and looks that name up (`getnameinfo`) for
# each connection: without a line for it in /etc/hosts, the lookup goes to
# the name server, and 256 clients took 20 s to connect instead of 0.07 s.
# `127.0.0.1` is in every /etc/hosts, so nothing needs editing.
torch_server() {
  local fifo port line
  fifo=$(mktemp -u)
  # Its standard input (it stops when that closes) and the line it prints
  # first, read as soon as it is written.
  mkfifo "$fifo" "$fifo.out"
  "$python" -W ignore -c '
import sys, socket, datetime, torch.distributed as d
listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", 0))
listener.listen(socket.SOMAXCONN)
port = listener.getsockname()[1]
s = d.TCPStore("127.0.0.1", port, None, True, datetime.timedelta(seconds=300),
               wait_for_workers=False, master_listen_fd=listener.detach(),
               use_libuv=(sys.argv[1] == "libuv"))
print("PORT", s.port, flush=True)
sys.stdin.read()
' "$1" <"$fifo" >"$fifo.out" &
  local pid=$!
  exec 3>"$fifo"
  line=
  read -r -t 120 line <"$fifo.out" || true
  port=${line#PORT }
  "$dipu" bench store --server "127.0.0.1:$port" --server-pid "$pid" "${@:2}"
  exec 3>&-
  wait "$pid" || true
  rm -f "$fifo" "$fifo.out"
}

for n in "${counts[@]}"; do
  # shellcheck disable=SC2207
  run=(--clients "$n" $(cycles_for "$n") ${opts[@]+"${opts[@]}"})
  # The second pass runs the servers in the reverse order.
  for server in dipu libuv legacy legacy libuv dipu; do
    echo
    echo "== $n clients: $server server"
    if [ "$server" = dipu ]; then
      "$dipu" bench store "${run[@]}"
    else
      torch_server "$server" "${run[@]}"
    fi
  done
done
