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


GOLDEN = Path(__file__).resolve().parents[1] / "golden/xml/virtio-gl-egl-headless.xml"


def _gl_devices(root: Path, name: str) -> str:
    """The domain's virtio <video> and GL <graphics>, pretty-printed as the golden files are."""
    doc = etree.fromstring(domain_xml(root, name).encode(), etree.XMLParser(remove_blank_text=True))
    out = []
    for el in [*doc.findall("devices/video"), *doc.findall("devices/graphics[@type='egl-headless']")]:
        for addr in el.findall("address"):
            el.remove(addr)
        out.append(etree.tostring(el, encoding="unicode", pretty_print=True))
    return "".join(out)


def test_apply_gives_and_takes_virtio_gl_from_a_plan_file(sim_host: Callable[[str], Path], tmp_path: Path) -> None:
    """`virtio_gl:` in a plan file, as a user types `vgpuadm apply -f plan.yaml`: --check and --diff show it, apply
    edits the definitions (the golden XML, and the stored domain valid under libvirt's RelaxNG schema), a second
    apply and restore after a reboot change nothing for it, and dropping the key takes it away."""
    root = sim_host("uhd770-vf-pool")
    define(root, "web01", "db02")
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        'vms:\n  web01:\n    virtio_gl: true\n  db02:\n    type: vf-uhd770\n    virtio_gl: {gpu: "00:02.0"}\n'
    )
    diff = ["+ db02: vf-uhd770 ×1", "+ db02: virtio-gl on 0000:00:02.0", "+ web01: virtio-gl"]
    res = vgpuadm(root, "apply", "-f", str(plan), "--check")
    assert (res.code, res.err) == (0, "")
    assert res.out.splitlines() == [*diff, "would run 8 step(s); nothing was changed (--check)"]
    assert allocations(root, "web01") == []
    res = vgpuadm(root, "apply", "-f", str(plan), "--diff")
    assert (res.code, res.err) == (0, "")
    assert res.out.splitlines() == [
        "[1/8] record 1 vgpuadm device(s) in the metadata of domain web01",
        "[2/8] set sriov_drivers_autoprobe of 0000:00:02.0 to 0",
        "[3/8] set sriov_numvfs of 0000:00:02.0 to 7 (was 0)",
        "[4/8] set driver_override of 0000:00:02.1 to vfio-pci",
        "[5/8] probe drivers for 0000:00:02.1 (expect vfio-pci)",
        "[6/8] give domain db02 a virtio-gpu with 3D on /dev/dri/renderD128 (egl-headless)",
        "[7/8] give domain web01 a virtio-gpu with 3D on /dev/dri/renderD128 (egl-headless)",
        "[8/8] attach vf-uhd770 0000:00:02.1 on 0000:00:02.0 to domain db02, and record 2 vgpuadm device(s) in its "
        "metadata",
        *diff,
        f"applied 8 step(s): apply {plan.name}: +3 −0 ~0",
    ]
    schema = etree.RelaxNG(etree.parse(SCHEMA))
    for vm in ("web01", "db02"):
        assert _gl_devices(root, vm) == GOLDEN.read_text()
        assert schema.validate(etree.fromstring(domain_xml(root, vm).encode())), schema.error_log.last_error
    assert [(a.mode, a.parent, a.extra["rendernode"]) for a in allocations(root, "web01")] == [
        ("virtio-gl", "0000:00:02.0", "/dev/dri/renderD128")]  # fmt: skip
    again = vgpuadm(root, "apply", "-f", str(plan))
    assert (again.code, again.out) == (0, "nothing to do: the host matches the plan\n")
    assert vgpuadm(root, "sim", "reboot", str(root)).code == 0
    res = vgpuadm(root, "restore")
    assert (res.code, res.out.splitlines()[-1]) == (0, "restored: 4 step(s) for 3 recorded device(s)")
    res = vgpuadm(root, "restore")
    assert (res.code, res.out) == (0, "nothing to restore: all 3 recorded device(s) are in place\n")
    assert _gl_devices(root, "web01") == GOLDEN.read_text()
    plan.write_text("vms:\n  web01:\n    virtio_gl: true\n  db02:\n    type: vf-uhd770\n")
    res = vgpuadm(root, "apply", "-f", str(plan), "--diff")
    assert (res.code, res.out.splitlines()) == (0, [
        "[1/2] take the virtio-gpu on /dev/dri/renderD128 from domain db02",
        "[2/2] record 1 vgpuadm device(s) in the metadata of domain db02",
        "- db02: virtio-gl /dev/dri/renderD128 on 0000:00:02.0",
        f"applied 2 step(s): apply {plan.name}: +0 −1 ~0",
    ])  # fmt: skip
    assert _devices(root, "db02", "video") == [
        '<video><model type="cirrus" vram="16384" heads="1" primary="yes"/></video>'
    ]
    assert [a.mode for a in allocations(root, "db02")] == ["pool"]
    assert vgpuadm(root, "apply", "-f", str(plan)).out == "nothing to do: the host matches the plan\n"
