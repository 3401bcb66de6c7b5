"""virtio-gl end to end on libvirt's embedded QEMU driver (real libvirt 9.0, the simulated kernel, the CLI as a
separate process): create gives the domain exactly the virtio <video> with accel3d and the egl-headless GL
<graphics> on the iGPU's render node, and libvirt's stored definition still validates against its RelaxNG schema;
destroy puts back the video model the domain had and nothing else is left."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from embedded_host import allocations, define, domain_xml, vgpuadm
from lxml import etree

pytestmark = pytest.mark.libvirt

SCHEMA = "/usr/share/libvirt/schemas/domain.rng"


def _devices(root: Path, name: str, tag: str) -> list[str]:
    doc = etree.fromstring(domain_xml(root, name).encode(), etree.XMLParser(remove_blank_text=True))
    out = []
    for el in doc.findall(f"devices/{tag}"):
        for addr in el.findall("address"):
            el.remove(addr)  # the guest address libvirt assigns itself
        out.append(etree.tostring(el, encoding="unicode"))
    return out


def test_create_and_destroy_virtio_gl(sim_host: Callable[[str], Path]) -> None:
    root = sim_host("uhd770-vf-pool")
    define(root, "web01")
    before = _devices(root, "web01", "video")
    assert before == ['<video><model type="cirrus" vram="16384" heads="1" primary="yes"/></video>']
    res = vgpuadm(root, "create", "--type", "virtio-gl", "--vm", "web01")
    assert res.code == 0, res.err
    assert res.out.splitlines()[0] == "attached virtio-gl virtio-gl /dev/dri/renderD128 on 0000:00:02.0 (to web01)"
    assert _devices(root, "web01", "video") == [
        '<video><model type="virtio" heads="1" primary="yes"><acceleration accel3d="yes"/></model></video>'
    ]
    assert _devices(root, "web01", "graphics")[1:] == [
        '<graphics type="egl-headless"><gl rendernode="/dev/dri/renderD128"/></graphics>'
    ]
    stored = etree.fromstring(domain_xml(root, "web01").encode())
    schema = etree.RelaxNG(etree.parse(SCHEMA))
    assert schema.validate(stored), schema.error_log.last_error
    [a] = allocations(root, "web01")
    assert (a.mode, a.type_id, a.extra["rendernode"], a.extra["previous_video"]) == (
        "virtio-gl", "virtio-gl", "/dev/dri/renderD128", "cirrus")  # fmt: skip
    res = vgpuadm(root, "destroy", "--vm", "web01")
    assert res.code == 0, res.err
    assert _devices(root, "web01", "video") == before
    assert [g.split(">")[0] for g in _devices(root, "web01", "graphics")] == [
        '<graphics type="vnc" port="-1" autoport="yes" listen="127.0.0.1"'
    ]
    assert allocations(root, "web01") == []
