"""Reading NVIDIA host policies through nvidia-smi (`-q`, `vgpu -s -v`, `vgpu -ss`) into one GpuPolicy per GPU.
Read-only; only asked when the host has placement IDs (HostSnapshot.has_placement_ids)."""

from __future__ import annotations

from vgpuadm.catalog.hetero import GpuPolicy, TypePlacement
from vgpuadm.host import nvidia_smi
from vgpuadm.host.nvidia_smi_vgpu import parse_query_text, parse_scheduler_state, parse_type_blocks
from vgpuadm.host.root import HostRoot

WHY = "read the vGPU heterogeneous mode and scheduler"


def read(root: HostRoot, *, scheduler: bool = False, placements: bool = False) -> dict[str, GpuPolicy]:
    """GPU address → its policies; {} without nvidia-smi or when it reports nothing. The placements are read only
    when some GPU is in heterogeneous mode, the scheduler only when asked (each is one more nvidia-smi run)."""
    q = nvidia_smi.run(root, *nvidia_smi.QUERY)
    if not q:
        return {}
    modes = parse_query_text(q)
    on = placements or any(m.heterogeneous_mode == "Enabled" for m in modes.values())
    blocks = parse_type_blocks(nvidia_smi.run(root, *nvidia_smi.VGPU_SUPPORTED) or "") if on else {}
    sched = parse_scheduler_state(nvidia_smi.run(root, *nvidia_smi.VGPU_SCHEDULER) or "") if scheduler else {}
    out = {}
    for index, (address, m) in enumerate(modes.items()):
        types = tuple(
            TypePlacement(b.type_id, b.name, b.fb_mib, b.placement_size, b.placement_ids)
            for b in blocks.get(address, ())
            if b.placement_size and b.placement_ids is not None
        )
        policy, ts = sched.get(address, (None, 0))
        out[address] = GpuPolicy(index, address, m.heterogeneous_supported, m.heterogeneous_mode, policy, ts, types)
    return out
