"""The simulated GPUs' MIG hardware: GPU-instance profiles, their placements, and which vGPU types need which
profile. Pure data and pure functions over the marker model (no host I/O), so the tree builder (sim/profiles.py)
and the simulated kernel and nvidia-smi (sim/mig.py, sim/nvidia_smi.py) read the same tables.

Marker model: `mig: {PF: {mode, pending, reset_needed, slots, profiles: [...], instances: [...], cis: [...]}}`
  mode/pending     "Enabled" | "Disabled" (nvidia-smi's words); pending differs from mode until a GPU reset/reboot
  reset_needed     True when `-mig 1` leaves the change pending until `nvidia-smi -r` or a reboot (A100 under
                   a hypervisor, as the published A100 output shows); False when the driver resets the idle GPU
  mode_survives_reset  False on Hopper and newer: a GPU reset (a recovered Xid, `vgpuadm sim reset`) leaves MIG mode
                   off (cozystack#70, NVIDIA gpu-operator#2600/#2603: the mode must be committed again after a reset);
                   True on Ampere, where the mode is kept in the GPU's InfoROM and survives (reference §7) [I: that
                   the Ampere mode survives a reset as it survives a reboot]. Absent: True.
  profiles         [{id, name, mem_gib, sm, dec, enc, ce, jpeg, ofa, starts, size, total}]
  instances        [{id, profile, start, users: [device dirs of the vGPUs on it]}]
  cis              [{gi, id, profile}]
  types            {type id or mdev type: {profile: GI profile id, per_gi: vGPUs one GI holds}}

NVIDIA's vGPU documentation: a GPU runs time-sliced vGPUs with MIG mode off and MIG-backed vGPUs with MIG mode on;
the two do not mix on one GPU. So a GPU offers only the types of its current mode (`offered`).
"""

from __future__ import annotations

from typing import Any

# One row: (id, name, memory GiB, SM, DEC, ENC, CE, JPEG, OFA, starts, size in slots, total)
Row = tuple[int, str, float, int, int, int, int, int, int, tuple[int, ...], int, int]

# H200 SXM5 141GB: the real H200's `mig -lgip`/`-lgipp` (tests/data/h200-passthrough-guest/nvidia-host.txt,
# driver 580.159.04), row for row.
H200_PROFILES: list[Row] = [
    (19, "1g.18gb", 16.00, 16, 1, 0, 1, 1, 0, (0, 1, 2, 3, 4, 5, 6), 1, 7),
    (20, "1g.18gb+me", 16.00, 16, 1, 0, 1, 1, 1, (0, 1, 2, 3, 4, 5, 6), 1, 1),
    (15, "1g.35gb", 32.50, 26, 1, 0, 1, 1, 0, (0, 2, 4, 6), 2, 4),
    (14, "2g.35gb", 32.50, 32, 2, 0, 2, 2, 0, (0, 2, 4), 2, 3),
    (9, "3g.71gb", 69.75, 60, 3, 0, 3, 3, 0, (0, 4), 4, 2),
    (5, "4g.71gb", 69.75, 64, 4, 0, 4, 4, 0, (0,), 4, 1),
    (0, "7g.141gb", 140.00, 132, 7, 0, 8, 7, 1, (0,), 8, 1),
]

# A100 PCIe 40GB: the published `mig -lgip` (tests/data/nvidia-smi-published/a100-pcie-40gb-510.txt), row for row;
# placements: the H200's (the same 8-slot layout) [I].
A100_PROFILES: list[Row] = [
    (19, "1g.5gb", 4.75, 14, 0, 0, 1, 0, 0, (0, 1, 2, 3, 4, 5, 6), 1, 7),
    (20, "1g.5gb+me", 4.75, 14, 1, 0, 1, 1, 1, (0, 1, 2, 3, 4, 5, 6), 1, 1),
    (14, "2g.10gb", 9.75, 28, 1, 0, 2, 0, 0, (0, 2, 4), 2, 3),
    (9, "3g.20gb", 19.62, 42, 2, 0, 3, 0, 0, (0, 4), 4, 2),
    (5, "4g.20gb", 19.62, 56, 2, 0, 4, 0, 0, (0,), 4, 1),
    (0, "7g.40gb", 39.50, 98, 5, 0, 7, 1, 1, (0,), 8, 1),
]

# A100 PCIe 80GB: the profile ids of the published A100 40GB `-lgip` (tests/data/nvidia-smi-published/
# a100-pcie-40gb-510.txt: 19, 20, 14, 9, 5, 0) plus 15 for 1g.20gb (the H200's id for its 2-slot 1g profile), with
# the 80GB names of NVIDIA's MIG user guide (1g.10gb, 1g.10gb+me, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb).
# SM, DEC and engine counts: the 40GB output's. Memory: twice the 40GB output's [I]. Placements: the H200's (the same
# 8-slot layout) [I]. Counts 7, 1, 4, 3, 2, 1, 1: the reference §3.6 A100D MIG types.
A100D_PROFILES: list[Row] = [
    (19, "1g.10gb", 9.75, 14, 0, 0, 1, 0, 0, (0, 1, 2, 3, 4, 5, 6), 1, 7),
    (20, "1g.10gb+me", 9.75, 14, 1, 0, 1, 1, 1, (0, 1, 2, 3, 4, 5, 6), 1, 1),
    (15, "1g.20gb", 19.62, 14, 1, 0, 1, 1, 0, (0, 2, 4, 6), 2, 4),
    (14, "2g.20gb", 19.62, 28, 1, 0, 2, 0, 0, (0, 2, 4), 2, 3),
    (9, "3g.40gb", 39.50, 42, 2, 0, 3, 0, 0, (0, 4), 4, 2),
    (5, "4g.40gb", 39.50, 56, 2, 0, 4, 0, 0, (0,), 4, 1),
    (0, "7g.80gb", 79.25, 98, 5, 0, 7, 1, 1, (0,), 8, 1),
]

# RTX PRO 6000 Blackwell Server Edition 96GB: NVIDIA's MIG user guide lists 4 instances at most; the profiles
# 1g.24gb ×4, 2g.48gb ×2, 4g.96gb ×1 are NVIDIA GPU Operator's mig-parted table (as aws/sagemaker-hyperpod-cli
# copies it). Profile ids, placements (A30's 4-slot layout: {0,1,2,3}:1, {0,2}:2, {0}:4, tests/data/
# nvidia-smi-published/a30-450.txt), memory and engine counts are [I].
RTXPRO6000_PROFILES: list[Row] = [
    (14, "1g.24gb", 23.00, 46, 1, 1, 1, 1, 0, (0, 1, 2, 3), 1, 4),
    (5, "2g.48gb", 47.00, 94, 2, 2, 2, 2, 0, (0, 2), 2, 2),
    (0, "4g.96gb", 95.00, 188, 4, 4, 4, 4, 1, (0,), 4, 1),
]


def gpu_order(model: dict[str, Any]) -> list[str]:
    """nvidia-smi's GPU index order: NVIDIA GPUs it manages (vendor-VFIO or MIG-capable PFs) by PCI address."""
    return sorted(set(model.get("vendor_vfio") or {}) | set(model.get("mig") or {}))


def gpu_state(
    rows: list[Row], types: dict[str, dict[str, int]], reset_needed: bool, *, mode_survives_reset: bool = True
) -> dict[str, Any]:
    """The marker's MIG entry for one GPU, MIG mode off, no instances."""
    profiles: list[dict[str, Any]] = [
        {"id": r[0], "name": r[1], "mem_gib": r[2], "sm": r[3], "dec": r[4], "enc": r[5], "ce": r[6], "jpeg": r[7],
         "ofa": r[8], "starts": list(r[9]), "size": r[10], "total": r[11]}
        for r in rows
    ]  # fmt: skip
    slots = max(r[9][-1] + r[10] for r in rows)
    return {"mode": "Disabled", "pending": "Disabled", "reset_needed": reset_needed,
            "mode_survives_reset": mode_survives_reset, "slots": slots, "profiles": profiles, "instances": [],
            "cis": [], "types": types}  # fmt: skip


def enabled(state: dict[str, Any] | None) -> bool:
    return bool(state) and state is not None and state["mode"] == "Enabled"


def is_mig_type(state: dict[str, Any] | None, type_key: str | int) -> bool:
    return bool(state) and state is not None and str(type_key) in state["types"]


def offered(state: dict[str, Any] | None, type_key: str | int) -> bool:
    """Whether the GPU offers this type in its current MIG mode (time-sliced with MIG off, MIG-backed with it on);
    a GPU without MIG offers every type."""
    if not state:
        return True
    return is_mig_type(state, type_key) == enabled(state)


def profile(state: dict[str, Any], profile_id: int) -> dict[str, Any] | None:
    return next((p for p in state["profiles"] if p["id"] == profile_id), None)


def used_slots(state: dict[str, Any]) -> set[int]:
    out: set[int] = set()
    for gi in state["instances"]:
        p = profile(state, gi["profile"])
        if p is not None:
            out.update(range(gi["start"], gi["start"] + p["size"]))
    return out


def free_instance(state: dict[str, Any], type_key: str | int) -> dict[str, Any] | None:
    """The GPU instance a vGPU of this MIG-backed type would land on: one of its profile with room (fewer users
    than the type's per-GI count; 1 for plain MIG-backed vGPU), lowest id first [I: the driver's choice]."""
    need = state["types"].get(str(type_key))
    if need is None:
        return None
    room = [gi for gi in state["instances"] if gi["profile"] == need["profile"] and len(gi["users"]) < need["per_gi"]]
    return min(room, key=lambda gi: gi["id"]) if room else None
