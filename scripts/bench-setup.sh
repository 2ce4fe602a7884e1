# Sourced by the scripts/bench-*.sh scripts, from the repository root and
# with their arguments: `--help` prints the calling script's header comment
# and exits; otherwise this prints the machine, builds `dipu` in release
# ($dipu; CARGO_TARGET_DIR is honoured) and installs PyTorch into
# .venv-torch ($python; scripts/torch-env.sh, idempotent).

for arg in "$@"; do
  case $arg in
  -h | --help)
    sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"
    exit 0
    ;;
  esac
done

echo "== machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p' | head -n1)" >&2
echo "== building dipu (release)" >&2
cargo build --release --quiet -p dipu-cli
dipu="${CARGO_TARGET_DIR:-target}/release/dipu"
echo "== installing PyTorch (scripts/torch-env.sh)" >&2
python=$(scripts/torch-env.sh)
