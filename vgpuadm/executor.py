"""Runs a Plan: host-wide lock, atomic journal, undo stack; rolls back on the first failure.

Each Step class is dispatched through a registry (`register(step_cls, apply_fn, undo_fn, is_applied)`), so other
modules (the libvirt steps) plug in their own handlers. Handlers:
  apply_fn(step, ctx)       makes the change (raises a VgpuadmError, usually HostIOError, on refusal);
  undo_fn(step, ctx)        reverts it and must be tolerant: it checks the current state first, because after a
                            crash it may run for a step that never happened or only half happened;
  is_applied(step, ctx)     (optional) whether the step's effect is present: checked after every apply (a real
                            kernel can accept a write and do nothing) and used by `recover(finish=True)`.

Files under the root: `<root>/run/vgpuadm.lock` (flock; holder pid in `vgpuadm.lock.owner`) and
`<root>/var/lib/vgpuadm/journal.json` (the plan and the index of the step in flight; temp + fsync + rename).
"""

from __future__ import annotations

import contextlib
import copy
import errno as errno_mod
import json
import os
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from filelock import FileLock, Timeout

from vgpuadm.errors import ConflictError, HostIOError, UsageError, VgpuadmError
from vgpuadm.host.sysfs import Sysfs
from vgpuadm.steps import (
    SRIOV_MANAGE,
    Bind,
    ClearVfVgpuType,
    CreateMdev,
    DriversProbe,
    ForgetDrivers,
    Plan,
    RecordDrivers,
    RemoveMdev,
    SetDriverOverride,
    SetNumVfs,
    SetVfVgpuType,
    SetVgpuParams,
    SriovManage,
    Step,
    Unbind,
)

LOCK_PATH = "run/vgpuadm.lock"
STATE_DIR = "var/lib/vgpuadm"
JOURNAL = f"{STATE_DIR}/journal.json"
DRIVERS = f"{STATE_DIR}/drivers.json"
DEFAULT_LOCK_TIMEOUT = 30.0
CRASH_HOOK = "VGPUADM_TEST_CRASH_AFTER_STEP"  # tests only: os._exit right after step N (1-based) is applied

PCI = "/sys/bus/pci"
MDEV_DEVICES = "/sys/bus/mdev/devices"

ApplyFn = Callable[[Any, "ExecContext"], None]
CheckFn = Callable[[Any, "ExecContext"], bool]
Progress = Callable[[int, int, str], None]


@dataclass
class ExecContext:
    """What handlers get: the kernel, the root, an optional libvirt connection (opaque here) and extras."""

    sysfs: Sysfs
    root: str
    virt: Any = None
    extras: dict[str, Any] = field(default_factory=dict)
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT
    verify: bool = True


@dataclass(frozen=True)
class ExecResult:
    """What execute did: the step descriptions applied (or, with dry_run, that would be applied)."""

    plan: Plan
    applied: tuple[str, ...]
    dry_run: bool = False

    @property
    def changed(self) -> bool:
        return bool(self.applied) and not self.dry_run


@dataclass(frozen=True)
class Handler:
    apply: ApplyFn
    undo: ApplyFn
    is_applied: CheckFn | None = None


_HANDLERS: dict[type, Handler] = {}


def register(step_cls: type, apply_fn: ApplyFn, undo_fn: ApplyFn, is_applied: CheckFn | None = None) -> None:
    """Make `execute` able to run (and roll back) steps of `step_cls`."""
    _HANDLERS[step_cls] = Handler(apply_fn, undo_fn, is_applied)


def handler_for(step: Step) -> Handler:
    for cls in type(step).__mro__:
        if cls in _HANDLERS:
            return _HANDLERS[cls]
    raise UsageError(f"no handler registered for step kind {step.kind!r}", "this is a bug in vgpuadm; report it")


# --- lock ---------------------------------------------------------------------------------------------------------

_LOCKS: dict[tuple[int, str], FileLock] = {}  # per pid: filelock refuses an instance inherited across fork()
_LOCKS_GUARD = threading.Lock()


@contextlib.contextmanager
def host_lock(root: str, timeout: float = DEFAULT_LOCK_TIMEOUT) -> Iterator[None]:
    """Hold the host-wide lock. Re-entrant within a process, so callers can plan and execute under one hold."""
    path = os.path.join(root, LOCK_PATH)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with _LOCKS_GUARD:
        key = (os.getpid(), path)
        lock = _LOCKS.get(key) or _LOCKS.setdefault(key, FileLock(path))
    owner = path + ".owner"
    try:
        lock.acquire(timeout=timeout)
    except Timeout:
        pid = _read_text(owner) or "unknown"
        raise ConflictError(
            f"another vgpuadm is changing this host (pid {pid})",
            f"wait for it to finish and retry; the lock is {'/' + LOCK_PATH}",
        ) from None
    try:
        if lock.lock_counter == 1:
            _write_text(owner, str(os.getpid()))
        yield
    finally:
        lock.release()


def _read_text(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def _write_text(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text + "\n")


def atomic_write_json(path: str, doc: Any) -> None:
    """Write JSON so that a crash leaves the old or the new file, never a torn one (temp + fsync + rename)."""
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(directory)


def _fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
        _fsync_dir(os.path.dirname(path))


# --- journal ------------------------------------------------------------------------------------------------------


def journal_path(root: str) -> str:
    return os.path.join(root, JOURNAL)


def read_journal(root: str) -> dict[str, Any] | None:
    """The journal of an interrupted change, or None."""
    path = journal_path(root)
    try:
        with open(path) as f:
            doc = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise HostIOError(
            f"journal /{JOURNAL} is unreadable: {exc}", "inspect and remove it by hand", path="/" + JOURNAL
        ) from None
    return doc if isinstance(doc, dict) else None


def _journal(root: str, plan: Plan, current: int, state: str) -> None:
    atomic_write_json(
        journal_path(root),
        # current: index of the step in flight (= how many are done); it may or may not have happened.
        {"version": 1, "pid": os.getpid(), "state": state, "current": current, "done": current, "plan": plan.to_dict()},
    )


def _pending_error() -> ConflictError:
    return ConflictError(
        f"an interrupted change is pending in /{JOURNAL}",
        "run `vgpuadm recover` to roll it back (or `vgpuadm recover --finish` to complete it)",
    )


# --- execute ------------------------------------------------------------------------------------------------------


def execute(plan: Plan, ctx: ExecContext, *, dry_run: bool = False, progress: Progress | None = None) -> ExecResult:
    """Apply `plan` step by step under the host lock. On the first failure, undo what was done in reverse order
    and raise the error naming the failed step. dry_run returns the step descriptions and changes nothing."""
    for step in plan.steps:
        handler_for(step)  # refuse unknown kinds before touching anything
    if dry_run or plan.empty:
        return ExecResult(plan, tuple(plan.describe()), dry_run=dry_run)
    with host_lock(ctx.root, ctx.lock_timeout):
        if read_journal(ctx.root) is not None:
            raise _pending_error()
        done: list[Step] = []
        total = len(plan.steps)
        crash_after = int(os.environ.get(CRASH_HOOK, "0") or 0)
        for i, step in enumerate(plan.steps):
            try:
                _journal(ctx.root, plan, i, "applying")
                if progress:
                    progress(i + 1, total, step.describe())
                _apply_one(step, ctx)
            except VgpuadmError as exc:
                _fail(plan, ctx, done, step, i, exc)
            except OSError as exc:  # the journal or a state file under <root>/var/lib/vgpuadm
                _fail(plan, ctx, done, step, i, HostIOError(f"{exc.strerror or exc}: {exc.filename}", errno=exc.errno))
            except BaseException:
                rollback([*done, step], ctx)  # a bug or ^C: still leave the host as it was, then let it surface
                _remove(journal_path(ctx.root))
                raise
            done.append(step)
            if crash_after == i + 1:
                os._exit(99)
        _remove(journal_path(ctx.root))
    return ExecResult(plan, tuple(plan.describe()))


def _apply_one(step: Step, ctx: ExecContext) -> None:
    handler = handler_for(step)
    handler.apply(step, ctx)
    if ctx.verify and handler.is_applied is not None and not handler.is_applied(step, ctx):
        raise HostIOError(
            f"the kernel accepted the write but nothing changed ({step.describe()})",
            "check `dmesg` for driver messages",
        )


def _fail(plan: Plan, ctx: ExecContext, done: list[Step], step: Step, index: int, exc: VgpuadmError) -> None:
    with contextlib.suppress(OSError):  # a full disk must not stop the rollback itself
        _journal(ctx.root, plan, index, "rolling-back")
    # The failed step is undone too: a refused write may still have half-happened, and every undo checks first.
    problems = rollback([*done, step], ctx)
    err = copy.copy(exc)
    err.message = f"step {index + 1}/{len(plan.steps)} {step.describe()} failed: {exc.message}"
    err.args = (err.message,)
    cause = exc.hint or errno_hint(step, getattr(exc, "errno", None))
    if problems:
        err.hint = f"{cause + '; ' if cause else ''}rollback incomplete ({'; '.join(problems)}): run `vgpuadm recover`"
    else:
        _remove(journal_path(ctx.root))
        err.hint = f"{cause + '; ' if cause else ''}nothing was changed (the earlier steps were rolled back)"
    raise err from None


def rollback(done: list[Step], ctx: ExecContext) -> list[str]:
    """Undo steps in reverse order; returns the problems (empty when all undid cleanly)."""
    problems = []
    for step in reversed(done):
        try:
            handler_for(step).undo(step, ctx)
        except VgpuadmError as exc:
            problems.append(f"undo of {step.describe()}: {exc.message}")
        except OSError as exc:
            problems.append(f"undo of {step.describe()}: {exc.strerror or exc}: {exc.filename}")
    return problems


def recover(ctx: ExecContext, *, finish: bool = False) -> list[str]:
    """Deal with a journal left by a crashed run; returns what was done ([] when there was nothing).

    Rolling back is the default: the interrupted plan was computed from a snapshot that is now stale and the
    command that started it never reported success, so the host goes back to the state its user last saw.
    Every undo checks the current state first, so the step that was in flight is undone whether or not it
    happened. `finish=True` instead completes the plan: the step in flight is skipped when its effect is present."""
    with host_lock(ctx.root, ctx.lock_timeout):
        doc = read_journal(ctx.root)
        if doc is None:
            return []
        plan = Plan.from_dict(doc.get("plan", {}))
        current = min(int(doc.get("current", 0)), len(plan.steps) - 1)
        out: list[str] = []
        if finish and doc.get("state") == "applying":
            for i in range(current, len(plan.steps)):
                step = plan.steps[i]
                h = handler_for(step)
                if i == current and h.is_applied is not None and h.is_applied(step, ctx):
                    continue
                _journal(ctx.root, plan, i, "applying")
                h.apply(step, ctx)
                out.append(f"applied: {step.describe()}")
        else:
            undo = list(plan.steps[: current + 1])
            problems = rollback(undo, ctx)
            if problems:
                raise HostIOError(
                    f"rollback of the interrupted change incomplete: {'; '.join(problems)}",
                    f"fix the cause and run `vgpuadm recover` again; the journal is /{JOURNAL}",
                )
            out = [f"rolled back: {s.describe()}" for s in reversed(undo)]
        _remove(journal_path(ctx.root))
        return out


# --- errno → likely cause -----------------------------------------------------------------------------------------

_HINTS: dict[type, dict[str, str]] = {
    CreateMdev: {
        "EINVAL": "the type is incompatible with what already runs on that GPU (one type, or one framebuffer size, "
        "per physical GPU), or the NVIDIA vGPU manager (nvidia-vgpu-mgr) is not running",
        "EUSERS": "no instances of that type are left on that parent; see `vgpuadm types --available`",
        "ENOSPC": "no instances of that type are left on that parent; see `vgpuadm types --available`",
        "EEXIST": "that UUID is already used by another mdev; pass another --uuid or omit it",
        "ENODEV": "the parent driver is unregistering (driver reload?); retry once it is loaded",
    },
    RemoveMdev: {"EBUSY": "the mdev is in use by a running VM; stop the VM first"},
    SetVfVgpuType: {
        "EPERM": "the VF already runs a vGPU; clear it first with `vgpuadm vf clear`",
        "EINVAL": "the type is incompatible with what already runs on that GPU (one framebuffer size per GPU), or "
        "the NVIDIA vGPU manager is not running",
        "EIO": "a MIG-backed type needs a free matching GPU instance (`nvidia-smi mig -cgi`)",
    },
    ClearVfVgpuType: {
        "EPERM": "the VF runs no vGPU",
        "EBUSY": "the VF is in use by a running VM; stop the VM first",
    },
    SetNumVfs: {
        "EBUSY": "VFs are enabled; the count must go through 0 first",
        "ENOENT": "the PF has no driver that can enable VFs (NVIDIA PFs need sriov-manage)",
        "ERANGE": "more VFs than sriov_totalvfs",
    },
    Bind: {
        "EBUSY": "device busy: it already has a driver",
        "ENODEV": "the driver does not match the device (driver_override names another driver?)",
    },
    Unbind: {
        "ENODEV": "the device is not bound to that driver",
        "EBUSY": "device busy: a process (nvidia-persistenced, Xorg, CUDA) holds it",
    },
    DriversProbe: {"EBUSY": "device busy: it already has a driver"},
}


def errno_hint(step: Step, code: int | None) -> str:
    """A likely cause for `code` on `step`, "" when none is known."""
    if not code:
        return ""
    name = errno_mod.errorcode.get(code, "")
    for cls in type(step).__mro__:
        if cls in _HINTS and name in _HINTS[cls]:
            return _HINTS[cls][name]
    return ""


# --- handlers for the kernel steps ------------------------------------------------------------------------------


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
    return ctx.sysfs.exists(_mdev_dir(s.uuid))


def _apply_remove(s: RemoveMdev, ctx: ExecContext) -> None:
    ctx.sysfs.write(f"{_mdev_dir(s.uuid)}/remove", "1\n")


def _undo_remove(s: RemoveMdev, ctx: ExecContext) -> None:
    if s.type_id and not ctx.sysfs.exists(_mdev_dir(s.uuid)):
        ctx.sysfs.write(_create_path(s.parent, s.type_id), s.uuid + "\n")


def _params_path(s: SetVgpuParams) -> str:
    if s.device_path_kind == "mdev":
        return f"{_mdev_dir(s.id)}/nvidia/vgpu_params"
    return f"{PCI}/devices/{s.id}/nvidia/vgpu_params"


def _params_data(params: str) -> str:
    # The driver consumes the last character (reference §2.5): end with "\n" as echo does; clear with one space.
    return (params if params.strip() else " ") + "\n"


def _apply_params(s: SetVgpuParams, ctx: ExecContext) -> None:
    ctx.sysfs.write(_params_path(s), _params_data(s.params))


def _undo_params(s: SetVgpuParams, ctx: ExecContext) -> None:
    path = _params_path(s)
    current = ctx.sysfs.read_opt(path)
    if current is not None and current.strip() != s.previous.strip():
        ctx.sysfs.write(path, _params_data(s.previous))


def _params_set(s: SetVgpuParams, ctx: ExecContext) -> bool:
    current = ctx.sysfs.read_opt(_params_path(s))
    return current is None or current.strip() == s.params.strip()


def _vf_type_path(vf: str) -> str:
    return f"{PCI}/devices/{vf}/nvidia/current_vgpu_type"


def _vf_type(ctx: ExecContext, vf: str) -> int:
    return ctx.sysfs.read_int(_vf_type_path(vf)) or 0


def _apply_vf_type(s: SetVfVgpuType, ctx: ExecContext) -> None:
    ctx.sysfs.write(_vf_type_path(s.vf), f"{s.type_num}\n")


def _undo_vf_type(s: SetVfVgpuType, ctx: ExecContext) -> None:
    if _vf_type(ctx, s.vf) != 0:
        ctx.sysfs.write(_vf_type_path(s.vf), "0\n")


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


def run_sriov_manage(ctx: ExecContext, pf: str, enable: bool) -> None:
    """Run NVIDIA's script (under the root; VGPUADM_ROOT tells a simulated one where the host is)."""
    script = os.path.join(ctx.root, SRIOV_MANAGE.lstrip("/"))
    if not os.access(script, os.X_OK):
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
    """Original drivers remembered by `vfio bind` ({address: driver}, "" = was unbound)."""
    try:
        with open(os.path.join(root, DRIVERS)) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in doc.items()} if isinstance(doc, dict) else {}


def _save_drivers(root: str, drivers: dict[str, str]) -> None:
    atomic_write_json(os.path.join(root, DRIVERS), dict(sorted(drivers.items())))


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


register(CreateMdev, _apply_create, _undo_create, _created)
register(RemoveMdev, _apply_remove, _undo_remove, lambda s, ctx: not ctx.sysfs.exists(_mdev_dir(s.uuid)))
register(SetVgpuParams, _apply_params, _undo_params, _params_set)
register(SetVfVgpuType, _apply_vf_type, _undo_vf_type, lambda s, ctx: _vf_type(ctx, s.vf) == s.type_num)
register(ClearVfVgpuType, _apply_vf_clear, _undo_vf_clear, lambda s, ctx: _vf_type(ctx, s.vf) == 0)
register(SetNumVfs, _apply_numvfs, _undo_numvfs, lambda s, ctx: _numvfs(ctx, s.pf) == s.count)
register(SriovManage, _apply_sriov_manage, _undo_sriov_manage, _sriov_managed)
register(SetDriverOverride, _apply_override, _undo_override, lambda s, ctx: _override(ctx, s.address) == s.driver)
register(Unbind, _apply_unbind, _undo_unbind, lambda s, ctx: _driver(ctx, s.address) != s.driver)
register(Bind, _apply_bind, _undo_bind, lambda s, ctx: _driver(ctx, s.address) == s.driver)
register(DriversProbe, _apply_probe, _undo_probe, _probed)
register(RecordDrivers, _apply_record, _undo_record)
register(ForgetDrivers, _apply_forget, _undo_forget)
