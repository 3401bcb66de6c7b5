"""`restore`: rebuild this host's domains' devices after a reboot, a GPU reset or a driver reload, phase by phase
(plan/restore.py), and `restore --check`, the drift from the domains' record. Apart from the other declarative verbs
(ops/declarative.py) so that the boot unit's `restore` and udev's runs load the restore planner and what its phases
run, not `apply`'s plan file grammar, desired-state planners and reconcile (bench/bench_restore_kernel.py)."""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from vgpuadm import modes
from vgpuadm.errors import ConflictError, UsageError, VgpuadmError
from vgpuadm.executor import execute_units, recover
from vgpuadm.host import hetero as host_hetero
from vgpuadm.host import mig as host_mig
from vgpuadm.host.root import SRIOV_MANAGE
from vgpuadm.io.domainxml import read_domain_dir
from vgpuadm.io.policyfile import read_file as read_policy
from vgpuadm.model import Allocation, HostSnapshot, mdev_parent_name, pci_address
from vgpuadm.ops.session import Session
from vgpuadm.plan import restore as restore_plan
from vgpuadm.plan.domains import Domains
from vgpuadm.polling import wait_until

Report = Callable[[str], None]


@dataclass
class RestoreResult:
    done: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    devices: int = 0
    dry_run: bool = False
    planned: list[str] = field(default_factory=list)  # dry run: the steps restore would run first
    held: list[str] = field(default_factory=list)  # gone devices of running domains: reported, never recreated
    gpus: tuple[str, ...] = ()  # --gpu and --parent, canonical (not in the JSON document)
    parents: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The `restore --json` document (vgpuadm/schemas/restore.schema.json)."""
        return {"devices": self.devices, "dry_run": self.dry_run, "planned": self.planned, "done": self.done,
                "skipped": self.skipped, "problems": self.problems, "held": self.held}  # fmt: skip


@dataclass(frozen=True)
class DriftResult:
    """`restore --check`: what differs from the domains' record (plan/restore.drift), one line each."""

    devices: int
    drift: tuple[str, ...]
    gpus: tuple[str, ...] = ()
    parents: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The `restore --check --json` document (vgpuadm/schemas/restore-check.schema.json)."""
        return {"devices": self.devices, "drifted": bool(self.drift), "drift": list(self.drift),
                "gpus": list(self.gpus), "parents": list(self.parents)}  # fmt: skip


MAX_TIMEOUT = 3600.0  # seconds restore waits for GPUs at most (an hour: far beyond any driver's registration)


def check_timeout(timeout: float) -> None:
    """0 < timeout ≤ MAX_TIMEOUT and finite (nan, inf and negatives are refused before anything runs)."""
    if not (math.isfinite(timeout) and 0 < timeout <= MAX_TIMEOUT):
        raise UsageError(
            f"--timeout {timeout:g} is not a number of seconds in (0, {MAX_TIMEOUT:g}]",
            "give the seconds to wait for GPUs to register, e.g. --timeout 120",
        )


def restore_scope(snap: HostSnapshot, gpus: tuple[str, ...], parents: tuple[str, ...]) -> restore_plan.Scope:
    """--gpu and --parent checked once, where they enter, into canonical names: each a GPU of this host (a PF; a VF
    names its PF) or an mdev parent name (a PCI function, a VF by address, a virtual parent such as mtty; that it is
    on this host: check_parents). UsageError (exit 2) otherwise."""
    out_gpus = set()
    for text in gpus:
        addr = pci_address(text)
        fn = snap.functions.get(addr)
        fn = snap.functions.get(fn.physfn) if fn is not None and fn.physfn else fn
        if fn is None or not (fn.is_display or fn.sriov_total_vfs or fn.address in snap.mdev_parents):
            known = sorted(f.address for f in snap.functions.values() if f.is_display and not f.is_vf)
            raise UsageError(f"--gpu {text}: {addr} is no GPU on this host",
                             f"its GPUs: {', '.join(known)} (vgpuadm gpus)" if known else "this host shows no GPU")  # fmt: skip
        out_gpus.add(fn.address)
    return restore_plan.Scope(frozenset(out_gpus), frozenset(mdev_parent_name(text) for text in parents))


def check_parents(scope: restore_plan.Scope, snap: HostSnapshot, recorded: list[Allocation]) -> None:
    """Each parent of `scope` is one the host shows, or that a domain records a device on (a VF gone with a
    reset): UsageError (exit 2) otherwise."""
    on_record = {dev for a in recorded if (dev := restore_plan.needed_device(a)) is not None}
    for name in sorted(scope.parents):
        if name not in snap.mdev_parents and name not in snap.functions and name not in on_record:
            known = sorted(set(snap.mdev_parents) | on_record)
            raise UsageError(f"--parent {name}: no mdev parent or device of that name on this host",
                             f"mdev parents and recorded devices: {', '.join(known[:8])}{' …' if len(known) > 8 else ''}"
                             if known else "this host shows no mdev parent and no domain records a device")  # fmt: skip


def restore(
    root: str | None,
    *,
    connect: str | None = None,
    domain_xml_dir: str | None = None,
    timeout: float = 60.0,
    report: Report | None = None,
    dry_run: bool = False,
    gpus: tuple[str, ...] = (),
    parents: tuple[str, ...] = (),
) -> RestoreResult:
    """Rebuild this host's domains' devices after a reboot, phase by phase (plan/restore.RESTORE_ORDER), under the host
    lock. Each device is its own unit: one that fails is rolled back and named in `problems`, the others still
    happen. A running domain's device is never touched: one that is gone is named in `held`.

    gpus, parents: after a GPU reset or a driver reload, re-converge only the devices on these GPUs (PF addresses)
    and mdev parents (restore_scope), and the enablers of those GPUs, in the same phases.

    dry_run: what restore would do first, changing nothing (no lock, no root needed): the phases are planned
    against the host as it is, up to the first phase that would change it — the phases after it are planned
    against what that phase leaves, so they are named, not guessed."""
    check_timeout(timeout)
    say = report or (lambda _line: None)
    out = RestoreResult(dry_run=dry_run)
    with Session.changing(root, connect, dry_run=dry_run, allow_pending=True) as s:
        scope = restore_scope(s.snap, gpus, parents)  # checked before anything changes (the journal's rollback below)
        out.gpus, out.parents = tuple(sorted(scope.gpus)), tuple(sorted(scope.parents))
        ctx = s.context()
        if not domain_xml_dir:
            ctx.virt = s.virt
        try:
            recovered = recover(ctx, dry_run=dry_run)
        except VgpuadmError as exc:
            raise ConflictError(
                f"an interrupted change is pending and could not be rolled back: {exc.message}",
                "run `vgpuadm recover` once libvirt runs, then `vgpuadm restore` again",
            ) from None
        # read after the rollback: it may have taken devices out of definitions (restoring them would leak them)
        doms = read_domain_dir(domain_xml_dir, s.host_key) if domain_xml_dir else s.domains()
        for line in recovered:
            say(f"recovered: {line}" if not dry_run else f"journal: {line}")
        snap = s.refresh() if recovered else s.snap
        check_parents(scope, snap, doms.allocations)
        allocs = [a for a in doms.allocations if not a.on_demand and scope.covers(a, snap)]  # on demand: the hook's
        out.devices = len(allocs)
        for a in allocs:
            if a.domain in doms.running and modes.of(a).missing(snap, a):
                line = f"{a.domain} is running and holds {modes.describe(a)} which is gone: stop it and run restore"
                out.held.append(line)
                say(f"not restored: {line}")
        allocs = [a for a in allocs if a.domain not in doms.running]  # never touched under a running guest
        rebuild(s, ctx, allocs, timeout, say, out, stale=bool(recovered), dry_run=dry_run,
                gpus=scope.enabler_gpus(allocs, snap))  # fmt: skip
    return out


def restore_check(
    root: str | None,
    *,
    connect: str | None = None,
    domain_xml_dir: str | None = None,
    gpus: tuple[str, ...] = (),
    parents: tuple[str, ...] = (),
) -> DriftResult:
    """What differs from the domains' record now (plan/restore.drift): reads only, no lock, changes nothing. For a
    reset that sends no uevent (MIG mode or policies lost while devices remain) and for `doctor`."""
    with Session.read(root, connect) as s:
        doms = read_domain_dir(domain_xml_dir, s.host_key) if domain_xml_dir else s.domains()
        return drift_of(s, doms, gpus, parents)


def drift_of(s: Session, doms: Domains, gpus: tuple[str, ...] = (), parents: tuple[str, ...] = ()) -> DriftResult:
    """The drift of `doms`' recorded devices on the session's host, read as restore's phases declare (the MIG state
    and the policies only where needed)."""
    snap = s.snap
    scope = restore_scope(snap, gpus, parents)
    check_parents(scope, snap, doms.allocations)
    allocs = [a for a in doms.allocations if not a.on_demand and scope.covers(a, snap)]
    mig = host_mig.read_host(s.root) if restore_plan.needs_mig(allocs, snap) else None
    state = None
    if snap.has_placement_ids:
        state = read_policy(s.root.path, "state")
        snap = dataclasses.replace(snap, policies=host_hetero.read(s.root, scheduler=True, placements=True))
    reads = restore_plan.HostReads(s.root.has_executable(SRIOV_MANAGE), mig, state, scope.enabler_gpus(allocs, snap))
    lines = restore_plan.drift(allocs, snap, reads, doms.running)
    return DriftResult(len(allocs), tuple(lines), tuple(sorted(scope.gpus)), tuple(sorted(scope.parents)))


def rebuild(
    s: Session,
    ctx: Any,
    allocs: list[Allocation],
    timeout: float,
    say: Report,
    out: RestoreResult,
    *,
    stale: bool,
    dry_run: bool = False,
    gpus: frozenset[str] | None = None,
) -> None:
    """Bring `allocs` back, phase by phase (plan/restore.RESTORE_ORDER, each with the host reads it declares): what
    `restore` does for every domain and `apply` for the missing devices of the VMs its plan names. Each device is
    its own unit: one that fails is rolled back and named in `out.problems`, the others still happen. `dry_run`:
    plan until the first phase that would change the host, into `out.planned`. `gpus`: the GPUs whose enablers may
    change (None: every GPU)."""
    sriov_manage = s.root.has_executable(SRIOV_MANAGE)
    snap = s.snap  # the host is read again only after something changed it
    for spec in restore_plan.RESTORE_ORDER:  # each phase with the host reads it declares
        phase = spec.name
        if dry_run and stale:  # an earlier phase (or the journal) would change the host first
            say(f"{phase}: planned once the steps above are done")
            continue
        if stale:
            snap = s.refresh()
        missing = restore_plan.missing_devices(allocs, snap) if spec.waits_for_devices and not out.problems else []
        if missing and dry_run:
            say(f"would wait up to {timeout:g}s for {', '.join(missing)} to register")
        elif missing:
            say(f"waiting up to {timeout:g}s for {', '.join(missing)} to register")
            snap = wait_until(s.refresh, functools.partial(restore_plan.all_present, allocs), timeout)
        mig = host_mig.read_host(s.root) if spec.reads_mig and restore_plan.needs_mig(allocs, snap) else None
        state = None
        if spec.reads_policies and snap.has_placement_ids:
            state = read_policy(s.root.path, "state")
            snap = dataclasses.replace(snap, policies=host_hetero.read(s.root, scheduler=True, placements=True))
        pp = spec.plan(allocs, snap, restore_plan.HostReads(sriov_manage, mig, state, gpus))
        for line in pp.skipped:
            say(f"{phase}: skipped: {line}")
            out.skipped.append(line)
        stale = bool(pp.units)
        if dry_run:
            for unit in pp.units:
                for step in unit.steps:
                    out.planned.append(f"{phase}: {step.describe()}")
                    say(f"{phase}: would {step.describe()}")
        else:
            # One journal for the phase; each unit still fails (and is rolled back) alone.
            errors = execute_units(pp.units, ctx, f"restore: {phase}") if pp.units else []
            for unit, error in zip(pp.units, errors, strict=True):
                if error is not None:
                    out.problems.append(f"{phase}: {error.message}")
                    say(f"{phase}: FAILED: {error.message}")
                    continue
                for step in unit.steps:
                    out.done.append(f"{phase}: {step.describe()}")
                    say(f"{phase}: {step.describe()}")
            allocs = pp.without_held(allocs, snap)
        out.problems.extend(f"{phase}: {p}" for p in pp.problems)
        for p in pp.problems:
            say(f"{phase}: cannot restore: {p}")
