"""The declarative verbs: `apply -f` (make the host match a plan) and `reconcile` (finish a crashed change, find
leaks); `restore` (rebuild after a reboot) is ops/restore.py, which `apply` uses for the named VMs' missing devices.
Each runs in one Session — read, plan and apply under the host lock — and asks the pure planners (plan/apply.py,
plan/restore.py, plan/reconcile.py) what to do."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

from vgpuadm import modes
from vgpuadm.catalog.capacity import consume, release
from vgpuadm.catalog.mig import MigHost
from vgpuadm.errors import NotFoundError, UnsafeError
from vgpuadm.executor import load_drivers, recover
from vgpuadm.host import hetero as host_hetero
from vgpuadm.host import mig as host_mig
from vgpuadm.host.mig import read as mig_read
from vgpuadm.host.root import EMBED_LIBVIRT, HostRoot, list_beneath
from vgpuadm.io.planfile import load_plan
from vgpuadm.io.policyfile import read_file as read_policy
from vgpuadm.model import Allocation, HostSnapshot
from vgpuadm.modes import mig as mig_mode
from vgpuadm.ops.host import discover
from vgpuadm.ops.restore import RestoreResult, rebuild
from vgpuadm.ops.session import Session
from vgpuadm.plan import desired, ondemand
from vgpuadm.plan import devices as device_plans
from vgpuadm.plan import policies as policies_plan
from vgpuadm.plan import reconcile as reconcile_plan
from vgpuadm.plan.apply import build_apply_plan, resolve_types
from vgpuadm.plan.desired import Current, DesiredPlan, Diff, describe_allocation
from vgpuadm.plan.domains import Domains, missing_recorded, with_recorded
from vgpuadm.plan.policies import PolicyPlan
from vgpuadm.plan.reconcile import Leak
from vgpuadm.steps import DefineDomain, Plan, Step
from vgpuadm.virt.xml import parse_allocations

Progress = Callable[[int, int, str], None]


# -- apply -f --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ApplyResult:
    diff: Diff
    plan: Plan
    applied: tuple[str, ...]
    checked_only: bool
    warnings: tuple[str, ...] = ()  # on-demand requests of autostarting domains that would not all fit at boot
    restored: tuple[str, ...] = ()  # the restore steps that brought back the named VMs' missing devices

    @property
    def changed(self) -> bool:
        return not self.checked_only and (not self.plan.empty or bool(self.restored))

    def to_json(self) -> dict[str, Any]:
        """The `apply --json` document (vgpuadm/schemas/apply.schema.json)."""
        return {
            "changed": self.changed,
            "check": self.checked_only,
            "summary": self.plan.summary,
            "diff": self.diff.lines(),
            "untouched": list(self.diff.untouched),
            "steps": list(self.applied),
            "warnings": list(self.warnings),
            "restored": list(self.restored),
        }


def apply_plan_file(plan_file: str, root: str | None = None, **options: Any) -> ApplyResult:
    """Make the host match a plan file (options: connect, check, prune, progress)."""
    return apply_desired(root, load_plan(plan_file), **options)


def apply_desired(
    root: str | None,
    plan_doc: DesiredPlan,
    *,
    connect: str | None = None,
    check: bool = False,
    prune: bool = False,
    progress: Progress | None = None,
    timeout: float = 60.0,
) -> ApplyResult:
    """Make the host match a desired state (a plan file's, or the Ansible module's), as ONE journaled plan.
    `check` computes the diff and the steps and changes nothing (it only reads: no lock, no root needed). The
    recorded devices of the VMs the plan names that the host lacks (after a reboot) are desired state too: they
    come back first, as `restore` brings them back (same phases and checks; `timeout` for GPUs to register), then
    the plan is made against the host."""
    with Session.changing(root, connect, dry_run=check) as s:
        doms = s.domains()
        for name, spec in plan_doc.vms.items():
            if name not in doms.by_name:
                raise NotFoundError(
                    f"{plan_doc.source}:{spec.line}: vms.{name}: no libvirt domain named {name!r}",
                    "define the domain first (virsh define) or fix the name in the plan",
                )
        result = _apply(s, plan_doc, doms, check=check, prune=prune, progress=progress)
        if check or not result.diff.missing:
            return result
        out, ctx = RestoreResult(), s.context()
        ctx.virt = s.virt
        rebuild(s, ctx, list(result.diff.missing), timeout, lambda _line: None, out, stale=False)
        if out.problems:
            raise NotFoundError(
                f"{len(out.problems)} recorded device(s) of the plan's VMs could not be brought back: "
                f"{'; '.join(out.problems[:3])}",
                "check that the GPU driver and its daemons run, then apply again (it only redoes what is missing)",
            )
        s.refresh()
        after = _apply(s, plan_doc, doms, check=False, prune=prune, progress=progress)
        return dataclasses.replace(after, diff=dataclasses.replace(after.diff, missing=result.diff.missing),
                                   restored=tuple(out.done))  # fmt: skip


def _apply(
    s: Session, plan_doc: DesiredPlan, doms: Domains, *, check: bool, prune: bool, progress: Progress | None
) -> ApplyResult:
    """One plan of apply_desired against the host as it is: the diff, and with `check` nothing else; devices the
    diff finds missing are left to the caller (they need restore's phases, not one plan)."""
    snap = s.snap
    missing = tuple(a for a in missing_recorded(snap, doms) if a.domain in plan_doc.vms)
    snap, mig = planning_snapshot(s.root, snap, plan_doc)
    resolved = resolve_types(plan_doc, snap, doms.allocations)
    d = desired.diff(plan_doc, Current(doms.allocations, doms.running), resolved, prune=prune)
    desired.check_safe(d, doms.running)
    d = dataclasses.replace(d, missing=tuple(a for a in missing if a in d.kept))
    if mig is device_plans.NO_MIG and any("mig_instance" in a.extra for a in d.removes):
        mig = host_mig.read_host(s.root)
    first: tuple[Step, ...] = ()
    policy_warnings: tuple[str, ...] = ()
    if plan_doc.gpus:  # host policies first: the VMs' devices are placed under the new mode
        pp = _plan_gpus(s, snap, doms, plan_doc)
        snap, first, policy_warnings = pp.snap, pp.steps, pp.warnings
        d = dataclasses.replace(d, gpus=pp.lines)
    plan = build_apply_plan(plan_doc, d, snap, doms, load_drivers(s.root.path), mig)
    first, steps = device_plans.mig_one_mode_change(first, plan.steps)
    plan = Plan(steps, plan.summary)
    d = dataclasses.replace(d, gpus=(*d.gpus, *device_plans.mig_diff_lines(plan.steps)))
    plan = Plan((*first, *plan.steps), plan.summary) if first else plan
    after = allocations_after(doms, plan)
    boots = {a.domain for a in after if a.on_demand}
    autostart = {name for name in sorted(boots) if s.virt.autostart(name)}
    warnings = policy_warnings + tuple(ondemand.overcommit(projected(snap, doms, d, plan), after, autostart))
    if check or plan.empty or d.missing:
        return ApplyResult(d, plan, tuple(plan.describe()), check, warnings)
    result = s.execute(plan, progress=progress)
    return ApplyResult(d, plan, result.applied, False, warnings)


def planning_snapshot(root: HostRoot, snap: HostSnapshot, plan_doc: DesiredPlan) -> tuple[HostSnapshot, MigHost]:
    """`snap` as the plan's types are resolved and placed against it — with MIG-backed types listed where MIG mode
    can go on (plan/devices.py mig_project) — and the MIG state, read only when a type may need it."""
    names = sorted({spec.type for spec in plan_doc.vms.values() if spec.type and not spec.on_demand})
    mig = host_mig.read_host(root) if device_plans.mig_may_need(snap, names) else device_plans.NO_MIG
    return device_plans.mig_project(snap, mig, names), mig


def resolve_desired_types(root: str | None, plan_doc: DesiredPlan, allocations: list[Allocation]) -> dict[str, str]:
    """The type ids a plan's types name on this host, as apply_desired resolves them (a MIG-backed type too while
    MIG mode is off): for the Ansible module, which compares them with what its VM owns."""
    snap, _ = planning_snapshot(HostRoot(root), discover(root), plan_doc)
    return resolve_types(plan_doc, snap, allocations)


def _plan_gpus(s: Session, snap: HostSnapshot, doms: Domains, plan_doc: DesiredPlan) -> PolicyPlan:
    """The `gpus:` section's steps (plan/policies.py), with MIG mode on or off through the mig mode's planner."""
    snap = dataclasses.replace(snap, policies=host_hetero.read(s.root, scheduler=True, placements=True))
    running: dict[str, set[str]] = {}
    for a in doms.allocations:
        dev = a.address or a.parent
        if a.domain in doms.running and dev:
            running.setdefault(snap.physical_gpu(dev), set()).add(a.domain)
    limited = any("frame_rate_limiter=1" in v.params.replace(" ", "") for v in plan_doc.vms.values())
    pp = policies_plan.plan_gpus(snap, plan_doc.gpus, running, state_text=read_policy(s.root.path, "state"),
                                 modprobe_text=read_policy(s.root.path, "modprobe"), source=plan_doc.source,
                                 frame_rate_limited=limited)  # fmt: skip
    wants_mig = {g: spec.mig for g, spec in plan_doc.gpus.items() if spec.mig is not None}
    if not wants_mig:
        return pp
    gpus = mig_read(s.root)
    mig_steps: list[Step] = []
    lines = list(pp.lines)
    for gpu, on in sorted(wants_mig.items()):
        more = (mig_mode.MODE.plan_enable if on else mig_mode.MODE.plan_disable)(snap, gpus, gpu)
        if more:
            lines.append(f"~ gpu {gpu}: MIG {'off → on' if on else 'on → off'}")
        mig_steps += more
    return dataclasses.replace(pp, steps=(*mig_steps, *pp.steps), lines=tuple(lines))


def allocations_after(doms: Domains, plan: Plan) -> list[Allocation]:
    """What every domain records once `plan` ran: its (last) definition step's element, else what it records now."""
    records = {s.domain: s.element for s in plan.steps if isinstance(s, DefineDomain)}
    out: list[Allocation] = []
    for name, dom in sorted(doms.by_name.items()):
        if name in records:
            out += parse_allocations(records[name], domain=name, domain_uuid=dom.uuid) if records[name] else []
        else:
            out += dom.allocations
    return out


def projected(snap: HostSnapshot, doms: Domains, d: Diff, plan: Plan) -> HostSnapshot:
    """The host once `plan` ran, as capacity counts it: removals freed, creates made, recorded devices held."""
    view = with_recorded(release(snap, d.removes), doms, besides=d.removes)
    made = [a for a in allocations_after(doms, plan) if not a.on_demand and modes.for_name(a.mode).missing(view, a)]
    return consume(view, made) if made else view


# -- reconcile ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReconcileResult:
    recovered: tuple[str, ...]
    leaks: tuple[Leak, ...]
    fixed: tuple[str, ...]
    lost: tuple[str, ...]  # allocations whose device is missing (run `vgpuadm restore`)
    dry_run: bool = False  # recovered and fixed say what would be done
    # (domain, incoming|outgoing, it runs here): a move to or from another host that stopped half-way
    moving: tuple[tuple[str, str, bool], ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The `reconcile --json` document (vgpuadm/schemas/reconcile.schema.json)."""
        return {
            "dry_run": self.dry_run,
            "recovered": list(self.recovered),
            "leaks": [{"kind": lk.kind, "id": lk.id, "detail": lk.detail} for lk in self.leaks],
            "fixed": list(self.fixed),
            "lost": list(self.lost),
            **({"moving": [{"domain": d, "state": m} for d, m, _ in self.moving]} if self.moving else {}),
        }


def embedded_domains(root: str) -> list[str]:
    """The domain definitions a simulated root's embedded libvirt keeps (its persistent XML files)."""
    found = list_beneath(root, f"{EMBED_LIBVIRT.strip('/')}/etc/qemu") or []
    return sorted(name for name, _ in found if name.endswith(".xml"))


def check_owner_uri(uri: str, root: str, simulated: bool) -> None:
    """A device is a leak only when the libvirt that holds this host's domains says so: on a simulated root its
    embedded libvirt (under <root>/var/lib/vgpuadm/libvirt), on a real host the local system daemon
    (qemu:///system, or qemu+unix:///system with its socket named). Anything else (another driver, qemu:///session,
    a remote host, another root's embedded libvirt) is refused for --fix. A simulated root whose embedded libvirt
    holds no domain (its domains live on a shared daemon, as the kernel lane's and the shared-daemon tests' do) may
    name the local system daemon: the embedded driver's domains are the ones another URI would miss."""
    parts = urlsplit(uri)
    driver, _, transport = parts.scheme.partition("+")
    query = parse_qs(parts.query, keep_blank_values=True)
    system = parts.path == "/system" and not parts.netloc and transport in ("", "unix") and set(query) <= {"socket"}
    if driver != "qemu":
        raise UnsafeError(
            f"--connect {uri} is not this host's QEMU/KVM libvirt, so it cannot say which devices are leaks",
            "run `vgpuadm reconcile --fix` without --connect, or with the qemu:/// URI of this host",
        )
    if simulated:
        embed_root = (query.get("root") or [""])[0]
        own = f"{root.rstrip('/')}{EMBED_LIBVIRT}"
        embedded = parts.path == "/embed" and not transport and not parts.netloc and set(query) == {"root"}
        if not (embedded and embed_root.rstrip("/") == own) and not (system and not embedded_domains(root)):
            raise UnsafeError(
                f"--connect {uri} does not hold this simulated host's domains (its embedded libvirt does), so it "
                "cannot say which devices are leaks",
                "run `vgpuadm reconcile --fix` without --connect",
            )
        return
    if not system:
        raise UnsafeError(
            f"--connect {uri} is not this host's own system libvirt, so it cannot say which devices are leaks",
            "run `vgpuadm reconcile --fix` without --connect, or with --connect qemu:///system",
        )


def reconcile(
    root: str | None, *, connect: str | None = None, fix: bool = False, finish: bool = False, dry_run: bool = False
) -> ReconcileResult:
    """Roll back (or finish) a crashed change, then list — and with `fix` remove — devices no domain owns.
    dry_run: what it would do, changing nothing (no lock, no root needed)."""
    with Session.changing(root, connect, dry_run=dry_run, allow_pending=True) as s:
        if fix:
            check_owner_uri(s.uri, s.root.path, s.simulated)
        ctx = s.context()
        ctx.virt = s.virt
        recovered = recover(ctx, finish=finish, dry_run=dry_run)
        snap = s.refresh()
        doms: Domains = s.domains()
        remembered = load_drivers(s.root.path)
        leaks = reconcile_plan.find_leaks(snap, doms.owned(), remembered)
        fixed: tuple[str, ...] = ()
        if fix and leaks:
            fixed = s.execute(reconcile_plan.leak_plan(snap, leaks, remembered), dry_run=dry_run).applied
            snap = s.refresh()
        lost = tuple(f"{a.domain}: {describe_allocation(a)}" for a in missing_recorded(snap, doms))
        # an incoming domain's devices are owned (never leaks): a move that stopped half-way is said, not undone
        running = doms.running
        moving = tuple(sorted({(a.domain, a.moving, a.domain in running) for a in doms.allocations if a.moving}))
    return ReconcileResult(tuple(recovered), tuple(leaks), fixed, lost, dry_run, moving)
