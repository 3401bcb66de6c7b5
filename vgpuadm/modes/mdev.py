"""Layouts A and B: mediated devices created on a PF or an SR-IOV VF, plus NVIDIA per-mdev vgpu_params."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import ClassVar

from vgpuadm.catalog.migration import Landing, TargetHost, live_params
from vgpuadm.errors import ConflictError, NotFoundError, VgpuadmError
from vgpuadm.model import (
    MDEV_KEY,
    Allocation,
    DeviceKey,
    Holding,
    HostSnapshot,
    Layout,
    Mdev,
    VgpuType,
    check_params,
    is_nvidia_type,
    join_params,
    mdev_key,
    mdev_uuid,
    params_now,
    same_params,
    split_params,
)
from vgpuadm.modes.base import RECREATE_VGPUS, HostdevSpec, Instance, Made, Mode, Rebuild, type_room
from vgpuadm.steps import CreateMdev, Plan, RemoveMdev, SetVgpuParams, Step
from vgpuadm.usage import DriverUsage, VgpuUsage
from vgpuadm.virt import xml


class MdevMode(Mode):
    name: ClassVar[str] = "mdev"
    layouts: ClassVar[tuple[Layout, ...]] = (Layout.MDEV_PF, Layout.MDEV_VF)
    holds: ClassVar[Holding] = Holding.MDEV_INSTANCE
    restore_phase: ClassVar[str | None] = "vgpu"
    reset_loses: ClassVar[tuple[str, ...]] = ("mdevs",)  # the parent unregisters and registers again, empty
    needs_vendor_driver: ClassVar[bool] = True

    def validate(self, snapshot: HostSnapshot, device_id: str) -> None:
        self.find(snapshot, device_id)

    def find(self, snapshot: HostSnapshot, device_id: str) -> Mdev:
        m = snapshot.mdevs.get(device_id.lower())
        if m is None:
            raise NotFoundError(f"No mdev {device_id} on this host", "run `vgpuadm devices` to list the mdevs")
        return m

    def plan_create(self, snapshot: HostSnapshot, t: VgpuType, uuid: str, params: str = "") -> list[Step]:
        uuid = mdev_uuid(uuid)
        if uuid in snapshot.mdevs:
            other = snapshot.mdevs[uuid]
            raise ConflictError(
                f"mdev {uuid} already exists (type {other.type_id} on {other.parent})",
                "pick another --uuid or omit it",
            )
        steps: list[Step] = [CreateMdev(t.parent, t.type_id, uuid)]
        params = check_params(params, t.type_id)
        if params:
            steps.append(SetVgpuParams("mdev", uuid, params))
        return steps

    def plan_remove(self, snapshot: HostSnapshot, device_id: str) -> list[Step]:
        m = self.find(snapshot, device_id)
        steps: list[Step] = []
        if m.vgpu_params and m.vgpu_params.strip():
            # Cleared first only so that a rollback of the removal restores the parameters too.
            steps.append(SetVgpuParams("mdev", m.uuid, "", previous=m.vgpu_params))
        steps.append(RemoveMdev(m.parent, m.uuid, m.type_id))
        return steps

    def plan_params(self, snapshot: HostSnapshot, device_id: str, params: str) -> list[Step]:
        m = self.find(snapshot, device_id)
        params = check_params(params, m.type_id)
        if same_params(m.vgpu_params, params):
            return []
        return [SetVgpuParams("mdev", m.uuid, params, previous=m.vgpu_params or "")]

    def plan_free(self, snapshot: HostSnapshot, a: Allocation, drivers: Mapping[str, str]) -> list[Step]:
        return self.plan_remove(snapshot, a.uuid) if a.uuid and a.uuid in snapshot.mdevs else []

    def missing(self, snapshot: HostSnapshot, a: Allocation) -> bool:
        return a.uuid not in snapshot.mdevs

    def key(self, a: Allocation) -> DeviceKey | None:
        return mdev_key(a.uuid) if a.uuid else None

    # -- migration (plan/migration.py) -----------------------------------------------------------------------------

    def live_move(self, a: Allocation) -> str | None:
        """An NVIDIA vGPU moves live (VFIO migration) unless its vgpu_params forbid it; other drivers' mdevs
        move with their domain stopped."""
        if not is_nvidia_type(a.type_id or ""):
            return f"vgpuadm moves only NVIDIA vGPUs live, not {a.type_id}"
        return live_params(a.params)

    def room_on(self, snapshot: HostSnapshot, target: TargetHost, a: Allocation, taken: Counter[str]) -> Landing:
        return type_room(snapshot, target, a, taken)

    def move_refusal(self, a: Allocation) -> str | None:
        """The target makes an mdev of the same type (its own placement), taking the same UUID where it is free."""
        return None

    def describe(self, a: Allocation) -> str:
        return f"mdev {a.uuid} ({a.type_id})"

    def display(self, a: Allocation) -> tuple[bool, bool]:
        return a.extra.get("display") == "on", a.extra.get("ramfb") == "on"

    def host_device(self, a: Allocation) -> str | None:
        return a.parent

    def usage(self, snapshot: HostSnapshot, a: Allocation, driver: DriverUsage) -> VgpuUsage | None:
        """An mdev's record names it: its MDEV UUID (on a MIG-backed type too: the record says its GPU instance),
        run by the VM of `a`'s domain (a domain copied with its <hostdev> claims the mdev too, but only the one
        running it is the record's)."""
        vm = (a.domain_uuid or "").lower()
        return next((v for v in driver.vgpus if a.uuid and v.mdev_uuid == a.uuid and (not vm or v.vm_uuid == vm)),
                    None)  # fmt: skip

    def current_params(self, snapshot: HostSnapshot, a: Allocation) -> str | None:
        m = snapshot.mdevs.get(a.uuid or "")
        return m.vgpu_params if m is not None else None

    def params_step(self, snapshot: HostSnapshot, a: Allocation, params: str) -> Step | None:
        return SetVgpuParams("mdev", a.uuid or "", params, previous=self.current_params(snapshot, a) or "")

    def hostdev_xml(self, a: Allocation) -> str:
        display, ramfb = self.display(a)
        return xml.mdev_hostdev(
            xml.require(a, a.uuid, "UUID"), display=display, ramfb=ramfb, guest_address=xml.guest_address(a)
        )

    def adopt(self, snapshot: HostSnapshot, ref: xml.HostdevRef, domain: str, domain_uuid: str, slot: int
              ) -> Allocation | None:  # fmt: skip
        m = snapshot.mdevs.get(ref.key) if ref.kind == MDEV_KEY else None
        if m is None:
            return None
        extra = {"display": "on" if ref.display else "off", **({"ramfb": "on"} if ref.ramfb else {})}
        return Allocation(domain, self.name, m.type_id, m.parent, m.uuid, params=params_now(m.vgpu_params),
                          domain_uuid=domain_uuid, slot=slot, extra=extra)  # fmt: skip

    # -- restore after a reboot, on demand ----------------------------------------------------------------------

    placed_at_start: ClassVar[bool] = True  # an on-demand mdev records no parent: placed when its domain starts

    def device_shown(self, snapshot: HostSnapshot, a: Allocation) -> bool:
        return (a.parent or "") in snapshot.mdev_parents  # the parent registered with the mdev core

    def plan_rebuild(self, snapshot: HostSnapshot, a: Allocation, done: set[str]) -> Rebuild:
        """The mdev with the UUID the domain names, on its recorded parent; parameters follow in their phase."""
        steps: list[Step] = []
        problems: list[str] = []
        if not (a.uuid and a.parent and a.type_id):
            return [], []
        have = snapshot.mdevs.get(a.uuid)
        if have is None:
            parent = snapshot.mdev_parents.get(a.parent)
            t = next((t for t in parent.types if t.type_id == a.type_id), None) if parent else None
            if parent is None:
                problems.append(f"{a.domain}: mdev {a.uuid} — parent {a.parent} has not registered")
            elif t is None:
                problems.append(f"{a.domain}: mdev {a.uuid} — parent {a.parent} offers no type {a.type_id}")
            else:
                try:  # this mode's own checks (UUID grammar, conflicts)
                    steps += self.plan_create(snapshot, t, a.uuid)
                except VgpuadmError as exc:
                    problems.append(f"{a.domain}: mdev {a.uuid}: {exc.message}")
        elif (have.parent, have.type_id) != (a.parent, a.type_id):
            problems.append(
                f"{a.domain}: mdev {a.uuid} exists as {have.type_id} on {have.parent}, "
                f"the domain wants {a.type_id} on {a.parent}"
            )
        return [Plan((s,), RECREATE_VGPUS) for s in steps], problems

    def restore_params(self, snapshot: HostSnapshot, a: Allocation) -> Step | None:
        m = snapshot.mdevs.get(a.uuid or "")
        if not a.params or m is None or same_params(m.vgpu_params, a.params):
            return None
        return self.params_step(snapshot, a, join_params(split_params(a.params)))

    def hostdev_spec(self, snapshot: HostSnapshot, device_id: str) -> HostdevSpec:
        m = snapshot.mdevs.get(device_id.lower())
        spec: HostdevSpec = {"mode": "mdev", "uuid": device_id.lower(), "model": "vfio-pci"}
        if m is not None:
            spec.update(type_id=m.type_id, parent=m.parent)
        return spec

    # -- reports, placement, create planner ----------------------------------------------------------------------

    def device_id(self, a: Allocation) -> str | None:
        return a.uuid

    def device_label(self, a: Allocation) -> str | None:
        return f"mdev {a.uuid}"

    def mdev_record(self, a: Allocation) -> tuple[str, str, str, str | None] | None:
        return (a.parent, a.uuid, a.type_id, a.params) if a.parent and a.uuid and a.type_id else None

    def present(self, snapshot: HostSnapshot, a: Allocation) -> bool:
        m = snapshot.mdevs.get((a.uuid or "").lower())
        return m is not None and m.type_id == a.type_id

    def plan_instance(self, snapshot: HostSnapshot, t: VgpuType, ask: Instance) -> Made:
        dev = ask.uuid()
        steps = tuple(self.plan_create(snapshot, t, dev, ask.params))
        return Made(
            steps, dev, self.name, t.type_id, t.parent, uuid=dev, display=True, placed_at_start=self.placed_at_start
        )


MODE = MdevMode()
