"""The host verbs that involve no VM (`mdev`, `vf`, `sriov`, `vfio`, `recover`) and the building blocks tests and
benchmarks drive directly: discover, apply a Plan, recover. Each changing verb runs in one Session."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

from vgpuadm.errors import ConflictError, NotFoundError
from vgpuadm.executor import ExecContext, ExecResult, execute, load_drivers, read_journal
from vgpuadm.executor import host_lock as _host_lock
from vgpuadm.executor import recover as _recover
from vgpuadm.host.discover import snapshot
from vgpuadm.host.root import SRIOV_MANAGE, HostRoot, check_writable
from vgpuadm.host.sysfs import Sysfs, check_root
from vgpuadm.model import HostSnapshot
from vgpuadm.ops.session import LIBVIRT_STEP_KINDS, WITH_LIBVIRT, Session
from vgpuadm.ops.session import open_sysfs as _open_sysfs
from vgpuadm.plan import devices
from vgpuadm.plan.guest import plan_destroy
from vgpuadm.steps import DefineDomain, Plan, Step
from vgpuadm.virt.conn import VirtConn, choose_uri

Progress = Callable[[int, int, str], None]
Planner = Callable[[HostSnapshot], tuple[Plan, list[str]]]
Frees = Callable[[HostSnapshot], Sequence[str]]  # the devices (mdev UUIDs, PCI addresses) a verb takes away


def open_sysfs(root: str | None = None) -> Sysfs:
    return _open_sysfs(HostRoot(root))


def discover(root: str | None = None, *, types: bool = True) -> HostSnapshot:
    """Read the host at `root`; `types=False` skips the mdev type directories (for commands that show none)."""
    return snapshot(open_sysfs(root), types=types)


def host_lock(root: str | None = None, timeout: float | None = None) -> AbstractContextManager[None]:
    """Hold the host-wide lock (re-entrant)."""
    return _host_lock(HostRoot(root).path, timeout)


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
    return execute(
        plan,
        ExecContext(sysfs=sysfs, root=sysfs.root, virt=virt, handlers=WITH_LIBVIRT),
        dry_run=dry_run,
        progress=progress,
    )


def run(
    root: str | None,
    planner: Planner,
    *,
    dry_run: bool = False,
    frees: Frees | None = None,
    force: bool = False,
    connect: str | None = None,
) -> tuple[Plan, list[str], ExecResult]:
    """A host verb: discover → plan → apply under the lock (dry_run: plan only, no lock).

    `frees` (the verbs that take a device away: `mdev remove`, `vf clear`, `vfio unbind`) names the devices the
    plan frees; they are looked up in the Session's one domain scan (libvirt at `connect`, else this root's), and a
    device a domain references is refused with a ConflictError naming the domain. With `force` the device goes
    anyway and leaves the domain's record in the same plan: the hostdev is detached and the vgpuadm metadata
    rewritten (plan/guest.py's plan_destroy for that domain). Without `frees` libvirt is never opened."""
    if dry_run:
        with Session.read(root, connect) as s:
            plan, ids = _plan(s, planner, frees, force)
            return plan, ids, s.execute(plan, dry_run=True)
    with Session.open(root, connect) as s:
        plan, ids = _plan(s, planner, frees, force)
        return plan, ids, s.execute(plan)


def _plan(s: Session, planner: Planner, frees: Frees | None, force: bool) -> tuple[Plan, list[str]]:
    plan, ids = planner(s.snap)
    if frees is None or plan.empty or s.holds_no_domains():
        return plan, ids
    domains = s.domains()
    owners: dict[str, str] = {}  # domain → the first device of it this verb frees
    for dev in frees(s.snap):
        name = domains.owner_of(dev)
        if name is None:
            continue
        if not force:
            raise ConflictError(
                f"{dev} is given to domain {name}",
                f"take it back with `vgpuadm destroy --vm {name} --uuid {dev}`, or pass --force to remove it "
                f"anyway (it is also dropped from {name}'s record)",
            )
        owners.setdefault(name, dev)
    if not owners:
        return plan, ids
    others = {ref: n for ref, n in domains.users().items() if n not in owners}
    define: list[Step] = []
    for name, dev in sorted(owners.items()):
        try:
            taken, _, _ = plan_destroy(s.snap, domains.by_name[name].xml, others, uuid=dev, all_=False,
                                       drivers=load_drivers(s.root.path))  # fmt: skip
        except NotFoundError:
            raise ConflictError(
                f"{dev} is in a hostdev of domain {name} that its vgpuadm metadata does not record",
                f"detach it from {name} first (virsh edit {name}); --force only takes back devices vgpuadm gave",
            ) from None
        # the kernel steps are this verb's own; plan_destroy contributes the domain's new definition
        define += [st for st in taken.steps if isinstance(st, DefineDomain)]
    summary = f"{plan.summary}; take it from domain {', '.join(sorted(owners))} (--force)"
    return Plan.of([*define, *plan.steps], summary), ids


def recover(
    root: str | None = None,
    *,
    finish: bool = False,
    virt: Any = None,
    connect: str | None = None,
    dry_run: bool = False,
) -> list[str]:
    """Roll back (default) or finish a change a crashed run left in the journal; [] when there was none. When the
    journal holds libvirt steps and no `virt` is given, a connection is opened (`connect`, else this root's).
    dry_run: what it would do (`would roll back: …`); only reads, so no root is needed."""
    sysfs = open_sysfs(root)
    check_root(sysfs.root)
    if not dry_run:
        check_writable(sysfs.root)
    ctx = ExecContext(sysfs=sysfs, root=sysfs.root, virt=virt, handlers=WITH_LIBVIRT)
    doc = read_journal(ctx.root) or {}
    kinds = {s.get("kind") for s in doc.get("plan", {}).get("steps", [])}
    if virt is None and kinds & LIBVIRT_STEP_KINDS:
        with VirtConn(choose_uri(connect, ctx.root, sysfs.simulated)) as conn:
            ctx.virt = conn
            return _recover(ctx, finish=finish, dry_run=dry_run)
    return _recover(ctx, finish=finish, dry_run=dry_run)
