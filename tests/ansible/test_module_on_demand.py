"""vgpu_allocation with on_demand: true, run ad hoc by real ansible-core on a simulated P4 host against the real
libvirtd: the request and its hostdev are recorded and nothing is made, a rerun is ok, requests of domains that
autostart and could not all run at boot come with a warning, and state: absent takes the request back."""

from __future__ import annotations

from typing import Any

import pytest

from tests.ansible.lab import autostart, inactive_xml
from vgpuadm.sim.treestate import tree_state
from vgpuadm.virt.xml import parse_allocations, parse_hostdevs

pytestmark = pytest.mark.libvirt


def test_on_demand_allocation_records_warns_and_is_idempotent(ansible_lab: Any) -> None:
    lab = ansible_lab(["gpu-p4"])
    root = lab.root("gpu-p4")
    clean = tree_state(root)
    vms = [lab.vm(n) for n in ("web01", "web02")]
    for vm in vms:
        autostart(vm)
    # two whole-GPU vGPUs for web01 fill both P4s when it runs; web02's one more is recorded, with a warning
    results = [lab.module("gpu-p4", "vgpu_allocation", {"vm": vm, "type": "P4-8Q", "count": n, "on_demand": True})
               for vm, n in zip(vms, (2, 1), strict=True)]  # fmt: skip
    assert [r["changed"] for r in results] == [True, True]
    assert results[0].get("warnings", []) == []
    [warning] = results[1]["warnings"]
    assert warning.startswith(f"domain {vms[1]}: its on-demand request (1 × nvidia-66) would not fit when every domain "
                              "that autostarts starts at boot: No room for 1 × nvidia-66")  # fmt: skip
    for vm, r in zip(vms, results, strict=True):
        allocs = parse_allocations(inactive_xml(vm))
        assert {(a.type_id, a.parent, a.on_demand) for a in allocs} == {("nvidia-66", None, True)}
        assert [h.key for h in parse_hostdevs(inactive_xml(vm))] == [a.uuid for a in allocs]
        assert [d["uuid"] for d in r["devices"]] == [a.uuid for a in allocs]
        assert {d["options"]["on_demand"] for d in r["devices"]} == {"yes"}
    assert tree_state(root) == clean
    again = lab.module("gpu-p4", "vgpu_allocation", {"vm": vms[0], "type": "P4-8Q", "count": 2, "on_demand": True})
    assert again["changed"] is False and again["plan"] == []
    gone = lab.module("gpu-p4", "vgpu_allocation", {"vm": vms[0], "type": "P4-8Q", "state": "absent"})
    assert gone["changed"] is True and parse_allocations(inactive_xml(vms[0])) == []
    assert parse_hostdevs(inactive_xml(vms[0])) == [] and tree_state(root) == clean
