"""Parsers for `nvidia-smi mig` text output (MIG-backed vGPU needs GPU instances, made through nvidia-smi). Pure.

Tested on the real H200 (tests/data/h200-passthrough-guest/nvidia-host.txt: the 81-column `-lgip`) and on published
A100/A30 outputs (tests/data/nvidia-smi-published/, the 79-column `-lgip` of older drivers; provenance in
tests/data/README.md). Every table row is matched whole; anything else (borders, headers, "No MIG-enabled devices
found.", "No compute instances found: Not Found") yields no row.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

# A profile name as nvidia-smi prints it after `MIG `: 1g.18gb, 1g.18gb+me, 1g.24gb+gfx, 1c.3g.20gb, 7g.141gb
NAME = r"(?P<name>\d+[cg]\.[0-9a-z.]+(?:\+[a-z.]+)?)"

# `|   0  MIG 1g.18gb         19     7/7        16.00      No     16     1     0   |`
_GIP_ROW = re.compile(
    rf"^\|\s*(?P<gpu>\d+)\s+MIG\s+{NAME}\s+(?P<id>\d+)\s+(?P<free>\d+)/(?P<total>\d+)\s+(?P<mem>[\d.]+)\s+"
    r"(?P<p2p>Yes|No|N/A)\s+(?P<sm>\d+)\s+(?P<dec>\d+)\s+(?P<enc>\d+)\s*\|$"
)
# the row's second line: `|                                          1     1     0   |` (CE, JPEG, OFA)
_GIP_CONT = re.compile(r"^\|\s+(?P<ce>\d+)\s+(?P<jpeg>\d+)\s+(?P<ofa>\d+)\s*\|$")
# `GPU  0 Profile ID 19 Placements: {0,1,2,3,4,5,6}:1` (singular `Placement :` for one start slot)
_GIPP = re.compile(
    r"^GPU\s+(?P<gpu>\d+)\s+Profile ID\s+(?P<id>\d+)\s+Placements?\s*:\s*\{(?P<starts>[\d,]*)\}:(?P<size>\d+)$"
)
# -lgi: `|   0  MIG 1g.5gb          19       11          0:1     |`
_GI_ROW = re.compile(
    rf"^\|\s*(?P<gpu>\d+)\s+MIG\s+{NAME}\s+(?P<pid>\d+)\s+(?P<iid>\d+)\s+(?P<start>\d+):(?P<size>\d+)\s*\|$"
)
# -lci: `|   0     11       MIG 1g.5gb           0         0          0:1     |`
_CI_ROW = re.compile(
    rf"^\|\s*(?P<gpu>\d+)\s+(?P<gi>\d+)\s+MIG\s+{NAME}\s+(?P<pid>\d+)\s+(?P<ciid>\d+)\s+(?P<start>\d+):(?P<size>\d+)"
    r"\s*\|$"
)
# -lcip: `|   0      9       MIG 1g.5gb           0*     0/1           14        0     0     0   |` and its second
# line `|                                                                      1     0         |` (CE, JPEG)
_CIP_ROW = re.compile(
    rf"^\|\s*(?P<gpu>\d+)\s+(?P<gi>\d+)\s+MIG\s+{NAME}\s+(?P<pid>\d+)(?P<default>\*?)\s+(?P<free>\d+)/(?P<total>\d+)"
    r"\s+(?P<sm>\d+)\s+(?P<dec>\d+)\s+(?P<enc>\d+)\s+(?P<ofa>\d+)\s*\|$"
)
_CIP_CONT = re.compile(r"^\|\s+(?P<ce>\d+)\s+(?P<jpeg>\d+)\s*\|$")
# `Successfully created GPU instance ID  1 on GPU  0 using profile MIG 3g.20gb (ID  9)`
_CGI_DONE = re.compile(
    rf"^Successfully created GPU instance ID\s+(?P<iid>\d+) on GPU\s+(?P<gpu>\d+) using profile MIG {NAME} "
    r"\(ID\s+(?P<pid>\d+)\)$"
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
    ce: int | None = None  # None: the row's second line was missing
    jpeg: int | None = None
    ofa: int | None = None

    @property
    def slices(self) -> int:
        """The compute slices of the name: 1g.18gb → 1."""
        return int(self.name.split("g.", 1)[0])


@dataclass(frozen=True)
class GpuInstance:
    """One row of `nvidia-smi mig -lgi`: a GPU instance and its placement (start slot, size in slots)."""

    gpu: int
    name: str
    profile_id: int
    instance_id: int
    start: int
    size: int


@dataclass(frozen=True)
class ComputeInstance:
    """One row of `nvidia-smi mig -lci`."""

    gpu: int
    gpu_instance_id: int
    name: str  # 1g.5gb, or 1c.3g.20gb for a CI smaller than its GI
    profile_id: int
    instance_id: int
    start: int
    size: int


@dataclass(frozen=True)
class ComputeInstanceProfile:
    """One row of `nvidia-smi mig -lcip`: a CI profile offered inside GPU instance `gpu_instance_id`."""

    gpu: int
    gpu_instance_id: int
    name: str
    profile_id: int
    default: bool  # the `*` nvidia-smi prints after the id of the profile `-C` uses
    free: int
    total: int
    sm: int
    dec: int
    enc: int
    ofa: int
    ce: int | None = None
    jpeg: int | None = None


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines()]


def parse_gi_profiles(text: str) -> list[GpuInstanceProfile]:
    """`nvidia-smi mig -lgip` (79- or 81-column layout): every profile row with its second line when present."""
    out: list[GpuInstanceProfile] = []
    last_was_row = False
    for line in _lines(text):
        m = _GIP_ROW.match(line)
        if m:
            out.append(
                GpuInstanceProfile(
                    gpu=int(m["gpu"]), name=m["name"], profile_id=int(m["id"]), free=int(m["free"]),
                    total=int(m["total"]), memory_gib=float(m["mem"]), p2p=m["p2p"] == "Yes",
                    sm=int(m["sm"]), dec=int(m["dec"]), enc=int(m["enc"]),
                )
            )  # fmt: skip
            last_was_row = True
            continue
        c = _GIP_CONT.match(line)
        if c and last_was_row:
            out[-1] = replace(out[-1], ce=int(c["ce"]), jpeg=int(c["jpeg"]), ofa=int(c["ofa"]))
        last_was_row = False
    return out


def parse_gi_placements(text: str) -> dict[tuple[int, int], tuple[tuple[int, ...], int]]:
    """`nvidia-smi mig -lgipp`: {(gpu, profile id): (start slots, size in slots)}."""
    out = {}
    for line in _lines(text):
        m = _GIPP.match(line)
        if m:
            starts = tuple(int(s) for s in m["starts"].split(",") if s)
            out[(int(m["gpu"]), int(m["id"]))] = (starts, int(m["size"]))
    return out


def parse_gpu_instances(text: str) -> list[GpuInstance]:
    """`nvidia-smi mig -lgi`; "No MIG-enabled devices found." and "No GPU instances found" give []."""
    out = []
    for line in _lines(text):
        m = _GI_ROW.match(line)
        if m:
            out.append(GpuInstance(int(m["gpu"]), m["name"], int(m["pid"]), int(m["iid"]), int(m["start"]),
                                   int(m["size"])))  # fmt: skip
    return out


def parse_compute_instances(text: str) -> list[ComputeInstance]:
    """`nvidia-smi mig -lci`; "No compute instances found: Not Found" gives []."""
    out = []
    for line in _lines(text):
        m = _CI_ROW.match(line)
        if m:
            out.append(ComputeInstance(int(m["gpu"]), int(m["gi"]), m["name"], int(m["pid"]), int(m["ciid"]),
                                       int(m["start"]), int(m["size"])))  # fmt: skip
    return out


def parse_ci_profiles(text: str) -> list[ComputeInstanceProfile]:
    """`nvidia-smi mig -lcip`: every CI profile row with its second line (CE, JPEG) when present."""
    out: list[ComputeInstanceProfile] = []
    last_was_row = False
    for line in _lines(text):
        m = _CIP_ROW.match(line)
        if m:
            out.append(
                ComputeInstanceProfile(
                    gpu=int(m["gpu"]), gpu_instance_id=int(m["gi"]), name=m["name"], profile_id=int(m["pid"]),
                    default=m["default"] == "*", free=int(m["free"]), total=int(m["total"]), sm=int(m["sm"]),
                    dec=int(m["dec"]), enc=int(m["enc"]), ofa=int(m["ofa"]),
                )
            )  # fmt: skip
            last_was_row = True
            continue
        c = _CIP_CONT.match(line)
        if c and last_was_row:
            out[-1] = replace(out[-1], ce=int(c["ce"]), jpeg=int(c["jpeg"]))
        last_was_row = False
    return out


def parse_created_gpu_instances(text: str) -> list[tuple[int, int, str, int]]:
    """`nvidia-smi mig -cgi …`: (gpu, GPU instance id, profile name, profile id) per "Successfully created" line."""
    out = []
    for line in _lines(text):
        m = _CGI_DONE.match(line)
        if m:
            out.append((int(m["gpu"]), int(m["iid"]), m["name"], int(m["pid"])))
    return out
