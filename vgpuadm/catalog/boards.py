"""NVIDIA's published maximum of vGPUs per physical GPU, per board and type, for drivers that do not say it.

Layout C (vendor-specific VFIO) lists types as "id : name" only, with no `max_instance` (reference §3.3), so
discovery takes the maximum from NVIDIA's tables instead. Source: shared/docs/vgpu-sysfs.md §3.6, which copies
NVIDIA's vGPU documentation [V N4]. Pure data; a kernel-reported maximum (layouts A and B) always wins over it.

- Time-sliced types: the table is keyed by framebuffer size (GB, as the name prints it) and holds the
  **equal-size mode** maximum, the default mode (§3.4). In equal-size mode the Q, B and A types of one size share
  the maximum of the C type of that size [I in the reference]; a size with no C type in the table (1Q, 2B…) has
  no known maximum. A GPU switched to mixed-size mode (`nvidia-smi vgpu -shm 1`) has lower maxima for some sizes
  (H100-4C 20 → 16); the driver's creatable lists still bound what can be made there.
- MIG-backed types (`<board>-<slices>-<GB>C[ME]`): keyed by slices, size and the ME variant, only for boards
  whose table gives the counts (H100, H100XM, H200, H200X, A100, A100X). Their sizes are rounded (H200X-3-71C,
  max 2, on 141 GB), so a board's memory is read from its time-sliced sizes only.
- Board prefixes are as the type names print them (`NVIDIA H200X-35C` → H200X, `NVIDIA RTX6000-Ada-4C` →
  RTX6000-Ada). The RTX A6000 prefix `RTXA6000` is [I]: the reference names the board but not its prefix.
"""

from __future__ import annotations

TYPE_CHECKING = False  # `typing` stays off the fast path of the read commands (bench/bench_cold_start.py)
if TYPE_CHECKING:
    from vgpuadm.model import NvidiaName

# framebuffer GB → equal-size maximum
# H100-16C: the doc prints 6, but 6 × 16 GB exceeds the 80 GB board; framebuffer arithmetic and H800-16C say 5.
_H100 = {80: 1, 40: 2, 20: 4, 16: 5, 10: 8, 8: 10, 5: 16, 4: 20}
_H100L = {94: 1, 47: 2, 23: 4, 15: 6, 11: 8, 6: 15, 4: 23}
_H100XS = {64: 1, 32: 2, 16: 4, 8: 8, 4: 16}
_H200 = {141: 1, 70: 2, 35: 4, 28: 5, 17: 8, 14: 10, 8: 16, 7: 20, 4: 32}
_A100_40 = {40: 1, 20: 2, 10: 4, 8: 5, 5: 8, 4: 10}
_A100_80 = {80: 1, 40: 2, 20: 4, 16: 5, 10: 8, 8: 10, 4: 20}
_GB24 = {24: 1, 12: 2, 8: 3, 6: 4, 4: 6}  # A10, L4, L2
_GB48 = {48: 1, 24: 2, 16: 3, 12: 4, 8: 6, 6: 8, 4: 12}  # A40, RTX A6000, L40, L40S, L20, RTX 6000 Ada
_GB16 = {16: 1, 8: 2, 4: 4}  # A16 (per GPU; 4 per board), T4, V100X
_V100D = {32: 1, 16: 2, 8: 4, 4: 8}

TIME_SLICED: dict[str, dict[int, int]] = {
    "H100": _H100, "H100XM": _H100, "H100L": _H100L, "H100XL": _H100L, "H100XS": _H100XS,
    "H200": _H200, "H200X": _H200,
    "A100": _A100_40, "A100X": _A100_40, "A100D": _A100_80, "A100DX": _A100_80,
    "A10": _GB24, "A40": _GB48, "RTXA6000": _GB48,
    "L40": _GB48, "L40S": _GB48, "L20": _GB48, "RTX6000-ADA": _GB48,
    "L4": _GB24, "L2": _GB24, "A16": _GB16, "T4": _GB16,
    "V100X": _GB16, "V100D": _V100D,
}  # fmt: skip

# (slices, framebuffer GB, ME variant) → maximum
_H100_MIG = {(7, 80, False): 1, (4, 40, False): 1, (3, 40, False): 2, (2, 20, False): 3, (1, 20, False): 4,
             (1, 10, False): 7, (1, 10, True): 1}  # fmt: skip
_H200_MIG = {(7, 141, False): 1, (4, 71, False): 1, (3, 71, False): 2, (2, 35, False): 3, (1, 35, False): 4,
             (1, 18, False): 7, (1, 18, True): 1}  # fmt: skip
_A100_MIG = {(7, 40, False): 1, (4, 20, False): 1, (3, 20, False): 2, (2, 10, False): 3, (1, 10, False): 4,
             (1, 5, False): 7, (1, 5, True): 1}  # fmt: skip

MIG: dict[str, dict[tuple[int, int, bool], int]] = {
    "H100": _H100_MIG, "H100XM": _H100_MIG, "H200": _H200_MIG, "H200X": _H200_MIG,
    "A100": _A100_MIG, "A100X": _A100_MIG,
}  # fmt: skip


def equal_size_max(info: NvidiaName) -> int | None:
    """NVIDIA's maximum per physical GPU of the parsed type name `info` in equal-size mode; None when the board or
    the size is not in the tables."""
    if info.board is None or info.framebuffer_mib is None:
        return None
    board = info.board.upper()
    gb = info.framebuffer_mib // 1024
    if info.slices is not None:
        return MIG.get(board, {}).get((info.slices, gb, (info.variant or "").upper() == "ME"))
    return TIME_SLICED.get(board, {}).get(gb)


def board_framebuffer_mib(board: str | None) -> int | None:
    """The framebuffer of one physical GPU of `board`: the largest size × maximum of its time-sliced types."""
    sizes = TIME_SLICED.get(board.upper()) if board else None
    return max(gb * n for gb, n in sizes.items()) * 1024 if sizes else None
