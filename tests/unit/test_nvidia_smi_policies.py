"""Parsers of nvidia-smi's host-policy outputs (host/nvidia_smi_vgpu.py): `-q` heterogeneous mode and capability,
placement lines of `vgpu -s -v` / `vgpu -c -v`, `vgpu -ss`; and discovery's reading of nvidia/placement_id. The
inputs are the simulated nvidia-smi's outputs (sim/nvidia_smi.py) and the real L40S VF capture."""

from __future__ import annotations

import subprocess

import pytest

from vgpuadm import api
from vgpuadm.errors import HostIOError
from vgpuadm.host.discover import _placement
from vgpuadm.host.nvidia_smi_vgpu import (
    GpuPolicies,
    VgpuTypeInfo,
    parse_query_text,
    parse_scheduler_state,
    parse_type_blocks,
)


def smi(root, *args: str) -> str:
    return subprocess.run([f"{root}/usr/bin/nvidia-smi", *args], capture_output=True, text=True, check=True).stdout


@pytest.mark.process
def test_query_text_gives_capability_and_mode(sim_host):
    root = sim_host("rtxpro6000-mig")
    assert parse_query_text(smi(root, "-q")) == {"0000:81:00.0": GpuPolicies(True, "Disabled")}
    smi(root, "vgpu", "-i", "0", "-shm", "1")
    assert parse_query_text(smi(root, "-q")) == {"0000:81:00.0": GpuPolicies(True, "Enabled")}


@pytest.mark.process
def test_placement_lines_of_supported_and_creatable_types(sim_host):
    root = sim_host("rtxpro6000-mig")
    supported = {t.name: t for t in parse_type_blocks(smi(root, "vgpu", "-s", "-v"))["0000:81:00.0"]}
    assert supported["NVIDIA DC-24C"] == VgpuTypeInfo(2008, "NVIDIA DC-24C", None, 4, 24576, 24, (0, 24, 48, 72))
    assert supported["NVIDIA DC-2-24C"].placement_size is None  # MIG-backed: no time-slice placement
    smi(root, "vgpu", "-i", "0", "-shm", "1")
    creatable = {t.name: t for t in parse_type_blocks(smi(root, "vgpu", "-c", "-v"))["0000:81:00.0"]}
    assert creatable["NVIDIA DC-48C"].placement_ids == (0, 48)


@pytest.mark.process
def test_scheduler_state(sim_host):
    root = sim_host("rtxpro6000-mig")
    assert parse_scheduler_state(smi(root, "vgpu", "-ss")) == {"0000:81:00.0": ("best-effort", 0)}
    smi(root, "vgpu", "-i", "0", "--set-vgpu-scheduler-state", "equalShare", "--timeslice", "3")
    assert parse_scheduler_state(smi(root, "vgpu", "-ss")) == {"0000:81:00.0": ("equal-share", 3)}


@pytest.mark.parametrize(("text", "value"), [(None, None), ("\n", -1), ("-1\n", -1), ("48\n", 48)])
def test_placement_id_grammar(text, value):
    assert _placement(text, "/sys/x") == value


@pytest.mark.parametrize("text", ["-2\n", "4096\n", "0x10\n", "1 2\n"])
def test_placement_id_garbage_is_refused_with_its_path(text):
    with pytest.raises(HostIOError) as info:
        _placement(text, "/sys/bus/pci/devices/0000:18:00.4/nvidia/placement_id")
    assert info.value.message == (
        f"/sys/bus/pci/devices/0000:18:00.4/nvidia/placement_id holds {text.strip()!r}, not a placement ID"
    )


def test_discovery_exposes_each_vfs_placement(sim_host):
    snap = api.discover(str(sim_host("h200-vendor-vfio")))
    assert {vf.placement_id for vf in snap.vendor_vfs.values()} == {-1}
