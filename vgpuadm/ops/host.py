"""The host verbs that involve no VM (`mdev`, `vf`, `sriov`, `vfio`, `recover`) and the building blocks tests and
benchmarks drive directly: discover, apply a Plan, recover. Each changing verb runs in one Session."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from vgpuadm.executor import DEFAULT_LOCK_TIMEOUT, ExecContext, ExecResult, execute, load_drivers, read_journal
from vgpuadm.executor import host_lock as _host_lock
from vgpuadm.executor import recover as _recover
from vgpuadm.host.discover import snapshot
from vgpuadm.host.root import SRIOV_MANAGE, HostRoot
from vgpuadm.host.sysfs import Sysfs
from vgpuadm.model import HostSnapshot
from vgpuadm.ops.session import LIBVIRT_STEP_KINDS, Session
from vgpuadm.ops.session import open_sysfs as _open_sysfs
from vgpuadm.plan import devices
from vgpuadm.steps import Plan
from vgpuadm.virt.conn import VirtConn, choose_uri

Progress = Callable[[int, int, str], None]
Planner = Callable[[HostSnapshot], tuple[Plan, list[str]]]


def open_sysfs(root: str | None = None) -> Sysfs:
    return _open_sysfs(HostRoot(root))


def discover(root: str | None = None, *, types: bool = True) -> HostSnapshot:
    """Read the host at `root`; `types=False` skips the mdev type directories (for commands that show none)."""
    return snapshot(open_sysfs(root), types=types)


def host_lock(root: str | None = None, timeout: float | None = None) -> AbstractContextManager[None]:
    """Hold the host-wide lock (re-entrant)."""
    return _host_lock(HostRoot(root).path, DEFAULT_LOCK_TIMEOUT if timeout is None else timeout)


def original_drivers(root: str | None = None) -> dict[str, str]:
    """Drivers remembered by `vfio bind` under <root>/var/lib/vgpuadm/drivers.json."""
    return load_drivers(HostRoot(root).path)


def plan_sriov(snap: HostSnapshot, pf: str, enable: bool, num: int | None = None) -> Plan:
    """Enable (`num` VFs, default all) or disable a PF's VFs (NVIDIA's sriov-manage when the root has it)."""
    present = HostRoot(snap.root).has_executable(SRIOV_MANAGE)
    return devices.plan_sriov(snap, pf, enable, num, present=present)


def plan_vfio_restore(snap: HostSnapshot, gpu: str, original: dict[str, str] | None = None) -> Plan:
    """Give the group of `gpu` back to its original drivers (the remembered ones when `original` is None)."""
    return devices.plan_vfio_restore(snap, gpu, load_drivers(snap.root) if original is None else original)


def apply(
    plan: Plan,
    root: str | None = None,
    *,
    dry_run: bool = False,
    virt: Any = None,
    progress: Progress | None = None,
) -> ExecResult:
    """Execute `plan` on the host at `root` (lock, journal, rollback on failure). dry_run changes nothing."""
    sysfs = open_sysfs(root)
    return execute(plan, ExecContext(sysfs=sysfs, root=sysfs.root, virt=virt), dry_run=dry_run, progress=progress)


def run(root: str | None, planner: Planner, *, dry_run: bool = False) -> tuple[Plan, list[str], ExecResult]:
    """A host verb: discover → plan → apply under the lock (dry_run: plan only, no lock)."""
    if dry_run:
        with Session.read(root) as s:
            plan, ids = planner(s.snap)
            return plan, ids, s.execute(plan, dry_run=True)
    with Session.open(root, verb="the command") as s:
        plan, ids = planner(s.snap)
        return plan, ids, s.execute(plan)


def recover(
    root: str | None = None, *, finish: bool = False, virt: Any = None, connect: str | None = None
) -> list[str]:
    """Roll back (default) or finish a change a crashed run left in the journal; [] when there was none. When the
    journal holds libvirt steps and no `virt` is given, a connection is opened (`connect`, else this root's)."""
    sysfs = open_sysfs(root)
    ctx = ExecContext(sysfs=sysfs, root=sysfs.root, virt=virt)
    doc = read_journal(ctx.root) or {}
    kinds = {s.get("kind") for s in doc.get("plan", {}).get("steps", [])}
    if virt is None and kinds & LIBVIRT_STEP_KINDS:
        with VirtConn(choose_uri(connect, ctx.root, sysfs.simulated)) as conn:
            ctx.virt = conn
            return _recover(ctx, finish=finish)
    return _recover(ctx, finish=finish)
