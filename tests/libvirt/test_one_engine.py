"""Regressions of the duplicated paths the one engine removed, on simulated hosts with domains in libvirt's embedded
driver (real libvirt, the simulated kernel, the real CLI as separate processes):
- `apply -f` and `create` record the same ownership metadata (with this host's key);
- one layout C VF is never handed to two domains, even when its type was cleared behind vgpuadm's back;
- after a crash mid-change, every verb refuses with the pending-journal error before planning anything."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from embedded_host import allocations, define, domain_xml, hostdev_keys, vgpuadm

from vgpuadm.executor import CRASH_HOOK
from vgpuadm.sim.kernel import SimKernel
from vgpuadm.virt.xml import metadata_host

pytestmark = pytest.mark.libvirt

PENDING = (
    "error: an interrupted change is pending in /var/lib/vgpuadm/journal.json\n"
    "hint: run `vgpuadm recover` to roll it back (or `vgpuadm recover --finish` to complete it)\n"
)


def test_apply_and_create_record_the_same_metadata(sim_host: Callable[[str], Path], tmp_path: Path) -> None:
    root = sim_host("p4")
    define(root, "by-create", "by-apply")
    res = vgpuadm(root, "create", "--type", "nvidia-63", "--vm", "by-create")
    assert res.code == 0, res.err
    plan = tmp_path / "plan.yaml"
    plan.write_text("vms:\n  by-apply:\n    type: nvidia-63\n")
    res = vgpuadm(root, "apply", "-f", str(plan))
    assert res.code == 0, res.err
    key = f"sim:{root}"
    assert metadata_host(domain_xml(root, "by-create")) == key
    assert metadata_host(domain_xml(root, "by-apply")) == key
    [a], [b] = allocations(root, "by-create"), allocations(root, "by-apply")
    assert (a.mode, a.type_id, a.parent, a.slot, a.params) == (b.mode, b.type_id, b.parent, b.slot, b.params)


def test_a_vf_cleared_behind_our_back_is_not_given_to_a_second_domain(sim_host: Callable[[str], Path]) -> None:
    root = sim_host("h200-vendor-vfio")
    define(root, "a", "b")
    res = vgpuadm(root, "create", "--type", "nvidia-1420", "--vm", "a")
    assert res.code == 0, res.err
    [vf] = hostdev_keys(root, "a")
    # Something else (a reboot, a hand-written echo) clears the VF's type: domain a still names it.
    SimKernel(str(root)).write(f"/sys/bus/pci/devices/{vf}/nvidia/current_vgpu_type", "0\n")
    res = vgpuadm(root, "create", "--type", "nvidia-1420", "--vm", "b")
    assert res.code == 0, res.err
    [other] = hostdev_keys(root, "b")
    assert other != vf
    assert hostdev_keys(root, "a") == [vf]


def test_a_pending_journal_stops_every_verb_before_it_plans(sim_host: Callable[[str], Path]) -> None:
    root = sim_host("p4")
    define(root, "web01", "web02")
    crashed = vgpuadm(root, "create", "--type", "nvidia-63", "--vm", "web02", env={CRASH_HOOK: "1"})
    assert crashed.code == 99
    again = vgpuadm(root, "create", "--type", "nvidia-63", "--vm", "web02")
    assert (again.code, again.err) == (5, PENDING)
    # A verb whose plan would be empty says so too instead of "nothing to do".
    empty = vgpuadm(root, "destroy", "--vm", "web01", "--all")
    assert (empty.code, empty.err) == (5, PENDING)
    res = vgpuadm(root, "reconcile")
    assert res.code == 0, res.err
    res = vgpuadm(root, "create", "--type", "nvidia-63", "--vm", "web02")
    assert res.code == 0, res.err


def test_a_full_layout_c_gpu_still_knows_its_types(sim_host: Callable[[str], Path]) -> None:
    """Every VF of a full layout C GPU lists nothing in creatable_vgpu_types: the names come from the driver
    (nvidia-smi vgpu -s -v), so the same request is idempotent and another one says there is no room."""
    root = sim_host("h200-vendor-vfio")
    define(root, "vm01", "vm02")
    first = vgpuadm(root, "create", "--type", "H200X-4C", "--vm", "vm01", "--count", "16")
    assert first.code == 0, first.err
    again = vgpuadm(root, "create", "--type", "H200X-4C", "--vm", "vm01", "--count", "16")
    assert (again.code, again.out, again.err) == (0, "nothing to do: domain vm01 already has 16 × nvidia-1420\n", "")
    other = vgpuadm(root, "create", "--type", "H200X-4C", "--vm", "vm02")
    assert other.code == 4
    assert other.err.splitlines()[0] == (
        "error: No room for 1 × nvidia-1420: no VF lists it in nvidia/creatable_vgpu_types "
        "(0000:18:00.0: 16 VFs host vGPUs)"
    )
    inventory = vgpuadm(root, "inventory", "--format", "json")
    assert inventory.code == 0, inventory.err
    assert '"name": "NVIDIA H200X-4C"' in inventory.out and '"name": null' not in inventory.out
