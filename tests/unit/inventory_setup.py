"""Test setup for the inventory tests: make vGPUs on a simulated host the way a user would, by writing sysfs
through vgpuadm.api.open_sysfs(root); the simulated kernel (vgpuadm/sim/kernel.py) applies the effects."""

from __future__ import annotations

import os
from pathlib import Path

from vgpuadm import api
from vgpuadm.model import Allocation
from vgpuadm.virt.xml import metadata_xml


def create_mdev(root: Path, parent: str, type_id: str, uuid: str) -> None:
    """Write the UUID to the type's `create`, as mdevctl does; the simulated kernel makes the device."""
    api.open_sysfs(str(root)).write(f"/sys/class/mdev_bus/{parent}/mdev_supported_types/{type_id}/create", uuid)
    assert os.path.isdir(f"{root}/sys/bus/mdev/devices/{uuid}"), "the simulated kernel did not create the mdev"


def set_vf_type(root: Path, vf: str, type_num: int) -> None:
    api.open_sysfs(str(root)).write(f"/sys/bus/pci/devices/{vf}/nvidia/current_vgpu_type", f"{type_num}\n")


def domain_xml(name: str, allocations: list[Allocation]) -> str:
    """A saved domain definition (as `virsh dumpxml` prints it) carrying vgpuadm's metadata."""
    return (
        f"<domain type='kvm'><name>{name}</name><uuid>6c3e8a6e-0000-4000-8000-00000000000{len(name) % 10}</uuid>"
        f"<memory unit='KiB'>1048576</memory><os><type arch='x86_64' machine='q35'>hvm</type></os>"
        f"<metadata>{metadata_xml(allocations)}</metadata><devices/></domain>\n"
    )


P4_UUIDS = [f"aaaaaaaa-0000-4000-8000-00000000000{i}" for i in range(8)]


def p4_busy(root: Path, domains_dir: Path | None = None) -> list[Allocation]:
    """On a P4 host: two nvidia-63 on 01:00.0 (one owned by web01, one leaked), one nvidia-64 on 02:00.0 (db02),
    and a domain `gone` whose recorded mdev does not exist. Saves the domains' XML in domains_dir when given."""
    u = P4_UUIDS
    create_mdev(root, "0000:01:00.0", "nvidia-63", u[0])
    create_mdev(root, "0000:01:00.0", "nvidia-63", u[1])
    create_mdev(root, "0000:02:00.0", "nvidia-64", u[2])
    allocations = [
        Allocation("web01", "mdev", "nvidia-63", "0000:01:00.0", u[0]),
        Allocation("db02", "mdev", "nvidia-64", "0000:02:00.0", u[2]),
        Allocation("gone", "mdev", "nvidia-63", "0000:01:00.0", u[5]),
    ]
    if domains_dir is not None:
        domains_dir.mkdir(parents=True, exist_ok=True)
        for a in allocations:
            (domains_dir / f"{a.domain}.xml").write_text(domain_xml(a.domain, [a]))
    return allocations
