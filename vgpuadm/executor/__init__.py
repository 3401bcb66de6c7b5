"""Runs a Plan: host-wide lock, atomic journal, undo stack; rolls back on the first failure.

Each Step class is dispatched through a table of handlers, assembled explicitly (nothing registers by being
imported): `HANDLERS` holds the executor's own (the kernel steps' below, executor/files.py's, mig.py's and
policies.py's, each a list of rows (step class, apply_fn, undo_fn[, is_applied])); a caller that runs libvirt steps
passes a wider table in `ExecContext.handlers` (ops/session.py adds virt/conn.py's). Handlers:
  apply_fn(step, ctx)       makes the change (raises a VgpuadmError, usually HostIOError, on refusal);
  undo_fn(step, ctx)        reverts it and must be tolerant: it checks the current state first, because after a
                            crash it may run for a step that never happened or only half happened;
  is_applied(step, ctx)     (optional) whether the step's effect is present: checked after every apply (a real
                            kernel can accept a write and do nothing) and used by `recover(finish=True)`;
  lane(step)                (optional) what the step changes alone (a libvirt domain's name): consecutive steps in
                            distinct lanes run concurrently (see `_waves`), each still journaled, verified and undone
                            as its own step.

Files under the root: `<root>/run/vgpuadm/lock` (flock, in a 0700 directory; the holder's pid and argv in
`lock.owner`, as JSON) and
`<root>/var/lib/vgpuadm/journal.json`: the plan, written once before the first step (temp + fsync + rename +
directory fsync), then one appended progress line per step (the index of the step in flight) that is flushed but
not fsynced, see `_Journal`. The journal's removal at the end is fsynced: a reappearing journal would roll back a
change its user saw succeed.

State is private: every directory the executor creates under <root>/run and <root>/var/lib/vgpuadm is 0700 and
every file it writes there (journal, drivers.json, lock, lock owner, temp files) 0600, whatever the umask; files
are opened with O_NOFOLLOW (temp files also O_EXCL), so a planted symlink is refused, never followed.

The kernel steps' handlers are at the end of this module. Every undo checks the current state first, so it is a
no-op for a step that never ran: recovery relies on that. Paths follow shared/docs/vgpu-sysfs.md (§1 mdev, §2.5
vgpu_params, §3.1 sriov-manage, §3.3 current_vgpu_type, §5 driver binding). The original drivers `vfio bind`
replaced are kept in <root>/var/lib/vgpuadm/drivers.json. The managed-file step is in executor/files.py, the errno
→ likely-cause table in executor/hints.py.
"""

from __future__ import annotations

import contextlib
import copy
import errno as errno_mod
import json
import os
import re
import stat
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from vgpuadm.errors import ConflictError, HostIOError, Interrupted, UnsafeError, UsageError, VgpuadmError
from vgpuadm.executor.hints import errno_hint
from vgpuadm.executor.journalcheck import PCI as PCI_GRAMMAR
from vgpuadm.executor.journalcheck import check_document, check_owner, check_progress_state
from vgpuadm.host import root as host_root
from vgpuadm.host.root import (
    BeneathError,
    FileLock,
    HostRoot,
    LockTimeout,
    check_exists,
    check_writable,
    fsync_dir,
    write_beneath,
)
from vgpuadm.host.sysfs import Sysfs
from vgpuadm.model import join_params, same_params, split_params
from vgpuadm.steps import DRIVER as DRIVER_GRAMMAR
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
    SetSriovAutoprobe,
    SetVfPlacement,
    SetVfVgpuType,
    SetVgpuParams,
    SriovManage,
    Step,
    Unbind,
)

# Relative to the root (host/root.py holds the host paths).
LOCK_PATH = host_root.LOCK.lstrip("/")
STATE_DIR = host_root.STATE_DIR.lstrip("/")
JOURNAL = host_root.JOURNAL.lstrip("/")
DRIVERS = host_root.DRIVERS.lstrip("/")
DEFAULT_LOCK_TIMEOUT = 30.0
CRASH_HOOK = "VGPUADM_TEST_CRASH_AFTER_STEP"  # tests only: os._exit right after step N (1-based) is applied
CRASH_DIGITS = re.compile(r"[1-9][0-9]{0,5}")
CRASH_ARMED = "run/vgpuadm/test-crash-hook"  # under the root: arms the hook on a real root (the kernel lane's guest)
WAVE_WORKERS = 4  # threads of a wave: libvirtd serves at most 5 calls of one client at once (max_client_requests)


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
    lock_timeout: float | None = None  # None: LOCK_POLICY's
    verify: bool = True
    workers: int = WAVE_WORKERS  # threads for a wave of steps in distinct lanes (see _waves); 1: one step at a time
    handlers: Mapping[type, Handler] | None = None  # None: HANDLERS (no libvirt steps)


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
    lane: Callable[[Any], str] | None = None


HandlerRow = tuple[Any, ...]  # (step class, apply_fn, undo_fn[, is_applied[, lane]])


def handlers(*tables: Iterable[HandlerRow]) -> dict[type, Handler]:
    """The step class → Handler table of these lists of rows (a later row for the same class wins)."""
    return {row[0]: Handler(*row[1:]) for table in tables for row in table}


def handler_for(step: Step, table: Mapping[type, Handler] | None = None) -> Handler:
    """The handler of `step` in `table` (default HANDLERS); a step kind without one is a bug, refused up front."""
    known = HANDLERS if table is None else table
    for cls in type(step).__mro__:
        if cls in known:
            return known[cls]
    raise UsageError(f"no handler registered for step kind {step.kind!r}", "this is a bug in vgpuadm; report it")


# --- lock ---------------------------------------------------------------------------------------------------------

_LOCKS: dict[tuple[int, str], FileLock] = {}  # per pid: a child of fork() shares its parent's descriptor
_LOCKS_GUARD = threading.Lock()
MAX_OWNER = 4096  # the owner file holds {"pid": N, "argv": [...]}; a bigger one is not ours


@dataclass
class LockPolicy:
    """How a busy host lock is waited for: `timeout` seconds (0: not at all), and `on_wait(text)` told at once,
    naming the holder, when the lock is busy. `argv` is recorded in the owner file for the waiters to show."""

    timeout: float = DEFAULT_LOCK_TIMEOUT
    on_wait: Callable[[str], None] | None = None
    argv: tuple[str, ...] = ()


LOCK_POLICY = LockPolicy()


def set_lock_policy(
    timeout: float | None = None, on_wait: Callable[[str], None] | None = None, argv: tuple[str, ...] = ()
) -> None:
    """Set how this process waits for the host lock (the CLI's --wait/--no-wait) and what it records as holder."""
    LOCK_POLICY.timeout = DEFAULT_LOCK_TIMEOUT if timeout is None else timeout
    LOCK_POLICY.on_wait = on_wait
    LOCK_POLICY.argv = tuple(argv)


@contextlib.contextmanager
def host_lock(root: str, timeout: float | None = None) -> Iterator[None]:
    """Hold the host-wide lock. Re-entrant within a process, so callers can plan and execute under one hold.
    The root must exist (nothing is created on a mistyped --root) and be writable (NeedsRootError, not a
    PermissionError on the lock). A busy lock is reported at once through LOCK_POLICY.on_wait ("waiting for pid
    N (vgpuadm apply …)"), then waited for up to `timeout` (default LOCK_POLICY.timeout) seconds."""
    path = os.path.join(root, LOCK_PATH)
    held = _LOCKS.get((os.getpid(), path))
    if held is not None and held.is_locked:  # a nested hold (plan and execute under one): it only counts
        held.acquire()
        try:
            yield
        finally:
            held.release()
        return
    check_exists(root)
    check_writable(root)
    wait = LOCK_POLICY.timeout if timeout is None else timeout
    private_dirs(os.path.dirname(path), root)
    _private_dir(root, os.path.dirname(path))
    _refuse_link(root, path)
    with _LOCKS_GUARD:
        key = (os.getpid(), path)
        lock = _LOCKS.get(key) or _LOCKS.setdefault(key, FileLock(path, mode=PRIVATE_FILE))
    owner = path + ".owner"
    _acquire(lock, root, owner, wait)
    try:
        if lock.lock_counter == 1:
            _refuse_link(root, path)
            os.chmod(path, PRIVATE_FILE)
            argv = list(LOCK_POLICY.argv) or ["vgpuadm", *sys.argv[1:]]
            _write_text(owner, json.dumps({"pid": os.getpid(), "argv": argv[:64]})[: MAX_OWNER - 1], root)
        yield
    finally:
        if lock.lock_counter == 1:
            _sync_deferred()
            with contextlib.suppress(OSError, VgpuadmError):  # a stale holder must not be named after us
                _write_text(owner, "", root)
        lock.release()


def _acquire(lock: FileLock, root: str, owner: str, wait: float) -> None:
    try:
        lock.acquire(timeout=0)
        return
    except LockTimeout:
        pass
    holder = lock_holder(root, owner)
    if not holder:  # the holder has the lock but has not written its name yet
        with contextlib.suppress(LockTimeout):
            lock.acquire(timeout=min(0.5, wait))
            return
        holder = lock_holder(root, owner)
    holder = holder or "another process"
    hint = f"retry when it has finished, or wait for it with --wait SECONDS; the lock is {'/' + LOCK_PATH}"
    if wait <= 0:
        raise ConflictError(f"another vgpuadm is changing this host: {holder}", hint)
    if LOCK_POLICY.on_wait is not None:
        LOCK_POLICY.on_wait(f"waiting for {holder} (up to {wait:g} s; --no-wait fails at once)")
    try:
        lock.acquire(timeout=wait)
    except LockTimeout:
        raise ConflictError(
            f"another vgpuadm is changing this host: {lock_holder(root, owner) or holder}, still after {wait:g} s",
            hint,
        ) from None


def lock_holder(root: str, owner: str) -> str:
    """`pid N (vgpuadm apply -f plan.yaml)` from the owner file, "" when it names no one. The file is untrusted:
    read without following a symlink, bounded, and only a positive pid and a list of strings are used (shown
    quoted, printable, shortened)."""
    try:
        fd = os.open(owner, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        data = os.read(fd, MAX_OWNER + 1)
    except OSError:
        return ""
    finally:
        os.close(fd)
    text = data.decode("utf-8", "replace").strip()
    if text.isdigit():  # an owner file of an older vgpuadm: the pid alone
        return f"pid {int(text)}" if 0 < int(text) < 2**22 else ""
    try:
        doc = json.loads(text) if len(data) <= MAX_OWNER else None
    except ValueError:
        return ""
    if not isinstance(doc, dict):
        return ""
    pid, argv = doc.get("pid"), doc.get("argv")
    if not isinstance(pid, int) or isinstance(pid, bool) or not 0 < pid < 2**22:
        return ""
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        return f"pid {pid}"
    import shlex

    command = " ".join(shlex.quote("".join(c if c.isprintable() else "?" for c in a)) for a in argv)
    return f"pid {pid} ({command if len(command) <= 100 else command[:99] + '…'})"


def _lock_nested(root: str) -> bool:
    """Whether this process holds the host lock of `root` more than once (a batch: plans run under an outer hold)."""
    lock = _LOCKS.get((os.getpid(), os.path.join(root, LOCK_PATH)))
    return lock is not None and lock.lock_counter > 1


PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600


def _host(root: str, path: str) -> str:
    """The host path (/run/...) of a path under the root, for messages."""
    rel = os.path.relpath(path, root)
    return "/" + rel if not rel.startswith("..") else path


PLANTED = "someone planted it: remove it (and check who could write that directory)"


def _unsafe(root: str, path: str) -> UnsafeError:
    return UnsafeError(f"refusing to follow the symlink at {_host(root, path)}", PLANTED)


def _private_dir(root: str, directory: str) -> None:
    """`directory` is this user's and no one else's: another user who could open the lock file could hold the flock
    (it works on a read-only descriptor) and stall every change. Made 0700 when it is ours; refused otherwise."""
    st = os.lstat(directory)
    shown = "/" + os.path.relpath(directory, root)
    if not stat.S_ISDIR(st.st_mode):  # a FIFO or file planted where the lock's directory goes
        raise UnsafeError(f"refusing {shown}: it is not a directory",
                          f"someone planted it: remove it (rm {shown}); vgpuadm makes it again, private")  # fmt: skip
    if st.st_uid != os.geteuid():
        raise UnsafeError(f"{shown} is owned by uid {st.st_uid}, not by this user",
                          f"remove it (rm -r {shown}); vgpuadm makes it again, private")  # fmt: skip
    if st.st_mode & 0o077:
        os.chmod(directory, PRIVATE_DIR)


def _refuse_link(root: str, path: str) -> None:
    if os.path.islink(path):
        raise _unsafe(root, path)


def refuse_linked_dirs(root: str, directory: str) -> None:
    """On a root other than /, no existing component of `directory` below the root is a symlink (UnsafeError): state
    reached through a planted link would be read or written outside the root. On / they belong to root."""
    if root == "/":
        return
    rel = os.path.relpath(directory, root)
    if rel == "." or rel.startswith(".."):
        return
    current = root
    for part in rel.split(os.sep):
        current = os.path.join(current, part)
        if os.path.islink(current):
            raise _unsafe(root, current)
        if not os.path.exists(current):
            return


def private_dirs(directory: str, root: str | None = None) -> None:
    """Create `directory` and its missing parents; the ones created here are 0700 whatever the umask. Existing
    directories (a real host's /run) are left as they are. With `root`, a symlinked component is refused first."""
    if root is not None:
        refuse_linked_dirs(root, directory)
    missing: list[str] = []
    d = directory
    while not os.path.isdir(d):
        missing.append(d)
        parent = os.path.dirname(d)
        if parent == d:
            break
        d = parent
    for d in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(d, PRIVATE_DIR)
            os.chmod(d, PRIVATE_DIR)


def open_private(root: str, path: str, flags: int) -> int:
    """os.open with O_NOFOLLOW|O_NONBLOCK and mode 0600 (fchmod'ed: the umask does not count); a symlink →
    UnsafeError; anything but a regular file there (a planted FIFO would hang the open) → UnsafeError, checked
    before the open and again on the descriptor."""
    with contextlib.suppress(FileNotFoundError):
        kind = stat.S_IFMT(os.lstat(path).st_mode)
        if kind == stat.S_IFLNK:
            raise _unsafe(root, path)
        if kind != stat.S_IFREG:
            raise _not_regular(root, path, kind)
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, PRIVATE_FILE)
    except OSError as exc:
        if exc.errno == errno_mod.ELOOP or (exc.errno == errno_mod.EEXIST and os.path.islink(path)):
            raise _unsafe(root, path) from None
        if exc.errno == errno_mod.ENXIO:  # O_WRONLY|O_NONBLOCK on a FIFO swapped in after the check
            raise _not_regular(root, path, stat.S_IFIFO) from None
        raise
    try:
        kind = stat.S_IFMT(os.fstat(fd).st_mode)
        if kind != stat.S_IFREG:
            raise _not_regular(root, path, kind)
        os.fchmod(fd, PRIVATE_FILE)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _not_regular(root: str, path: str, kind: int) -> UnsafeError:
    what = {stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a directory"}.get(kind, "a device")
    return UnsafeError(f"refusing {_host(root, path)}: it is {what}, not a regular file", PLANTED)


def _write_text(path: str, text: str, root: str) -> None:
    fd = open_private(root, path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    with os.fdopen(fd, "w") as f:
        f.write(text + "\n")


def write_state(root: str, path: str, doc: Any, *, sync: bool = True) -> None:
    """Write a JSON state file under `root` with the one atomic writer (host/root.write_beneath): 0600, a
    directory created for it 0700, whatever the umask; a crash leaves the old or the new file. sync=False skips
    every fsync: only for a file whose loss in a power cut loses nothing (see _Journal). Under a root other than
    `/` no link at any directory component is followed (UnsafeError); on `/` those directories are root's own, as
    for the readers (refuse_linked_dirs), and no link can lead out of `/`."""
    data = (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode("utf-8")
    try:
        write_beneath(root, os.path.relpath(path, root), data, mode=PRIVATE_FILE, dir_mode=PRIVATE_DIR,
                      sync=sync, confine=root != "/")  # fmt: skip
    except BeneathError as exc:
        what = (
            f"to follow the symlink at {exc.shown}" if exc.errno == errno_mod.ELOOP else f"{exc.shown}: it {exc.reason}"
        )
        raise UnsafeError(f"refusing {what}", PLANTED) from None
    if sync:
        _DEFERRED_DIR_SYNCS.discard(os.path.dirname(path))  # that fsync made an earlier deferred removal durable too


_DEFERRED_DIR_SYNCS: set[str] = set()  # directories whose journal removal is not durable yet (see _Journal.remove)


def _remove(path: str, *, defer_sync: bool = False) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
        if defer_sync:
            _DEFERRED_DIR_SYNCS.add(os.path.dirname(path))
        else:
            fsync_dir(os.path.dirname(path))


def _sync_deferred() -> None:
    while _DEFERRED_DIR_SYNCS:
        directory = _DEFERRED_DIR_SYNCS.pop()
        with contextlib.suppress(OSError):  # gone (a test root removed) or an I/O error the next write will report
            fsync_dir(directory)


# --- journal ------------------------------------------------------------------------------------------------------


def journal_path(root: str) -> str:
    return os.path.join(root, JOURNAL)


def read_journal(root: str) -> dict[str, Any] | None:
    """The journal of an interrupted change, or None: the plan document with `current` and `state` taken from the
    last complete progress line after it."""
    path = journal_path(root)
    refuse_linked_dirs(root, os.path.dirname(path))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno_mod.ELOOP:
            raise _unsafe(root, path) from None
        raise HostIOError(
            f"journal /{JOURNAL} is unreadable: {exc.strerror}", "inspect and remove it by hand", path="/" + JOURNAL
        ) from None
    try:
        with os.fdopen(fd) as f:
            check_owner(os.fstat(f.fileno()))  # untrusted until checked: a planted journal is refused, never run
            text = f.read()
        doc, end = json.JSONDecoder().raw_decode(text)
    except (OSError, ValueError) as exc:
        raise HostIOError(
            f"journal /{JOURNAL} is unreadable: {exc}", "inspect and remove it by hand", path="/" + JOURNAL
        ) from None
    check_document(doc)
    for line in text[end:].splitlines():
        # A crash mid-append leaves a torn last line: ignore it, the previous index is a safe answer (see recover).
        with contextlib.suppress(ValueError):
            record = json.loads(line) if line.strip() else None
            if isinstance(record, dict) and isinstance(record.get("current"), int):
                state = check_progress_state(record.get("state"))
                doc.update(current=record["current"], done=record["current"], state=state)
                if isinstance(record.get("undo"), list):
                    doc["undo"] = [i for i in record["undo"] if isinstance(i, int)]
    return doc


def pending_summary(doc: dict[str, Any]) -> str:
    """A pending journal (read_journal) in words: its plan's summary and where it stopped, numbered from 1 as every
    step line is ("step 2/3 …"). The journal's `current` is the 0-based index of the step in flight, which may or
    may not have run: "stopped at step 2 of 3: …; steps 1–2 may have run"."""
    plan = doc.get("plan")
    summary = str(plan.get("summary") or "a change") if isinstance(plan, dict) else "a change"
    try:
        steps = Plan.from_dict(plan if isinstance(plan, dict) else {}).steps
    except (VgpuadmError, KeyError, TypeError, ValueError):
        steps = ()
    current = doc.get("current")
    if not isinstance(current, int) or not 0 <= current < len(steps):
        return summary
    where = f"step {current + 1} of {len(steps)}: {steps[current].describe()}"
    if doc.get("state") == "rolling-back":
        return f"{summary} (failed at {where}; its rollback was interrupted)"
    ran = "it may have run" if current == 0 else f"steps 1–{current + 1} may have run"
    return f"{summary} (stopped at {where}; {ran})"


class _Journal:
    """The journal of one plan run. `begin` makes the plan durable before anything changes; `step` appends the
    index of the step in flight (= how many are done; it may or may not have happened) without fsync: a crash of
    the process keeps it (the page cache survives), a power loss may lose it, which is harmless because recovery
    undoes the whole plan (undoing a step that never ran is a no-op) and `finish` skips steps already applied.
    The switch to rolling back is fsynced, so that `recover --finish` never completes a plan that failed.

    A plan of runtime kernel steps only (no Step.durable: mdevs, VFs, binds — all gone after a power loss) is
    journaled without any fsync and its removal's directory fsync is left to the host lock's release: a process
    crash keeps the page cache, and a power loss takes the changes the journal describes with it (a journal that
    survived is rolled back at boot by `restore`, whose undo steps find nothing to undo). `restore` journals each
    phase as one such plan (`execute_units`): one journal per phase, where it was one per device."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.path = journal_path(root)
        self._file: Any = None
        self.durable = True

    def begin(self, plan: Plan) -> None:
        self.durable = plan.durable
        write_state(
            self.root,
            self.path,
            {"version": 1, "pid": os.getpid(), "state": "applying", "current": 0, "done": 0, "plan": plan.to_dict()},
            sync=self.durable,
        )

    def step(
        self, current: int, state: str = "applying", *, durable: bool = False, undo: list[int] | None = None
    ) -> None:
        """Append a progress line; `undo` (when rolling back) lists the indices of the steps to undo."""
        if self._file is None:
            # closed in close(), kept open across steps
            self._file = os.fdopen(open_private(self.root, self.path, os.O_WRONLY | os.O_APPEND), "a")
        record: dict[str, Any] = {"current": current, "state": state}
        if undo is not None:
            record["undo"] = undo
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        if durable:
            os.fsync(self._file.fileno())

    def close(self) -> None:
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None

    def remove(self) -> None:
        """Delete the journal, durably: a journal that reappeared after a power loss would roll back a change that
        succeeded. In a batch (the host lock held by an outer caller, e.g. `create_many`) the directory fsync is
        left to the next plan's `begin` or to the outer lock's release, whichever comes first; until the batch
        returns, its user has seen no success that a rollback could contradict."""
        self.close()
        _remove(self.path, defer_sync=_lock_nested(self.root) or not self.durable)


def pending_error() -> ConflictError:
    return ConflictError(
        f"an interrupted change is pending in /{JOURNAL}",
        "run `vgpuadm recover` to roll it back (or `vgpuadm recover --finish` to complete it)",
    )


# --- execute ------------------------------------------------------------------------------------------------------


def execute(plan: Plan, ctx: ExecContext, *, dry_run: bool = False, progress: Progress | None = None) -> ExecResult:
    """Apply `plan` step by step under the host lock. On the first failure, undo what was done in reverse order
    and raise the error naming the failed step. dry_run returns the step descriptions and changes nothing."""
    for step in plan.steps:
        handler_for(step, ctx.handlers)  # refuse unknown kinds before touching anything
    if dry_run or plan.empty:
        return ExecResult(plan, tuple(plan.describe()), dry_run=dry_run)
    with host_lock(ctx.root, ctx.lock_timeout):
        if read_journal(ctx.root) is not None:
            raise pending_error()
        journal = _Journal(ctx.root)
        try:
            _run_unit(plan, 0, plan, ctx, journal, progress)
            journal.remove()
        finally:
            journal.close()
    return ExecResult(plan, tuple(plan.describe()))


def execute_units(units: Sequence[Plan], ctx: ExecContext, summary: str) -> list[VgpuadmError | None]:
    """Apply independent plans (`restore`'s units: one per device) under one host lock and ONE journal: the
    journal holds every unit's steps, written once (fsynced once when durable), with one progress line per step.
    A unit that fails is rolled back alone, as `execute` would; the units before it are then done, so the journal
    is removed and the units after it run under a new one. A crash at any point leaves a journal whose recovery
    undoes the steps of the units not yet reported (undo is tolerant of steps that never ran). Returns, per unit,
    None (applied) or the error `execute` would have raised for it alone; after a rollback that was incomplete,
    the journal stays and every later unit gets the pending-journal error, as `execute` gives it."""
    for unit in units:
        for step in unit.steps:
            handler_for(step, ctx.handlers)
    out: list[VgpuadmError | None] = []
    rest = [u for u in units if not u.empty]
    with host_lock(ctx.root, ctx.lock_timeout):
        if rest and read_journal(ctx.root) is not None:
            out, rest = [pending_error() for _ in rest], []
        while rest:
            batch = Plan(tuple(s for u in rest for s in u.steps), summary)
            journal = _Journal(ctx.root)
            failed = None
            try:
                offset = 0
                for k, unit in enumerate(rest):
                    try:
                        _run_unit(unit, offset, batch, ctx, journal, None)
                    except Interrupted:
                        raise  # ^C stops the whole command, not one unit
                    except VgpuadmError as exc:
                        failed = k
                        out.append(exc)
                        break
                    out.append(None)
                    offset += len(unit.steps)
                if failed is None:
                    journal.remove()  # (a unit's clean rollback removed it already)
            finally:
                journal.close()
            if failed is None:
                break
            rest = rest[failed + 1 :]
            if read_journal(ctx.root) is not None:  # an incomplete rollback: `recover` must run first
                out += [pending_error() for _ in rest]
                break
    results = iter(out)
    return [None if u.empty else next(results) for u in units]


def _run_unit(unit: Plan, offset: int, journaled: Plan, ctx: ExecContext, journal: _Journal,
              progress: Progress | None) -> None:  # fmt: skip
    """Apply `unit`, whose steps sit at `offset` in the `journaled` plan (begun already): on its first failure its
    own applied steps are undone and the error (naming the step within `unit`) raised.

    The steps run in waves (`_waves`): every step of a wave is journaled as in flight before the wave starts (a
    crash undoes them all, as it undoes everything up to the step in flight), and their results are taken in step
    order — the progress lines, the first failure and its message are those of a run one step at a time; the steps
    of the wave after a failed one that had started and succeeded are undone with the earlier ones."""
    done: list[tuple[int, Step]] = []  # (index in the journaled plan, step) of the steps to undo on failure
    crash_after = _crash_after(ctx)
    for wave in _waves(unit, offset, ctx, crash_after):
        journaled_ok: list[int] = []
        lost: OSError | None = None  # the journal line of the next step could not be written
        try:
            for n in wave:
                if offset + n == 0:
                    journal.begin(journaled)
                else:
                    journal.step(offset + n)
                journaled_ok.append(n)
        except OSError as journal_error:  # the steps journaled before it still run, as they would one at a time
            lost = journal_error
        attempts, stopped = _run_wave(unit, journaled_ok, ctx, progress)
        failed: list[tuple[int, BaseException]] = []
        for n, attempt in zip(journaled_ok, attempts, strict=True):
            if attempt is None:
                continue
            if attempt.error is not None:
                failed.append((n, attempt.error))
            elif attempt.ours:
                done.append((offset + n, unit.steps[n]))
        if failed:
            # A step that raised a bug or ^C (anything but a refusal, whose effect _attempt found absent) is undone
            # only when its effect appeared during this run.
            done += [(offset + n, unit.steps[n]) for n, a in zip(journaled_ok, attempts, strict=True)
                     if a is not None and a.error is not None and not isinstance(a.error, (VgpuadmError, OSError))
                     and not a.before and _already_applied(unit.steps[n], ctx)]  # fmt: skip
            done.sort(key=lambda d: d[0])
        if stopped is None and failed and isinstance(failed[0][1], (VgpuadmError, OSError)):
            n, error = failed[0]
            _fail(unit, n, ctx, journal, done, unit.steps[n], offset + n, _as_host_error(error))
        if stopped is not None or failed:  # a bug or ^C: leave the host as it was, then let it surface
            raised = stopped if stopped is not None else failed[0][1]
            undone = [s for _, s in done]
            problems = rollback(undone, ctx)
            if not problems:
                journal.remove()
            if isinstance(raised, KeyboardInterrupt):
                raise interrupted(undone, problems) from None
            raise raised
        if lost is not None:
            n = wave[len(journaled_ok)]
            _fail(unit, n, ctx, journal, done, unit.steps[n], offset + n, _as_host_error(lost))
        if crash_after == offset + wave[-1] + 1:
            journal.close()
            os._exit(99)


def _as_host_error(exc: BaseException) -> VgpuadmError:
    """A step's error as _fail reports it: an OSError (the journal, a state file under <root>/var/lib/vgpuadm) as a
    HostIOError naming the file."""
    if isinstance(exc, OSError):
        return HostIOError(f"{exc.strerror or exc}: {exc.filename}", errno=exc.errno)
    assert isinstance(exc, VgpuadmError)
    return exc


def _waves(unit: Plan, offset: int, ctx: ExecContext, crash_after: int) -> list[list[int]]:
    """`unit`'s step indices in the runs that may run at once: consecutive steps whose handlers name a lane, no two
    in the same lane (a `apply -f` plan's domain definitions); every other step alone. With ctx.workers ≤ 1 every
    step is alone. A wave ends at the test crash hook's step: the steps after it never run."""
    waves: list[list[int]] = []
    lanes: set[str] = set()  # the lanes of the last wave, while it may grow
    for n, step in enumerate(unit.steps):
        lane_of = handler_for(step, ctx.handlers).lane if ctx.workers > 1 else None
        lane = lane_of(step) if lane_of is not None else None
        if lane is not None and lanes and lane not in lanes:
            waves[-1].append(n)
            lanes.add(lane)
        else:
            waves.append([n])
            lanes = {lane} if lane is not None else set()
        if crash_after == offset + n + 1:
            lanes = set()
    return waves


@dataclass
class _Attempt:
    """What running one step came to: `before`, whether its effect was there before it ran (True until checked:
    a step stopped before it started is not undone); `ours`, whether this run caused the effect; `error`."""

    before: bool = True
    ours: bool = True
    error: BaseException | None = None


def _attempt(step: Step, ctx: ExecContext) -> _Attempt:
    """Run one step and verify it; its error is returned, not raised (a wave's threads hand it to the caller).
    A write that is refused while its effect is there exactly (EEXIST for an identical mdev, EBUSY for the type
    already on the VF) counts as done, and is undone later only when this run caused that effect, never when it
    was there before (another VM's)."""
    out = _Attempt()
    try:
        out.before = _already_applied(step, ctx)
        try:
            _apply_one(step, ctx)
        except (VgpuadmError, OSError):
            if not _already_applied(step, ctx):
                raise
            out.ours = not out.before
    except BaseException as exc:  # handed to _run_unit, which rolls back and raises it
        out.error = exc
    return out


def _run_wave(
    unit: Plan, wave: list[int], ctx: ExecContext, progress: Progress | None
) -> tuple[list[_Attempt | None], BaseException | None]:
    """Run the steps `wave` (indices into unit.steps): one alone in this thread, more on up to ctx.workers threads.
    Each step's progress line is given before its result is awaited, in step order, and none after the first
    failure; after a failure no further step of the wave starts. Returns each step's attempt (None: it never
    started) and what stopped this thread while it waited (^C), if anything."""
    total = len(unit.steps)
    if not wave:  # the journal could not record even its first step: nothing runs
        return [], None
    if len(wave) == 1:
        step = unit.steps[wave[0]]
        try:
            if progress:
                progress(wave[0] + 1, total, step.describe())
        except BaseException as exc:
            return [None], exc
        return [_attempt(step, ctx)], None
    stopped = threading.Event()  # set at a failure (in the worker that saw it) or an interrupt: no step starts after

    def run(step: Step) -> _Attempt | None:
        if stopped.is_set():
            return None  # never started: nothing to undo
        attempt = _attempt(step, ctx)
        if attempt.error is not None:
            stopped.set()
        return attempt

    pool = ThreadPoolExecutor(min(ctx.workers, len(wave)))  # libvirt's calls release the GIL
    futures = [pool.submit(run, unit.steps[n]) for n in wave]
    failed, interrupt = False, None
    try:
        for k, n in enumerate(wave):
            if progress and not failed:
                progress(n + 1, total, unit.steps[n].describe())
            attempt = futures[k].result()
            failed = failed or (attempt is not None and attempt.error is not None)
    except BaseException as exc:
        stopped.set()
        interrupt = exc
    pool.shutdown(wait=True, cancel_futures=True)  # the running steps finish (a libvirt call cannot be abandoned)
    return [None if f.cancelled() else f.result() for f in futures], interrupt


def _crash_after(ctx: ExecContext) -> int:
    """The test crash hook's step number: honoured only on a simulated root, or on a real one whose root-only
    /run/vgpuadm holds CRASH_ARMED (the kernel lane's throwaway guest), so a production run never dies on purpose
    whatever its environment says; and only when it is a plain step number."""
    text = os.environ.get(CRASH_HOOK, "")
    if not text or not CRASH_DIGITS.fullmatch(text):
        return 0
    armed = ctx.sysfs.simulated or os.path.isfile(os.path.join(ctx.root, CRASH_ARMED))
    return int(text) if armed else 0


def _apply_one(step: Step, ctx: ExecContext) -> None:
    handler = handler_for(step, ctx.handlers)
    handler.apply(step, ctx)
    if ctx.verify and handler.is_applied is not None and not handler.is_applied(step, ctx):
        raise HostIOError(
            f"the kernel accepted the write but nothing changed ({step.describe()})",
            "check `dmesg` for driver messages",
        )


def _already_applied(step: Step, ctx: ExecContext) -> bool:
    """Whether the step's effect is present now (False for kinds without an is_applied check, or when the check
    itself cannot read the host)."""
    check = handler_for(step, ctx.handlers).is_applied
    if check is None:
        return False
    try:
        return bool(check(step, ctx))
    except (VgpuadmError, OSError):
        return False


def _fail(
    plan: Plan,
    index: int,
    ctx: ExecContext,
    journal: _Journal,
    done: list[tuple[int, Step]],
    step: Step,
    journal_index: int,
    exc: VgpuadmError,
) -> None:
    with contextlib.suppress(OSError):  # a full disk must not stop the rollback itself
        journal.step(journal_index, "rolling-back", durable=True, undo=[i for i, _ in done])
    # Only the steps before the failed one are undone: a refused write did not happen (its effect is absent, see
    # execute), and undoing it would remove what the refusal protected (another VM's mdev with that UUID, the
    # vGPU on a busy VF).
    problems = rollback([s for _, s in done], ctx)
    err = copy.copy(exc)
    err.message = f"step {index + 1}/{len(plan.steps)} {step.describe()} failed: {exc.message}"
    err.args = (err.message,)
    cause = exc.hint or errno_hint(step, getattr(exc, "errno", None))
    if problems:
        err.hint = f"{cause + '; ' if cause else ''}rollback incomplete ({'; '.join(problems)}): run `vgpuadm recover`"
    else:
        journal.remove()
        err.hint = f"{cause + '; ' if cause else ''}nothing was changed (the earlier steps were rolled back)"
    raise err from None


def _undo_list(doc: dict[str, Any], plan: Plan, current: int) -> list[Step]:
    """The steps a recovery reports undone: those a failed run recorded as done when it started rolling back, else
    every step up to the journal's current one (the rollback itself undoes the whole plan: undo is tolerant)."""
    indices = doc.get("undo") if doc.get("state") == "rolling-back" else None
    if isinstance(indices, list):
        return [plan.steps[i] for i in indices if isinstance(i, int) and 0 <= i < len(plan.steps)]
    return list(plan.steps[: current + 1])


def interrupted(undone: list[Step], problems: list[str]) -> Interrupted:
    """The error a Ctrl-C in the middle of a plan ends with: what was rolled back, in the order it was undone."""
    what = f" ({'; '.join(s.describe() for s in reversed(undone))})" if undone else ""
    n = len(undone)
    message = f"interrupted: rolled back {n} step{'' if n == 1 else 's'}{what}"
    if problems:
        return Interrupted(message, f"rollback incomplete ({'; '.join(problems)}): run `vgpuadm recover`")
    return Interrupted(message, "nothing was changed; run the command again to make the change")


def rollback(done: list[Step], ctx: ExecContext) -> list[str]:
    """Undo steps in reverse order; returns the problems (empty when all undid cleanly)."""
    problems = []
    for step in reversed(done):
        try:
            handler_for(step, ctx.handlers).undo(step, ctx)
        except VgpuadmError as exc:
            problems.append(f"undo of {step.describe()}: {exc.message}")
        except OSError as exc:
            problems.append(f"undo of {step.describe()}: {exc.strerror or exc}: {exc.filename}")
    return problems


def recover(ctx: ExecContext, *, finish: bool = False, dry_run: bool = False) -> list[str]:
    """Deal with a journal left by a crashed run; returns what was done ([] when there was nothing). `dry_run`:
    what would be done (`would roll back: …`, `would apply: …`); nothing changes and no lock is taken.

    Rolling back is the default: the interrupted plan was computed from a snapshot that is now stale and the
    command that started it never reported success, so the host goes back to the state its user last saw.
    Every undo checks the current state first, so the whole plan is undone in reverse: steps that never ran (or
    whose journal update the crash lost) are no-ops. `finish=True` instead completes the plan from the journal's
    step on, skipping each step whose effect is already present."""
    if dry_run:
        doc = read_journal(ctx.root)
        if doc is None:
            return []
        plan = Plan.from_dict(doc.get("plan", {}))
        current = min(int(doc.get("current", 0)), len(plan.steps) - 1)
        if finish and doc.get("state") == "applying":
            todo = [s for s in plan.steps[current:] if not _already_applied(s, ctx)]
            return [f"would apply: {s.describe()}" for s in todo]
        return [f"would roll back: {s.describe()}" for s in reversed(_undo_list(doc, plan, current))]
    with host_lock(ctx.root, ctx.lock_timeout):
        doc = read_journal(ctx.root)
        if doc is None:
            return []
        plan = Plan.from_dict(doc.get("plan", {}))
        current = min(int(doc.get("current", 0)), len(plan.steps) - 1)
        out: list[str] = []
        journal = _Journal(ctx.root)
        if finish and doc.get("state") == "applying":
            try:
                for i in range(current, len(plan.steps)):
                    step = plan.steps[i]
                    h = handler_for(step, ctx.handlers)
                    if h.is_applied is not None and h.is_applied(step, ctx):
                        continue
                    journal.step(i)
                    h.apply(step, ctx)
                    out.append(f"applied: {step.describe()}")
            finally:
                journal.close()
        else:
            # A run that failed and started rolling back recorded which steps it had done: the failed step (and
            # a step whose effect was there before) is never undone. A crash while applying undoes the whole plan.
            undo = _undo_list(doc, plan, current)
            partial = isinstance(doc.get("undo"), list) and doc.get("state") == "rolling-back"
            problems = rollback(undo if partial else list(plan.steps), ctx)
            if problems:
                raise HostIOError(
                    f"rollback of the interrupted change incomplete: {'; '.join(problems)}",
                    f"fix the cause and run `vgpuadm recover` again; the journal is /{JOURNAL}",
                )
            out = [f"rolled back: {s.describe()}" for s in reversed(undo)]
        journal.remove()
        return out


# -- the kernel steps' handlers -------------------------------------------------------------------------------------
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
            raise _unsafe(root, path) from None
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


_KERNEL_HANDLERS: list[HandlerRow] = [
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


# The handler modules import ExecContext from here, so they come last.
from vgpuadm.executor import files, mig, policies  # noqa: E402

HANDLERS: dict[type, Handler] = handlers(_KERNEL_HANDLERS, files.HANDLERS, mig.HANDLERS, policies.HANDLERS)

__all__ = [
    "CRASH_ARMED",
    "CRASH_HOOK",
    "DEFAULT_LOCK_TIMEOUT",
    "HANDLERS",
    "JOURNAL",
    "ExecContext",
    "ExecResult",
    "Handler",
    "HandlerRow",
    "errno_hint",
    "execute",
    "execute_units",
    "handler_for",
    "handlers",
    "host_lock",
    "load_drivers",
    "lock_holder",
    "pending_error",
    "read_journal",
    "recover",
    "rollback",
    "set_lock_policy",
]  # fmt: skip
