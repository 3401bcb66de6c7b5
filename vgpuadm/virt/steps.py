"""Data-only libvirt Steps. Planners emit DefineDomain: a domain's whole change (hostdevs in and out plus its vgpuadm
<metadata>) as ONE persistent definition. AttachHostdev, DetachHostdev and SetMetadata (one libvirt write each)
stay runnable for journals written before DefineDomain existed.

The device XML is rendered at plan time and carried by the step, so the journal holds exactly what was attached
and undo detaches that same element. Handlers live in vgpuadm/virt/handlers.py (added to the executor's table by
ops/session.py); this module imports no libvirt, so planners (modes, api) can build these steps freely.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vgpuadm.steps import HOSTDEV, Step, check, element, line, matching, one_of, step_kind, text

METADATA = element(("<vgpuadm",), 1024 * 1024, empty=True)  # the domain's vgpuadm <metadata> element, or none
HOSTDEVS = element(HOSTDEV, 256 * 1024, empty=True)  # one or more concatenated <hostdev> elements, or none


def _summary(v: str) -> bool:
    """What a DefineDomain attached or detached, in words: printable, one line (a tab allowed)."""
    return text(4096)(v) and "\n" not in v


@step_kind("attach-hostdev")
@dataclass(frozen=True)
class AttachHostdev(Step):
    """Attach `device_xml` (persistent, and live when the domain runs). `what` names the device for people.
    Undo: detach it when present."""

    domain: str
    device_xml: str = field(metadata=check(element(HOSTDEV, 16 * 1024)))
    what: str = field(metadata=check(line(512)))

    def describe(self) -> str:
        return f"attach {self.what} to domain {self.domain}"


@step_kind("detach-hostdev")
@dataclass(frozen=True)
class DetachHostdev(Step):
    """Detach `device_xml` from the domain. Undo: attach it again when absent."""

    domain: str
    device_xml: str = field(metadata=check(element(HOSTDEV, 16 * 1024)))
    what: str = field(metadata=check(line(512)))

    def describe(self) -> str:
        return f"detach {self.what} from domain {self.domain}"


@step_kind("set-metadata")
@dataclass(frozen=True)
class SetMetadata(Step):
    """Replace the domain's vgpuadm metadata element with `element` ("" removes it); `previous` is what was there
    ("" = nothing), written back on undo. `devices` is how many devices the new element records."""

    domain: str
    element: str = field(metadata=check(METADATA))
    previous: str = field(metadata=check(METADATA))
    devices: int

    def describe(self) -> str:
        if not self.element:
            return f"remove the vgpuadm metadata of domain {self.domain}"
        return f"record {self.devices} vgpuadm device(s) in the metadata of domain {self.domain}"


@step_kind("define-domain")
@dataclass(frozen=True)
class DefineDomain(Step):
    """Write the domain's new persistent definition once: its current definition with the hostdevs of `detach`
    taken out, those of `attach` added and the vgpuadm metadata element replaced by `element` ("" = none). When
    the domain runs, the hostdevs are also unplugged/hot-plugged live (before the define; a refused hot-plug
    changes nothing). `attach`/`detach` are concatenated hostdev elements; `previous` is the metadata element
    that was there, so undo (the same change reversed) gives back the old definition. `attached`/`detached`
    name the devices for people; `devices` is how many devices `element` records."""

    domain: str
    attach: str = field(metadata=check(HOSTDEVS))
    detach: str = field(metadata=check(HOSTDEVS))
    element: str = field(metadata=check(METADATA))
    previous: str = field(metadata=check(METADATA))
    devices: int
    attached: str = field(default="", metadata=check(_summary))
    detached: str = field(default="", metadata=check(_summary))

    def describe(self) -> str:
        parts = []
        if self.detached:
            parts.append(f"detach {self.detached} from domain {self.domain}")
        if self.attached:
            parts.append(f"attach {self.attached} to domain {self.domain}")
        meta = (
            f"record {self.devices} vgpuadm device(s) in its metadata"
            if self.element
            else "remove its vgpuadm metadata"
        )
        if not parts:
            return f"{meta.replace(' its ', ' the ')} of domain {self.domain}"
        if not self.element and not self.previous:  # a domain vgpuadm never recorded anything in
            return " and ".join(parts)
        return f"{' and '.join(parts)}, and {meta}"


@step_kind("set-virtio-gl")
@dataclass(frozen=True)
class SetVirtioGl(Step):
    """Give the domain's persistent definition a virtio-gpu with 3D on `rendernode` (`enable`) — a virtio <video>
    with accel3d replacing its video devices, and a `graphics` (egl-headless or spice) GL element — or take it
    away, putting back a <video> of model `previous_video` ("" for none). Undo: the opposite."""

    domain: str
    rendernode: str = field(metadata=check(matching(r"(/dev/dri/renderD[0-9]{1,4})?")))
    graphics: str = field(metadata=check(one_of("egl-headless", "spice")))
    enable: bool
    previous_video: str = field(metadata=check(matching(r"[a-z0-9_-]{0,32}")))

    def describe(self) -> str:
        if self.enable:
            return f"give domain {self.domain} a virtio-gpu with 3D on {self.rendernode} ({self.graphics})"
        return f"take the virtio-gpu on {self.rendernode} from domain {self.domain}"
