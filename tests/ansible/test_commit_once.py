"""The vgpu_allocation module commits ONE journaled plan per task, the `vgpuadm apply -f` one: killed mid-way
(the executor's crash hook), `vgpuadm reconcile` rolls the whole task back like any other crashed change, so the
host and the domain are exactly as before the task."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.ansible.lab import URI, inactive_xml
from vgpuadm.executor import CRASH_HOOK, JOURNAL
from vgpuadm.sim.treestate import diff as tree_diff
from vgpuadm.sim.treestate import tree_state
from vgpuadm.virt.xml import parse_allocations

pytestmark = pytest.mark.libvirt


def _devices_diff(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """The kernel trees' differences, but for IOMMU group numbers: an mdev created again (by the rollback) gets a
    new group from the kernel's counter, as on a real host."""
    return {k: v for k, v in tree_diff(before, after).items() if "iommu_group" not in k}


def _xml(text: str) -> str:
    """A domain definition, re-indented and with its hostdevs in one order: two are equal whatever indentation
    libvirt gives a metadata element written back, and in whatever order a rollback attached the devices again
    (each at the guest PCI address it had, which is what the guest sees)."""
    from lxml import etree

    doc = etree.fromstring(text.encode(), etree.XMLParser(remove_blank_text=True))
    devices = doc.find("devices")
    hostdevs = devices.findall("hostdev")
    places = [devices.index(h) for h in hostdevs]
    for place, h in zip(places, sorted(hostdevs, key=lambda h: etree.tostring(h)), strict=True):
        devices.insert(place, h)
    return str(etree.tostring(doc, pretty_print=True, encoding="unicode"))


def test_a_task_killed_mid_way_is_rolled_back_whole_by_reconcile(ansible_lab: Any, cli: Any) -> None:
    lab = ansible_lab(["gpu-p4"])
    root, vm = lab.root("gpu-p4"), lab.vm("web01")

    def alloc(check: bool = False, **args: Any) -> dict[str, Any]:
        return lab.module("gpu-p4", "vgpu_allocation", {"vm": vm, "type": "nvidia-63", **args}, check=check)

    three = alloc(count=3)
    assert three["changed"] is True and len(three["devices"]) == 3
    kernel, xml = tree_state(root), inactive_xml(vm)

    # Three down to one: one definition without two of the hostdevs (and the new record), then the two removals.
    # Check mode lists the steps.
    predicted = alloc(check=True, count=1)
    steps = predicted["plan"]
    assert predicted["changed"] is True and len(steps) == 3, steps
    assert tree_diff(kernel, tree_state(root)) == {} and _xml(inactive_xml(vm)) == _xml(xml)

    # Killed right before the last of them: if they are one plan, all that ran is journaled as one change. (Run as
    # one transaction per device, no single transaction reaches this step and the kill never comes.)
    lab.env[CRASH_HOOK] = str(len(steps) - 1)
    try:
        killed = alloc(count=1)
    finally:
        del lab.env[CRASH_HOOK]
    assert killed["status"] == "failed" and killed.get("rc") == 99, (steps, killed)
    assert (root / JOURNAL).exists(), "the task's plan is journaled and pending"
    assert tree_diff(kernel, tree_state(root)) != {}, "the kill left the task half-done"

    r = cli("--root", str(root), "--connect", URI, "reconcile", "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["recovered"], "reconcile rolled the crashed plan back"
    assert _devices_diff(kernel, tree_state(root)) == {}
    assert _xml(inactive_xml(vm)) == _xml(xml)
    assert [a.uuid for a in parse_allocations(inactive_xml(vm))] == [d["uuid"] for d in three["devices"]]
    assert not (root / JOURNAL).exists()

    # And the task, run again, does what it was asked.
    done = alloc(count=1)
    assert done["changed"] is True and done["devices"] == three["devices"][:1]
