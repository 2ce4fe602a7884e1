#!/usr/bin/env bash
# Downloads PyPI's bangc-mcp-server 0.3.7 (a documentation server that
# embeds the text of 161 CNRT prototypes) into target/bangc-mcp-server/ (an
# ignored folder; nothing of it is committed) and extracts those prototypes
# to target/bangc-mcp-server/cnrt-prototypes.txt, one a line, for the
# Cambricon vendor's cross-check test:
#   cargo test -p dipu-vendor-cambricon --lib published -- --ignored
# Uses the repository's .venv (scripts/cuda-env.sh makes it).
set -euo pipefail
cd "$(dirname "$0")/.."
out=target/bangc-mcp-server
mkdir -p "$out"
if [ ! -f "$out/bangc_mcp_server-0.3.7-py3-none-any.whl" ]; then
  .venv/bin/python -m pip download --quiet --no-deps --only-binary=:all: \
    bangc-mcp-server==0.3.7 -d "$out"
fi
.venv/bin/python - "$out" <<'PY'
import re, sys, zipfile
out = sys.argv[1]
whl = zipfile.ZipFile(f"{out}/bangc_mcp_server-0.3.7-py3-none-any.whl")
binary = whl.read("bangc_mcp_server_launcher/bin/linux-x86_64/bangc-mcp-server")
found = sorted(set(m.decode() for m in re.findall(rb"cnrtRet_t cnrt[A-Za-z_0-9]+\([^;()]*\);", binary)))
with open(f"{out}/cnrt-prototypes.txt", "w") as f:
    f.write("\n".join(found) + "\n")
print(f"{len(found)} CNRT prototypes -> {out}/cnrt-prototypes.txt")
PY
