"""README's "Choosing a sharing method" table: its columns and rows exactly, and the vgpuadm command of every row
that has one run as a user types it (V = a VM, BDF = the GPU) with --dry-run on a simulated host of that kind,
whose embedded libvirt has the VM: each plans the device the row promises."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from embedded_host import define, vgpuadm

from vgpuadm.sim.profiles import build

pytestmark = pytest.mark.libvirt

README = Path(__file__).resolve().parents[2] / "README.md"
HEADER = ["method", "isolation between VMs", "overhead", "density (VMs per GPU)", "vgpuadm command",
          "what the guest gets"]  # fmt: skip
METHODS = [
    "whole-GPU passthrough",
    "time-sliced vGPU (NVIDIA, layouts A/B/C)",
    "MIG (A100, A30, H100, H200) and MIG-backed vGPU",
    "SR-IOV VFs (AMD MxGPU under GIM, Intel i915/xe)",
    "virtio-gpu with virgl 3D (`virtio-gl`)",
    "guest-side: CUDA MPS",
    "guest-side: user-space API interception (CUDA/GL shims)",
    "guest-side: remote GPU (API remoting over the network)",
]
# The simulated host each command runs on, the BDF it names, and the first line its --dry-run prints.
HOSTS = {
    "passthrough": ("passthrough", "0000:65:00.0", "would pass 0000:65:00.0 (2 function(s)) through to domain web01:"),
    "nvidia-63": ("p4", "", "would give domain web01 1 × nvidia-63:"),
    "H200X-1-18C": ("h200-vendor-vfio", "", "would give domain web01 1 × nvidia-1414:"),
    "vf-flex170": ("flex170-vf-pool", "", "would give domain web01 1 × vf-flex170:"),
    "virtio-gl": ("uhd770-vf-pool", "", "would give domain web01 a virtio-gpu on /dev/dri/renderD128:"),
}


def _table() -> list[list[str]]:
    section = README.read_text().split("## Choosing a sharing method\n", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in line.strip("|").split(" | ")] for line in lines if not line.startswith("|---")]


def test_the_table_has_every_method_with_its_columns() -> None:
    header, *rows = _table()
    assert header == HEADER
    assert [r[0] for r in rows] == METHODS
    assert all(len(r) == len(HEADER) and all(r) for r in rows)
    for row in rows[5:]:  # the guest-side ones: vgpuadm gives the guest a device to run them in
        assert row[4] == "none itself"
    assert "passthrough, a vGPU or a MIG-backed vGPU" in rows[5][5]


@pytest.mark.parametrize("row", range(5))
def test_each_rows_command_runs_as_written(row: int, tmp_path: Path) -> None:
    command = re.findall(r"`([^`]+)`", _table()[1 + row][4])[0]
    args = shlex.split(command)
    key = args[args.index("--type") + 1] if "--type" in args else args[1]
    profile, bdf, first = HOSTS[key]
    root = tmp_path / "host"
    build(profile, str(root))
    define(root, "web01")
    args = ["web01" if a == "V" else bdf if a == "BDF" else a for a in args]
    assert args[0] == "vgpuadm"
    res = vgpuadm(root, *args[1:], "--dry-run")
    assert (res.code, res.err) == (0, ""), command
    assert res.out.splitlines()[0] == first
