"""Reading the host's MIG state through nvidia-smi (`-q -x`, `mig -lgip`, `mig -lgipp`, `mig -lgi`) into one
MigState per GPU, and which layout C VF's vGPU sits on which GPU instance (`<VF>/nvidia/gpu_instance_id`).
Read-only; nvidia-smi is required (a one-line error with a hint when it is missing)."""

from __future__ import annotations

from dataclasses import dataclass

from vgpuadm.errors import HostIOError
from vgpuadm.host import nvidia_smi
from vgpuadm.host.discover import PCI_DEVICES
from vgpuadm.host.nvidia_smi_mig import (
    GpuInstance,
    GpuInstanceProfile,
    parse_gi_placements,
    parse_gi_profiles,
    parse_gpu_instances,
)
from vgpuadm.host.nvidia_smi_vgpu import GpuModes, parse_query_xml
from vgpuadm.host.root import HostRoot

WHY = "read MIG state"


@dataclass(frozen=True)
class MigGpu:
    """One GPU as MIG sees it."""

    modes: GpuModes
    profiles: tuple[GpuInstanceProfile, ...]
    placements: dict[int, tuple[tuple[int, ...], int]]  # profile id → (start slots, size)
    instances: tuple[GpuInstance, ...]
    users: dict[int, tuple[str, ...]]  # GPU instance id → VFs whose vGPU uses it


def _read(root: HostRoot, *args: str) -> str:
    result = nvidia_smi.invoke(root, list(args), WHY)
    text = result.stdout
    if result.returncode != 0 and not text.strip():
        text = result.stderr
    return text


def read(root: HostRoot) -> list[MigGpu]:
    """Every GPU nvidia-smi reports, with its MIG profiles, placements and instances (empty when MIG is off)."""
    xml = nvidia_smi.invoke(root, ["-q", "-x"], WHY)
    if xml.returncode != 0:
        raise HostIOError(f"nvidia-smi -q -x failed: {xml.message()}", "check the driver with `nvidia-smi`")
    gpus = parse_query_xml(xml.stdout.encode())
    profiles = parse_gi_profiles(_read(root, "mig", "-lgip"))
    placements = parse_gi_placements(_read(root, "mig", "-lgipp"))
    instances = parse_gpu_instances(_read(root, "mig", "-lgi"))
    sysfs = root.sysfs()
    users: dict[tuple[str, int], list[str]] = {}
    for vf in sysfs.listdir(PCI_DEVICES):
        text = sysfs.read_opt(f"{PCI_DEVICES}/{vf}/nvidia/gpu_instance_id")
        physfn = sysfs.link_name(f"{PCI_DEVICES}/{vf}/physfn")
        if text is not None and text.strip().isdecimal() and physfn:
            users.setdefault((physfn, int(text)), []).append(vf)
    out = []
    for g in gpus:
        out.append(
            MigGpu(
                modes=g,
                profiles=tuple(p for p in profiles if p.gpu == g.index),
                placements={pid: v for (gpu, pid), v in placements.items() if gpu == g.index},
                instances=tuple(i for i in instances if i.gpu == g.index),
                users={gid: tuple(vfs) for (pf, gid), vfs in users.items() if pf == g.address},
            )
        )
    return out
