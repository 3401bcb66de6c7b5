"""As an operator types them, against libvirt's embedded driver under a simulated root (one process per command):
`vgpuadm devices` shows who owns each vGPU, its filters, and `destroy --vm V` without --uuid/--all."""

from __future__ import annotations

import json
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
    assert r.out == f"removed mdev nvidia-63 {u} on 0000:01:00.0 (from ux-web01)\n"
    assert mdevs(root) == []


def test_destroy_vm_alone_with_several_devices_lists_them_and_names_the_vm(tmp_path: Path) -> None:
    root = _host(tmp_path, "ux-web02")
    assert vgpuadm(root, "create", "--type", "nvidia-63", "--vm", "ux-web02", "--count", "2").code == 0
    uuids = mdevs(root)
    r = vgpuadm(root, "destroy", "--vm", "ux-web02")
    assert r.code != 0 and len(mdevs(root)) == 2
    assert all(u in r.err for u in uuids), r.err
    assert "hint: vgpuadm destroy --vm ux-web02 --uuid " in r.err and "web01" not in r.err.replace("ux-web0", "")


def test_devices_shows_each_owner_and_filters_by_vm_gpu_uuid_and_type(tmp_path: Path) -> None:
    root = _host(tmp_path, "ux-own01", "ux-own02")
    assert vgpuadm(root, "create", "--type", "nvidia-63", "--vm", "ux-own01").code == 0
    [mine] = mdevs(root)
    spare = "aaaaaaaa-0000-4000-8000-000000000001"
    assert vgpuadm(root, "mdev", "create", "--gpu", "0000:01:00.0", "--type", "nvidia-63", "--uuid", spare).code == 0

    table = vgpuadm(root, "devices", env={"COLUMNS": "200"})
    assert table.code == 0, table.err
    assert "owner" in table.out
    [own_line] = [line for line in table.out.splitlines() if mine in line]
    [spare_line] = [line for line in table.out.splitlines() if spare in line]
    assert "ux-own01" in own_line and " unowned " in spare_line

    plain = vgpuadm(root, "devices", "--json")  # the fast path: no owner read
    assert plain.code == 0 and all("owner" not in r for r in json.loads(plain.out))
    owned = json.loads(vgpuadm(root, "devices", "--json", "--owners").out)
    assert {(r["id"], r["owner"], r["owned"]) for r in owned} == {(mine, "ux-own01", True), (spare, None, False)}
    by_vm = json.loads(vgpuadm(root, "devices", "--vm", "ux-own01", "--json").out)
    assert [r["id"] for r in by_vm] == [mine]
    assert vgpuadm(root, "devices", "--vm", "ux-own02", "--json").out == "[]\n"
    by_uuid = json.loads(vgpuadm(root, "devices", "--uuid", spare.upper(), "--json").out)
    assert [r["id"] for r in by_uuid] == [spare]
    assert len(json.loads(vgpuadm(root, "devices", "--gpu", "01:00.0", "--json").out)) == 2
    assert json.loads(vgpuadm(root, "devices", "--parent", "0000:02:00.0", "--json").out) == []
    assert len(json.loads(vgpuadm(root, "devices", "--type", "GRID P4-1Q", "--json").out)) == 2
    assert json.loads(vgpuadm(root, "devices", "--type", "nvidia-64", "--json").out) == []


def test_create_type_typo_suggests_by_edit_distance(tmp_path: Path) -> None:
    root = _host(tmp_path, "ux-typo01")
    r = vgpuadm(root, "create", "--type", "nvidia-36", "--vm", "ux-typo01")
    assert r.code == 3
    assert r.err.startswith('error: Unknown type "nvidia-36" on this host; did you mean nvidia-63 (GRID P4-1Q)'), r.err


def test_create_a_known_type_without_room_says_no_room(tmp_path: Path) -> None:
    root = tmp_path / "h200"
    build("h200-vendor-vfio", str(root))
    define(root, "ux-room01")
    assert vgpuadm(root, "vf", "set-type", "--type", "nvidia-1428", "--vf", "0000:18:00.4").code == 0
    r = vgpuadm(root, "create", "--type", "nvidia-1420", "--vm", "ux-room01")
    assert r.code != 0
    assert r.err.startswith("error: No room for 1 × nvidia-1420"), r.err
    assert "Unknown type" not in r.err


def test_create_accepts_a_pci_address_without_its_domain(tmp_path: Path) -> None:
    root = _host(tmp_path, "ux-bdf01")
    r = vgpuadm(root, "create", "--type", "nvidia-63", "--vm", "ux-bdf01", "--gpu", "01:00.0")
    assert (r.code, r.err) == (0, ""), r.err
    assert r.out.startswith("attached mdev nvidia-63 ") and "on 0000:01:00.0 (to ux-bdf01)" in r.out
