"""`vgpuadm sim build` installs a simulated NVIDIA sriov-manage on hosts whose PFs are bound to nvidia with SR-IOV
(as the vGPU host driver package does), so `sriov enable|disable` work on layouts B and C without a hand-planted
stand-in; the script drives the simulated kernel (reference §3.1's stub dance)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from vgpuadm import api

PF = "0000:18:00.0"
SCRIPT = "usr/lib/nvidia/sriov-manage"


def _numvfs(root: Path, pf: str = PF) -> str:
    return (root / f"sys/bus/pci/devices/{pf}/sriov_numvfs").read_text().strip()


@pytest.mark.parametrize(("profile", "installed"), [("h200-vendor-vfio", True), ("a100-mdev-vf", True),
                                                    ("mixed", True), ("p4", False), ("kernel-samples", False)])  # fmt: skip
def test_build_installs_sriov_manage_only_for_nvidia_sriov_pfs(
    sim_host: Callable[[str], Path], profile: str, installed: bool
) -> None:
    script = sim_host(profile) / SCRIPT
    assert os.access(script, os.X_OK) is installed


@pytest.mark.process
def test_sriov_enable_on_a_fresh_layout_c_host(sim_host: Callable[[str], Path], cli) -> None:  # type: ignore[no-untyped-def]
    root = sim_host("h200-vendor-vfio")
    assert cli("sim", "reboot", str(root)).code == 0
    assert _numvfs(root) == "0" and api.discover(str(root)).vendor_vfs == {}
    res = cli("--root", str(root), "sriov", "enable", PF)
    assert (res.code, res.err) == (0, "")
    assert res.out == f"done: step 1/1 run /usr/lib/nvidia/sriov-manage -e {PF}\n"
    assert _numvfs(root) == "16"
    snap = api.discover(str(root))
    assert len(snap.vendor_vfs) == 16 and snap.functions[PF].driver == "nvidia"
    assert cli("--root", str(root), "sriov", "enable", PF).out.startswith("nothing to do")


@pytest.mark.process
def test_sriov_disable_then_enable_on_layout_b_and_a_moved_root(sim_host: Callable[[str], Path], cli,  # type: ignore[no-untyped-def]
                                                                tmp_path: Path) -> None:  # fmt: skip
    built = sim_host("a100-mdev-vf")
    root = tmp_path / "moved"
    shutil.copytree(built, root, symlinks=True)
    shutil.rmtree(built)  # the shim finds its host from where it sits, not from where it was built
    pf = "0000:41:00.0"
    assert cli("--root", str(root), "sriov", "disable", pf).code == 0
    assert _numvfs(root, pf) == "0"
    assert cli("--root", str(root), "sriov", "enable", pf).code == 0
    assert _numvfs(root, pf) == "16"
    assert api.discover(str(root)).functions[pf].driver == "nvidia"
