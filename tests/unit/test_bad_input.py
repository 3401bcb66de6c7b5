"""Bad hosts through the CLI: a missing or odd root is one error line plus a hint; an odd attribute, link or
device is one warning naming the host path (/sys/..., never the temporary root) and never stops discovery of the
others; no traceback ever."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

PCI = "sys/bus/pci/devices"


def test_missing_root(cli, tmp_path):
    r = cli("--root", str(tmp_path / "nope"), "types", "--json")
    assert (r.code, json.loads(r.out)["exit_code"]) == (3, 3)  # the error as JSON on stdout (under --json)
    assert r.err.splitlines() == [
        f"error: host root {tmp_path / 'nope'} does not exist",
        "hint: pass --root DIR or set VGPUADM_ROOT to a host root",
    ]


def test_root_is_a_file(cli, tmp_path):
    (tmp_path / "file").write_text("")
    r = cli("--root", str(tmp_path / "file"), "gpus")
    assert r.code == 3 and r.err.splitlines()[0] == f"error: host root {tmp_path / 'file'} is not a directory"


def test_root_without_sys(cli, tmp_path):
    r = cli("--root", str(tmp_path), "devices", "--json")
    assert (r.code, json.loads(r.out)["exit_code"]) == (3, 3)  # the error as JSON on stdout (under --json)
    assert r.err.splitlines() == [
        f"error: host root {tmp_path} has no sys/ directory",
        "hint: point --root at a directory holding a sys/ tree, e.g. one made by `vgpuadm sim build p4 DIR`",
    ]


def test_empty_sys_is_an_empty_host(cli, tmp_path):
    (tmp_path / "sys").mkdir()
    for command in ("gpus", "types", "devices"):
        r = cli("--root", str(tmp_path), command, "--json")
        assert (r.code, r.out, r.err) == (0, "[]\n", "")


def test_pci_devices_not_a_directory_is_one_error(cli, tmp_path):
    (tmp_path / "sys/bus/pci").mkdir(parents=True)
    (tmp_path / PCI).write_text("")
    r = cli("--root", str(tmp_path), "gpus", "--json")
    assert r.code == 7
    assert r.err == "error: listing /sys/bus/pci/devices failed: Not a directory (ENOTDIR)\n"


def run_gpus(cli, root: Path) -> tuple[list[str], list[str]]:
    r = cli("--root", str(root), "gpus", "--json")
    assert r.code == 0, r.err
    assert str(root) not in r.err and "Traceback" not in r.err
    return [g["address"] for g in json.loads(r.out)], r.err.splitlines()


def test_non_integer_numa_node_is_a_warning_and_the_gpu_stays(cli, sim_host):
    root = sim_host("p4")
    (root / PCI / "0000:01:00.0/numa_node").write_text("node1\n")
    addresses, err = run_gpus(cli, root)
    assert addresses == ["0000:01:00.0", "0000:02:00.0"]
    assert err == [
        "warning: PCI function 0000:01:00.0: /sys/bus/pci/devices/0000:01:00.0/numa_node holds 'node1', not an integer"
    ]


def test_missing_vendor_skips_only_that_function(cli, sim_host):
    root = sim_host("p4")
    (root / PCI / "0000:02:00.0/vendor").unlink()
    addresses, err = run_gpus(cli, root)
    assert addresses == ["0000:01:00.0"]
    assert err == [
        "warning: skipped PCI function 0000:02:00.0: reading /sys/bus/pci/devices/0000:02:00.0/vendor failed: "
        "No such file or directory (ENOENT)"
    ]


def test_unreadable_class_is_a_warning(cli, sim_host):
    """An attribute that cannot be read (here a directory where the file should be: EISDIR; the suite runs as
    root, so permission bits would not stop a read)."""
    root = sim_host("p4")
    cls = (root / PCI / "0000:02:00.0/class").resolve()
    cls.unlink()
    cls.mkdir()
    addresses, err = run_gpus(cli, root)
    assert addresses == ["0000:01:00.0"]
    assert err == [
        "warning: skipped PCI function 0000:02:00.0: reading /sys/bus/pci/devices/0000:02:00.0/class failed: "
        "Is a directory (EISDIR)"
    ]


def test_dangling_pci_link(cli, sim_host):
    root = sim_host("p4")
    os.symlink("../../../devices/pci0000:99/0000:99:00.0", root / PCI / "0000:99:00.0")
    addresses, err = run_gpus(cli, root)
    assert addresses == ["0000:01:00.0", "0000:02:00.0"]
    assert err == ["warning: skipped PCI function 0000:99:00.0: /sys/bus/pci/devices/0000:99:00.0 is a dangling link"]


def test_odd_iommu_group_link(cli, sim_host):
    root = sim_host("p4")
    link = root / PCI / "0000:01:00.0/iommu_group"
    link.unlink()
    os.symlink("../../../../kernel/iommu_groups/bogus", link)
    r = cli("--root", str(root), "gpus", "--json")
    assert [g["iommu_group"] for g in json.loads(r.out)] == [None, 2]
    assert r.err == (
        "warning: PCI function 0000:01:00.0: /sys/bus/pci/devices/0000:01:00.0/iommu_group points at 'bogus', "
        "not an IOMMU group number\n"
    )


def test_non_integer_available_instances_skips_only_that_type(cli, sim_host):
    root = sim_host("p4")
    (root / PCI / "0000:01:00.0/mdev_supported_types/nvidia-63/available_instances").write_text("lots\n")
    r = cli("--root", str(root), "types", "--json")
    rows = json.loads(r.out)
    assert len(rows) == 27 and ("0000:01:00.0", "nvidia-63") not in {(t["parent"], t["type_id"]) for t in rows}
    assert r.err == (
        "warning: skipped type nvidia-63 on 0000:01:00.0: /sys/class/mdev_bus/0000:01:00.0/mdev_supported_types/"
        "nvidia-63/available_instances holds 'lots', not an integer\n"
    )


def test_odd_description_keeps_the_type(cli, sim_host):
    root = sim_host("p4")
    (root / PCI / "0000:01:00.0/mdev_supported_types/nvidia-63/description").write_bytes(b"num_heads=\xff??\n")
    r = cli("--root", str(root), "types", "--gpu", "0000:01:00.0", "--json")
    assert (r.code, r.err) == (0, "")
    t = json.loads(r.out)[0]
    assert (t["type_id"], t["description"], t["max_instances"], t["framebuffer_mib"]) == (
        "nvidia-63", "num_heads=\ufffd??", None, 1024
    )  # fmt: skip


def test_missing_available_instances(cli, sim_host):
    root = sim_host("mtty")
    (root / "sys/devices/virtual/mtty/mtty/mdev_supported_types/mtty-2/available_instances").unlink()
    r = cli("--root", str(root), "types", "--json")
    assert [t["type_id"] for t in json.loads(r.out)] == ["mtty-1"]
    assert r.err == (
        "warning: skipped type mtty-2 on mtty: /sys/class/mdev_bus/mtty/mdev_supported_types/mtty-2/"
        "available_instances is missing\n"
    )


def test_dangling_mdev_link(cli, sim_host):
    root = sim_host("p4")
    os.symlink("../../../devices/gone/1234", root / "sys/bus/mdev/devices/11111111-2222-3333-4444-555555555555")
    r = cli("--root", str(root), "devices", "--json")
    assert (r.code, r.out) == (0, "[]\n")
    assert r.err == (
        "warning: skipped mdev 11111111-2222-3333-4444-555555555555: /sys/bus/mdev/devices/"
        "11111111-2222-3333-4444-555555555555 is a dangling link or has no mdev_type\n"
    )


@pytest.mark.parametrize(
    ("damage", "warning"),
    [
        ("current", "/sys/bus/pci/devices/0000:18:00.5/nvidia/current_vgpu_type holds 'x', not an integer"),
        ("creatable", "reading /sys/bus/pci/devices/0000:18:00.5/nvidia/creatable_vgpu_types failed: "
                      "Is a directory (EISDIR)"),
    ],
)  # fmt: skip
def test_odd_vendor_vf_skips_only_that_vf(cli, sim_host, damage, warning):
    root = sim_host("h200-vendor-vfio")
    nv = root / PCI / "0000:18:00.5/nvidia"
    if damage == "current":
        (nv / "current_vgpu_type").write_text("x\n")
    else:
        (nv / "creatable_vgpu_types").unlink()
        (nv / "creatable_vgpu_types").mkdir()
    r = cli("--root", str(root), "types", "--json")
    parents = {t["parent"] for t in json.loads(r.out)}
    assert len(parents) == 15 and "0000:18:00.5" not in parents
    assert r.err == f"warning: skipped vendor-VFIO VF 0000:18:00.5: {warning}\n"


def test_bad_parent_for_types_gpu(cli, sim_host):
    root = sim_host("p4")
    r = cli("--root", str(root), "types", "--gpu", "0000:09:00.0", "--json")
    assert (r.code, json.loads(r.out)["exit_code"]) == (3, 3)  # the error as JSON on stdout (under --json)
    assert r.err.splitlines() == [
        "error: No GPU or mdev parent 0000:09:00.0 on this host",
        "hint: run `vgpuadm gpus` to list them",
    ]


def test_mdev_bus_entry_without_types_dir(cli, sim_host):
    root = sim_host("p4")
    shutil.rmtree((root / PCI / "0000:02:00.0/mdev_supported_types").resolve())
    r = cli("--root", str(root), "types", "--json")
    assert {t["parent"] for t in json.loads(r.out)} == {"0000:01:00.0"}
    assert r.err == ""


def test_gpus_reads_no_type_directories(cli, sim_host):
    """`gpus` shows no types, so an odd type directory costs it nothing (not even a warning); `types` warns."""
    root = sim_host("p4")
    (root / PCI / "0000:01:00.0/mdev_supported_types/nvidia-63/available_instances").write_text("lots\n")
    r = cli("--root", str(root), "gpus", "--json")
    assert (r.code, r.err, len(json.loads(r.out))) == (0, "", 2)
    assert cli("--root", str(root), "types", "--json").err.startswith("warning: skipped type nvidia-63")
