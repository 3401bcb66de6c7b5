"""vGPU type names: parse NVIDIA profile names and type descriptions, and resolve what a user typed to one type.

Accepted spellings (shared/docs/vgpu-sysfs.md §2.2): `nvidia-63`, `GRID P4-1Q`, `P4-1Q`, and for layout C
`nvidia-<id>` or the bare numeric id. Matching is case-insensitive.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from vgpuadm.errors import NotFoundError

TYPE_CHECKING = False  # `typing` stays off the fast path of the read commands (bench/bench_cold_start.py)

if TYPE_CHECKING:
    from vgpuadm.model import VgpuType

# <board>[-<slices>]-<fb GB><series>[ME|4]; fb 0 means 512 MB (M60-0B). Board names may contain hyphens.
_PROFILE = re.compile(
    r"^(?P<board>.+?)(?:-(?P<slices>\d+))?-(?P<fb>\d+)(?P<series>[ABCQ])(?P<variant>ME|4)?$", re.IGNORECASE
)
_NV_DESCRIPTION = re.compile(
    r"^num_heads=(?P<heads>\d+), frl_config=(?P<frl>\d+), framebuffer=(?P<fb>\d+)M, "
    r"max_resolution=(?P<res>\d+x\d+), max_instance=(?P<max>\d+)$"
)
_GVT_LINE = re.compile(r"^(?P<key>low_gm_size|high_gm_size|fence|resolution|weight):\s*(?P<value>\S+)$")


@dataclass(frozen=True)
class NvidiaName:
    """What an NVIDIA vGPU name says: `NVIDIA H200X-1-18C` → board H200X, 1 MIG slice, 18 GB, C series."""

    profile: str
    board: str | None = None
    slices: int | None = None
    framebuffer_mib: int | None = None
    series: str | None = None
    variant: str | None = None

    def attributes(self) -> dict[str, str | int]:
        out: dict[str, str | int] = {}
        if self.board:
            out["board"] = self.board
        if self.series:
            out["series"] = self.series
        if self.slices is not None:
            out["mig_slices"] = self.slices
        if self.variant:
            out["variant"] = self.variant
        return out


def profile_of(name: str) -> str:
    """The last whitespace-separated token (vgpu-device-manager's shortName convention)."""
    parts = name.split()
    return parts[-1] if parts else name


def describe_nvidia_name(name: str) -> NvidiaName:
    profile = profile_of(name)
    m = _PROFILE.match(profile)
    if not m:
        return NvidiaName(profile=profile)
    fb_gb = int(m["fb"])
    return NvidiaName(
        profile=profile,
        board=m["board"],
        slices=int(m["slices"]) if m["slices"] else None,
        framebuffer_mib=512 if fb_gb == 0 else fb_gb * 1024,
        series=m["series"].upper(),
        variant=m["variant"],
    )


def parse_description(text: str) -> dict[str, str | int]:
    """Parse an mdev type description: NVIDIA's one-liner or GVT-g's key: value lines. Unknown text → {}."""
    text = text.strip()
    m = _NV_DESCRIPTION.match(text)
    if m:
        return {
            "num_heads": int(m["heads"]),
            "frl_config": int(m["frl"]),
            "framebuffer_mib": int(m["fb"]),
            "max_resolution": m["res"],
            "max_instance": int(m["max"]),
        }
    out: dict[str, str | int] = {}
    for line in text.splitlines():
        g = _GVT_LINE.match(line.strip())
        if not g:
            continue
        value = g["value"]
        if value.endswith("MB") and value[:-2].isdigit():
            out[g["key"].replace("_size", "_mib")] = int(value[:-2])
        elif value.isdigit():
            out[g["key"]] = int(value)
        else:
            out[g["key"]] = value
    return out


def parse_creatable(text: str) -> list[tuple[int, str]]:
    """Parse nvidia/creatable_vgpu_types: header `ID    : vGPU Name`, `%-5d : name` rows, blank lines,
    single or multiple spaces, and the colon-less form `1428 NVIDIA H200X-141C` all occur."""
    out = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or re.match(r"^ID\s*:", line, re.IGNORECASE):
            continue
        m = re.match(r"^(\d+)\s*:?\s*(.+?)$", line)
        if m:
            out.append((int(m[1]), m[2].strip()))
    return out


def _spellings(t: VgpuType) -> set[str]:
    names = {t.type_id.lower(), t.name.lower(), t.profile.lower()}
    if t.numeric_id is not None and t.layout == "vendor-vfio":
        names.add(str(t.numeric_id))
    return names


def resolve_type(types: Sequence[VgpuType], wanted: str, where: str = "this host") -> list[VgpuType]:
    """All types (on any parent) that `wanted` names, sharing one type_id. Unknown → NotFoundError with
    the closest spellings."""
    key = " ".join(wanted.split()).lower()
    hits = [t for t in types if key in _spellings(t)]
    ids = {t.type_id for t in hits}
    if len(ids) > 1:
        listed = ", ".join(sorted(ids))
        raise NotFoundError(
            f'Type "{wanted}" is ambiguous on {where}: {listed}', "name the type id, e.g. --type nvidia-63"
        )
    if hits:
        return hits
    raise NotFoundError(f'Unknown type "{wanted}" on {where}{_suggest(types, key)}', _list_hint(types))


def _suggest(types: Iterable[VgpuType], key: str) -> str:
    import difflib  # only on the error path: keeps the read commands' start-up light

    by_spelling: dict[str, VgpuType] = {}
    for t in types:
        for s in _spellings(t):
            by_spelling.setdefault(s, t)
    close = difflib.get_close_matches(key, list(by_spelling), n=3, cutoff=0.6)
    seen: list[str] = []
    for s in close:
        t = by_spelling[s]
        label = f"{t.type_id} ({t.name})" if t.name != t.type_id else t.type_id
        if label not in seen:
            seen.append(label)
    return f"; did you mean {' or '.join(seen)}?" if seen else ""


def _list_hint(types: Sequence[VgpuType]) -> str:
    return "run `vgpuadm types` to list the types this host offers" if types else "this host offers no vGPU types"
