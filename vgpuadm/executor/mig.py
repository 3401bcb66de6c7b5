"""Apply / undo / is-applied handlers for the MIG steps (vgpuadm.steps): nvidia-smi runs through host/nvidia_smi.py,
and its effect is read back from `-q -x` and `mig -lgi` (what nvidia-smi says, not what it printed on success)."""

from __future__ import annotations

from vgpuadm.errors import HostIOError
from vgpuadm.executor import ExecContext, HandlerRow
from vgpuadm.host import nvidia_smi
from vgpuadm.host.nvidia_smi_mig import parse_gpu_instances
from vgpuadm.host.nvidia_smi_vgpu import parse_query_xml
from vgpuadm.host.root import HostRoot
from vgpuadm.steps import CreateGpuInstance, DestroyGpuInstance, SetMigMode

WHY = "change MIG state"
HINT = "see `vgpuadm mig status` and `nvidia-smi mig -lgi`; a GPU in use by a vGPU or process refuses MIG changes"


def _smi(ctx: ExecContext, args: list[str]) -> str:
    result = nvidia_smi.invoke(HostRoot(ctx.root), args, WHY)
    if result.returncode != 0:
        raise HostIOError(f"nvidia-smi {' '.join(args)} failed: {result.message()}", HINT)
    return result.stdout


def _mode(ctx: ExecContext, address: str) -> tuple[str, str]:
    for gpu in parse_query_xml(_smi(ctx, ["-q", "-x"]).encode()):
        if gpu.address == address:
            return gpu.mig_current, gpu.mig_pending
    raise HostIOError(f"nvidia-smi does not report GPU {address}", HINT)


def _instance_at(ctx: ExecContext, gpu_index: int, profile_id: int, start: int) -> int | None:
    text = nvidia_smi.invoke(HostRoot(ctx.root), ["mig", "-i", str(gpu_index), "-lgi"], WHY).stdout
    for gi in parse_gpu_instances(text):
        if gi.gpu == gpu_index and gi.profile_id == profile_id and gi.start == start:
            return gi.instance_id
    return None


def _set_mode(ctx: ExecContext, s: SetMigMode, enable: bool) -> None:
    _smi(ctx, ["-i", str(s.gpu_index), "-mig", "1" if enable else "0"])


def _apply_mode(s: SetMigMode, ctx: ExecContext) -> None:
    _set_mode(ctx, s, s.enable)
    if s.effective and _mode(ctx, s.address)[0] != ("Enabled" if s.enable else "Disabled"):
        _set_mode(ctx, s, not s.enable)  # the pending change is taken back: the step did nothing
        word = "enable" if s.enable else "disable"
        raise HostIOError(
            f"MIG mode on {s.address} changes only after a GPU reset on this board",
            f"run `vgpuadm mig {word} --gpu {s.address}`, then `nvidia-smi -r -i {s.gpu_index}` (no VM may use the "
            "GPU) or reboot, and run this command again",
        )


def _mode_is(ctx: ExecContext, s: SetMigMode, enable: bool) -> bool:
    """The mode asked for is current or pending (a board that needs a reset reports it pending); current only when
    the step needs it in effect."""
    current, pending = _mode(ctx, s.address)
    word = "Enabled" if enable else "Disabled"
    return current == word if s.effective and enable == s.enable else word in (current, pending)


def _create(ctx: ExecContext, profile_id: int, gpu_index: int, start: int) -> None:
    _smi(ctx, ["mig", "-i", str(gpu_index), "-cgi", f"{profile_id}:{start}"])


def _destroy_at(ctx: ExecContext, gpu_index: int, profile_id: int, start: int) -> None:
    gid = _instance_at(ctx, gpu_index, profile_id, start)
    if gid is not None:
        _smi(ctx, ["mig", "-i", str(gpu_index), "-dgi", "-gi", str(gid)])


def _undo_mode(s: SetMigMode, ctx: ExecContext) -> None:
    if not _mode_is(ctx, s, not s.enable):
        _set_mode(ctx, s, not s.enable)


def _destroy(s: DestroyGpuInstance, ctx: ExecContext) -> None:
    _smi(ctx, ["mig", "-i", str(s.gpu_index), "-dgi", "-gi", str(s.instance_id)])


def _undo_destroy(s: DestroyGpuInstance, ctx: ExecContext) -> None:
    if _instance_at(ctx, s.gpu_index, s.profile_id, s.start) is None:
        _create(ctx, s.profile_id, s.gpu_index, s.start)


HANDLERS: list[HandlerRow] = [
    (SetMigMode, _apply_mode, _undo_mode, lambda s, ctx: _mode_is(ctx, s, s.enable)),
    (
        CreateGpuInstance,
        lambda s, ctx: _create(ctx, s.profile_id, s.gpu_index, s.start),
        lambda s, ctx: _destroy_at(ctx, s.gpu_index, s.profile_id, s.start),
        lambda s, ctx: _instance_at(ctx, s.gpu_index, s.profile_id, s.start) is not None,
    ),
    (
        DestroyGpuInstance,
        _destroy,
        _undo_destroy,
        lambda s, ctx: _instance_at(ctx, s.gpu_index, s.profile_id, s.start) is None,
    ),
]
