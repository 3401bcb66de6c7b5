"""vGPU type names: parse NVIDIA profile names and type descriptions, and resolve what a user typed to one type.

Accepted spellings (shared/docs/vgpu-sysfs.md §2.2): `nvidia-63`, `GRID P4-1Q`, `P4-1Q`, and for layout C
`nvidia-<id>` or the bare numeric id. Matching is case-insensitive.
"""

from __future__ import annotations

from vgpuadm.errors import NotFoundError

TYPE_CHECKING = False  # `typing` stays off the fast path of the read commands (bench/bench_cold_start.py)

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from vgpuadm.model import VgpuType

# The parsers below split instead of using regular expressions: importing `re` and compiling the patterns cost
# ~3 ms of every cold start, and discovery parses a name and a description per type. Each keeps the grammar of
# the pattern it replaced, noted above it; `str.isdecimal` is exactly what `\d` matches.
_NV_KEYS = ("num_heads", "frl_config", "framebuffer", "max_resolution", "max_instance")
_GVT_KEYS = ("low_gm_size", "high_gm_size", "fence", "resolution", "weight")


class NvidiaName:
    """What an NVIDIA vGPU name says: `NVIDIA H200X-1-18C` → board H200X, 1 MIG slice, 18 GB, C series.
    A plain read-only-by-convention class rather than a dataclass (see vgpuadm/model.py for why)."""

    __slots__ = ("board", "framebuffer_mib", "profile", "series", "slices", "variant")

    def __init__(
        self,
        profile: str,
        board: str | None = None,
        slices: int | None = None,
        framebuffer_mib: int | None = None,
        series: str | None = None,
        variant: str | None = None,
    ) -> None:
        self.profile = profile
        self.board = board
        self.slices = slices
        self.framebuffer_mib = framebuffer_mib
        self.series = series
        self.variant = variant

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
    # <board>[-<slices>]-<fb GB><series>[ME|4], case-insensitive; fb 0 means 512 MB (M60-0B). Board names may
    # contain hyphens; the board is the shortest prefix that leaves a valid rest (as `^(.+?)(?:-(\d+))?-…$`).
    profile = profile_of(name)
    parts = profile.split("-")
    last = parts[-1]
    digits = next((i for i, c in enumerate(last) if not c.isdecimal()), len(last))
    series, variant = last[digits : digits + 1].upper(), last[digits + 1 :]
    if len(parts) < 2 or not digits or series not in ("A", "B", "C", "Q") or variant.upper() not in ("", "ME", "4"):
        return NvidiaName(profile=profile)
    slices = None
    board = "-".join(parts[:-1])
    if len(parts) >= 3 and parts[-2].isdecimal() and "-".join(parts[:-2]):
        slices, board = int(parts[-2]), "-".join(parts[:-2])
    if not board:
        return NvidiaName(profile=profile)
    fb_gb = int(last[:digits])
    return NvidiaName(
        profile=profile,
        board=board,
        slices=slices,
        framebuffer_mib=512 if fb_gb == 0 else fb_gb * 1024,
        series=series,
        variant=variant or None,
    )


def parse_description(text: str) -> dict[str, str | int]:
    """Parse an mdev type description: NVIDIA's one-liner or GVT-g's key: value lines. Unknown text → {}."""
    text = text.strip()
    nvidia = _nvidia_description(text)
    if nvidia is not None:
        return nvidia
    out: dict[str, str | int] = {}
    for line in text.splitlines():
        # (low_gm_size|high_gm_size|fence|resolution|weight):\s*(\S+)
        key, colon, value = line.strip().partition(":")
        value = value.lstrip()
        if not colon or key not in _GVT_KEYS or not value or len(value.split()) != 1:
            continue
        if value.endswith("MB") and value[:-2].isdigit():
            out[key.replace("_size", "_mib")] = int(value[:-2])
        elif value.isdigit():
            out[key] = int(value)
        else:
            out[key] = value
    return out


def _nvidia_description(text: str) -> dict[str, str | int] | None:
    # num_heads=(\d+), frl_config=(\d+), framebuffer=(\d+)M, max_resolution=(\d+x\d+), max_instance=(\d+)
    fields = text.split(", ")
    if len(fields) != 5:
        return None
    values = []
    for field, key in zip(fields, _NV_KEYS, strict=True):
        k, eq, v = field.partition("=")
        if k != key or not eq:
            return None
        values.append(v)
    heads, frl, fb, res, most = values
    width, x, height = res.partition("x")
    if not (fb.endswith("M") and fb[:-1].isdecimal() and x and width.isdecimal() and height.isdecimal()):
        return None
    if not (heads.isdecimal() and frl.isdecimal() and most.isdecimal()):
        return None
    return {
        "num_heads": int(heads),
        "frl_config": int(frl),
        "framebuffer_mib": int(fb[:-1]),
        "max_resolution": res,
        "max_instance": int(most),
    }


def parse_creatable(text: str) -> list[tuple[int, str]]:
    """Parse nvidia/creatable_vgpu_types: header `ID    : vGPU Name`, `%-5d : name` rows, blank lines,
    single or multiple spaces, and the colon-less form `1428 NVIDIA H200X-141C` all occur."""
    import re  # layout C hosts only: keeps `re` off the other hosts' read commands

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
    if t.numeric_id is not None and t.layout.types_by_number:
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
    """Up to three types whose id, name or profile is within a few edits of `key` (a swap of two neighbouring
    characters is one edit: nvidia-36 → nvidia-63), closest first; among equals, the same characters reordered
    first, then the host's order."""
    limit = max(1, len(key) // 3)
    best: dict[str, tuple[int, bool, int, VgpuType]] = {}
    for order, t in enumerate(types):
        for s in _spellings(t):
            d = edit_distance(key, s)
            if d <= limit:
                rank = (d, sorted(s) != sorted(key), order, t)
                if t.type_id not in best or rank[:3] < best[t.type_id][:3]:
                    best[t.type_id] = rank
    seen = []
    for *_, t in sorted(best.values(), key=lambda r: r[:3])[:3]:
        seen.append(f"{t.type_id} ({t.name})" if t.name != t.type_id else t.type_id)
    return f"; did you mean {' or '.join(seen)}?" if seen else ""


def edit_distance(a: str, b: str) -> int:
    """Optimal string alignment distance: insertions, deletions, substitutions and adjacent swaps cost 1."""
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb))
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                cur[j] = min(cur[j], prev2[j - 2] + 1)
        prev2, prev = prev, cur
    return prev[-1]


def _list_hint(types: Sequence[VgpuType]) -> str:
    return "run `vgpuadm types` to list the types this host offers" if types else "this host offers no vGPU types"


def mig_profile_name(type_name: str) -> str | None:
    """The GPU-instance profile a MIG-backed type's name asks for (`NVIDIA H200X-1-18C` → 1g.18gb); None for a
    time-sliced type."""
    info = describe_nvidia_name(type_name)
    if info.slices is None or info.framebuffer_mib is None:
        return None
    me = "+me" if (info.variant or "").upper() == "ME" else ""
    return f"{info.slices}g.{info.framebuffer_mib // 1024}gb{me}"
