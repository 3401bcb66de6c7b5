"""`vgpuadm mig status|profiles|instances` on the simulated MIG boards: exact JSON (validated against the mig-*
schemas) read through the simulated nvidia-smi, and one-line errors."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import jsonschema
import pytest

from vgpuadm.schemas import MIG_NAMES, validate
from vgpuadm.schemas import load as load_schema
from vgpuadm.sim.kernel import SimKernel
from vgpuadm.sim.profiles import build


@pytest.fixture(scope="module")
def h200(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("mig") / "h200"
    build("h200-mig", str(root))
    smi = str(root / "usr/bin/nvidia-smi")
    subprocess.run([smi, "-i", "0", "-mig", "1"], check=True, capture_output=True)
    subprocess.run([smi, "mig", "-i", "0", "-cgi", "19:6,14:0"], check=True, capture_output=True)
    SimKernel(str(root)).write("/sys/bus/pci/devices/0000:18:00.4/nvidia/current_vgpu_type", "1414\n")
    return root


def test_schemas_are_valid_and_name_the_issue_fields():
    for name in MIG_NAMES:
        jsonschema.Draft202012Validator.check_schema(load_schema(name))
    assert set(load_schema("mig-profiles")["items"]["required"]) == {
        "gpu_index", "address", "name", "profile_id", "free", "total", "memory_gib", "p2p", "sm", "ce", "dec", "enc",
        "jpeg", "ofa", "placements"}  # fmt: skip
    assert {"gpu_index", "address", "name", "profile_id", "instance_id", "start", "size", "owner"} <= set(
        load_schema("mig-instances")["items"]["required"]
    )


def test_mig_instances_json(cli, h200):
    r = cli("--root", str(h200), "mig", "instances", "--json")
    assert (r.code, r.err) == (0, "")
    doc = json.loads(r.out)
    validate("mig-instances", doc)
    assert doc == [
        {"gpu_index": 0, "address": "0000:18:00.0", "name": "2g.35gb", "profile_id": 14, "instance_id": 2, "start": 0,
         "size": 2, "owner": None, "vgpus": []},
        {"gpu_index": 0, "address": "0000:18:00.0", "name": "1g.18gb", "profile_id": 19, "instance_id": 1, "start": 6,
         "size": 1, "owner": None, "vgpus": ["0000:18:00.4"]},
    ]  # fmt: skip


def test_mig_profiles_and_status_json(cli, h200):
    doc = json.loads(cli("--root", str(h200), "mig", "profiles", "--gpu", "18:00.0", "--json").out)
    validate("mig-profiles", doc)
    first = doc[0]
    assert first == {"gpu_index": 0, "address": "0000:18:00.0", "name": "1g.18gb", "profile_id": 19, "free": 4,
                     "total": 7, "memory_gib": 16.0, "p2p": False, "sm": 16, "ce": 1, "dec": 1, "enc": 0, "jpeg": 1,
                     "ofa": 0, "placements": [{"start": s, "size": 1} for s in range(7)]}  # fmt: skip
    assert {r["name"]: (r["free"], r["total"]) for r in doc}["3g.71gb"] == (0, 2)  # 0 and 4 both overlap
    status = json.loads(cli("--root", str(h200), "mig", "status", "--json").out)
    validate("mig-status", status)
    assert status == [{"gpu_index": 0, "address": "0000:18:00.0", "product": "h200-mig", "mig_current": "Enabled",
                       "mig_pending": "Enabled", "virtualization_mode": "Host VGPU", "host_vgpu_mode": "SR-IOV",
                       "instances": 2}]  # fmt: skip


def test_mig_without_nvidia_smi_is_one_line(cli, tmp_path, monkeypatch):
    build("t4", str(tmp_path / "t4"))
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("VGPUADM_NVIDIA_SMI", raising=False)
    r = cli("--root", str(tmp_path / "t4"), "mig", "status")
    assert r.code == 3
    assert r.err.splitlines()[0] == "error: nvidia-smi not found; it is needed to read MIG state"
