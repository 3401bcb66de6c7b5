"""The simulator against the real kernel: the differential scenario's records from the lane's guest
(<results>/real-scenario.json, written by tests/kernel/guest/test_scenario.py) must equal the records of the same
scenario run on a simulated host of profile `kernel-samples`; so must the verb-level scenario's
(<results>/real-verbs.json from tests/kernel/guest/test_verbs.py, here with the host's libvirtd holding the
domains). Each comparison appends its counts to <results>/differential-counts.txt, which run-lane.sh prints.

run-lane.sh runs this after the guest returns, with VGPUADM_KERNEL_RESULTS set; then missing results are a failure.
Run by hand without that variable, it uses tests/kernel/out/results and skips when the lane has not run yet.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import differential_scenario as scenario
import libvirt
import pytest
import verb_scenario as verbs

from vgpuadm import api
from vgpuadm.sim.profiles import build

DEFAULT_RESULTS = Path(__file__).parent / "out" / "results"


def _results() -> Path:
    return Path(os.environ.get("VGPUADM_KERNEL_RESULTS") or DEFAULT_RESULTS)


def _load(name: str) -> list[dict[str, Any]]:
    path = _results() / name
    if not path.exists():
        if os.environ.get("VGPUADM_KERNEL_TESTS"):
            pytest.skip(f"{path} is missing: VGPUADM_KERNEL_TESTS left its guest test out")
        if os.environ.get("VGPUADM_KERNEL_RESULTS"):
            pytest.fail(f"{path} is missing: the guest did not run the scenario (see its pytest.log)")
        pytest.skip(f"{path} is missing: run tests/kernel/run-lane.sh first")
    records: list[dict[str, Any]] = json.loads(path.read_text())
    return records


def _count(line: str) -> None:
    with open(_results() / "differential-counts.txt", "a") as f:
        f.write(line + "\n")


@pytest.fixture
def real_records() -> list[dict[str, Any]]:
    return _load("real-scenario.json")


def test_simulator_matches_the_real_kernel(real_records: list[dict[str, Any]], tmp_path: Path) -> None:
    root = tmp_path / "kernel-samples"
    build("kernel-samples", str(root))
    sim_records = scenario.run(api.open_sysfs(str(root)))
    # JSON turns tuples into lists; compare both in the same form.
    sim_records = json.loads(json.dumps(sim_records))
    assert list(scenario.differences(real_records, sim_records)) == []
    assert sim_records == real_records
    writes = sum(1 for r in real_records if "write" in r)
    facts = sum(len(r["state"]) for r in real_records if "observe" in r)
    _count(f"differential sysfs: {writes} writes and {len(real_records) - writes} snapshots ({facts} keys) identical")


def test_verbs_on_the_simulator_match_the_real_kernel(libvirtd: str, tmp_path: Path) -> None:
    """The verb scenario again on a simulated kernel-samples host, its domains on the host's libvirtd."""
    real = _load("real-verbs.json")
    root = tmp_path / "kernel-samples"
    build("kernel-samples", str(root))
    (root / "etc").mkdir()
    (root / "etc/machine-id").write_text((_results() / "machine-id").read_text())  # the same deterministic UUIDs

    conn = libvirt.open(libvirtd)
    verbs.undefine_domains(conn)
    verbs.define_domains(conn)
    try:
        plan = verbs.write_plan(str(tmp_path))
        sim = verbs.run(
            verbs.in_process, ["--root", str(root), "-c", libvirtd], api.open_sysfs(str(root)), conn, plan, str(root)
        )
    finally:
        verbs.undefine_domains(conn)
        conn.close()
    sim = json.loads(json.dumps(sim))
    assert list(verbs.differences(real, sim)) == []
    assert sim == real
    commands, facts = verbs.counts(real)
    _count(f"differential verbs: {commands} commands, {facts} facts (exit, --json, stderr, tree, domain XML) identical")


def test_the_scenario_is_the_one_the_guest_ran(real_records: list[dict[str, Any]]) -> None:
    writes = [(s.path, s.data, s.expect) for s in scenario.steps() if isinstance(s, scenario.Write)]
    assert [(r["write"], r["data"], r["expect"]) for r in real_records if "write" in r] == writes
