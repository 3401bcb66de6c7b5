"""Data-only libvirt Steps: attach/detach a hostdev and replace the vgpuadm <metadata> element of a domain.

The device XML is rendered at plan time and carried by the step, so the journal holds exactly what was attached
and undo detaches that same element. Handlers live in vgpuadm/virt/handlers.py (registered by vgpuadm.api); this
module imports no libvirt, so planners (modes, api) can build these steps freely.
"""

from __future__ import annotations

from dataclasses import dataclass

from vgpuadm.steps import Step, step_kind


@step_kind("attach-hostdev")
@dataclass(frozen=True)
class AttachHostdev(Step):
    """Attach `device_xml` (persistent, and live when the domain runs). `what` names the device for people.
    Undo: detach it when present."""

    domain: str
    device_xml: str
    what: str

    def describe(self) -> str:
        return f"attach {self.what} to domain {self.domain}"


@step_kind("detach-hostdev")
@dataclass(frozen=True)
class DetachHostdev(Step):
    """Detach `device_xml` from the domain. Undo: attach it again when absent."""

    domain: str
    device_xml: str
    what: str

    def describe(self) -> str:
        return f"detach {self.what} from domain {self.domain}"


@step_kind("set-metadata")
@dataclass(frozen=True)
class SetMetadata(Step):
    """Replace the domain's vgpuadm metadata element with `element` ("" removes it); `previous` is what was there
    ("" = nothing), written back on undo. `devices` is how many devices the new element records."""

    domain: str
    element: str
    previous: str
    devices: int

    def describe(self) -> str:
        if not self.element:
            return f"remove the vgpuadm metadata of domain {self.domain}"
        return f"record {self.devices} vgpuadm device(s) in the metadata of domain {self.domain}"


@step_kind("set-virtio-gl")
@dataclass(frozen=True)
class SetVirtioGl(Step):
    """Give the domain's persistent definition a virtio-gpu with 3D on `rendernode` (`enable`) — a virtio <video>
    with accel3d replacing its video devices, and a `graphics` (egl-headless or spice) GL element — or take it
    away, putting back a <video> of model `previous_video` ("" for none). Undo: the opposite."""

    domain: str
    rendernode: str
    graphics: str
    enable: bool
    previous_video: str

    def describe(self) -> str:
        if self.enable:
            return f"give domain {self.domain} a virtio-gpu with 3D on {self.rendernode} ({self.graphics})"
        return f"take the virtio-gpu on {self.rendernode} from domain {self.domain}"
