"""Parsers for `nvidia-smi mig` text output (MIG-backed vGPU needs GPU instances, made through nvidia-smi). Pure.
Tested on real H200 output (tests/data/h200-passthrough-guest/nvidia-host.txt)."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

# `|   0  MIG 1g.18gb         19     7/7        16.00      No     16     1     0   |`
_GIP_ROW = re.compile(
    r"^\|\s*(?P<gpu>\d+)\s+MIG\s+(?P<name>\S+)\s+(?P<id>\d+)\s+(?P<free>\d+)/(?P<total>\d+)\s+(?P<mem>[\d.]+)\s+"
    r"(?P<p2p>\S+)\s+(?P<sm>\d+)\s+(?P<dec>\d+)\s+(?P<enc>\d+)\s*\|$"
)
# the row's second line: `|                                          1     1     0   |` (CE, JPEG, OFA)
_GIP_CONT = re.compile(r"^\|\s+(?P<ce>\d+)\s+(?P<jpeg>\d+)\s+(?P<ofa>\d+)\s*\|$")
# `GPU  0 Profile ID 19 Placements: {0,1,2,3,4,5,6}:1` (singular `Placement :` for one start slot)
_GIPP = re.compile(
    r"^GPU\s+(?P<gpu>\d+)\s+Profile ID\s+(?P<id>\d+)\s+Placements?\s*:\s*\{(?P<starts>[\d,]*)\}:(?P<size>\d+)"
)


@dataclass(frozen=True)
class GpuInstanceProfile:
    """One row of `nvidia-smi mig -lgip`: a MIG GPU-instance profile (1g.18gb is id 19 on an H200)."""

    gpu: int
    name: str  # 1g.18gb, 1g.18gb+me
    profile_id: int
    free: int
    total: int
    memory_gib: float
    p2p: bool
    sm: int
    dec: int
    enc: int
    ce: int | None = None
    jpeg: int | None = None
    ofa: int | None = None

    @property
    def slices(self) -> int:
        """The compute slices of the name: 1g.18gb → 1."""
        return int(self.name.split("g.", 1)[0])


def parse_gi_profiles(text: str) -> list[GpuInstanceProfile]:
    """`nvidia-smi mig -lgip`: every profile row with its continuation line (CE, JPEG, OFA)."""
    out: list[GpuInstanceProfile] = []
    for line in text.splitlines():
        line = line.strip()
        m = _GIP_ROW.match(line)
        if m:
            out.append(
                GpuInstanceProfile(
                    gpu=int(m["gpu"]), name=m["name"], profile_id=int(m["id"]), free=int(m["free"]),
                    total=int(m["total"]), memory_gib=float(m["mem"]), p2p=m["p2p"].lower() == "yes",
                    sm=int(m["sm"]), dec=int(m["dec"]), enc=int(m["enc"]),
                )
            )  # fmt: skip
            continue
        c = _GIP_CONT.match(line)
        if c and out and out[-1].ce is None:
            out[-1] = replace(out[-1], ce=int(c["ce"]), jpeg=int(c["jpeg"]), ofa=int(c["ofa"]))
    return out


def parse_gi_placements(text: str) -> dict[tuple[int, int], tuple[tuple[int, ...], int]]:
    """`nvidia-smi mig -lgipp`: {(gpu, profile id): (start slots, size in slots)}."""
    out = {}
    for line in text.splitlines():
        m = _GIPP.match(line.strip())
        if m:
            starts = tuple(int(s) for s in m["starts"].split(",") if s)
            out[(int(m["gpu"]), int(m["id"]))] = (starts, int(m["size"]))
    return out
