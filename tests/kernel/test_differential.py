"""The simulator against the real kernel: the differential scenario's records from the lane's guest
(<results>/real-scenario.json, written by tests/kernel/guest/test_scenario.py) must equal the records of the same
scenario run on a simulated host of profile `kernel-samples`.

run-lane.sh runs this after the guest returns, with VGPUADM_KERNEL_RESULTS set; then missing results are a failure.
Run by hand without that variable, it uses tests/kernel/out/results and skips when the lane has not run yet.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import differential_scenario as scenario
import pytest

from vgpuadm import api
from vgpuadm.sim.profiles import build

DEFAULT_RESULTS = Path(__file__).parent / "out" / "results"


@pytest.fixture
def real_records() -> list[dict[str, Any]]:
    env = os.environ.get("VGPUADM_KERNEL_RESULTS")
    path = Path(env or DEFAULT_RESULTS) / "real-scenario.json"
    if not path.exists():
        if env:
            pytest.fail(f"{path} is missing: the guest did not run the scenario (see its pytest.log)")
        pytest.skip(f"{path} is missing: run tests/kernel/run-lane.sh first")
    records: list[dict[str, Any]] = json.loads(path.read_text())
    return records


def test_simulator_matches_the_real_kernel(real_records: list[dict[str, Any]], tmp_path: Path) -> None:
    root = tmp_path / "kernel-samples"
    build("kernel-samples", str(root))
    sim_records = scenario.run(api.open_sysfs(str(root)))
    # JSON turns tuples into lists; compare both in the same form.
    sim_records = json.loads(json.dumps(sim_records))
    assert list(scenario.differences(real_records, sim_records)) == []
    assert sim_records == real_records


def test_the_scenario_is_the_one_the_guest_ran(real_records: list[dict[str, Any]]) -> None:
    writes = [(s.path, s.data, s.expect) for s in scenario.steps() if isinstance(s, scenario.Write)]
    assert [(r["write"], r["data"], r["expect"]) for r in real_records if "write" in r] == writes
