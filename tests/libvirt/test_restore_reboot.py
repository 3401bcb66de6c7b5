"""`vgpuadm restore` after `vgpuadm sim reboot`: every domain's hostdevs resolve again (mdevs with the same UUIDs
and vgpu_params, layout C VF types after SR-IOV is re-enabled, vfio-pci binds), and a second run changes nothing.
Also the boot path (domains read from XML files before libvirt runs) and a GPU that never registers."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from embedded_host import EMBED_ETC, allocations, attr, define, hostdev_keys, install_sriov_manage, mdevs, vgpuadm

from vgpuadm.sim.treestate import tree_state

pytestmark = pytest.mark.libvirt


def _apply(root: Path, tmp_path: Path, plan: str) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text(plan)
    res = vgpuadm(root, "apply", "-f", str(path))
    assert res.code == 0, res.err


def _reboot_restore_twice(root: Path, *args: str, reboot: bool = True) -> tuple[str, dict[str, object]]:
    if reboot:
        before = tree_state(root)
        assert vgpuadm(root, "sim", "reboot", str(root)).code == 0
        assert tree_state(root) != before
    first = vgpuadm(root, "restore", *args)
    assert first.code == 0, first.err
    state = tree_state(root)
    second = vgpuadm(root, "restore", *args)
    assert second.code == 0, second.err
    assert second.out.startswith("nothing to restore: all ")
    assert tree_state(root) == state
    return first.out, state


def test_mdevs_come_back_with_the_same_uuids_and_params(sim_host: Callable[[str], Path], tmp_path: Path) -> None:
    root = sim_host("p4")
    define(root, "web01", "db02")
    _apply(root, tmp_path, "vms:\n  web01:\n    type: nvidia-64\n    count: 2\n    params: frame_rate_limiter=0\n"
                           "  db02:\n    type: nvidia-64\n")  # fmt: skip
    owned = {n: hostdev_keys(root, n) for n in ("web01", "db02")}
    assert len(mdevs(root)) == 3
    out, _ = _reboot_restore_twice(root)
    assert sorted(owned["web01"] + owned["db02"]) == mdevs(root)
    for a in allocations(root, "web01") + allocations(root, "db02"):
        dev = f"/sys/bus/mdev/devices/{a.uuid}"
        assert (root / dev.lstrip("/") / "mdev_type").resolve().name == "nvidia-64"
        assert (root / dev.lstrip("/")).resolve().parent.name == a.parent
        params = attr(root, f"{dev}/nvidia/vgpu_params")
        assert params == "frame_rate_limiter=0\n" if a.domain == "web01" else params.strip() == ""
    assert out.splitlines()[-1] == "restored: 5 step(s) for 3 recorded device(s)"
    assert sum(line.startswith("vgpu: create mdev ") for line in out.splitlines()) == 3
    assert sum(line.startswith("params: set vgpu_params") for line in out.splitlines()) == 2


def test_layout_c_vfs_are_enabled_and_typed_again(sim_host: Callable[[str], Path], tmp_path: Path) -> None:
    root = sim_host("h200-vendor-vfio")
    install_sriov_manage(root)
    define(root, "web01")
    _apply(root, tmp_path, "vms:\n  web01:\n    type: H200X-4C\n    count: 2\n    params: enable_uvm=1\n")
    vfs = hostdev_keys(root, "web01")
    assert len(vfs) == 2
    out, _ = _reboot_restore_twice(root)
    assert out.splitlines()[0] == "sriov: run /usr/lib/nvidia/sriov-manage -e 0000:18:00.0"
    for vf in vfs:
        assert attr(root, f"/sys/bus/pci/devices/{vf}/nvidia/current_vgpu_type") == "1420\n"
        assert attr(root, f"/sys/bus/pci/devices/{vf}/nvidia/vgpu_params") == "enable_uvm=1\n"
    assert attr(root, "/sys/bus/pci/devices/0000:18:00.0/sriov_numvfs") == "16\n"


def test_passthrough_group_is_bound_to_vfio_again(sim_host: Callable[[str], Path], tmp_path: Path) -> None:
    root = sim_host("passthrough")
    define(root, "gamer")
    _apply(root, tmp_path, "vms:\n  gamer:\n    passthrough: 0000:65:00.0\n")
    assert hostdev_keys(root, "gamer") == ["0000:65:00.0", "0000:65:00.1"]
    assert vgpuadm(root, "sim", "reboot", str(root)).code == 0
    assert (root / "sys/bus/pci/devices/0000:65:00.0/driver").resolve().name == "nvidia"
    _reboot_restore_twice(root, reboot=False)
    for fn in ("0000:65:00.0", "0000:65:00.1"):
        assert (root / f"sys/bus/pci/devices/{fn}/driver").resolve().name == "vfio-pci"
        assert attr(root, f"/sys/bus/pci/devices/{fn}/driver_override") == "vfio-pci\n"


def test_boot_path_reads_domain_xml_files_and_names_what_cannot_come_back(
    sim_host: Callable[[str], Path], tmp_path: Path
) -> None:
    root = sim_host("p4")
    define(root, "web01")
    _apply(root, tmp_path, "vms:\n  web01:\n    type: nvidia-63\n")
    saved = tmp_path / "qemu"
    shutil.copytree(root / EMBED_ETC, saved)
    # A second domain file whose GPU is not on this host (moved away): its parent never registers.
    gone = (saved / "web01.xml").read_text().replace("web01", "web02").replace("0000:01:00.0", "0000:09:00.0")
    (saved / "web02.xml").write_text(gone)
    assert vgpuadm(root, "sim", "reboot", str(root)).code == 0
    res = vgpuadm(root, "restore", "--domain-xml-dir", str(saved), "--timeout", "0.3")
    assert res.code == 3
    assert "waiting up to 0.3s for 0000:09:00.0 to register" in res.out
    assert "vgpu: cannot restore: web02: mdev " in res.out and "parent 0000:09:00.0 has not registered" in res.out
    assert res.err.startswith("error: 1 device(s) could not be restored: vgpu: web02: mdev ")
    assert mdevs(root) == hostdev_keys(root, "web01")  # the restorable one came back all the same
