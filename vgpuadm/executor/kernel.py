"""Apply / undo / is-applied handlers for the kernel steps (vgpuadm.steps), listed in HANDLERS for the executor's table.

Every undo checks the current state first, so it is a no-op for a step that never ran: recovery relies on that.
Paths follow shared/docs/vgpu-sysfs.md (§1 mdev, §2.5 vgpu_params, §3.1 sriov-manage, §3.3 current_vgpu_type,
§5 driver binding). The original drivers `vfio bind` replaced are kept in <root>/var/lib/vgpuadm/drivers.json.
"""

from __future__ import annotations

import errno as errno_mod
import json
import os
import stat
import subprocess

from vgpuadm.errors import HostIOError, UnsafeError
from vgpuadm.executor import DRIVERS, ExecContext, HandlerRow, refuse_linked_dirs, unsafe_path, write_state
from vgpuadm.executor.journalcheck import PCI as PCI_GRAMMAR
from vgpuadm.host.root import HostRoot
from vgpuadm.model import join_params, same_params, split_params
from vgpuadm.steps import DRIVER as DRIVER_GRAMMAR
from vgpuadm.steps import (
    SRIOV_MANAGE,
    Bind,
    ClearVfVgpuType,
    CreateMdev,
    DriversProbe,
    ForgetDrivers,
    RecordDrivers,
    RemoveMdev,
    SetDriverOverride,
    SetNumVfs,
    SetSriovAutoprobe,
    SetVfPlacement,
    SetVfVgpuType,
    SetVgpuParams,
    SriovManage,
    Unbind,
)

PCI = "/sys/bus/pci"
MDEV_DEVICES = "/sys/bus/mdev/devices"


def _mdev_dir(uuid: str) -> str:
    return f"{MDEV_DEVICES}/{uuid}"


def _create_path(parent: str, type_id: str) -> str:
    return f"/sys/class/mdev_bus/{parent}/mdev_supported_types/{type_id}/create"


def _apply_create(s: CreateMdev, ctx: ExecContext) -> None:
    ctx.sysfs.write(_create_path(s.parent, s.type_id), s.uuid + "\n")


def _undo_create(s: CreateMdev, ctx: ExecContext) -> None:
    if ctx.sysfs.exists(_mdev_dir(s.uuid)):
        ctx.sysfs.write(f"{_mdev_dir(s.uuid)}/remove", "1\n")


def _created(s: CreateMdev, ctx: ExecContext) -> bool:
    """The mdev exists exactly as the step describes it: same UUID, type and parent (not merely the UUID)."""
    d = _mdev_dir(s.uuid)
    if not ctx.sysfs.exists(d) or ctx.sysfs.link_name(f"{d}/mdev_type") != s.type_id:
        return False
    return os.path.basename(os.path.dirname(ctx.sysfs.resolve_link(d))) == s.parent


def _apply_remove(s: RemoveMdev, ctx: ExecContext) -> None:
    ctx.sysfs.write(f"{_mdev_dir(s.uuid)}/remove", "1\n")


def _undo_remove(s: RemoveMdev, ctx: ExecContext) -> None:
    if s.type_id and not ctx.sysfs.exists(_mdev_dir(s.uuid)):
        ctx.sysfs.write(_create_path(s.parent, s.type_id), s.uuid + "\n")


def _params_path(s: SetVgpuParams) -> str:
    if s.of_mdev:
        return f"{_mdev_dir(s.id)}/nvidia/vgpu_params"
    return f"{PCI}/devices/{s.id}/nvidia/vgpu_params"


def _params_data(params: str) -> str:
    """The bytes for vgpu_params (reference §2.5): NVIDIA's comma-separated `k=v, k=v`, whichever form `params`
    is in (a domain recorded by an earlier version holds `k=v k=v`); a single space clears. The driver keeps all
    but the last byte it is given, so end with "\n" as echo does."""
    return (join_params(split_params(params)) or " ") + "\n"


def _apply_params(s: SetVgpuParams, ctx: ExecContext) -> None:
    ctx.sysfs.write(_params_path(s), _params_data(s.params))


def _undo_params(s: SetVgpuParams, ctx: ExecContext) -> None:
    path = _params_path(s)
    current = ctx.sysfs.read_opt(path)
    if current is not None and not same_params(current, s.previous):
        ctx.sysfs.write(path, _params_data(s.previous))


def _params_set(s: SetVgpuParams, ctx: ExecContext) -> bool:
    current = ctx.sysfs.read_opt(_params_path(s))
    return current is None or same_params(current, s.params)


def _vf_type_path(vf: str) -> str:
    return f"{PCI}/devices/{vf}/nvidia/current_vgpu_type"


def _vf_type(ctx: ExecContext, vf: str) -> int:
    return ctx.sysfs.read_int(_vf_type_path(vf)) or 0


def _apply_vf_type(s: SetVfVgpuType, ctx: ExecContext) -> None:
    ctx.sysfs.write(_vf_type_path(s.vf), f"{s.type_num}\n")


def _undo_vf_type(s: SetVfVgpuType, ctx: ExecContext) -> None:
    if _vf_type(ctx, s.vf) != 0:
        ctx.sysfs.write(_vf_type_path(s.vf), "0\n")


def _placement_path(vf: str) -> str:
    return f"{PCI}/devices/{vf}/nvidia/placement_id"


def _placement(ctx: ExecContext, vf: str) -> int | None:
    text = ctx.sysfs.read_opt(_placement_path(vf))
    value = (text or "").strip()
    return int(value) if value.lstrip("-").isdecimal() and len(value) <= 5 else None


def _apply_vf_clear(s: ClearVfVgpuType, ctx: ExecContext) -> None:
    ctx.sysfs.write(_vf_type_path(s.vf), "0\n")


def _undo_vf_clear(s: ClearVfVgpuType, ctx: ExecContext) -> None:
    if _vf_type(ctx, s.vf) == 0:
        ctx.sysfs.write(_vf_type_path(s.vf), f"{s.previous_type}\n")


def _numvfs_path(pf: str) -> str:
    return f"{PCI}/devices/{pf}/sriov_numvfs"


def _numvfs(ctx: ExecContext, pf: str) -> int:
    return ctx.sysfs.read_int(_numvfs_path(pf)) or 0


def _apply_numvfs(s: SetNumVfs, ctx: ExecContext) -> None:
    ctx.sysfs.write(_numvfs_path(s.pf), f"{s.count}\n")


def _undo_numvfs(s: SetNumVfs, ctx: ExecContext) -> None:
    current = _numvfs(ctx, s.pf)
    if current == s.previous:
        return
    if current != 0 and s.previous != 0:
        ctx.sysfs.write(_numvfs_path(s.pf), "0\n")  # the kernel refuses N→M (EBUSY)
    ctx.sysfs.write(_numvfs_path(s.pf), f"{s.previous}\n")


def _autoprobe_path(pf: str) -> str:
    return f"{PCI}/devices/{pf}/sriov_drivers_autoprobe"


def _autoprobe(ctx: ExecContext, pf: str) -> bool:
    return (ctx.sysfs.read_opt(_autoprobe_path(pf)) or "1").strip() != "0"


def _apply_autoprobe(s: SetSriovAutoprobe, ctx: ExecContext) -> None:
    ctx.sysfs.write(_autoprobe_path(s.pf), f"{int(s.enabled)}\n")


def _undo_autoprobe(s: SetSriovAutoprobe, ctx: ExecContext) -> None:
    if _autoprobe(ctx, s.pf) != s.previous:
        ctx.sysfs.write(_autoprobe_path(s.pf), f"{int(s.previous)}\n")


def run_sriov_manage(ctx: ExecContext, pf: str, enable: bool) -> None:
    """Run NVIDIA's script (under the root; VGPUADM_ROOT tells a simulated one where the host is)."""
    script = HostRoot(ctx.root).executable(SRIOV_MANAGE)
    if script is None:
        raise HostIOError(
            f"{SRIOV_MANAGE} is missing or not executable",
            "install the NVIDIA vGPU host driver, which ships sriov-manage",
            path=SRIOV_MANAGE,
            errno=errno_mod.ENOENT,
        )
    env = {**os.environ, "VGPUADM_ROOT": ctx.root}
    proc = subprocess.run(
        [script, "-e" if enable else "-d", pf], capture_output=True, text=True, env=env, timeout=300, check=False
    )
    if proc.returncode != 0:
        last = (proc.stderr or proc.stdout).strip().splitlines()
        raise HostIOError(
            f"{SRIOV_MANAGE} {'-e' if enable else '-d'} {pf} exited with {proc.returncode}"
            + (f": {last[-1]}" if last else ""),
            "check that no process holds the GPU (nvidia-smi) and look at `dmesg`",
            path=SRIOV_MANAGE,
        )


def _apply_sriov_manage(s: SriovManage, ctx: ExecContext) -> None:
    run_sriov_manage(ctx, s.pf, s.enable)


def _undo_sriov_manage(s: SriovManage, ctx: ExecContext) -> None:
    if (_numvfs(ctx, s.pf) > 0) == s.enable:
        run_sriov_manage(ctx, s.pf, not s.enable)


def _sriov_managed(s: SriovManage, ctx: ExecContext) -> bool:
    return (_numvfs(ctx, s.pf) > 0) == s.enable


def _override_path(address: str) -> str:
    return f"{PCI}/devices/{address}/driver_override"


def _override(ctx: ExecContext, address: str) -> str:
    text = (ctx.sysfs.read_opt(_override_path(address)) or "").strip()
    return "" if text == "(null)" else text


def _apply_override(s: SetDriverOverride, ctx: ExecContext) -> None:
    ctx.sysfs.write(_override_path(s.address), s.driver + "\n")


def _undo_override(s: SetDriverOverride, ctx: ExecContext) -> None:
    if _override(ctx, s.address) != s.previous:
        ctx.sysfs.write(_override_path(s.address), s.previous + "\n")


def _driver(ctx: ExecContext, address: str) -> str | None:
    return ctx.sysfs.link_name(f"{PCI}/devices/{address}/driver")


def _apply_unbind(s: Unbind, ctx: ExecContext) -> None:
    ctx.sysfs.write(f"{PCI}/drivers/{s.driver}/unbind", s.address)


def _undo_unbind(s: Unbind, ctx: ExecContext) -> None:
    if _driver(ctx, s.address) is None:
        ctx.sysfs.write(f"{PCI}/drivers/{s.driver}/bind", s.address)


def _apply_bind(s: Bind, ctx: ExecContext) -> None:
    ctx.sysfs.write(f"{PCI}/drivers/{s.driver}/bind", s.address)


def _undo_bind(s: Bind, ctx: ExecContext) -> None:
    if _driver(ctx, s.address) == s.driver:
        ctx.sysfs.write(f"{PCI}/drivers/{s.driver}/unbind", s.address)


def _apply_probe(s: DriversProbe, ctx: ExecContext) -> None:
    ctx.sysfs.write(f"{PCI}/drivers_probe", s.address)


def _undo_probe(s: DriversProbe, ctx: ExecContext) -> None:
    current = _driver(ctx, s.address)
    if current is not None and (not s.expect or current == s.expect):
        ctx.sysfs.write(f"{PCI}/drivers/{current}/unbind", s.address)


def _probed(s: DriversProbe, ctx: ExecContext) -> bool:
    # Without an expected driver the kernel may legitimately bind nothing (no native driver loaded).
    return not s.expect or _driver(ctx, s.address) == s.expect


def load_drivers(root: str) -> dict[str, str]:
    """Original drivers remembered by `vfio bind` ({address: driver}, "" = was unbound). Untrusted: never read
    through a symlink, and every entry must be a PCI address and a driver name (they become sysfs paths)."""
    path = os.path.join(root, DRIVERS)
    refuse_linked_dirs(root, os.path.dirname(path))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno_mod.ELOOP:
            raise unsafe_path(root, path) from None
        return {}
    try:
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise _bad_drivers("it is not a regular file")
            doc = json.loads(f.read(MAX_DRIVERS_BYTES + 1)[: MAX_DRIVERS_BYTES + 1])
    except (OSError, ValueError):
        return {}
    if not isinstance(doc, dict):
        return {}
    for address, driver in doc.items():
        if not (isinstance(driver, str) and PCI_GRAMMAR.fullmatch(address) and DRIVER_GRAMMAR.fullmatch(driver)):
            raise _bad_drivers(f"entry {str(address)[:40]!r}: {str(driver)[:40]!r} is not a PCI address and a driver")
    return dict(doc)


MAX_DRIVERS_BYTES = 1024 * 1024


def _bad_drivers(problem: str) -> UnsafeError:
    return UnsafeError(f"refusing /{DRIVERS}: {problem}", f"inspect /{DRIVERS} and remove it by hand")


def _save_drivers(root: str, drivers: dict[str, str]) -> None:
    write_state(root, os.path.join(root, DRIVERS), dict(sorted(drivers.items())))


def _apply_record(s: RecordDrivers, ctx: ExecContext) -> None:
    _save_drivers(ctx.root, {**load_drivers(ctx.root), **dict(s.drivers)})


def _undo_record(s: RecordDrivers, ctx: ExecContext) -> None:
    drivers = load_drivers(ctx.root)
    if not any(address in drivers for address, _ in s.drivers):
        return
    for address, _ in s.drivers:
        drivers.pop(address, None)
    _save_drivers(ctx.root, drivers)


def _apply_forget(s: ForgetDrivers, ctx: ExecContext) -> None:
    _undo_record(RecordDrivers(s.drivers), ctx)


def _undo_forget(s: ForgetDrivers, ctx: ExecContext) -> None:
    drivers = load_drivers(ctx.root)
    if any(drivers.get(address) != driver for address, driver in s.drivers):
        _apply_record(RecordDrivers(s.drivers), ctx)


HANDLERS: list[HandlerRow] = [
    (CreateMdev, _apply_create, _undo_create, _created),
    (RemoveMdev, _apply_remove, _undo_remove, lambda s, ctx: not ctx.sysfs.exists(_mdev_dir(s.uuid))),
    (SetVgpuParams, _apply_params, _undo_params, _params_set),
    (SetVfVgpuType, _apply_vf_type, _undo_vf_type, lambda s, ctx: _vf_type(ctx, s.vf) == s.type_num),
    (
        SetVfPlacement,
        lambda s, ctx: ctx.sysfs.write(_placement_path(s.vf), f"{s.placement_id}\n"),
        lambda s, ctx: ctx.sysfs.write(_placement_path(s.vf), f"{s.previous}\n"),
        lambda s, ctx: _placement(ctx, s.vf) == s.placement_id,
    ),
    (ClearVfVgpuType, _apply_vf_clear, _undo_vf_clear, lambda s, ctx: _vf_type(ctx, s.vf) == 0),
    (SetNumVfs, _apply_numvfs, _undo_numvfs, lambda s, ctx: _numvfs(ctx, s.pf) == s.count),
    (SetSriovAutoprobe, _apply_autoprobe, _undo_autoprobe, lambda s, ctx: _autoprobe(ctx, s.pf) == s.enabled),
    (SriovManage, _apply_sriov_manage, _undo_sriov_manage, _sriov_managed),
    (SetDriverOverride, _apply_override, _undo_override, lambda s, ctx: _override(ctx, s.address) == s.driver),
    (Unbind, _apply_unbind, _undo_unbind, lambda s, ctx: _driver(ctx, s.address) != s.driver),
    (Bind, _apply_bind, _undo_bind, lambda s, ctx: _driver(ctx, s.address) == s.driver),
    (DriversProbe, _apply_probe, _undo_probe, _probed),
    (RecordDrivers, _apply_record, _undo_record),
    (ForgetDrivers, _apply_forget, _undo_forget),
]
