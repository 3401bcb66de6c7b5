"""Layouts A and B: mediated devices created on a PF or an SR-IOV VF, plus NVIDIA per-mdev vgpu_params."""

from __future__ import annotations

import re
import uuid as uuid_mod
from typing import ClassVar

from vgpuadm.errors import ConflictError, NotFoundError, UsageError
from vgpuadm.model import HostSnapshot, Layout, Mdev, VgpuType
from vgpuadm.modes.base import HostdevSpec, Mode, register_mode
from vgpuadm.steps import CreateMdev, RemoveMdev, SetVgpuParams, Step

_PARAM = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=\S+$")


def check_uuid(text: str, hint: str = "or omit --uuid") -> str:
    """The canonical lower-case form of a UUID the kernel accepts (36 characters), else UsageError whose hint ends
    with `hint`."""
    try:
        value = uuid_mod.UUID(text)
    except ValueError:
        value = None
    if value is None or len(text) != 36:
        raise UsageError(
            f'Malformed UUID "{text}"', f"give 36 characters like 83b8f4f2-509f-382f-3c1e-e6bfe0fa1001, {hint}"
        )
    return str(value)


def check_params(params: str, type_id: str) -> str:
    """Normalise `k=v k=v` vgpu_params (reference §2.5); only NVIDIA types take them."""
    words = params.split()
    if not words:
        return ""
    if not type_id.startswith("nvidia-"):
        raise UsageError(f"{type_id} takes no vgpu_params", "vgpu_params exist only for NVIDIA vGPU types")
    for w in words:
        if not _PARAM.match(w):
            raise UsageError(f'Malformed vgpu parameter "{w}"', "write key=value, e.g. --param frame_rate_limiter=0")
    return " ".join(words)


class MdevMode(Mode):
    name: ClassVar[str] = "mdev"
    layouts: ClassVar[tuple[Layout, ...]] = (Layout.MDEV_PF, Layout.MDEV_VF)

    def validate(self, snapshot: HostSnapshot, device_id: str) -> None:
        self.find(snapshot, device_id)

    def find(self, snapshot: HostSnapshot, device_id: str) -> Mdev:
        m = snapshot.mdevs.get(device_id.lower())
        if m is None:
            raise NotFoundError(f"No mdev {device_id} on this host", "run `vgpuadm devices` to list the mdevs")
        return m

    def plan_create(self, snapshot: HostSnapshot, t: VgpuType, uuid: str, params: str = "") -> list[Step]:
        uuid = check_uuid(uuid)
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
        if (m.vgpu_params or "").strip() == params:
            return []
        return [SetVgpuParams("mdev", m.uuid, params, previous=m.vgpu_params or "")]

    def hostdev_spec(self, snapshot: HostSnapshot, device_id: str) -> HostdevSpec:
        m = snapshot.mdevs.get(device_id.lower())
        spec: HostdevSpec = {"mode": "mdev", "uuid": device_id.lower(), "model": "vfio-pci"}
        if m is not None:
            spec.update(type_id=m.type_id, parent=m.parent)
        return spec


MODE = register_mode(MdevMode())
