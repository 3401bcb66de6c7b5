"""Test setup for the inventory tests: make vGPUs on a simulated host the way a user would, by writing sysfs
through vgpuadm.api.open_sysfs(root); the simulated kernel (vgpuadm/sim/kernel.py) applies the effects."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.domains import KVM_MACHINE, domain
from vgpuadm import api
from vgpuadm.model import Allocation
from vgpuadm.plan.domains import Domain, Domains
from vgpuadm.virt.xml import metadata_xml


def create_mdev(root: Path, parent: str, type_id: str, uuid: str) -> None:
    """Write the UUID to the type's `create`, as mdevctl does; the simulated kernel makes the device."""
    api.open_sysfs(str(root)).write(f"/sys/class/mdev_bus/{parent}/mdev_supported_types/{type_id}/create", uuid)
    assert os.path.isdir(f"{root}/sys/bus/mdev/devices/{uuid}"), "the simulated kernel did not create the mdev"


def set_vf_type(root: Path, vf: str, type_num: int) -> None:
    api.open_sysfs(str(root)).write(f"/sys/bus/pci/devices/{vf}/nvidia/current_vgpu_type", f"{type_num}\n")


def nvidia_smi(root: Path, *args: str) -> str:
    """Run the host's nvidia-smi (the simulated one `vgpuadm sim build` installs under the root); its stdout."""
    smi = Path(root) / "usr/bin/nvidia-smi"
    return subprocess.run([str(smi), *args], check=True, capture_output=True, text=True).stdout


def mig_on(root: Path, index: int = 0) -> None:
    """`nvidia-smi -i N -mig 1`: the GPU then offers its MIG-backed types instead of its time-sliced ones."""
    nvidia_smi(root, "-i", str(index), "-mig", "1")


def domain_xml(name: str, allocations: list[Allocation]) -> str:
    """A saved domain definition (as `virsh dumpxml` prints it) carrying vgpuadm's metadata."""
    uuid = f"6c3e8a6e-0000-4000-8000-00000000000{len(name) % 10}"
    return domain(name, uuid, machine=KVM_MACHINE, metadata=metadata_xml(allocations), devices="") + "\n"


def recorded(allocations: list[Allocation] | None) -> Domains | None:
    """The domains (stopped) whose vgpuadm metadata records `allocations` and whose XML has no other hostdev — the
    domain scan report/inventory.inventory() reads ownership from (None stays None: ownership unknown). Built
    field by field, so that any name (markup, quotes) can be given."""
    if allocations is None:
        return None
    names = dict.fromkeys(a.domain for a in allocations)
    return Domains("", {n: Domain(n, "", "", False, "", tuple(a for a in allocations if a.domain == n), (), None, None)
                        for n in names})  # fmt: skip


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


def h200_mig_busy(root: Path, domains_dir: Path) -> None:
    """On an H200 host (layout C): MIG on and three GPU instances made with nvidia-smi — 1g.18gb at slots 6 (id 1)
    and 5 (id 2), 2g.35gb at 0 (id 3). train01's H200X-1-18C on VF 0000:18:00.4 runs on instance 1 (the driver binds
    the lowest free id); the domains' metadata says vgpuadm made instance 1 for train01 and instance 2 for idle01
    (whose vGPU is not there now), and nobody made instance 3: used, free and by-hand."""
    mig_on(root)
    nvidia_smi(root, "mig", "-i", "0", "-cgi", "19:6,19:5,14:0")
    set_vf_type(root, "0000:18:00.4", 1414)
    vf = "0000:18:00.5"
    allocations = [
        Allocation("train01", "vf", "nvidia-1414", "0000:18:00.4", address="0000:18:00.4",
                   extra={"mig_instance": "19:6"}),
        Allocation("idle01", "vf", "nvidia-1414", vf, address=vf, extra={"mig_instance": "19:5"}),
    ]  # fmt: skip
    domains_dir.mkdir(parents=True, exist_ok=True)
    for a in allocations:
        (domains_dir / f"{a.domain}.xml").write_text(domain_xml(a.domain, [a]))
