"""`vgpuadm mig …`: read the host's MIG state (host/mig.py) and plan MIG changes with the mig mode (modes/mig.py).
The planners read nvidia-smi inside the verb's Session (under the host lock, after discovery), then plan purely;
the executor runs the steps (executor/mig.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from vgpuadm.catalog.mig import MigGpu
from vgpuadm.errors import ConflictError, LibvirtError
from vgpuadm.host import mig as host_mig
from vgpuadm.host.root import HostRoot
from vgpuadm.model import HostSnapshot, pci_address
from vgpuadm.modes import mig as mig_mode
from vgpuadm.ops.host import Planner
from vgpuadm.ops.session import Session
from vgpuadm.report.mig import Made, instance_rows, made_by
from vgpuadm.steps import Plan


def read(root: str | None) -> list[MigGpu]:
    return host_mig.read(HostRoot(root))


def instances(root: str | None, connect: str | None = None) -> list[dict[str, Any]]:
    """`vgpuadm mig instances`: every GPU instance with the VM whose vGPU uses it and the VM vgpuadm made it for
    (from this host's domains; both unknown, null, when libvirt cannot be reached)."""
    with Session.read(root, connect) as s:
        gpus = host_mig.read(s.root)
        return instance_rows(gpus, *ownership(s))


def ownership(s: Session) -> tuple[dict[str, str] | None, Made | None]:
    """VF address / mdev UUID → the VM that owns it, and the instances vgpuadm made (report/mig.made_by); both None
    when the domains cannot be read."""
    try:
        domains = s.domains()
    except (LibvirtError, ConflictError):  # also LibvirtMissingError: no libvirt-python
        return None, None
    owners = {key: vm for (_kind, key), vm in domains.users().items()}
    return owners, made_by(domains.allocations, s.snap.physical_gpu)


def _gpus(snap: HostSnapshot) -> list[MigGpu]:
    return host_mig.read(HostRoot(snap.root))


def plan_enable(gpu: str, enable: bool = True) -> Planner:
    address = pci_address(gpu)

    def planner(snap: HostSnapshot) -> tuple[Plan, list[str]]:
        mode = mig_mode.MODE
        steps = (mode.plan_enable if enable else mode.plan_disable)(snap, _gpus(snap), address)
        return Plan.of(steps, f"{'enable' if enable else 'disable'} MIG mode on {address}"), []

    return planner


def plan_create(gpu: str, profile: str, count: int = 1, start: int | None = None) -> Planner:
    address = pci_address(gpu)

    def planner(snap: HostSnapshot) -> tuple[Plan, list[str]]:
        steps = mig_mode.MODE.plan_create(_gpus(snap), address, profile, count, start)
        return Plan.of(
            steps, f"create {count} MIG GPU instance{'s' if count > 1 else ''} of {profile} on {address}"
        ), []

    return planner


def plan_destroy(gpu: str, instance_ids: Sequence[int] | None) -> Planner:
    address = pci_address(gpu)

    def planner(snap: HostSnapshot) -> tuple[Plan, list[str]]:
        steps = mig_mode.MODE.plan_destroy(_gpus(snap), address, instance_ids)
        what = (
            "every MIG GPU instance"
            if instance_ids is None
            else "MIG GPU instance " + ", ".join(map(str, instance_ids))
        )
        return Plan.of(steps, f"destroy {what} on {address}"), []

    return planner
