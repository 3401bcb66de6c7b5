"""A real reboot, as far as the devices go: unloading the sample drivers drops every mdev their parents had, and
SR-IOV goes back to its boot state (VFs off, their vfio-pci binds gone, autoprobe on). `vgpuadm restore` must bring
back the same UUIDs of the same types for the recorded domains, re-enable the NVMe VFs and rebind vfio-pci, in the
documented order (SR-IOV VFs, then mdevs, then vfio-pci binds); a second restore changes nothing."""

from __future__ import annotations

import json
import os
import subprocess

from guest_virsh import URI

from vgpuadm import api
from vgpuadm.host.sysfs import Sysfs

PCI = "/sys/bus/pci/devices"
SAMPLES = (("mtty", ()), ("mdpy", ()), ("mbochs", ("count=96",)))  # as guest-entry.sh loads them


def _mdevs(cli) -> list[tuple[str, str, str]]:
    return sorted((d["id"], d["type_id"], d["parent"]) for d in json.loads(cli("devices", "--json").out))


def _reload_sample_drivers() -> None:
    modules = os.environ["VGPUADM_KERNEL_MODULES"]
    for name, _ in SAMPLES:
        subprocess.run(["rmmod", name], check=True, capture_output=True, timeout=120)
    for name, params in SAMPLES:
        subprocess.run(["insmod", f"{modules}/{name}.ko", *params], check=True, capture_output=True, timeout=120)


def test_restore_after_the_drivers_are_reloaded(cli, sysfs: Sysfs, domain, enabled_vfs: tuple[str, list[str]]) -> None:
    pf, (vf0, _vf1) = enabled_vfs
    a, b = domain("kl-boot-a"), domain("kl-boot-b")
    for args in (("--type", "mtty-2", "--vm", a, "--total", "2"), ("--type", "mdpy-vga", "--vm", a),
                 ("--type", "mbochs-medium", "--vm", b)):  # fmt: skip
        result = cli("--connect", URI, "create", *args)
        assert result.code == 0, result.err
    result = cli("--connect", URI, "passthrough", "--gpu", vf0, "--vm", b)
    assert result.code == 0, result.err
    made = _mdevs(cli)
    assert len(made) == 4

    # The reboot: the parents go away with every mdev; VFs off (vfio-pci let go first, as a shutdown does).
    _reload_sample_drivers()
    assert sysfs.listdir("/sys/bus/mdev/devices") == []
    sysfs.write("/sys/bus/pci/drivers/vfio-pci/unbind", vf0)
    sysfs.write(f"{PCI}/{vf0}/driver_override", "\n")
    sysfs.write(f"{PCI}/{pf}/sriov_numvfs", "0")
    sysfs.write(f"{PCI}/{pf}/sriov_drivers_autoprobe", "1")

    result = cli("--connect", URI, "restore", "--json")
    assert result.code == 0, result.err + result.out
    report = json.loads(result.out)
    assert report["problems"] == [] and report["skipped"] == []
    phases = [line.split(":", 1)[0] for line in report["done"]]
    assert phases == sorted(phases, key=("sriov", "vgpu", "vfio").index)  # the documented order
    assert phases.count("sriov") == 1 and phases.count("vgpu") == 4
    assert _mdevs(cli) == made  # the same UUIDs, the same types, on the same parents
    assert sysfs.read(f"{PCI}/{pf}/sriov_numvfs") == "2"
    assert sysfs.link_name(f"{PCI}/{vf0}/driver") == "vfio-pci"

    # After the reboot the VFs come back with autoprobe on: nvme may take vf0 before restore gives it to vfio-pci,
    # or may already have let go (QEMU's secondary controllers are offline, so nvme's probe can fail). vgpuadm
    # remembers which it was; taking the VF back must return it there.
    found_on = api.original_drivers(None)[vf0] or None
    assert found_on in ("nvme", None)

    again = cli("--connect", URI, "restore", "--json")
    assert again.code == 0, again.err
    assert json.loads(again.out)["done"] == []
    assert _mdevs(cli) == made

    for name in (a, b):
        assert cli("--connect", URI, "destroy", "--vm", name, "--all").code == 0
    # Handed back to nvme, its probe can fail again by itself, asynchronously ("Device not ready; aborting
    # initialisation, CSTS=0x2", -19): the VF may be unbound again by the time we look, the kernel's doing.
    assert sysfs.link_name(f"{PCI}/{vf0}/driver") in {found_on, None}
    assert sysfs.read(f"{PCI}/{vf0}/driver_override") == "(null)"
    assert cli("sriov", "disable", pf).code == 0
