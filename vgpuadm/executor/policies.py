"""Apply / undo / is-applied handlers for the NVIDIA host-policy steps (vgpuadm.steps): nvidia-smi runs through
host/nvidia_smi.py and its effect is read back (`-q`, `vgpu -ss`); their files are managed-file steps
(executor/files.py)."""

from __future__ import annotations

from vgpuadm.errors import HostIOError
from vgpuadm.executor import ExecContext, HandlerRow
from vgpuadm.host import nvidia_smi
from vgpuadm.host.nvidia_smi_vgpu import parse_query_text, parse_scheduler_state
from vgpuadm.host.root import HostRoot
from vgpuadm.steps import SetHeterogeneousMode, SetVgpuScheduler

WHY = "change the vGPU heterogeneous mode or scheduler"
HINT = "a GPU refuses these changes while vGPUs exist on it; see `nvidia-smi -q` and `nvidia-smi vgpu -ss`"
SMI_POLICY = {"best-effort": "bestEffort", "equal-share": "equalShare", "fixed-share": "fixedShare"}


def _smi(ctx: ExecContext, args: list[str]) -> str:
    result = nvidia_smi.invoke(HostRoot(ctx.root), args, WHY)
    if result.returncode != 0:
        raise HostIOError(f"nvidia-smi {' '.join(args)} failed: {result.message()}", HINT)
    return result.stdout


def _mode(ctx: ExecContext, address: str) -> str:
    found = parse_query_text(_smi(ctx, ["-q"])).get(address)
    if found is None:
        raise HostIOError(f"nvidia-smi does not report GPU {address}", HINT)
    return found.heterogeneous_mode


def _set_mode(ctx: ExecContext, s: SetHeterogeneousMode, enable: bool) -> None:
    _smi(ctx, ["vgpu", "-i", str(s.gpu_index), "-shm", "1" if enable else "0"])


def _sched(ctx: ExecContext, address: str) -> tuple[str, int] | None:
    return parse_scheduler_state(_smi(ctx, ["vgpu", "-ss"])).get(address)


def _set_sched(ctx: ExecContext, gpu_index: int, policy: str, timeslice_ms: int) -> None:
    args = ["vgpu", "-i", str(gpu_index), "--set-vgpu-scheduler-state", SMI_POLICY[policy]]
    _smi(ctx, args + (["--timeslice", str(timeslice_ms)] if timeslice_ms else []))


HANDLERS: list[HandlerRow] = [
    (
        SetHeterogeneousMode,
        lambda s, ctx: _set_mode(ctx, s, s.enable),
        lambda s, ctx: (
            _set_mode(ctx, s, not s.enable)
            if _mode(ctx, s.address) != ("Disabled" if s.enable else "Enabled")
            else None
        ),
        lambda s, ctx: _mode(ctx, s.address) == ("Enabled" if s.enable else "Disabled"),
    ),
    (
        SetVgpuScheduler,
        lambda s, ctx: _set_sched(ctx, s.gpu_index, s.policy, s.timeslice_ms),
        lambda s, ctx: _set_sched(ctx, s.gpu_index, s.previous_policy, s.previous_timeslice_ms),
        lambda s, ctx: _sched(ctx, s.address) == (s.policy, s.timeslice_ms),
    ),
]
