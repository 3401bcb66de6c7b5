"""Discovery on real captured hosts (tests/data): an H200 seen from a passthrough guest, the Harvester A2 vGPU
host (umockdev recording + captured sysfs), and a captured L40S vendor-VFIO VF."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from vgpuadm.api import discover
from vgpuadm.host.umockdev import load

DATA = Path(__file__).resolve().parent.parent / "data"
H200 = DATA / "h200-passthrough-guest"
A2 = DATA / "harvester-a2"


def build_from_pci_json(root: Path, topology: Path, sysfs_dump: Path) -> None:
    """A sys/ tree from pci-topology.json (every function: ids, driver, realpath) and nvidia-pci-sysfs.json (every
    attribute and link of one function, byte-exact)."""
    dump = json.loads(sysfs_dump.read_text())
    for addr, fn in json.loads(topology.read_text()).items():
        dev = root / fn["realpath"].lstrip("/")
        dev.mkdir(parents=True, exist_ok=True)
        files = dump.get(addr, {}).get("files") or {
            k: fn[k] + "\n" for k in ("vendor", "device", "class", "subsystem_vendor", "subsystem_device", "numa_node")
        }
        for name, text in files.items():
            (dev / name).write_text(text)
        links = dump.get(addr, {}).get("links") or (
            {"driver": os.path.relpath(f"/sys/bus/pci/drivers/{fn['driver']}", fn["realpath"])}
            if "driver" in fn
            else {}
        )
        for name, target in links.items():
            (dev / name).symlink_to(target)
            (dev / name).parent.joinpath(target).resolve().mkdir(parents=True, exist_ok=True)
        bus = root / "sys/bus/pci/devices" / addr
        bus.parent.mkdir(parents=True, exist_ok=True)
        bus.symlink_to(os.path.relpath(dev, bus.parent))
    (root / "sys/kernel/iommu_groups").mkdir(parents=True)


def test_h200_passthrough_guest(tmp_path, cli):
    build_from_pci_json(tmp_path, H200 / "pci-topology.json", H200 / "nvidia-pci-sysfs.json")
    assert json.loads((H200 / "iommu-groups.json").read_text()) == {}
    r = cli("--root", str(tmp_path), "gpus", "--json")
    assert (r.code, r.err) == (0, "")
    assert json.loads(r.out) == [
        {
            "address": "0000:00:06.0", "vendor_id": "0x10de", "device_id": "0x2335",
            "subsystem_vendor_id": "0x10de", "subsystem_device_id": "0x18bf", "class": "0x030200",
            "driver": "nvidia", "iommu_group": None, "iommu_group_members": [], "numa_node": -1, "boot_vga": None,
            "layout": "passthrough", "sriov_total_vfs": None, "sriov_num_vfs": None, "physfn": None, "virtfns": [],
        }
    ]  # fmt: skip
    assert json.loads(cli("--root", str(tmp_path), "types", "--json").out) == []
    assert json.loads(cli("--root", str(tmp_path), "devices", "--json").out) == []


@pytest.fixture(scope="module")
def a2_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("a2") / "host"
    load(str(A2 / "vgpu-node.umockdev"), str(root), str(A2 / "testdata-sys"), {"pci", "mdev"})
    return root


A2_VFS = [f"0000:08:{(4 + i) // 8:02x}.{(4 + i) % 8}" for i in range(16)]
MDEVS = {  # uuid: (parent VF, type)
    "f715f63c-0d00-4007-9c5a-b07b0c6c05de": ("0000:08:00.4", "nvidia-754"),
    "3deab9a4-200a-4c54-99b1-5eb0722d1d81": ("0000:08:00.6", "nvidia-751"),
    "c728e022-f16f-434b-ad2c-9665ee634d3d": ("0000:08:02.0", "nvidia-746"),
}


def test_a2_pf_and_vfs(a2_root):
    s = discover(str(a2_root))
    assert s.warnings == ()
    pf = s.functions["0000:08:00.0"]
    assert (pf.vendor_id, pf.device_id, pf.driver, pf.sriov_total_vfs, pf.sriov_num_vfs, pf.iommu_group) == (
        "0x10de", "0x25b6", "nvidia", 16, 16, 38
    )  # fmt: skip
    assert pf.virtfns == tuple(A2_VFS)
    for vf in A2_VFS:
        fn = s.functions[vf]
        assert (fn.physfn, fn.driver, fn.device_id, s.layouts[vf]) == ("0000:08:00.0", "nvidia", "0x25b6", "mdev-vf")
    assert s.functions["0000:08:00.4"].iommu_group == 90


def test_a2_three_live_mdevs(a2_root, cli):
    s = discover(str(a2_root))
    assert {u: (m.parent, m.type_id) for u, m in s.mdevs.items()} == MDEVS
    assert {m.iommu_group for m in s.mdevs.values()} == {106, 107, 108}
    rows = json.loads(cli("--root", str(a2_root), "devices", "--json").out)
    assert [(r["parent"], r["type_id"], r["name"], r["physical_gpu"], r["layout"]) for r in rows] == [
        ("0000:08:00.4", "nvidia-754", "NVIDIA A2-4C", "0000:08:00.0", "mdev-vf"),
        ("0000:08:00.6", "nvidia-751", "NVIDIA A2-4A", "0000:08:00.0", "mdev-vf"),
        ("0000:08:02.0", "nvidia-746", "NVIDIA A2-4Q", "0000:08:00.0", "mdev-vf"),
    ]
    assert {r["vgpu_params"] for r in rows} == {""}


def test_a2_captured_vf_types(a2_root, cli):
    rows = json.loads(cli("--root", str(a2_root), "types", "--gpu", "0000:08:01.7", "--json").out)
    assert len(rows) == 15
    assert [r["type_id"] for r in rows] == [f"nvidia-{n}" for n in range(742, 757)]
    assert {r["profile"]: r["available_instances"] for r in rows if r["available_instances"]} == {
        "A2-4Q": 1, "A2-4A": 1, "A2-4C": 1
    }  # fmt: skip
    c4 = next(r for r in rows if r["type_id"] == "nvidia-754")
    assert (c4["name"], c4["framebuffer_mib"], c4["max_instances"], c4["attributes"]["max_resolution"]) == (
        "NVIDIA A2-4C", 4096, 4, "4096x2400"
    )  # fmt: skip
    busy = json.loads(cli("--root", str(a2_root), "types", "--gpu", "0000:08:00.4", "--json").out)
    assert len(busy) == 15 and {r["available_instances"] for r in busy} == {0}
    free = json.loads(cli("--root", str(a2_root), "types", "--available", "--json").out)
    assert len(free) == 13 * 3


def test_l40s_vendor_vfio_vf(sim_host, tmp_path):
    """The captured L40S `nvidia/` files, byte for byte, on a VF of a simulated SR-IOV PF."""
    root = sim_host("h200-vendor-vfio")
    vf = root / "sys/bus/pci/devices/0000:18:00.4"
    shutil.rmtree(vf / "nvidia")
    shutil.copytree(A2 / "testdata-sys/bus/pci/devices/0000:26:00.4/nvidia", vf.resolve() / "nvidia")
    s = discover(str(root))
    assert s.warnings == ()
    v = s.vendor_vfs["0000:18:00.4"]
    assert v.current_type == 0 and not v.in_use
    assert v.creatable[:3] == ((1145, "NVIDIA L40S-1B"), (1146, "NVIDIA L40S-2B"), (1147, "NVIDIA L40S-1Q"))
    assert len(v.creatable) == 23 and v.creatable[-1] == (2164, "NVIDIA L40S-3B")
    assert s.layouts["0000:18:00.4"] == "vendor-vfio"
    assert v.vgpu_params == ""
