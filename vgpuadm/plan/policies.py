"""Planning NVIDIA host policies (`gpus:` in a plan file; restore after a reboot): heterogeneous mode and the vGPU
scheduler per GPU, at run time through nvidia-smi and persistently in the modprobe file and vgpuadm's state file
(io/policyfile.py). Pure: a snapshot with its GpuPolicy records in, steps and warnings out.

Refused before any change (the driver's rules, docs/reference/nvidia-host-policies.md): heterogeneous mode on a GPU
that does not support it, or with the fixed-share scheduler (mixed sizes work only under best effort and equal
share); a mode change while vGPUs exist on the GPU; a scheduler change while a VM on that GPU runs. A scheduler
change on a GPU that has vGPUs (no VM running) is written to the modprobe file only and takes effect when the vGPU
manager restarts (a reboot): the result says so."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from vgpuadm.catalog.capacity import policy_of
from vgpuadm.catalog.hetero import GpuPolicy, parse_state, render_modprobe, render_state
from vgpuadm.errors import ConflictError, NotFoundError
from vgpuadm.model import HostSnapshot
from vgpuadm.steps import SetHeterogeneousMode, SetVgpuScheduler, Step, WritePolicyFile


@dataclass(frozen=True)
class PolicyPlan:
    steps: tuple[Step, ...]
    lines: tuple[str, ...]  # `~ gpu …` diff lines
    warnings: tuple[str, ...]
    snap: HostSnapshot  # the snapshot as the VMs' placement will find it (the new mode)


@dataclass(frozen=True)
class GpuSpec:
    """A GPU's NVIDIA host policies (`gpus:` in a plan file); None: leave as it is."""

    address: str
    heterogeneous: bool | None = None
    scheduler: str | None = None
    timeslice_ms: int | None = None
    mig: bool | None = None
    line: int = 0


def _vgpus(snap: HostSnapshot, gpu: str) -> list[str]:
    return sorted(a for a, vf in snap.vendor_vfs.items() if vf.in_use and snap.physical_gpu(a) == gpu)


def _policy(snap: HostSnapshot, spec: GpuSpec, source: str) -> GpuPolicy:
    p = policy_of(snap, spec.address)
    if p is None:
        where = f"{source}:{spec.line}" if spec.line else source
        raise NotFoundError(
            f"{where}: gpus.{spec.address}: nvidia-smi reports no GPU {spec.address} with vGPU policies",
            "name the GPU's PF address (`vgpuadm gpus`); the NVIDIA vGPU host driver must be loaded",
        )
    return p


def plan_gpus(
    snap: HostSnapshot, gpus: Mapping[str, GpuSpec], running: Mapping[str, Collection[str]], *,
    state_text: str | None, modprobe_text: str | None, source: str = "plan", frame_rate_limited: bool = False,
) -> PolicyPlan:  # fmt: skip
    """`running`: GPU → the running VMs that hold a vGPU on it. `frame_rate_limited`: a VM of the plan asks for
    frame_rate_limiter=1 (off under equal and fixed share)."""
    state = parse_state(state_text)
    runtime: list[Step] = []
    lines: list[str] = []
    warnings: list[str] = []
    policies: dict[str, Any] = dict(snap.policies)
    for gpu, spec in sorted(gpus.items()):
        p = _policy(snap, spec, source)
        where = f"{source}:{spec.line}: gpus.{gpu}" if spec.line else f"{source}: gpus.{gpu}"
        cur_het, cur_sched, cur_ts = p.heterogeneous, p.scheduler or "best-effort", p.timeslice_ms
        want_het = cur_het if spec.heterogeneous is None else spec.heterogeneous
        want_sched = cur_sched if spec.scheduler is None else spec.scheduler
        want_ts = (spec.timeslice_ms or 0) if spec.scheduler is not None else cur_ts
        if want_het and not p.supported:
            raise ConflictError(f"{where}: GPU {gpu} does not support heterogeneous time-slice sizes",
                                "`nvidia-smi -q` shows Heterogeneous Time-Slice Sizes; use one size per GPU here")  # fmt: skip
        if want_het and spec.mig:
            raise ConflictError(f"{where}: heterogeneous time-sliced sizes and MIG mode do not mix on one GPU",
                                "choose mig: {enabled: true} or heterogeneous: true for this GPU")  # fmt: skip
        if want_het and want_sched == "fixed-share":
            raise ConflictError(f"{where}: fixed-share scheduling does not work with mixed sizes (heterogeneous)",
                                "use scheduler: equal-share or best-effort, or heterogeneous: false")  # fmt: skip
        busy = _vgpus(snap, gpu)
        if want_het != cur_het and busy:
            raise ConflictError(
                f"{where}: heterogeneous mode changes only on a GPU without vGPUs; {len(busy)} run on {gpu} "
                f"({', '.join(busy)})",
                "give the vGPUs back first (`vgpuadm destroy --vm NAME`), then apply again",
            )
        sched_change = (want_sched, want_ts) != (cur_sched, cur_ts)
        if sched_change and running.get(gpu):
            raise ConflictError(
                f"{where}: the vGPU scheduler cannot change while a VM on {gpu} runs ({', '.join(sorted(running[gpu]))})",
                "shut the VM(s) down, then apply again",
            )
        if want_het != cur_het:
            lines.append(f"~ gpu {gpu}: heterogeneous {'on' if cur_het else 'off'} → {'on' if want_het else 'off'}")
        if sched_change:
            ts = f" (time slice {want_ts} ms)" if want_ts else ""
            lines.append(f"~ gpu {gpu}: scheduler {cur_sched} → {want_sched}{ts}")
        if want_het != cur_het and not want_het:
            runtime.append(SetHeterogeneousMode(gpu, p.index, False))
        if sched_change and not busy:
            runtime.append(SetVgpuScheduler(gpu, p.index, want_sched, want_ts, cur_sched, cur_ts))
        elif sched_change:
            warnings.append(f"GPU {gpu} has vGPUs: the {want_sched} scheduler is written to the modprobe file and "
                            "takes effect when the vGPU manager restarts (a reboot)")  # fmt: skip
        if want_het != cur_het and want_het:
            runtime.append(SetHeterogeneousMode(gpu, p.index, True))
        if want_sched in ("equal-share", "fixed-share") and frame_rate_limited:
            warnings.append(f"GPU {gpu}: the frame-rate limiter is off under {want_sched}; frame_rate_limiter=1 has "
                            "no effect there")  # fmt: skip
        state[gpu] = {"heterogeneous": want_het, "scheduler": want_sched, "timeslice_ms": want_ts}
        policies[gpu] = dataclasses.replace(p, mode="Enabled" if want_het else "Disabled", scheduler=want_sched,
                                            timeslice_ms=want_ts)  # fmt: skip
    files: list[Step] = []
    new_state = render_state(state)
    if new_state != state_text:
        files.append(WritePolicyFile("state", new_state, state_text))
    new_modprobe = render_modprobe({g: (s["scheduler"], s["timeslice_ms"]) for g, s in state.items()})
    if new_modprobe != modprobe_text:
        files.append(WritePolicyFile("modprobe", new_modprobe, modprobe_text))
    return PolicyPlan((*runtime, *files), tuple(lines), tuple(warnings), dataclasses.replace(snap, policies=policies))


def restore_steps(
    snap: HostSnapshot, state_text: str | None, placed_gpus: Collection[str], only: Collection[str] | None = None
) -> list[Step]:
    """After a reboot or a GPU reset: heterogeneous mode on again where the state file or a recorded placement ID
    wants it, and the running scheduler set to the state file's when the driver did not load it from the modprobe
    file. `only`: these GPUs alone (None: every GPU)."""
    state = parse_state(state_text)
    steps: list[Step] = []
    for gpu in sorted(set(state) | set(placed_gpus)):
        p = policy_of(snap, gpu)
        if p is None or (only is not None and gpu not in only):
            continue
        want = state.get(gpu, {})
        sched = (want.get("scheduler", p.scheduler or "best-effort"), want.get("timeslice_ms", p.timeslice_ms))
        if want and p.scheduler is not None and sched != (p.scheduler, p.timeslice_ms) and not _vgpus(snap, gpu):
            steps.append(SetVgpuScheduler(gpu, p.index, sched[0], sched[1], p.scheduler, p.timeslice_ms))
        if (want.get("heterogeneous") or gpu in placed_gpus) and not p.heterogeneous and p.supported:
            steps.append(SetHeterogeneousMode(gpu, p.index, True))
    return steps
