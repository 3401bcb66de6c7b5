"""`vgpuadm mig status|profiles|instances` on the simulated MIG boards: exact JSON (validated against the mig-*
schemas) read through the simulated nvidia-smi, and one-line errors."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import jsonschema
import pytest

from vgpuadm.host.sysfs import SIM_MARKER
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


@pytest.mark.process
def test_mig_instances_json(cli, h200):
    # No domains, through libvirt's test driver: the embedded driver allows one root per process, and an earlier
    # in-process test may have opened another (then ownership is unknown, and no instance can be told by-hand).
    r = cli("--root", str(h200), "--connect", "test:///default", "mig", "instances", "--json")
    assert (r.code, r.err) == (0, "")
    doc = json.loads(r.out)
    validate("mig-instances", doc)
    assert doc == [
        {"gpu_index": 0, "address": "0000:18:00.0", "name": "2g.35gb", "profile_id": 14, "instance_id": 2, "start": 0,
         "size": 2, "owner": None, "vgpus": [], "state": "by-hand", "made_for": None},
        {"gpu_index": 0, "address": "0000:18:00.0", "name": "1g.18gb", "profile_id": 19, "instance_id": 1, "start": 6,
         "size": 1, "owner": None, "vgpus": ["0000:18:00.4"], "state": "used", "made_for": None},
    ]  # fmt: skip


@pytest.mark.process
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
    assert status == [{"gpu_index": 0, "address": "0000:18:00.0", "product": "NVIDIA H200", "mig_current": "Enabled",
                       "mig_pending": "Enabled", "virtualization_mode": "Host VGPU", "host_vgpu_mode": "SR-IOV",
                       "instances": 2}]  # fmt: skip


def test_mig_without_nvidia_smi_is_one_line(cli, tmp_path, monkeypatch):
    build("t4", str(tmp_path / "t4"))
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("VGPUADM_NVIDIA_SMI", raising=False)
    r = cli("--root", str(tmp_path / "t4"), "mig", "status")
    assert r.code == 3
    assert r.err.splitlines()[0] == "error: nvidia-smi not found; it is needed to read MIG state"


BOARDS = {"h200-mig": "0000:18:00.0", "a100d-mig": "0000:41:00.0", "rtxpro6000-mig": "0000:81:00.0"}


PRODUCTS = {"h200-mig": "NVIDIA H200", "a100d-mig": "NVIDIA A100 80GB PCIe",
            "rtxpro6000-mig": "NVIDIA RTX PRO 6000 Blackwell Server Edition"}  # fmt: skip


@pytest.mark.process
@pytest.mark.parametrize("board", BOARDS)
def test_simulated_nvidia_smi_names_the_board_not_the_profile(board, tmp_path):
    """nvidia-smi's Product Name is the board's (the real H200 prints `NVIDIA H200`), never the simulated profile."""
    build(board, str(tmp_path / "h"))
    smi = str(tmp_path / "h/usr/bin/nvidia-smi")
    text = subprocess.run([smi, "-q"], check=True, capture_output=True, text=True).stdout
    xml = subprocess.run([smi, "-q", "-x"], check=True, capture_output=True, text=True).stdout
    assert f"    Product Name                          : {PRODUCTS[board]}\n" in text
    assert f"<product_name>{PRODUCTS[board]}</product_name>" in xml and board not in text + xml


def _enable(cli, root: Path, gpu: str) -> None:
    r = cli("--root", str(root), "mig", "enable", "--gpu", gpu)
    assert r.code == 0, r.err
    if json.loads(cli("--root", str(root), "mig", "status", "--json").out)[0]["mig_current"] != "Enabled":
        # the A100 board leaves it pending: creating is refused until a reset
        r = cli("--root", str(root), "mig", "create", "--gpu", gpu, "--profile", "1g.10gb")
        assert (r.code, r.err.splitlines()[0]) == (5, f"error: MIG mode is pending until a GPU reset on {gpu}")
        subprocess.run([str(root / "usr/bin/nvidia-smi"), "-r", "-i", "0"], check=True, capture_output=True)


# every profile of the Blackwell board and the H200; on the A100 the two whose placements differ most (each run
# starts nvidia-smi some 30 times)
MAXIMA = [("h200-mig", None), ("rtxpro6000-mig", None), ("a100d-mig", ("1g.10gb", "3g.40gb"))]


@pytest.mark.process
@pytest.mark.parametrize(("board", "names"), MAXIMA)
def test_every_profile_to_its_maximum_and_back(cli, tmp_path, board, names):
    """Each profile at its maximum count, then destroy --all: the GPU-instance table is the starting one."""
    root, gpu = tmp_path / board, BOARDS[board]
    build(board, str(root))
    _enable(cli, root, gpu)
    start = cli("--root", str(root), "mig", "profiles", "--json").out
    for row in json.loads(start):
        if names is not None and row["name"] not in names:
            continue
        r = cli("--root", str(root), "mig", "create", "--gpu", gpu, "--profile", row["name"], "--count",
                str(row["total"]))  # fmt: skip
        assert r.code == 0, r.err
        made = json.loads(cli("--root", str(root), "mig", "instances", "--json").out)
        assert [(i["name"], i["size"]) for i in made] == [(row["name"], row["placements"][0]["size"])] * row["total"]
        assert len({i["start"] for i in made}) == row["total"]
        assert cli("--root", str(root), "mig", "destroy", "--gpu", gpu, "--all").code == 0
        assert cli("--root", str(root), "mig", "profiles", "--json").out == start


@pytest.mark.process
def test_a_mix_that_does_not_fit_fails_before_any_change(cli, tmp_path):
    root, gpu = tmp_path / "h200", BOARDS["h200-mig"]
    build("h200-mig", str(root))
    _enable(cli, root, gpu)
    assert cli("--root", str(root), "mig", "create", "--gpu", gpu, "--profile", "1g.18gb", "--placement", "0").code == 0
    assert cli("--root", str(root), "mig", "create", "--gpu", gpu, "--profile", "1g.18gb", "--placement", "2").code == 0
    before = cli("--root", str(root), "mig", "instances", "--json").out
    r = cli("--root", str(root), "mig", "create", "--gpu", gpu, "--profile", "2g.35gb", "--count", "3")
    assert (r.code, r.err) == (4, "error: 2g.35gb needs slots 0/2/4; 0 and 2 hold 1g.18gb; 4 is taken by this "
                                  "request\nhint: destroy the instances in the way (`vgpuadm mig instances` lists "
                                  "them) or pick another profile\n")  # fmt: skip
    assert cli("--root", str(root), "mig", "instances", "--json").out == before
    r = cli("--root", str(root), "mig", "create", "--gpu", gpu, "--profile", "3g.71gb", "--count", "3")
    assert r.err.splitlines()[0] == "error: 0000:18:00.0 holds at most 2 3g.71gb GPU instances (0 exist)"
    assert cli("--root", str(root), "mig", "instances", "--json").out == before


@pytest.mark.process
def test_bad_input_is_one_line_and_changes_nothing(cli, tmp_path):
    root, gpu = tmp_path / "h200", BOARDS["h200-mig"]
    build("h200-mig", str(root))
    kernel = SimKernel(str(root))
    kernel.write("/sys/bus/pci/devices/0000:18:00.5/nvidia/current_vgpu_type", "1420\n")  # a time-sliced vGPU
    r = cli("--root", str(root), "mig", "enable", "--gpu", gpu)
    assert (r.code, r.err.splitlines()[0]) == (5, "error: cannot enable MIG mode on 0000:18:00.0: 1 vGPU runs on "
                                                  "it (0000:18:00.5)")  # fmt: skip
    kernel.write("/sys/bus/pci/devices/0000:18:00.5/nvidia/current_vgpu_type", "0\n")
    _enable(cli, root, gpu)
    cli("--root", str(root), "mig", "create", "--gpu", gpu, "--profile", "1g.18gb")
    kernel.write("/sys/bus/pci/devices/0000:18:00.4/nvidia/current_vgpu_type", "1414\n")
    r = cli("--root", str(root), "mig", "destroy", "--gpu", gpu, "--instance", "1")
    assert (r.code, r.err.splitlines()[0]) == (5, "error: GPU instance 1 (1g.18gb) on 0000:18:00.0 runs the vGPU on "
                                                  "0000:18:00.4")  # fmt: skip
    # the hint used to offer `vgpuadm vf clear` whoever owns the VF (#30.8); no VM owns this one
    assert r.err.splitlines()[1] == (
        "hint: free what is in the way: no VM owns 0000:18:00.4 (`vgpuadm vf clear 0000:18:00.4`); then destroy the GPU "
        "instance"
    )
    r = cli("--root", str(root), "mig", "destroy", "--gpu", gpu, "--instance", "7")
    assert (r.code, r.err.splitlines()[0]) == (3, "error: 0000:18:00.0 has no GPU instance 7")
    r = cli("--root", str(root), "mig", "disable", "--gpu", gpu)
    assert (r.code, r.err.splitlines()[0]) == (5, "error: 0000:18:00.0 still has 1 GPU instance")
    r = cli("--root", str(root), "mig", "create", "--gpu", gpu, "--profile", "2g.35gb", "--placement", "1")
    assert (r.code, r.err.splitlines()[0]) == (4, "error: 2g.35gb cannot start at slot 1 on 0000:18:00.0")
    assert cli("--root", str(root), "mig", "destroy", "--gpu", gpu).err.startswith("error: give --instance ID or --all")
    assert len(json.loads(cli("--root", str(root), "mig", "instances", "--json").out)) == 1


@pytest.mark.process
def test_mig_on_a_gpu_without_mig(cli, tmp_path):
    """A layout C GPU without MIG (an L40S, say): every simulated layout C board has MIG, so the H200 host's marker
    loses the GPU's MIG state and its simulated nvidia-smi reports MIG mode N/A, as for a board without MIG."""
    build("h200-vendor-vfio", str(tmp_path / "h"))
    marker = tmp_path / "h" / SIM_MARKER
    model = json.loads(marker.read_text())
    del model["mig"]["0000:18:00.0"]
    marker.write_text(json.dumps(model))
    r = cli("--root", str(tmp_path / "h"), "mig", "enable", "--gpu", "0000:18:00.0")
    assert r.code == 2 and r.err.splitlines()[0] == "error: 0000:18:00.0 (NVIDIA H200) has no MIG"


@pytest.mark.process
def test_readme_mig_example_runs_as_written(cli, tmp_path, monkeypatch):
    """The `## MIG` section's sh block of README.md, line by line, in tmp_path (its root is a relative dir)."""
    monkeypatch.chdir(tmp_path)
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    block = readme.split("\n## MIG\n", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    for line in block.splitlines():
        args = shlex.split(line, comments=True)
        assert args[0] == "vgpuadm"
        r = cli(*args[1:])
        assert (r.code, r.err) == (0, ""), line
    assert [
        i["start"] for i in json.loads(cli("--root", str(tmp_path / "h200"), "mig", "instances", "--json").out)
    ] == [5, 6]
