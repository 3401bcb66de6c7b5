"""`vgpuadm adopt --vm V` records in V's vgpuadm metadata the devices V's XML already has (attached by hand with
`virsh attach-device --config`, or made by mdevctl), as `create` would have recorded them, so that restore, apply and
destroy manage them; `--dry-run` shows what it would record; a device another domain claims too is refused, with a
hint that never says to strip the original; nothing to adopt says so and exits 0. Real CLI processes, the root's
embedded libvirt, the simulated kernel."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from embedded_host import allocations, define_xml, hostdev_keys, mdevs, vgpuadm

from tests.domains import QEMU_MACHINE, VNC, domain
from vgpuadm.model import Allocation

pytestmark = pytest.mark.libvirt

U = "11111111-2222-4333-8444-555555555555"
GONE = "99999999-2222-4333-8444-555555555555"  # an mdev no host device backs


def _mdev_hostdev(uuid: str, *, display: bool = False) -> str:
    on = " display='on'" if display else ""
    return (f"<hostdev mode='subsystem' type='mdev' model='vfio-pci'{on}><source><address uuid='{uuid}'/></source>"
            "</hostdev>")  # fmt: skip


def _pci_hostdev(bus: int, slot: int, function: int) -> str:
    return (f"<hostdev mode='subsystem' type='pci' managed='no'><source><address domain='0x0000' bus='{bus:#04x}' "
            f"slot='{slot:#04x}' function='{function:#x}'/></source></hostdev>")  # fmt: skip


def _define_by_hand(root: Path, name: str, *hostdevs: str, graphics: bool = False) -> None:
    """A domain given devices by hand (as `virsh attach-device --config` leaves it): hostdevs, no vgpuadm metadata."""
    vnc = VNC if graphics else ""
    define_xml(root, domain(name, hypervisor="qemu", machine=QEMU_MACHINE, devices=vnc + "".join(hostdevs)))


def test_adopt_records_a_hand_attached_mdev_and_restore_and_destroy_then_manage_it(
    sim_host: Callable[[str], Path],
) -> None:
    root = sim_host("p4")
    assert vgpuadm(root, "mdev", "create", "--type", "nvidia-63", "--gpu", "0000:01:00.0", "--uuid", U).code == 0
    _define_by_hand(root, "legacy01", _mdev_hostdev(U, display=True), _mdev_hostdev(GONE), graphics=True)

    checks = {c["check"]: c for c in json.loads(vgpuadm(root, "doctor", "--json").out)["checks"]}
    assert checks["unrecorded legacy01"] == {
        "check": "unrecorded legacy01", "status": "warn",
        "detail": f"domain legacy01 has mdev {U} that vgpuadm has not recorded: `vgpuadm restore` will not bring them "
                  "back after a reboot",
        "hint": "vgpuadm adopt --vm legacy01 (records them; --dry-run shows what)",
    }  # fmt: skip
    assert checks["leaks"]["status"] == "pass"

    dry = vgpuadm(root, "adopt", "--vm", "legacy01", "--dry-run")
    assert (dry.code, dry.out, dry.err) == (0, (
        f"would record mdev nvidia-63 {U} on 0000:01:00.0 in domain legacy01's metadata\n"
        f"left as it is: mdev {GONE}: no vGPU or GPU function vgpuadm can identify on this host now\n"), "")  # fmt: skip
    assert allocations(root, "legacy01") == []

    res = vgpuadm(root, "adopt", "--vm", "legacy01", "--json")
    assert res.code == 0, res.err
    doc = json.loads(res.out)
    assert (doc["changed"], doc["steps"], doc["skipped"]) == (
        True, ["step 1/1 record 1 vgpuadm device(s) in the metadata of domain legacy01"],
        [f"mdev {GONE}: no vGPU or GPU function vgpuadm can identify on this host now"],
    )  # fmt: skip
    [a] = allocations(root, "legacy01")
    assert (a.mode, a.type_id, a.parent, a.uuid, a.slot, a.extra) == (
        "mdev", "nvidia-63", "0000:01:00.0", U, 0, {"display": "on"}
    )  # fmt: skip
    assert hostdev_keys(root, "legacy01") == [U, GONE]  # nothing attached or detached

    after = {c["check"] for c in json.loads(vgpuadm(root, "doctor", "--json").out)["checks"]}
    assert "unrecorded legacy01" not in after and "leaks" in after
    inv = json.loads(vgpuadm(root, "inventory", "--json").out)
    assert [(d["id"], d["domain"], d["recorded"]) for d in inv["devices"]] == [(U, "legacy01", True)]

    again = vgpuadm(root, "adopt", "--vm", "legacy01")
    assert (again.code, again.out) == (0, (
        "nothing to adopt: no other device of domain legacy01 is a vGPU or GPU function here\n"
        f"left as it is: mdev {GONE}: no vGPU or GPU function vgpuadm can identify on this host now\n"))  # fmt: skip

    assert vgpuadm(root, "sim", "reboot", str(root)).code == 0
    assert mdevs(root) == []
    assert vgpuadm(root, "restore").code == 0
    assert mdevs(root) == [U]
    gone = vgpuadm(root, "destroy", "--vm", "legacy01")
    assert gone.code == 0, gone.err
    assert (mdevs(root), allocations(root, "legacy01"), hostdev_keys(root, "legacy01")) == ([], [], [GONE])


def test_nothing_to_adopt_says_so(sim_host: Callable[[str], Path]) -> None:
    root = sim_host("p4")
    _define_by_hand(root, "plain01")
    res = vgpuadm(root, "adopt", "--vm", "plain01")
    assert (res.code, res.out, res.err) == (
        0, "nothing to adopt: vgpuadm already records every device domain plain01 has\n", "")  # fmt: skip


def test_adopt_refuses_a_device_another_domain_claims(sim_host: Callable[[str], Path]) -> None:
    """The copy of a VM (by hand, or of one vgpuadm gave the device) claims the same device: refused, and the
    hint drops the copy's claim — it never tells the user to take the device from the VM it belongs to."""
    root = sim_host("p4")
    assert vgpuadm(root, "mdev", "create", "--type", "nvidia-63", "--uuid", U).code == 0
    _define_by_hand(root, "legacy01", _mdev_hostdev(U))
    _define_by_hand(root, "legacy01-copy", _mdev_hostdev(U))
    res = vgpuadm(root, "adopt", "--vm", "legacy01-copy")
    assert (res.code, res.out) == (5, "")
    assert res.err == (
        f"error: cannot adopt mdev {U} for domain legacy01-copy: domain legacy01 claims it too\n"
        "hint: a device belongs to one VM: on whichever of legacy01-copy and legacy01 is a copy, run `vgpuadm destroy "
        "--vm COPY --forget` (drops the copy's claim; the device and the VM it belongs to stay as they are), then "
        "adopt again\n"
    )
    assert (allocations(root, "legacy01"), allocations(root, "legacy01-copy"), mdevs(root)) == ([], [], [U])

    assert vgpuadm(root, "destroy", "--vm", "legacy01-copy", "--forget").code == 0  # as the hint says
    res = vgpuadm(root, "adopt", "--vm", "legacy01")
    assert (res.code, res.out) == (0, f"recorded mdev nvidia-63 {U} on 0000:01:00.0 in domain legacy01's metadata\n")
    assert (hostdev_keys(root, "legacy01-copy"), [a.uuid for a in allocations(root, "legacy01")]) == ([], [U])


def test_adopt_records_a_layout_c_vf_and_a_passed_through_gpu(sim_host: Callable[[str], Path]) -> None:
    root = sim_host("h200-vendor-vfio")
    assert vgpuadm(root, "vf", "set-type", "--type", "H200X-4C", "--vf", "0000:18:00.4").code == 0
    _define_by_hand(root, "legacyvf", _pci_hostdev(0x18, 0, 4))
    res = vgpuadm(root, "adopt", "--vm", "legacyvf")
    assert (res.code, res.out) == (0, "recorded vf nvidia-1420 0000:18:00.4 in domain legacyvf's metadata\n")
    [vf] = allocations(root, "legacyvf")
    assert vf == Allocation("legacyvf", "vf", "nvidia-1420", "0000:18:00.4", address="0000:18:00.4",
                            domain_uuid=vf.domain_uuid, slot=0)  # fmt: skip

    root = sim_host("passthrough")
    _define_by_hand(root, "legacypt", _pci_hostdev(0x65, 0, 0), _pci_hostdev(0x65, 0, 1))
    res = vgpuadm(root, "adopt", "--vm", "legacypt")
    assert (res.code, res.out) == (0, (
        "recorded pci 0000:65:00.0 in domain legacypt's metadata\n"
        "recorded pci 0000:65:00.1 on 0000:65:00.0 in domain legacypt's metadata\n"))  # fmt: skip
    assert [(a.mode, a.parent, a.address, a.slot, a.extra["managed"]) for a in allocations(root, "legacypt")] == [
        ("pci", "0000:65:00.0", "0000:65:00.0", 0, "no"), ("pci", "0000:65:00.0", "0000:65:00.1", 1, "no")
    ]  # fmt: skip
    gone = vgpuadm(root, "release", "--gpu", "65:00.0")
    assert gone.code == 0, gone.err
    assert (allocations(root, "legacypt"), hostdev_keys(root, "legacypt")) == ([], [])
