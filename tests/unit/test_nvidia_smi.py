"""nvidia-smi MIG parsers on the real H200 output (tests/data/h200-passthrough-guest/nvidia-host.txt)."""

from __future__ import annotations

from pathlib import Path

from vgpuadm.host.nvidia_smi_mig import parse_gi_placements, parse_gi_profiles

HOST = Path(__file__).resolve().parent.parent / "data" / "h200-passthrough-guest" / "nvidia-host.txt"


def section(title: str) -> str:
    """The text under `## <title>` up to the next `## ` heading."""
    text = HOST.read_text()
    body = text.split(f"## {title}\n", 1)[1]
    return body.split("\n## ", 1)[0]


def test_h200_gpu_instance_profiles():
    profiles = parse_gi_profiles(section("nvidia-smi mig -lgip"))
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
    placements = parse_gi_placements(section("nvidia-smi mig -lgipp"))
    assert placements == {
        (0, 19): ((0, 1, 2, 3, 4, 5, 6), 1), (0, 20): ((0, 1, 2, 3, 4, 5, 6), 1), (0, 15): ((0, 2, 4, 6), 2),
        (0, 14): ((0, 2, 4), 2), (0, 9): ((0, 4), 4), (0, 5): ((0,), 4), (0, 0): ((0,), 8),
    }  # fmt: skip


def test_no_mig_devices_is_empty():
    assert parse_gi_profiles(section("nvidia-smi mig -lgi")) == []
    assert parse_gi_placements("No MIG-enabled devices found.\n") == {}
