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
# The dependency floors pyproject declares, installed in a venv of their own, run the CLI (scripts/test-floors.sh).
step scripts/test-floors.sh
# pytest exits 5 when it collected nothing: that is a failure for us, as is any other non-zero code.
mkdir -p .work && rm -f .work/junit-*.xml
step pytest -n 2 -q tests --ignore=tests/kernel --junitxml .work/junit-main.xml
step tests/ansible/sanity.sh lint
if [ -x tests/kernel/run-lane.sh ]; then
  step tests/kernel/run-lane.sh
fi
# One closing line over every lane's junit XML (the main suite, the guest's, the differential comparison).
.venv/bin/python - .work/junit-main.xml tests/kernel/out/results/junit.xml \
  tests/kernel/out/results/junit-differential.xml <<'PY'
import os
import sys
import xml.etree.ElementTree as ET

n = dict.fromkeys(("tests", "failures", "errors", "skipped"), 0)
for path in sys.argv[1:]:
    if os.path.exists(path):
        root = ET.parse(path).getroot()
        for suite in [root] if root.tag == "testsuite" else list(root):
            for key in n:
                n[key] += int(suite.get(key, 0))
failed = n["failures"] + n["errors"]
print(f"total: {n['tests'] - failed - n['skipped']} passed, {failed} failed, {n['skipped']} skipped")
PY
exit $status
