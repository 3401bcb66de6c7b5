"""The vgpu_allocation and vgpu_inventory modules run ad hoc by real ansible-core on one simulated P4 host (layout
A) against the real libvirtd: count up and down, params, type names, absent by type and for all, bad input."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.ansible.lab import URI, inactive_xml
from vgpuadm.sim.treestate import diff as tree_diff
from vgpuadm.sim.treestate import tree_state
from vgpuadm.virt.xml import parse_allocations

pytestmark = pytest.mark.libvirt


def _mdevs(root: Any) -> list[str]:
    return sorted(p.name for p in (root / "sys/bus/mdev/devices").iterdir())


def test_allocation_counts_params_and_absent(ansible_lab: Any) -> None:
    lab = ansible_lab(["gpu-p4"])
    root, vm = lab.root("gpu-p4"), lab.vm("web01")

    def alloc(check: bool = False, **args: Any) -> dict[str, Any]:
        return lab.module("gpu-p4", "vgpu_allocation", {"vm": vm, **args}, check=check, diff=True)

    three = alloc(type="nvidia-63", count=3, params={"frame_rate_limiter": 0, "disable_vnc": 1})
    assert three["changed"] is True
    assert [(d["slot"], d["params"]) for d in three["devices"]] == [
        (i, "frame_rate_limiter=0, disable_vnc=1") for i in range(3)
    ]
    uuids = [d["uuid"] for d in three["devices"]]
    assert _mdevs(root) == sorted(uuids)
    assert [a.uuid for a in parse_allocations(inactive_xml(vm))] == uuids

    # Shrinking takes back the highest slots; check mode predicts it and changes nothing.
    kernel, xml = tree_state(root), inactive_xml(vm)
    shrink = alloc(check=True, type="nvidia-63", count=1)
    assert shrink["changed"] is True
    assert [d["slot"] for d in shrink["removed"]] == [2, 1]
    assert shrink["diff"]["after"]["devices"] == three["devices"][:1]
    assert shrink["diff"]["before"]["devices"] == three["devices"]
    assert tree_diff(kernel, tree_state(root)) == {} and inactive_xml(vm) == xml

    shrink = alloc(type="nvidia-63", count=1)
    assert shrink["changed"] is True and shrink["devices"] == three["devices"][:1]
    assert _mdevs(root) == [uuids[0]]

    # The same type by name, params not managed: nothing to do.
    same = alloc(type="GRID P4-1Q", count=1)
    assert same["changed"] is False and same["plan"] == []

    # Other params for devices that exist: refused, nothing changes.
    other = alloc(type="nvidia-63", count=1, params="frame_rate_limiter=1")
    assert other["status"] == "failed" and other["error"] == "ConflictError"
    assert other["msg"] == (
        f"VM {vm} has 1 device of type nvidia-63 with vgpu_params 'frame_rate_limiter=0, disable_vnc=1', "
        "not 'frame_rate_limiter=1'"
    )
    assert "state: absent" in other["hint"]
    assert _mdevs(root) == [uuids[0]]

    # absent by type, then absent for everything: the second has nothing left to do.
    gone = alloc(type="nvidia-63", state="absent")
    assert gone["changed"] is True and gone["devices"] == [] and [d["uuid"] for d in gone["removed"]] == uuids[:1]
    assert _mdevs(root) == [] and parse_allocations(inactive_xml(vm)) == []
    again = alloc(state="absent")
    assert again["changed"] is False and again["diff"]["before"] == again["diff"]["after"]


def test_bad_input_fails_with_vgpuadm_message_and_hint(ansible_lab: Any, cli: Any) -> None:
    lab = ansible_lab(["gpu-p4"])
    before = tree_state(lab.root("gpu-p4"))

    missing = lab.module("gpu-p4", "vgpu_allocation", {"vm": "no-such-vm-vgt", "type": "nvidia-63"})
    assert missing["status"] == "failed" and missing["error"] == "NotFoundError"
    assert missing["msg"] == "No domain named 'no-such-vm-vgt'"
    assert missing["hint"] == f"list the domains with `virsh -c {URI} list --all`"

    unknown = lab.module("gpu-p4", "vgpu_allocation", {"vm": lab.vm("web01"), "type": "nvidia-6e"})
    assert unknown["status"] == "failed" and unknown["error"] == "NotFoundError"
    assert unknown["msg"].startswith('Unknown type "nvidia-6e" on this host; did you mean '), unknown["msg"]
    r = cli(
        "--root", str(lab.root("gpu-p4")), "--connect", URI, "create", "--type", "nvidia-6e", "--vm", lab.vm("web01")
    )
    assert r.err == f"error: {unknown['msg']}\nhint: {unknown['hint']}\n", "the same words as the vgpuadm CLI"

    both = lab.module(
        "gpu-p4", "vgpu_allocation", {"vm": lab.vm("web01"), "type": "nvidia-63", "passthrough": "0000:01:00.0"}
    )
    assert both["status"] == "failed" and "mutually exclusive" in both["msg"]
    assert tree_diff(before, tree_state(lab.root("gpu-p4"))) == {}


def test_inventory_module_counts_only_the_named_domains(ansible_lab: Any) -> None:
    lab = ansible_lab(["gpu-p4"])
    created = lab.module("gpu-p4", "vgpu_allocation", {"vm": lab.vm("web02"), "type": "nvidia-63"})
    assert created["changed"] is True
    (uuid,) = (d["uuid"] for d in created["devices"])

    mine = lab.module("gpu-p4", "vgpu_inventory", {"host": "gpu-p4", "domains": [lab.vm("web01"), lab.vm("web02")]})
    doc = mine["inventory"]
    assert mine["changed"] is False and doc["host"] == "gpu-p4"
    assert [(d["uuid"], d["domain"], d["owned"]) for d in doc["devices"]] == [(uuid, lab.vm("web02"), True)]

    # Counting only web01, the device web02 owns is a leak: no owner.
    only = lab.module("gpu-p4", "vgpu_inventory", {"host": "gpu-p4", "domains": [lab.vm("web01")]})
    assert [(d["uuid"], d["domain"], d["owned"]) for d in only["inventory"]["devices"]] == [(uuid, None, False)]

    # dest: written once (check mode only says it would be), and a rerun with nothing new is no change.
    dest = lab.dir / "inventory-gpu-p4.json"
    args = {"host": "gpu-p4", "domains": [lab.vm("web02")], "dest": str(dest)}
    assert lab.module("gpu-p4", "vgpu_inventory", args, check=True)["changed"] is True and not dest.exists()
    first = lab.module("gpu-p4", "vgpu_inventory", args)
    assert first["changed"] is True and json.loads(dest.read_text()) == first["inventory"]
    assert lab.module("gpu-p4", "vgpu_inventory", args)["changed"] is False
