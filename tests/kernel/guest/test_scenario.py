"""The differential scenario on the real kernel. Saves the records to the results folder for the host-side
comparison (tests/kernel/test_differential.py), then checks every write got the errno the scenario expects."""

from __future__ import annotations

import json
from pathlib import Path

import differential_scenario as scenario

from vgpuadm.host.sysfs import Sysfs


def test_scenario_on_the_real_kernel(sysfs: Sysfs, results: Path) -> None:
    records = scenario.run(sysfs)
    (results / "real-scenario.json").write_text(json.dumps(records, indent=1, sort_keys=True) + "\n")
    wrong = [
        f"{r['data']!r} > {r['write']}: expected {r['expect'] or 'ok'}, got {r['errno'] or 'ok'}"
        for r in records
        if "write" in r and r["errno"] != r["expect"]
    ]
    assert wrong == []
    states = {r["observe"]: r["state"] for r in records if "observe" in r}
    assert states["mdev-reverted"] == states["mdev-initial"]
    assert states["mtty-reverted"] == states["mdev-initial"]
    assert states["sriov-reverted"] == states["sriov-initial"]
    assert states["group-reverted"] == states["group-initial"]
