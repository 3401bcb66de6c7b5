#!/usr/bin/env bash
# The whole test suite, as CI runs it: install (idempotent), static checks, then every pytest lane.
# The libvirt lane's fixtures start libvirtd/virtlogd themselves when no daemon answers.
set -uo pipefail
cd "$(dirname "$0")/.."
./scripts/install.sh || exit 1
export PATH="$PWD/.venv/bin:$PATH"
status=0
step() { echo "== $*"; "$@" || { echo "FAILED: $*"; status=1; }; }
step ruff check vgpuadm tests bench
step ruff format --check vgpuadm tests bench
step mypy
step lint-imports
# pytest exits 5 when it collected nothing: that is a failure for us, as is any other non-zero code.
step pytest -n 2 -q tests --ignore=tests/kernel
if [ -x tests/kernel/run-lane.sh ]; then
  step tests/kernel/run-lane.sh
fi
exit $status
