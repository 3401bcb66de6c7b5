"""A vGPU with display on needs a <graphics> device in the domain (libvirt: "graphics device is needed for attribute
value 'display=on' in <hostdev>"). Both `create --display on` and `apply -f` with `display: {enabled: true}` refuse
it while planning, on a simulated P4 host with domains in libvirt's embedded driver: one line naming the domain, a
hint with the fix, and the host untouched (sim tree, domain XML, no journal)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from embedded_host import define, domain_xml, mdevs, vgpuadm

from vgpuadm.sim.treestate import tree_state

pytestmark = pytest.mark.libvirt

FIX = "add one (virsh edit {vm}, then <graphics type='vnc'/> or <graphics type='spice'/> under <devices>), or {off}"

PLAN = """\
vms:
  w2-headless01:
    type: GRID P4-1Q
    count: 2
    params: {frame_rate_limiter: 0}
    display: {enabled: true, ramfb: true}
"""


@pytest.fixture
def headless(sim_host: Callable[[str], Path]) -> Path:
    root = sim_host("p4")
    define(root, "w2-headless01", vnc=False)
    assert "<graphics" not in domain_xml(root, "w2-headless01")
    return root


def test_create_display_on_without_graphics_is_refused_before_any_change(headless: Path) -> None:
    root, vm = headless, "w2-headless01"
    state, before = tree_state(root), domain_xml(root, vm)
    r = vgpuadm(root, "create", "--type", "nvidia-63", "--vm", vm, "--display", "on", "--ramfb")
    assert r.code == 2, r.err
    assert r.err.splitlines() == [
        f"error: domain {vm} has no <graphics> device, which a vGPU with display on needs",
        "hint: " + FIX.format(vm=vm, off="use --display off"),
    ]
    assert (tree_state(root), domain_xml(root, vm), mdevs(root)) == (state, before, [])
    assert not (root / "var/lib/vgpuadm/journal.json").exists()
    # Display off needs no graphics device.
    assert vgpuadm(root, "create", "--type", "nvidia-63", "--vm", vm).code == 0
    assert len(mdevs(root)) == 1


def test_apply_display_enabled_without_graphics_is_refused_before_any_change(headless: Path, tmp_path: Path) -> None:
    """The README's plan (web01 with display: {enabled: true, ramfb: true}) used to fail at the attach, after the
    kernel steps had run; now it fails while planning, pointing at the plan's display key."""
    root, vm = headless, "w2-headless01"
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN)
    state, before = tree_state(root), domain_xml(root, vm)
    r = vgpuadm(root, "apply", "-f", str(plan))
    assert r.code == 2, r.err
    assert r.err.splitlines() == [
        f"error: plan.yaml:6: vms.{vm}.display: domain {vm} has no <graphics> device, which a vGPU with display on "
        "needs",
        "hint: " + FIX.format(vm=vm, off="set display: {enabled: false}"),
    ]
    assert (tree_state(root), domain_xml(root, vm), mdevs(root)) == (state, before, [])
    assert not (root / "var/lib/vgpuadm/journal.json").exists()
    plan.write_text(PLAN.replace("display: {enabled: true, ramfb: true}", "display: {enabled: false}"))
    assert vgpuadm(root, "apply", "-f", str(plan)).code == 0
    assert len(mdevs(root)) == 2
