"""`reconcile`: devices that exist but no domain owns (leaks), the steps that remove them, and recorded devices
that do not exist (lost: `restore` brings them back). Pure."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from vgpuadm.model import HostSnapshot
from vgpuadm.modes import passthrough
from vgpuadm.plan import devices as device_plans
from vgpuadm.steps import Plan, Step

VFIO = "vfio"  # the leak kind of a group vgpuadm bound to vfio-pci; a leaked vGPU's kind is its mode (mdev | vf)


@dataclass(frozen=True)
class Leak:
    kind: str  # mdev | vf | vfio
    id: str
    detail: str

    def describe(self) -> str:
        return f"{self.kind} {self.id} ({self.detail}) is owned by no domain"


def find_leaks(snap: HostSnapshot, owned: set[str], vfio_remembered: dict[str, str]) -> list[Leak]:
    """Devices that exist but no domain owns: mdevs, typed layout C VFs, and functions vgpuadm bound to vfio-pci."""
    leaks = [Leak("mdev", m.uuid, f"{m.type_id} on {m.parent}") for m in snap.mdevs.values() if m.uuid not in owned]
    leaks += [Leak("vf", vf.address, vf.current_type_id) for vf in snap.vendor_vfs.values()
              if vf.in_use and vf.address not in owned]  # fmt: skip
    for addr in sorted(vfio_remembered):
        fn = snap.functions.get(addr)
        group = snap.group_members(addr)
        if fn is not None and fn.driver == "vfio-pci" and not owned.intersection(group):
            leaks.append(Leak(VFIO, addr, f"bound to vfio-pci, was {vfio_remembered[addr] or 'unbound'}"))
    return sorted(leaks, key=lambda lk: (lk.kind, lk.id))


def leak_plan(snap: HostSnapshot, leaks: Sequence[Leak], vfio_remembered: dict[str, str]) -> Plan:

    steps: list[Step] = []
    done_groups: set[str] = set()
    for lk in leaks:
        if lk.kind != VFIO:  # a vGPU: removed as `vgpuadm remove` does
            steps.extend(device_plans.plan_remove(snap, lk.id).steps)
        elif lk.id not in done_groups:
            done_groups.update(snap.group_members(lk.id))
            steps.extend(passthrough.MODE.plan_restore(snap, lk.id, vfio_remembered))
    return Plan.of(steps, f"remove {len(leaks)} leaked device(s)")
