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
