"""`doctor` fails a host whose VMs cannot start — devices their domains record are missing (after a reboot, before
`restore`), or one device is claimed by two domains (a VM copied with `virsh dumpxml | sed | virsh define`) — naming
the domains and the command that fixes it; `destroy --vm COPY --forget` drops the copy's claim and leaves the device
and the original VM alone. Real CLI processes, the root's embedded libvirt, the simulated kernel."""

from __future__ import annotations

import json
import re
import uuid as uuid_mod
from collections.abc import Callable
from pathlib import Path

import pytest
from embedded_host import allocations, define, define_xml, domain_xml, hostdev_keys, mdevs, vgpuadm

from tests.domains import QEMU_MACHINE, domain

pytestmark = pytest.mark.libvirt


def _checks(root: Path) -> tuple[int, dict[str, dict[str, str]]]:
    res = vgpuadm(root, "doctor", "--json")
    return res.code, {c["check"]: c for c in json.loads(res.out)["checks"]}


def test_recorded_devices_missing_after_a_reboot_fail_doctor_until_restore(sim_host: Callable[[str], Path]) -> None:
    root = sim_host("p4")
    define(root, "docweb01", "docweb02")
    assert vgpuadm(root, "create", "--type", "nvidia-63", "--vm", "docweb01").code == 0
    assert vgpuadm(root, "create", "--type", "nvidia-63", "--total", "2", "--vm", "docweb02").code == 0
    code, checks = _checks(root)
    assert checks["devices"]["status"] == "pass"
    assert vgpuadm(root, "sim", "reboot", str(root)).code == 0
    code, checks = _checks(root)
    assert code == 1
    [one] = [f"mdev {a.uuid} (nvidia-63)" for a in allocations(root, "docweb01")]
    two = ", ".join(f"mdev {a.uuid} (nvidia-63)" for a in allocations(root, "docweb02"))
    assert checks["devices"] == {
        "check": "devices", "status": "fail",
        "detail": f"3 recorded device(s) missing, so these domains cannot start: docweb01: {one}; docweb02: {two}",
        "hint": "vgpuadm restore (brings back every recorded device)",
    }  # fmt: skip
    assert vgpuadm(root, "restore").code == 0
    assert _checks(root)[1]["devices"]["status"] == "pass"


def test_a_copied_vm_claiming_the_same_device_fails_doctor_and_forget_drops_the_copy(
    sim_host: Callable[[str], Path],
) -> None:
    root = sim_host("p4")
    define(root, "docorig")
    assert vgpuadm(root, "create", "--type", "nvidia-63", "--vm", "docorig").code == 0
    [dev] = hostdev_keys(root, "docorig")
    copy = re.sub(r"<uuid>[^<]+</uuid>", f"<uuid>{uuid_mod.uuid4()}</uuid>", domain_xml(root, "docorig"))
    define_xml(root, copy.replace("<name>docorig</name>", "<name>doccopy</name>"))
    code, checks = _checks(root)
    assert code == 1
    assert checks[f"claims {dev}"] == {
        "check": f"claims {dev}", "status": "fail",
        "detail": f"{dev} is claimed by 2 domains (doccopy, docorig); only one of them can start",
        "hint": "keep it on the VM it belongs to; on each copy run `vgpuadm destroy --vm COPY --forget` "
                "(drops the copy's claim; the device and the VM it belongs to stay as they are)",
    }  # fmt: skip

    refused = vgpuadm(root, "destroy", "--vm", "doccopy", "--all")
    assert refused.code == 5 and "destroy --vm COPY --forget" in refused.err and "--all" not in refused.err

    res = vgpuadm(root, "destroy", "--vm", "doccopy", "--forget")
    assert res.code == 0, res.err
    assert (hostdev_keys(root, "doccopy"), allocations(root, "doccopy")) == ([], [])
    assert mdevs(root) == [dev] and hostdev_keys(root, "docorig") == [dev]
    assert [a.uuid for a in allocations(root, "docorig")] == [dev]
    code, checks = _checks(root)
    assert checks["claims"]["status"] == "pass"


def test_forget_drops_a_copys_bare_hostdev_claim(sim_host: Callable[[str], Path]) -> None:
    """A VM given its mdev by hand (a <hostdev>, no vgpuadm metadata) copied with `virsh dumpxml | virsh define`:
    doctor's claims hint says `destroy --vm COPY --forget`, and that drops the copy's hostdev (it used to say
    "nothing to do: domain … owns no vgpuadm devices"); the device and the original stay, and the original itself
    is never forgotten by it (no other domain claims its device then)."""
    root = sim_host("p4")
    dev = "11111111-2222-4333-8444-555555555555"
    assert vgpuadm(root, "mdev", "create", "--type", "nvidia-63", "--uuid", dev).code == 0
    hostdev = (
        f"<hostdev mode='subsystem' type='mdev' model='vfio-pci'><source><address uuid='{dev}'/></source></hostdev>"
    )
    for name in ("handorig", "handcopy"):
        define_xml(root, domain(name, hypervisor="qemu", machine=QEMU_MACHINE, devices=hostdev))
    code, checks = _checks(root)
    assert (code, checks[f"claims {dev}"]["status"]) == (1, "fail")
    assert "`vgpuadm destroy --vm COPY --forget`" in checks[f"claims {dev}"]["hint"]

    dry = vgpuadm(root, "destroy", "--vm", "handcopy", "--forget", "--dry-run")
    assert (dry.code, dry.out) == (0, f"would forget 1 device(s) domain handcopy claims:\n"
                                      f"  step 1/1 detach mdev {dev} from domain handcopy\n")  # fmt: skip
    res = vgpuadm(root, "destroy", "--vm", "handcopy", "--forget")
    assert (res.code, res.out) == (0, f"done: step 1/1 detach mdev {dev} from domain handcopy\n")
    assert (hostdev_keys(root, "handcopy"), hostdev_keys(root, "handorig"), mdevs(root)) == ([], [dev], [dev])
    assert "vgpuadm" not in domain_xml(root, "handcopy")
    assert _checks(root)[1]["claims"]["status"] == "pass"
    again = vgpuadm(root, "destroy", "--vm", "handorig", "--forget")
    assert (again.code, again.out) == (0, "nothing to do: domain handorig owns no vgpuadm devices\n")
    assert hostdev_keys(root, "handorig") == [dev]
