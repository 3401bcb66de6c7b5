"""As an operator types them, against libvirt's embedded driver under a simulated root (one process per command):
`vgpuadm devices` shows who owns each vGPU, its filters, and `destroy --vm V` without --uuid/--all."""

from __future__ import annotations

from pathlib import Path

from tests.libvirt.embedded_host import define, mdevs, vgpuadm
from vgpuadm.sim.profiles import build


def _host(tmp_path: Path, *vms: str) -> Path:
    root = tmp_path / "p4"
    build("p4", str(root))
    define(root, *vms)
    return root


def test_destroy_vm_alone_removes_its_one_device(tmp_path: Path) -> None:
    root = _host(tmp_path, "ux-web01")
    assert vgpuadm(root, "create", "--type", "nvidia-63", "--vm", "ux-web01").code == 0
    [u] = mdevs(root)
    r = vgpuadm(root, "destroy", "--vm", "ux-web01")
    assert (r.code, r.err) == (0, "")
    assert r.out == f"detached mdev nvidia-63 {u} on 0000:01:00.0 (from ux-web01)\n"
    assert mdevs(root) == []


def test_destroy_vm_alone_with_several_devices_lists_them_and_names_the_vm(tmp_path: Path) -> None:
    root = _host(tmp_path, "ux-web02")
    assert vgpuadm(root, "create", "--type", "nvidia-63", "--vm", "ux-web02", "--count", "2").code == 0
    uuids = mdevs(root)
    r = vgpuadm(root, "destroy", "--vm", "ux-web02")
    assert r.code != 0 and len(mdevs(root)) == 2
    assert all(u in r.err for u in uuids), r.err
    assert "hint: vgpuadm destroy --vm ux-web02 --uuid " in r.err and "web01" not in r.err.replace("ux-web0", "")
