"""Layout C: NVIDIA vendor-specific VFIO. A vGPU is a VF whose nvidia/current_vgpu_type is set (reference §3.3);
the guest gets the VF itself as a `type='pci' managed='no'` hostdev."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import ClassVar

from vgpuadm.catalog.capacity import heterogeneous
from vgpuadm.catalog.migration import Landing, TargetHost, live_params
from vgpuadm.errors import FREE, ConflictError, NotFoundError
from vgpuadm.model import (
    PCI_KEY,
    Allocation,
    Holding,
    HostSnapshot,
    Layout,
    VendorVf,
    VgpuType,
    check_params,
    join_params,
    params_now,
    same_params,
    split_params,
)
from vgpuadm.modes.base import RECREATE_VGPUS, HostdevSpec, Instance, Made, Mode, Rebuild, type_room
from vgpuadm.steps import ClearVfVgpuType, Plan, SetVfPlacement, SetVfVgpuType, SetVgpuParams, Step
from vgpuadm.usage import DriverUsage, VgpuUsage
from vgpuadm.virt import xml


class VfVgpuMode(Mode):
    name: ClassVar[str] = "vf"
    layouts: ClassVar[tuple[Layout, ...]] = (Layout.VENDOR_VFIO,)
    holds: ClassVar[Holding] = Holding.VF_TYPE
    restore_phase: ClassVar[str | None] = "vgpu"
    reset_loses: ClassVar[tuple[str, ...]] = ("VF vGPU types and placement IDs",)  # with the VFs (modes/sriov.py)
    needs_vendor_driver: ClassVar[bool] = True

    def find(self, snapshot: HostSnapshot, vf: str) -> VendorVf:
        found = snapshot.vendor_vfs.get(vf)
        if found is None:
            raise NotFoundError(
                f"{vf} is not an NVIDIA vendor-VFIO VF",
                snapshot.skipped(vf, "run `vgpuadm gpus` and pick a VF of layout vendor-vfio"),
            )
        return found

    def validate(self, snapshot: HostSnapshot, device_id: str) -> None:
        self.find(snapshot, device_id)

    def plan_create(
        self, snapshot: HostSnapshot, t: VgpuType, params: str = "", placement: int | None = None
    ) -> list[Step]:
        """`placement`: the placement ID (heterogeneous mode, catalog/capacity.choose_placement), written first."""
        vf = self.find(snapshot, t.parent)
        number = t.numeric_id
        if vf.in_use:
            if vf.current_type == number:
                return []
            raise ConflictError(
                f"VF {vf.address} already runs {vf.current_type_id}",
                f"{FREE}or pick another VF",
                blockers=[(vf.address, "vf clear")],
            )
        steps: list[Step] = []
        if placement is not None and vf.placement_id != placement:
            steps.append(SetVfPlacement(vf.address, placement, -1 if vf.placement_id is None else vf.placement_id))
        steps.append(SetVfVgpuType(vf.address, int(number or 0)))
        params = check_params(params, t.type_id)
        if params:
            steps.append(SetVgpuParams("vf", vf.address, params, previous=vf.vgpu_params or ""))
        return steps

    def plan_clear(self, snapshot: HostSnapshot, vf_address: str) -> list[Step]:
        vf = self.find(snapshot, vf_address)
        if not vf.in_use:
            return []
        steps: list[Step] = []
        if vf.vgpu_params and vf.vgpu_params.strip():
            steps.append(SetVgpuParams("vf", vf.address, "", previous=vf.vgpu_params))
        steps.append(ClearVfVgpuType(vf.address, vf.current_type))
        return steps

    def plan_free(self, snapshot: HostSnapshot, a: Allocation, drivers: Mapping[str, str]) -> list[Step]:
        vf = snapshot.vendor_vfs.get(a.address or "")
        return self.plan_clear(snapshot, vf.address) if vf is not None and vf.in_use else []

    def record_problem(self, a: Allocation) -> str | None:
        """Recorded metadata is outside input: a VF's type is nvidia-<number>."""
        number = (a.type_id or "").rsplit("-", 1)[-1]
        if a.type_id and not (number.isdecimal() and int(number) > 0):
            return f"{a.domain}: vf device #{a.slot}: type {a.type_id[:80]!r} is not nvidia-<number>"
        return None

    def missing(self, snapshot: HostSnapshot, a: Allocation) -> bool:
        vf = snapshot.vendor_vfs.get(a.address or "")
        return vf is None or vf.current_type_id != a.type_id

    # -- migration (plan/migration.py) -----------------------------------------------------------------------------

    def live_move(self, a: Allocation) -> str | None:
        """A layout C vGPU moves live (VFIO migration) unless its vgpu_params forbid it."""
        return live_params(a.params)

    def room_on(self, snapshot: HostSnapshot, target: TargetHost, a: Allocation, taken: Counter[str]) -> Landing:
        return type_room(snapshot, target, a, taken)

    def move_refusal(self, a: Allocation) -> str | None:
        """The target gives the domain one of its own VFs set to the same type (the hostdev names that VF)."""
        return None

    def describe(self, a: Allocation) -> str:
        return f"VF {a.address} ({a.type_id})"

    def usage(self, snapshot: HostSnapshot, a: Allocation, driver: DriverUsage) -> VgpuUsage | None:
        """A layout C VF's record does not name the VF (no MDEV UUID): it is the vGPU of the VF's type on the VF's
        GPU that the VM owning the VF runs (VM UUID = the domain's), at the VF's placement where it has one (a
        VM with two vGPUs of one type on one GPU is told apart by placement only)."""
        vf = snapshot.vendor_vfs.get(a.address or "")
        if vf is None or not vf.current_type or not a.domain_uuid:
            return None
        placed = vf.placement_id if vf.placement_id is not None and vf.placement_id >= 0 else None
        return next((v for v in driver.vgpus if v.gpu == vf.physfn and v.vm_uuid == a.domain_uuid.lower()
                     and v.type_num == vf.current_type and placed in (None, v.placement_id)), None)  # fmt: skip

    def current_params(self, snapshot: HostSnapshot, a: Allocation) -> str | None:
        vf = snapshot.vendor_vfs.get(a.address or "")
        return vf.vgpu_params if vf is not None else None

    def params_step(self, snapshot: HostSnapshot, a: Allocation, params: str) -> Step | None:
        return SetVgpuParams("vf", a.address or "", params, previous=self.current_params(snapshot, a) or "")

    def hostdev_xml(self, a: Allocation) -> str:
        return xml.vf_hostdev(xml.require(a, a.address, "address"), guest_address=xml.guest_address(a))

    def adopt(self, snapshot: HostSnapshot, ref: xml.HostdevRef, domain: str, domain_uuid: str, slot: int
              ) -> Allocation | None:  # fmt: skip
        vf = snapshot.vendor_vfs.get(ref.key) if ref.kind == PCI_KEY else None
        if vf is None or not vf.in_use:
            return None
        return Allocation(domain, self.name, vf.current_type_id, vf.address, address=vf.address,
                          params=params_now(vf.vgpu_params), domain_uuid=domain_uuid, slot=slot)  # fmt: skip

    # -- restore after a reboot ---------------------------------------------------------------------------------

    def device_shown(self, snapshot: HostSnapshot, a: Allocation) -> bool:
        return (self.host_device(a) or "") in snapshot.vendor_vfs  # the VF enabled (SR-IOV on its GPU)

    def heterogeneous_gpu(self, snapshot: HostSnapshot, a: Allocation) -> str | None:
        return snapshot.physical_gpu(a.address) if a.address and "placement_id" in a.extra else None

    def plan_rebuild(self, snapshot: HostSnapshot, a: Allocation, done: set[str]) -> Rebuild:
        """The VF's vGPU type again, at the recorded placement ID; parameters follow in their phase."""
        if not a.type_id:
            return [], []
        steps: list[Step] = []
        problems: list[str] = []
        vf_addr = a.address or a.parent or ""
        vf = snapshot.vendor_vfs.get(vf_addr)
        if bad := self.record_problem(a):
            return [], [bad]
        want = int(a.type_id.rsplit("-", 1)[-1])
        if vf is None:
            problems.append(f"{a.domain}: VF {vf_addr} does not exist (SR-IOV not enabled on its GPU)")
        elif vf.current_type == 0:
            t = next((t for t in vf.offered if t.numeric_id == want), None)
            if t is None:
                problems.append(f"{a.domain}: VF {vf_addr} does not offer {a.type_id} (creatable_vgpu_types)")
            else:
                steps += self.plan_create(snapshot, t, placement=_recorded_placement(a, snapshot, vf_addr))
        elif vf.current_type != want:
            problems.append(f"{a.domain}: VF {vf_addr} runs {vf.current_type_id}, the domain wants {a.type_id}")
        return [Plan((s,), RECREATE_VGPUS) for s in steps], problems

    def restore_params(self, snapshot: HostSnapshot, a: Allocation) -> Step | None:
        vf = snapshot.vendor_vfs.get(a.address or a.parent or "")
        if not a.params or vf is None or not vf.in_use or same_params(vf.vgpu_params, a.params):
            return None
        return SetVgpuParams("vf", vf.address, join_params(split_params(a.params)), vf.vgpu_params or "")

    def hostdev_spec(self, snapshot: HostSnapshot, device_id: str) -> HostdevSpec:
        return {"mode": "vf", "address": device_id, "managed": "no"}

    # -- reports, placement, create planner ----------------------------------------------------------------------

    def device_label(self, a: Allocation) -> str | None:
        return f"VF {a.address}"

    def present(self, snapshot: HostSnapshot, a: Allocation) -> bool:
        vf = snapshot.vendor_vfs.get(a.address or "")
        return vf is not None and vf.in_use and vf.current_type_id == a.type_id

    def plan_instance(self, snapshot: HostSnapshot, t: VgpuType, ask: Instance) -> Made:
        steps = tuple(self.plan_create(snapshot, t, ask.params, ask.placement()))
        placed = [s.placement_id for s in steps if isinstance(s, SetVfPlacement)]  # recorded when it is written
        extra = {"placement_id": str(placed[0])} if placed else {}
        return Made(steps, t.parent, self.name, t.type_id, t.parent, address=t.parent, extra=extra)


def _recorded_placement(a: Allocation, snapshot: HostSnapshot, vf: str) -> int | None:
    """The placement ID the domain recorded, on a GPU in heterogeneous mode (the metadata grammar: 1–4 digits)."""
    pid = a.extra.get("placement_id", "")
    return int(pid) if pid.isdecimal() and heterogeneous(snapshot, snapshot.physical_gpu(vf)) else None


MODE = VfVgpuMode()
