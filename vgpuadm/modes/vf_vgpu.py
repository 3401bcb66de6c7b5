"""Layout C: NVIDIA vendor-specific VFIO. A vGPU is a VF whose nvidia/current_vgpu_type is set (reference §3.3);
the guest gets the VF itself as a `type='pci' managed='no'` hostdev."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from vgpuadm.errors import ConflictError, NotFoundError
from vgpuadm.model import Allocation, HostSnapshot, Layout, VendorVf, VgpuType
from vgpuadm.modes.base import HostdevSpec, Mode, check_params
from vgpuadm.steps import ClearVfVgpuType, SetVfPlacement, SetVfVgpuType, SetVgpuParams, Step


class VfVgpuMode(Mode):
    name: ClassVar[str] = "vf"
    layouts: ClassVar[tuple[Layout, ...]] = (Layout.VENDOR_VFIO,)

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
                f"VF {vf.address} already runs nvidia-{vf.current_type}",
                f"clear it first with `vgpuadm vf clear {vf.address}` or pick another VF",
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
        return vf is None or f"nvidia-{vf.current_type}" != a.type_id

    def hostdev_spec(self, snapshot: HostSnapshot, device_id: str) -> HostdevSpec:
        return {"mode": "vf", "address": device_id, "managed": "no"}


MODE = VfVgpuMode()
