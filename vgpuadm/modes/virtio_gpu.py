"""virtio-gl: a paravirtual virtio-gpu with 3D acceleration (virglrenderer) rendered on one of the host's DRM render
nodes, for any GPU with a DRM driver (or none shared at all). No kernel change: the domain gets a virtio <video>
with accel3d and an egl-headless (or SPICE GL) <graphics> naming /dev/dri/renderD<N> (docs/reference/sriov-gpus.md
§5). Discovery lists the render nodes from /sys/class/drm/renderD* with the GPU each belongs to.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from typing import ClassVar

from vgpuadm.catalog.migration import Landing, TargetHost
from vgpuadm.errors import NotFoundError
from vgpuadm.model import Allocation, DeviceKey, HostSnapshot, Layout
from vgpuadm.modes.base import HostdevSpec, Mode
from vgpuadm.steps import SetVirtioGl, Step
from vgpuadm.virt import xml

TYPE = "virtio-gl"
GRAPHICS = ("egl-headless", "spice")
RENDER_NODE = re.compile(r"^/dev/dri/renderD[0-9]{1,5}$")  # what metadata may name, before it becomes XML


def render_path(node: str) -> str:
    return f"/dev/dri/{node}"


class VirtioGpuMode(Mode):
    name: ClassVar[str] = TYPE
    layouts: ClassVar[tuple[Layout, ...]] = ()
    hostdev: ClassVar[bool] = False

    def pick(self, snapshot: HostSnapshot, gpu: str | None = None) -> tuple[str, str]:
        """The render node (renderD128) to render on, and its GPU: the one of `gpu`, else the lowest numbered."""
        nodes = sorted(snapshot.render_nodes.items(), key=lambda kv: int(kv[0].removeprefix("renderD")))
        if not nodes:
            raise NotFoundError(
                "This host has no DRM render node (/sys/class/drm/renderD*) for virtio-gl",
                "load the GPU's DRM driver (amdgpu, i915, xe, nouveau, virtio_gpu…) or pick another type",
            )
        if gpu is not None:
            mine = [(n, g) for n, g in nodes if g == gpu]
            if not mine:
                listed = ", ".join(f"{n} ({g or 'not PCI'})" for n, g in nodes)
                raise NotFoundError(f"GPU {gpu} has no render node", f"render nodes here: {listed}")
            return mine[0]
        return nodes[0]

    def validate(self, snapshot: HostSnapshot, device_id: str) -> None:
        if device_id.removeprefix("/dev/dri/") not in snapshot.render_nodes:
            raise NotFoundError(f"No render node {device_id} on this host", "run `vgpuadm gpus` to list GPUs")

    def plan_free(self, snapshot: HostSnapshot, a: Allocation, drivers: Mapping[str, str]) -> list[Step]:
        return []  # nothing on the host to give back

    def missing(self, snapshot: HostSnapshot, a: Allocation) -> bool:
        return a.extra.get("rendernode", "").removeprefix("/dev/dri/") not in snapshot.render_nodes

    def key(self, a: Allocation) -> DeviceKey | None:
        return None  # a paravirtual device: nothing on the host to own

    # -- migration (plan/migration.py) -----------------------------------------------------------------------------

    def live_move(self, a: Allocation) -> str | None:
        """QEMU registers a migration blocker for a virtio-gpu with virgl (3D)."""
        return "QEMU does not migrate a virtio-gpu with 3D (virgl) live"

    def room_on(self, snapshot: HostSnapshot, target: TargetHost, a: Allocation, taken: Counter[str]) -> Landing:
        """Nothing to make on the target's GPUs: the domain's <video> moves with it (its render node is the
        target's; the inventory does not list render nodes, so it is not checked)."""
        return Landing()

    def describe(self, a: Allocation) -> str:
        return f"virtio-gpu on {a.extra.get('rendernode', '')}"

    def plan_line(self, a: Allocation) -> str:
        node = a.extra.get("rendernode", "")
        return f"{TYPE} {node} on {a.parent}" if a.parent else f"{TYPE} {node}"

    def handle(self, a: Allocation) -> str:
        return TYPE

    def host_device(self, a: Allocation) -> str | None:
        return None

    def definition_step(self, a: Allocation, enable: bool) -> Step:
        return SetVirtioGl(a.domain, a.extra.get("rendernode", ""), a.extra.get("graphics", "egl-headless"), enable,
                           a.extra.get("previous_video", ""))  # fmt: skip

    def hostdev_xml(self, a: Allocation) -> str:
        # no hostdev: the <video> and <graphics> the domain gets
        return "".join(xml.virtio_gl_elements(a.extra.get("rendernode", ""), a.extra.get("graphics", "egl-headless")))

    # -- restore after a reboot ---------------------------------------------------------------------------------

    def device_shown(self, snapshot: HostSnapshot, a: Allocation) -> bool:
        return True  # a paravirtual device: nothing on the host to wait for

    def hostdev_spec(self, snapshot: HostSnapshot, device_id: str) -> HostdevSpec:
        return {"mode": TYPE, "rendernode": render_path(device_id.removeprefix("/dev/dri/"))}

    # -- reports ---------------------------------------------------------------------------------------------------

    paravirtual: ClassVar[bool] = True

    def present(self, snapshot: HostSnapshot, a: Allocation) -> bool:
        return not self.missing(snapshot, a)  # the render node exists


MODE = VirtioGpuMode()
