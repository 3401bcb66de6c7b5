"""The verb-level differential on the real kernel (tests/kernel/verb_scenario.py): every command of the scenario
through the CLI against the guest's sample drivers, SR-IOV NVMe, vfio-pci and libvirtd. The records go to the
results folder; tests/kernel/test_differential.py compares them with the same scenario on a simulated host."""

from __future__ import annotations

import json
from pathlib import Path

import libvirt
import verb_scenario as verbs
from guest_virsh import URI

from vgpuadm.host.sysfs import Sysfs


def test_verb_scenario_on_the_real_kernel(cli, sysfs: Sysfs, libvirtd: None, results: Path, mark) -> None:
    conn = libvirt.open(URI)
    verbs.undefine_domains(conn)
    verbs.define_domains(conn)
    try:
        records = verbs.run(cli, ["-c", URI], sysfs, conn, verbs.write_plan(str(results)))
    finally:
        verbs.undefine_domains(conn)
        conn.close()
    mark("done")
    (results / "machine-id").write_text(Path("/etc/machine-id").read_text())
    (results / "real-verbs.json").write_text(json.dumps(records, indent=1, sort_keys=True) + "\n")
    exits = [(" ".join(r["command"]), r["exit"]) for r in records if "command" in r]
    assert [e for _, e in exits] == verbs.expected_exits(), exits
