"""Simulated NVIDIA host policies on layout C GPUs: heterogeneous (mixed-size) time-sliced vGPU with placement IDs,
and the vGPU scheduler (docs/reference/nvidia-host-policies.md has the sources; [I] marks inferences).

Marker model: `hetero: {PF: {supported, enabled, slots, scheduler: {policy, timeslice_ms}}}`
  supported     the GPU reports "Heterogeneous Time-Slice Sizes : Supported" in `nvidia-smi -q`
  enabled       the mode (`nvidia-smi vgpu -i N -shm 1|0`); off when built and after every reboot (it does not
                persist on Linux KVM)
  slots         placement slots of the GPU [I]: one per GiB of its largest time-sliced type's framebuffer
  scheduler     the running vGPU scheduler: best-effort | equal-share | fixed-share, time slice in ms (0: default).
                Set at run time by nvidia-smi (refused while a vGPU exists on the GPU: the change needs the vGPU
                manager restarted); at every reboot (driver load) it is read again from the RmPVMRL registry
                key in <root>/etc/modprobe.d/*.conf, per device first

Placement [I]: a time-sliced type's placement size is its framebuffer in GiB; its supported placement IDs are the
multiples of its size that fit in the slots. A VF's vGPU takes the slots [id, id + size). The VF's
`nvidia/placement_id` (-1: let the driver choose) is written before the type: with the mode on, writing
`current_vgpu_type` takes that ID, or the lowest free supported one for -1, and fails with EINVAL when the ID is not
a supported one of the type or overlaps a running vGPU (the driver's refusal that makes the VM fail to start);
with the mode off the ID is ignored and reads -1. Clearing the type frees the slots and resets the ID to -1.
MIG-backed types have no time-slice placement.
"""

from __future__ import annotations

import errno as errno_mod
import os
import re
from typing import Any

from vgpuadm.sim import migmodel
from vgpuadm.sim.heteromodel import NO_PLACEMENT, POLICIES, decode_rmpvmrl, placement_size, supported_ids
from vgpuadm.sim.state import SimHost, fail, kstrtol

MODPROBE_DIR = "etc/modprobe.d"  # under the root; every *.conf file, in name order, as modprobe reads them


def state_of(host_or_model: SimHost | dict[str, Any], pf: str | None) -> dict[str, Any] | None:
    model = host_or_model.model if isinstance(host_or_model, SimHost) else host_or_model
    return (model.get("hetero") or {}).get(pf or "")


def enabled(st: dict[str, Any] | None) -> bool:
    return bool(st and st["enabled"])


def _vf_dirs(host: SimHost, pf: str) -> list[str]:
    info = host.model["sriov"][pf]
    return [f"{info['parent_dir']}/{vf}" for vf in info["vfs"]]


def _types(host: SimHost, pf: str) -> dict[int, list[Any]]:
    return {int(t[0]): t for t in (host.model["vendor_vfio"].get(pf) or {}).get("types") or []}


def used_slots(host: SimHost, pf: str, skip: str | None = None) -> set[int]:
    """Slots held by the GPU's running vGPUs (their VF's placement_id and type)."""
    types = _types(host, pf)
    used: set[int] = set()
    for d in _vf_dirs(host, pf):
        if d == skip or not host.exists(f"{d}/nvidia/placement_id"):
            continue
        num = int(host.read(f"{d}/nvidia/current_vgpu_type") or 0)
        pid = int(host.read(f"{d}/nvidia/placement_id") or NO_PLACEMENT)
        if num and pid != NO_PLACEMENT and num in types:
            used |= set(range(pid, pid + placement_size(types[num][2])))
    return used


def creatable_ids(host: SimHost, pf: str, num: int, fb_mib: int) -> list[int]:
    st = state_of(host, pf)
    if st is None or not has_placement(st, num):
        return []
    used = used_slots(host, pf)
    size = placement_size(fb_mib)
    return [i for i in supported_ids(st, fb_mib) if not used & set(range(i, i + size))]


def has_placement(st: dict[str, Any] | None, num: int) -> bool:
    """A time-sliced type of the GPU (MIG-backed types have no time-slice placement)."""
    return st is not None and num in st["types"]


def place(host: SimHost, pf: str, vf_dir: str, num: int) -> None:
    """Writing type `num` on a VF with the mode on: check and record its placement (EINVAL when it cannot)."""
    st = state_of(host, pf)
    if not enabled(st) or not has_placement(st, num):
        return
    assert st is not None
    fb = int(_types(host, pf)[num][2])
    wanted = int(host.read(f"{vf_dir}/nvidia/placement_id") or NO_PLACEMENT)
    free = creatable_ids(host, pf, num, fb)
    if wanted == NO_PLACEMENT:
        if not free:
            fail(errno_mod.EINVAL)
        wanted = free[0]
    elif wanted not in free:
        fail(errno_mod.EINVAL)
    host.set_attr(f"{vf_dir}/nvidia/placement_id", wanted, 0o644)


def set_placement(host: SimHost, path: str, data: bytes) -> None:
    """`echo ID > <VF>/nvidia/placement_id`: kstrtol; EBUSY while the VF has a vGPU; EINVAL below -1 or past the
    GPU's slots [I]."""
    value = kstrtol(data, 10)
    vf_dir = path.rsplit("/nvidia/", 1)[0]
    if int(host.read(f"{vf_dir}/nvidia/current_vgpu_type") or 0):
        fail(errno_mod.EBUSY)
    pf = host.link_name(f"{vf_dir}/physfn")
    st = state_of(host, pf)
    if value < NO_PLACEMENT or (st is not None and value >= st["slots"]):
        fail(errno_mod.EINVAL)
    host.set_attr(path, value, 0o644)


def cleared(host: SimHost, vf_dir: str) -> None:
    if host.exists(f"{vf_dir}/nvidia/placement_id"):
        host.set_attr(f"{vf_dir}/nvidia/placement_id", NO_PLACEMENT, 0o644)


def has_vgpus(host: SimHost, pf: str) -> bool:
    return any(int(host.read(f"{d}/nvidia/current_vgpu_type") or 0) for d in _vf_dirs(host, pf))


# --- nvidia-smi's changes (sim/nvidia_smi.py calls these under the root lock; errors as (message, exit code)) ---


class PolicyError(Exception):
    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def set_mode(host: SimHost, pf: str, nv_address: str, on: bool) -> str:
    """`nvidia-smi vgpu -i N -shm 1|0` [I: wording]: refused while a vGPU exists on the GPU, with MIG mode on, or
    (for 1) under the fixed-share scheduler, which the mode does not support."""
    st = state_of(host, pf)
    if st is None or not st["supported"]:
        raise PolicyError(f"Heterogeneous vGPU mode is not supported on GPU {nv_address}", 3)
    mig = host.model.get("mig", {}).get(pf)
    if has_vgpus(host, pf) or (on and migmodel.enabled(mig)):
        raise PolicyError(f"Unable to set vGPU heterogeneous mode for GPU {nv_address}: In use by another client")
    if on and st["scheduler"]["policy"] == "fixed-share":
        raise PolicyError(f"Unable to set vGPU heterogeneous mode for GPU {nv_address}: Not Supported", 3)
    st["enabled"] = on
    host.tree.marker(host.model)
    return f"{'Enabled' if on else 'Disabled'} vGPU heterogeneous mode for GPU {nv_address}.\nAll done.\n"


def set_scheduler(host: SimHost, pf: str, nv_address: str, policy: str, timeslice_ms: int) -> str:
    """`nvidia-smi vgpu -i N --set-vgpu-scheduler-state POLICY [--timeslice MS]` [I: spelling]: refused while a
    vGPU exists on the GPU; fixed share is refused while the mode is on; time slice 1–30 ms [I] (0: default)."""
    st = state_of(host, pf)
    if st is None or policy not in POLICIES or not 0 <= timeslice_ms <= 30:
        raise PolicyError("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.", 2)
    if has_vgpus(host, pf):
        raise PolicyError(f"Unable to set vGPU scheduler state for GPU {nv_address}: In use by another client")
    if policy == "fixed-share" and st["enabled"]:
        raise PolicyError(f"Unable to set vGPU scheduler state for GPU {nv_address}: Not Supported", 3)
    st["scheduler"] = {"policy": policy, "timeslice_ms": timeslice_ms if policy != "best-effort" else 0}
    host.tree.marker(host.model)
    return f"Set vGPU scheduler state for GPU {nv_address}.\nAll done.\n"


# --- reboot: the mode goes; the scheduler comes from the registry key in the modprobe files ---

_OPTIONS = re.compile(r"^\s*options\s+nvidia\s+(.*)$")
_DWORDS = re.compile(r'NVreg_RegistryDwords(PerDevice)?="([^"]*)"')


def registry_scheduler(root: str) -> tuple[tuple[str, int] | None, dict[str, tuple[str, int]]]:
    """(the global RmPVMRL, per-device ones by PCI address) from <root>/etc/modprobe.d/*.conf."""
    base = os.path.join(root, MODPROBE_DIR)
    glob: tuple[str, int] | None = None
    per: dict[str, tuple[str, int]] = {}
    names = sorted(n for n in os.listdir(base) if n.endswith(".conf")) if os.path.isdir(base) else []
    for name in names:
        with open(os.path.join(base, name), encoding="utf-8", errors="replace") as f:
            for line in f:
                m = _OPTIONS.match(line)
                if not m:
                    continue
                for per_device, body in _DWORDS.findall(m.group(1)):
                    device = None  # per device: `pci=BDF;Key=value;…` applies to that BDF until the next pci=
                    for part in body.split(";"):
                        key, _, value = part.partition("=")
                        if key == "pci" and per_device:
                            device = value.strip().lower()
                        elif key == "RmPVMRL":
                            try:
                                decoded = decode_rmpvmrl(int(value, 0))
                            except ValueError:
                                continue
                            if per_device and device:
                                per[device] = decoded
                            elif not per_device:
                                glob = decoded
    return glob, per


def reboot(host: SimHost) -> None:
    """Caller holds the lock: the mode is off again, every placement_id reads -1, the scheduler is the registry's."""
    gpu_reset(host, list(host.model.get("hetero") or {}))


def gpu_reset(host: SimHost, pfs: list[str]) -> list[str]:
    """The vGPU manager sets these GPUs up again (a reboot, a GPU reset, a driver reload; caller holds the lock):
    heterogeneous mode off, the scheduler read again from the registry key [I: as at driver load]. What was lost, in
    words."""
    states = {pf: st for pf, st in (host.model.get("hetero") or {}).items() if pf in pfs}
    if not states:
        return []
    glob, per = registry_scheduler(host.root)
    lost = []
    for pf, st in states.items():
        policy, ts = per.get(pf) or glob or ("best-effort", 0)
        if st["enabled"]:
            lost.append("heterogeneous mode")
        if st["scheduler"] != {"policy": policy, "timeslice_ms": ts}:
            lost.append(f"scheduler {st['scheduler']['policy']}")
        st["enabled"] = False
        st["scheduler"] = {"policy": policy, "timeslice_ms": ts}
    host.tree.marker(host.model)
    return lost
