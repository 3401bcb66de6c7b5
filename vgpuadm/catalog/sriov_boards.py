"""AMD and Intel SR-IOV GPU boards whose VFs vgpuadm hands out whole (layout vf-pool): the pool's type name and
the board memory a VF's share is computed from when the driver publishes no per-VF quota. Pure data; sources in
docs/reference/sriov-gpus.md. Which PF is a pool is read from sysfs (a display PF with sriov_totalvfs, not NVIDIA's),
never from this table: a board missing here is still a pool, named vf-<vendor>-<device>.
"""

from __future__ import annotations

from vgpuadm.errors import UsageError

# (vendor, device) of the PF → (board, memory MiB or None for an iGPU that shares system RAM)
BOARDS: dict[tuple[str, str], tuple[str, int | None]] = {
    ("0x1002", "0x74a1"): ("MI300X", 192 * 1024),  # 192 GB HBM3; PF 1002:74a1, VF 1002:74b5 (RHOSO MI300X VA)
    ("0x1002", "0x740f"): ("MI210", 64 * 1024),  # Aldebaran, 64 GB HBM2e; GIM: 1 VF per GPU
    ("0x8086", "0x56c0"): ("Flex170", 16 * 1024),  # ATS-M, 16 GB GDDR6; xe/i915: up to 31 VFs
    ("0x8086", "0x56c1"): ("Flex140", 12 * 1024),  # ATS-M, 2 × 6 GB GDDR6
    ("0x8086", "0xa780"): ("UHD770", None),  # Raptor Lake-S iGPU; i915/xe: up to 7 VFs, no local memory
    ("0x8086", "0x4680"): ("UHD770", None),  # Alder Lake-S iGPU
    ("0x8086", "0x46a6"): ("IrisXe", None),  # Alder Lake-P iGPU
}

# PF drivers with no sriov_configure that enable their VFs themselves when they probe the GPU, so sriov_numvfs
# cannot change them (the kernel answers ENOENT): AMD's GIM takes the count per GPU from its vf_num module
# parameter (gim_config.c, module_param_array; docs/reference/sriov-gpus.md §2).
LOAD_TIME_VFS = {"gim": "modprobe -r gim && modprobe gim vf_num={total}"}

NVIDIA = "0x10de"  # NVIDIA's SR-IOV GPUs carry vGPUs on their VFs (layouts B and C), never a VF pool


def pool_type_id(vendor: str, device: str) -> str:
    """The pool's type name: vf-mi300x, vf-flex170; vf-<vendor>-<device> for a board not in BOARDS."""
    board = BOARDS.get((vendor, device))
    if board is not None:
        return f"vf-{board[0].lower()}"
    return f"vf-{vendor.removeprefix('0x')}-{device.removeprefix('0x')}"


def board_name(vendor: str, device: str) -> str:
    board = BOARDS.get((vendor, device))
    return board[0] if board is not None else f"{vendor}:{device}"


def vf_share_mib(vendor: str, device: str, vfs: int) -> int | None:
    """What one of `vfs` VFs gets of the board's memory under fair-share provisioning (GIM and the Intel PF
    drivers split it evenly when no quota is set), or None when the board has no local memory or is unknown."""
    board = BOARDS.get((vendor, device))
    if board is None or board[1] is None or vfs < 1:
        return None
    return board[1] // vfs


def check_vfs_settable(pf: str, driver: str | None, total: int) -> None:
    """Refuse to plan an sriov_numvfs write on a PF whose driver enables its VFs only when it loads (GIM)."""
    if driver in LOAD_TIME_VFS:
        raise UsageError(
            f"{pf} is driven by {driver}, which enables its VFs only when it loads (sriov_numvfs cannot: ENOENT)",
            f"reload it with the VF count per GPU: `{LOAD_TIME_VFS[driver].format(total=total)}` "
            "(no guest may use its VFs meanwhile), then run the command again",
        )
