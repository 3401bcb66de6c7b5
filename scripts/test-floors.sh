#!/usr/bin/env bash
# Proves the dependency floors pyproject.toml declares: a separate venv (.work/floors-venv) gets every runtime
# dependency at its declared minimum (scripts/floors.py turns each `>=X` into `==X`, installed with pip's -c), and
# the CLI runs there: its help, the read commands, a plan check and the demo. Any failure fails the run.
# Fast on a second run: the venv is kept and only refreshed when the floors changed (pip's cache holds the wheels).
set -euo pipefail
cd "$(dirname "$0")/.."
work=.work/floors
venv=${FLOORS_VENV:-.work/floors-venv}  # FLOORS_VENV: another venv to (re)use
mkdir -p "$work"
# pip's output only when it failed.
pip_q() { "$1" "${@:2}" -q --disable-pip-version-check > "$work/pip.log" 2>&1 || { cat "$work/pip.log"; exit 1; }; }
python3 scripts/floors.py pyproject.toml > "$work/floors.txt"
if ! cmp -s "$work/floors.txt" "$venv/floors.txt" 2>/dev/null; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  pip_q "$venv/bin/pip" install -c "$work/floors.txt" .
  cp "$work/floors.txt" "$venv/floors.txt"
fi
# The product as checked out now (the deps stay at their floors).
pip_q "$venv/bin/pip" install --no-deps --force-reinstall .
# Every pin really installed: pip check, and each floor's version as installed.
"$venv/bin/pip" check --disable-pip-version-check
"$venv/bin/python" - "$work/floors.txt" <<'PY'
import sys
from importlib.metadata import version


def release(v):  # 9.0 == 9.0.0
    parts = [int(p) for p in v.split(".")]
    return tuple(parts + [0] * (3 - len(parts)))


bad = []
for line in open(sys.argv[1]):
    name, want = line.strip().split("==")
    got = version(name)
    if release(got) != release(want):
        bad.append(f"{name}: {got} installed, floor {want}")
sys.exit("\n".join(bad) or None)
PY
v="$(cd "$venv" && pwd)/bin/vgpuadm"
host="$work/host"
demo="$work/demo"
rm -rf "$host" "$demo"
run() { echo "+ vgpuadm $*"; "$v" "$@" > "$work/out.txt" 2>&1 || { cat "$work/out.txt"; echo "FAILED at the floors: vgpuadm $*"; exit 1; }; }
run --help
run --version
run create --help
run man
run sim build mixed "$host"
for cmd in gpus types devices vms inventory; do run --root "$host" "$cmd"; run --root "$host" "$cmd" --json; done
run --root "$host" doctor
run demo --dir "$demo"
run --root "$demo" show --vm web01
cat > "$work/plan.yaml" <<'YAML'
version: 1
vms:
  train01:
    type: nvidia-63
    count: 1
YAML
run --root "$demo" apply -f "$work/plan.yaml" --check
echo "floors: every command ran at the declared minimum versions"
