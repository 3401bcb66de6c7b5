"""virtio-gl on simulated hosts: render nodes discovered with their GPU, the exact create plan (one definition edit
and the metadata record), which render node is chosen, the refusals, and the domain XML edit and its inverse."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from vgpuadm.errors import NotFoundError, UsageError
from vgpuadm.host.discover import snapshot
from vgpuadm.host.sysfs import Sysfs
from vgpuadm.model import DeviceMode
from vgpuadm.plan.guest import plan_create
from vgpuadm.steps import DefineDomain, SetVirtioGl
from vgpuadm.virt import xml

# As libvirt stores a defined domain: with the video device it added (cirrus on q35 with VNC).
DOMAIN = xml.domain_definition("web01", uuid="6b7f1e4e-5d3c-4d0b-9a55-2f9c4d1b0a01").replace(
    "</devices>", "<video><model type='cirrus' vram='16384' heads='1' primary='yes'/></video></devices>"
)


def test_render_nodes_are_discovered_with_their_gpu(sim_host: Callable[[str], Path]) -> None:
    assert snapshot(Sysfs(str(sim_host("uhd770-vf-pool")))).render_nodes == {"renderD128": "0000:00:02.0"}
    assert snapshot(Sysfs(str(sim_host("flex170-vf-pool")))).render_nodes == {"renderD129": "0000:4d:00.0"}


def test_create_plans_one_definition_edit_and_the_record(sim_host: Callable[[str], Path]) -> None:
    s = snapshot(Sysfs(str(sim_host("uhd770-vf-pool"))))
    plan, [a], _after = plan_create(s, DOMAIN, "virtio-gl")
    assert (a.mode, a.type_id, a.parent, a.slot) == (DeviceMode.VIRTIO_GL, "virtio-gl", "0000:00:02.0", 0)
    assert a.extra == {"rendernode": "/dev/dri/renderD128", "graphics": "egl-headless", "previous_video": "cirrus"}
    step, meta = plan.steps
    assert step == SetVirtioGl("web01", "/dev/dri/renderD128", "egl-headless", True, "cirrus")
    assert isinstance(meta, DefineDomain) and meta.devices == 1 and meta.attach == ""
    again, added, _ = plan_create(s, xml.with_virtio_gl(DOMAIN, "/dev/dri/renderD128")[0]
                                  .replace("<devices>", f"<metadata>{xml.metadata_xml([a], s.host_key)}</metadata><devices>"),
                                  "virtio-gl")  # fmt: skip
    assert (again.steps, added) == ((), [])


def test_a_gpu_without_a_render_node_and_a_host_without_any_are_refused(sim_host: Callable[[str], Path]) -> None:
    s = snapshot(Sysfs(str(sim_host("uhd770-vf-pool"))))
    with pytest.raises(NotFoundError) as exc:
        plan_create(s, DOMAIN, "virtio-gl", gpu="0000:4d:00.0")
    assert (exc.value.message, exc.value.hint) == ("GPU 0000:4d:00.0 has no render node",
                                                   "render nodes here: renderD128 (0000:00:02.0)")  # fmt: skip
    with pytest.raises(UsageError):
        plan_create(s, DOMAIN, "virtio-gl", count=2)
    gim = snapshot(Sysfs(str(sim_host("mi300x-vf-pool"))))  # amdgpu is blacklisted on a GIM host: no DRM device
    with pytest.raises(NotFoundError) as exc:
        plan_create(gim, DOMAIN, "virtio-gl")
    assert exc.value.message == "This host has no DRM render node (/sys/class/drm/renderD*) for virtio-gl"


def test_the_definition_edit_and_its_inverse() -> None:
    edited, previous = xml.with_virtio_gl(DOMAIN, "/dev/dri/renderD128")
    assert previous == "cirrus"
    assert xml.has_virtio_gl(edited, "/dev/dri/renderD128") and not xml.has_virtio_gl(DOMAIN, "/dev/dri/renderD128")
    doc = xml.parse_domain(edited)
    assert [v.find("model").get("type") for v in doc.findall("devices/video")] == ["virtio"]
    assert [g.get("type") for g in doc.findall("devices/graphics")] == ["vnc", "egl-headless"]
    back = xml.parse_domain(xml.without_virtio_gl(edited, "/dev/dri/renderD128", previous))
    assert [v.find("model").get("type") for v in back.findall("devices/video")] == ["cirrus"]
    assert [g.get("type") for g in back.findall("devices/graphics")] == ["vnc"]
    with pytest.raises(UsageError):
        xml.with_virtio_gl(DOMAIN, "/dev/dri/../../etc/passwd")
