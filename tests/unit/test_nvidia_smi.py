"""nvidia-smi parsers on real outputs: the H200 (tests/data/h200-passthrough-guest/) and published A100 PCIe 40GB
(510.47.03) and A30 (450.80.02) outputs (tests/data/nvidia-smi-published/; provenance in tests/data/README.md).
The runner is tested against executables written here (no nvidia-smi exists on CI)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from vgpuadm.errors import NotFoundError
from vgpuadm.host import nvidia_smi
from vgpuadm.host.nvidia_smi_mig import (
    ComputeInstance,
    GpuInstance,
    parse_ci_profiles,
    parse_compute_instances,
    parse_created_gpu_instances,
    parse_gi_placements,
    parse_gi_profiles,
    parse_gpu_instances,
)
from vgpuadm.host.nvidia_smi_vgpu import (
    GpuModes,
    parse_query_gpu,
    parse_query_xml,
    parse_type_blocks,
    parse_type_names,
    parse_vgpu_query,
)
from vgpuadm.host.root import HostRoot

DATA = Path(__file__).resolve().parent.parent / "data"
H200 = DATA / "h200-passthrough-guest"
PUBLISHED = DATA / "nvidia-smi-published"


def section(path: Path, title: str) -> str:
    """The text under `## <title>` up to the next `## ` heading."""
    body = path.read_text().split(f"## {title}\n", 1)[1]
    return body.split("\n## ", 1)[0]


def h200(title: str) -> str:
    return section(H200 / "nvidia-host.txt", title)


def test_h200_gpu_instance_profiles_81_columns():
    profiles = parse_gi_profiles(h200("nvidia-smi mig -lgip"))
    assert [(p.name, p.profile_id, p.free, p.total) for p in profiles] == [
        ("1g.18gb", 19, 7, 7), ("1g.18gb+me", 20, 1, 1), ("1g.35gb", 15, 4, 4), ("2g.35gb", 14, 3, 3),
        ("3g.71gb", 9, 2, 2), ("4g.71gb", 5, 1, 1), ("7g.141gb", 0, 1, 1),
    ]  # fmt: skip
    big = profiles[-1]
    assert (big.gpu, big.memory_gib, big.p2p, big.sm, big.dec, big.enc, big.ce, big.jpeg, big.ofa) == (
        0, 140.0, False, 132, 7, 0, 8, 7, 1
    )  # fmt: skip
    assert [p.slices for p in profiles] == [1, 1, 1, 2, 3, 4, 7]
    assert profiles[1].ofa == 1 and profiles[0].ofa == 0


def test_h200_placements_singular_and_plural():
    placements = parse_gi_placements(h200("nvidia-smi mig -lgipp"))
    assert placements == {
        (0, 19): ((0, 1, 2, 3, 4, 5, 6), 1), (0, 20): ((0, 1, 2, 3, 4, 5, 6), 1), (0, 15): ((0, 2, 4, 6), 2),
        (0, 14): ((0, 2, 4), 2), (0, 9): ((0, 4), 4), (0, 5): ((0,), 4), (0, 0): ((0,), 8),
    }  # fmt: skip


def test_h200_answers_without_mig_or_vgpu_mode_are_empty():
    assert h200("nvidia-smi mig -lgi").strip() == "No MIG-enabled devices found."
    assert parse_gpu_instances(h200("nvidia-smi mig -lgi")) == []
    assert parse_gi_profiles(h200("nvidia-smi mig -lgi")) == []
    assert parse_gi_placements("No MIG-enabled devices found.\n") == {}
    for title in ("nvidia-smi vgpu -s", "nvidia-smi vgpu -c"):
        assert h200(title).strip() == "No supported devices in vGPU mode"
        assert parse_type_names(h200(title)) == {}
        assert parse_type_blocks(h200(title)) == {}


def test_h200_query_xml_modes():
    gpus = parse_query_xml((H200 / "nvidia-smi-q.xml").read_bytes())
    assert gpus == [GpuModes(0, "0000:00:06.0", "NVIDIA H200", "Disabled", "Disabled", "Pass-Through", "N/A", "Enabled",
                             "580.159.04")]  # fmt: skip
    assert gpus[0].mig_supported


def test_query_xml_never_loads_entities(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("leaked")
    doc = (f'<?xml version="1.0"?><!DOCTYPE x [<!ENTITY e SYSTEM "file://{secret}">]>'
           '<nvidia_smi_log><gpu id="00000000:18:00.0"><product_name>&e;</product_name></gpu></nvidia_smi_log>')  # fmt: skip
    (gpu,) = parse_query_xml(doc.encode())
    assert "leaked" not in gpu.product and gpu.address == "0000:18:00.0"
    assert parse_query_xml(b"<not xml") == []


def test_h200_query_gpu_csv():
    rows = parse_query_gpu(h200("nvidia-smi --query-gpu"))
    assert rows == [{
        "index": "0", "name": "NVIDIA H200", "pci.bus_id": "00000000:00:06.0", "memory.total": "143771 MiB",
        "mig.mode.current": "Disabled", "mig.mode.pending": "Disabled", "driver_version": "580.159.04",
        "vbios_version": "96.00.A5.00.1A",
    }]  # fmt: skip


def test_a100_79_column_profiles_and_instances():
    text = PUBLISHED / "a100-pcie-40gb-510.txt"
    profiles = parse_gi_profiles(section(text, "nvidia-smi mig -lgip"))
    assert [(p.name, p.profile_id, p.free, p.total, p.memory_gib, p.sm, p.ce) for p in profiles] == [
        ("1g.5gb", 19, 0, 7, 4.75, 14, 1), ("1g.5gb+me", 20, 0, 1, 4.75, 14, 1), ("2g.10gb", 14, 0, 3, 9.75, 28, 2),
        ("3g.20gb", 9, 0, 2, 19.62, 42, 3), ("4g.20gb", 5, 0, 1, 19.62, 56, 4), ("7g.40gb", 0, 0, 1, 39.5, 98, 7),
    ]  # fmt: skip
    assert parse_gpu_instances(section(text, "nvidia-smi mig -lgi")) == [
        GpuInstance(0, "1g.5gb", 19, 11, 0, 1), GpuInstance(0, "1g.5gb", 19, 12, 1, 1),
        GpuInstance(0, "2g.10gb", 14, 6, 2, 2), GpuInstance(0, "3g.20gb", 9, 1, 4, 4),
    ]  # fmt: skip
    assert parse_created_gpu_instances(section(text, "nvidia-smi mig -cgi 9,19,14,19")) == [
        (0, 1, "3g.20gb", 9),
        (0, 11, "1g.5gb", 19),
        (0, 6, "2g.10gb", 14),
        (0, 12, "1g.5gb", 19),
    ]


def test_a100_compute_instances_and_profiles():
    text = PUBLISHED / "a100-pcie-40gb-510.txt"
    assert parse_compute_instances(section(text, "nvidia-smi mig -gi 12 -lci")) == []
    # the published listing ends without its closing border: the last row still counts
    assert parse_compute_instances(section(text, "nvidia-smi mig -i 0 -lci")) == [
        ComputeInstance(0, 11, "1g.5gb", 0, 0, 0, 1), ComputeInstance(0, 12, "1g.5gb", 0, 0, 0, 1),
        ComputeInstance(0, 6, "1c.2g.10gb", 0, 0, 0, 1), ComputeInstance(0, 1, "1c.3g.20gb", 0, 0, 0, 1),
    ]  # fmt: skip
    cips = parse_ci_profiles(section(text, "nvidia-smi mig -lcip"))
    assert [(c.gpu_instance_id, c.name, c.profile_id, c.default, c.free, c.total, c.sm, c.ce, c.jpeg) for c in cips] == [
        (9, "1g.5gb", 0, True, 0, 1, 14, 1, 0), (3, "1c.2g.10gb", 0, False, 0, 2, 14, 2, 0),
        (3, "2g.10gb", 1, True, 0, 1, 28, 2, 0),
    ]  # fmt: skip


def test_a30_placements_and_instances():
    text = PUBLISHED / "a30-450.txt"
    assert [p.name for p in parse_gi_profiles(section(text, "nvidia-smi mig -lgip"))] == [
        "1g.6gb",
        "1g.6gb+me",
        "2g.12gb",
        "4g.24gb",
    ]
    assert parse_gi_placements(section(text, "nvidia-smi mig -lgipp")) == {
        (0, 14): ((0, 1, 2, 3), 1),
        (0, 21): ((0, 1, 2, 3), 1),
        (0, 5): ((0, 2), 2),
        (0, 0): ((0,), 4),
    }
    assert [(g.instance_id, g.start) for g in parse_gpu_instances(section(text, "nvidia-smi mig -lgi"))] == [
        (3, 0),
        (4, 1),
        (5, 2),
        (6, 3),
    ]


def test_profile_rows_whose_second_line_is_missing_and_gfx_profiles():
    text = (
        "|   0  MIG 1g.24gb+gfx     47     4/4        23.00      No     46     1     0   |\n"
        "+-------------------------------------------------------------------------------+\n"
        "|   0  MIG 2g.48gb         14     2/2        47.00      No     94     2     0   |\n"
        "|                                                               2     2     0   |\n"
        "|                                                               9     9     9   |\n"
    )
    a, b = parse_gi_profiles(text)
    assert (a.name, a.profile_id, a.ce, a.jpeg, a.ofa) == ("1g.24gb+gfx", 47, None, None, None)
    assert (b.name, b.ce, b.jpeg, b.ofa) == ("2g.48gb", 2, 2, 0)  # a stray third line is not a second one


def test_type_names_and_blocks():
    names = "GPU 00000000:41:00.0\n    NVIDIA A100D-1-10C\n    NVIDIA A100D-2-20C\nGPU 00000000:C1:00.0\n"
    assert parse_type_names(names) == {"0000:41:00.0": ("NVIDIA A100D-1-10C", "NVIDIA A100D-2-20C"),
                                       "0000:c1:00.0": ()}  # fmt: skip
    blocks = (
        "GPU 00000000:18:00.0\n"
        "    vGPU Type ID                          : 0x586\n"
        "        Name                              : NVIDIA H200X-1-18C\n"
        "        Class                             : Compute\n"
        "        GPU Instance Profile ID           : 19\n"
        "        Max Instances                     : 7\n"
        "        FB Memory                         : 16384 MiB\n"
        "    vGPU Type ID                          : 0x594\n"
        "        Name                              : NVIDIA H200X-141C\n"
        "        GPU Instance Profile ID           : N/A\n"
        "        Max Instances                     : 1\n"
    )
    (t1, t2) = parse_type_blocks(blocks)["0000:18:00.0"]
    assert (t1.type_id, t1.name, t1.gi_profile_id, t1.max_instances, t1.fb_mib) == (1414, "NVIDIA H200X-1-18C", 19,
                                                                                   7, 16384)  # fmt: skip
    assert (t2.type_id, t2.gi_profile_id, t2.max_instances, t2.fb_mib) == (1428, None, 1, None)
    assert nvidia_smi.parse_supported_types(blocks) == {"0000:18:00.0": ((1414, "NVIDIA H200X-1-18C"),
                                                                         (1428, "NVIDIA H200X-141C"))}  # fmt: skip


def test_vgpu_query_published_fragment():
    (q,) = parse_vgpu_query(section(PUBLISHED / "vgpu-q-fragment.txt", "nvidia-smi vgpu -q")).values()
    assert (q.address, q.active, len(q.vgpus)) == ("0000:10:00.0", 1, 1)
    assert q.vgpus[0].vgpu_id == 3251634213
    assert q.vgpus[0].fields["MDEV UUID"] == "c73f1fa6-489e-4834-9476-d70dabd98c40"
    assert q.vgpus[0].gpu_instance_id is None


def _fake(tmp_path: Path, name: str, script: str) -> str:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)
    return str(path)


@pytest.mark.process
def test_locate_order_root_then_env_then_path(tmp_path, monkeypatch):
    root = tmp_path / "root"
    (root / "usr/bin").mkdir(parents=True)
    env_bin = _fake(tmp_path, "env-smi", "echo env\n")
    path_dir = tmp_path / "bin"
    path_dir.mkdir()
    _fake(path_dir, "nvidia-smi", "echo path\n")
    monkeypatch.setenv("PATH", str(path_dir))
    monkeypatch.delenv("VGPUADM_NVIDIA_SMI", raising=False)
    host = HostRoot(str(root))
    assert nvidia_smi.locate(host) == str(path_dir / "nvidia-smi")
    monkeypatch.setenv("VGPUADM_NVIDIA_SMI", env_bin)
    assert nvidia_smi.locate(host) == env_bin
    own = _fake(root / "usr/bin", "nvidia-smi", "echo own; echo oops >&2; exit 3\n")
    assert os.path.realpath(nvidia_smi.locate(host) or "") == os.path.realpath(own)
    result = nvidia_smi.invoke(host, ["mig", "-lgi"], "list GPU instances")
    assert (result.returncode, result.stdout, result.message()) == (3, "own\n", "oops")
    assert nvidia_smi.run(host, "mig", "-lgi") is None  # a failing read is "unknown", not an error


def test_missing_binary_is_one_line_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("VGPUADM_NVIDIA_SMI", raising=False)
    with pytest.raises(NotFoundError) as exc:
        nvidia_smi.require(HostRoot(str(tmp_path)), "create MIG GPU instances")
    assert exc.value.message == "nvidia-smi not found; it is needed to create MIG GPU instances"
    assert "VGPUADM_NVIDIA_SMI" in exc.value.hint


@pytest.mark.parametrize("text", ["-100000000:01:00.0", "0000:-1:00.0", "0000:01:+0.0", "0_0:01:00.0", "0000: 1:00.0",
                                  "0000:01:00.+1", ":01:00.0"])  # fmt: skip
def test_a_gpu_address_is_hex_digits_only(text: str) -> None:
    """nvidia-smi's `00000000:18:00.0`: int() alone took a sign, `_` or a space, and `-100000000:01:00.0` came out
    as the "address" -100000000:01:00.0 (found by the usage fuzz target)."""
    assert nvidia_smi.pci_address(text) is None
    assert nvidia_smi.pci_address("00000000:18:1F.7") == "0000:18:1f.7"
