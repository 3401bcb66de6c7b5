"""Reading the host's MIG state through nvidia-smi (`-q -x`, `mig -lgip`, `mig -lgipp`, `mig -lgi`) into one
MigState per GPU, and which vGPU sits on which GPU instance: a layout C VF's from `<VF>/nvidia/gpu_instance_id`, a
layout B mdev's from `vgpu -q` (its MDEV UUID and GPU Instance ID).
Read-only; nvidia-smi is required (a one-line error with a hint when it is missing)."""

from __future__ import annotations

import re

from vgpuadm.catalog.mig import MigGpu, MigHost, MigInstance, MigProfile, MigType
from vgpuadm.errors import HostIOError, VgpuadmError
from vgpuadm.host import nvidia_smi
from vgpuadm.host.discover import PCI_DEVICES
from vgpuadm.host.nvidia_smi_mig import (
    parse_gi_placements,
    parse_gi_profiles,
    parse_gpu_instances,
)
from vgpuadm.host.nvidia_smi_vgpu import GpuModes, parse_query_xml, parse_type_blocks, parse_vgpu_query
from vgpuadm.host.root import HostRoot
from vgpuadm.model import UUID_PATTERN

WHY = "read MIG state"
_UUID = re.compile(UUID_PATTERN)


def _read(root: HostRoot, args: tuple[str, ...]) -> str:
    result = nvidia_smi.read(root, args, WHY)
    text = result.stdout
    if result.returncode != 0 and not text.strip():
        text = result.stderr
    return text


def gpu_modes(root: HostRoot) -> list[GpuModes]:
    """`nvidia-smi -q -x`: every GPU nvidia-smi reports, with its MIG and vGPU modes, ECC and the driver's release
    (HostIOError when it fails)."""
    xml = nvidia_smi.read(root, nvidia_smi.QUERY_XML, WHY)
    if xml.returncode != 0:
        raise HostIOError(f"nvidia-smi -q -x failed: {xml.message()}", "check the driver with `nvidia-smi`")
    return parse_query_xml(xml.stdout.encode())


def read(root: HostRoot) -> list[MigGpu]:
    """Every GPU nvidia-smi reports, with its MIG profiles (placements merged in) and instances (none while MIG is
    off), each instance with the layout C VFs whose vGPU runs on it."""
    gpus = gpu_modes(root)
    profiles = parse_gi_profiles(_read(root, nvidia_smi.MIG_GI_PROFILES))
    placements = parse_gi_placements(_read(root, nvidia_smi.MIG_GI_PLACEMENTS))
    instances = parse_gpu_instances(_read(root, nvidia_smi.MIG_GPU_INSTANCES))
    sysfs = root.sysfs()
    users: dict[tuple[str, int], list[str]] = {}
    for vf in sysfs.listdir(PCI_DEVICES):
        text = sysfs.read_opt(f"{PCI_DEVICES}/{vf}/nvidia/gpu_instance_id")
        physfn = sysfs.link_name(f"{PCI_DEVICES}/{vf}/physfn")
        if text is not None and text.strip().isdecimal() and physfn:
            users.setdefault((physfn, int(text)), []).append(vf)
    if instances:  # layout B mdevs name no instance in sysfs: the driver's vgpu -q says which one each runs on
        for address, q in parse_vgpu_query(nvidia_smi.run(root, *nvidia_smi.VGPU_QUERY) or "").items():
            for v in q.vgpus:
                uuid, gi = v.fields.get("MDEV UUID", ""), v.gpu_instance_id
                if gi is not None and _UUID.fullmatch(uuid.lower()):
                    users.setdefault((address, gi), []).append(uuid.lower())
    out = []
    for g in gpus:
        profs = []
        for p in profiles:
            if p.gpu != g.index:
                continue
            starts, size = placements.get((g.index, p.profile_id), ((), 0))
            profs.append(MigProfile(p.name, p.profile_id, p.free, p.total, p.memory_gib, p.p2p, p.sm, p.ce, p.dec,
                                    p.enc, p.jpeg, p.ofa, starts, size))  # fmt: skip
        gis = tuple(
            MigInstance(i.name, i.profile_id, i.instance_id, i.start, i.size, tuple(users.get((g.address, i.instance_id),
                                                                                             ())))
            for i in instances if i.gpu == g.index
        )  # fmt: skip
        out.append(MigGpu(g.index, g.address, g.product, g.mig_current, g.mig_pending, g.virtualization_mode,
                          g.host_vgpu_mode, tuple(profs), gis, g.ecc, g.driver_version))  # fmt: skip
    return out


def read_host(root: HostRoot) -> MigHost:
    """`read` plus the types each GPU's driver lists (`vgpu -s -v`: the GPU-instance profile each MIG-backed type
    needs, its maximum); no types where that read fails, and no GPUs when this host has no nvidia-smi or it fails
    (the vGPU writes then meet the driver's answer)."""
    try:
        gpus = read(root)
    except VgpuadmError:
        return MigHost((), {})
    text = nvidia_smi.run(root, *nvidia_smi.VGPU_SUPPORTED)
    blocks = parse_type_blocks(text) if text else {}
    types = {pf: tuple(MigType(t.type_id, t.name, t.gi_profile_id, t.max_instances) for t in infos)
             for pf, infos in blocks.items()}  # fmt: skip
    return MigHost(tuple(gpus), types)
