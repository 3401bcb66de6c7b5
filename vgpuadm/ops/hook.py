"""`vgpuadm hook run|install|uninstall|status`: on-demand devices through libvirt's qemu hook.

`run` is what the installed hook executes for each domain libvirt starts and stops: on prepare/begin it makes the
domain's on-demand devices (plan/ondemand.py: the same planner and capacity model as `create`), on release/end it
removes them. It plans from the domain XML libvirt passes on stdin and the kernel alone, under the host lock, and
never calls libvirt (libvirt documents that a hook calling back into its API deadlocks). Other operations do nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vgpuadm.errors import ConflictError
from vgpuadm.executor import load_drivers
from vgpuadm.host import mig as host_mig
from vgpuadm.host.root import HostRoot
from vgpuadm.io import hookfile
from vgpuadm.io.policyfile import made_text, read_made
from vgpuadm.model import Allocation, HostSnapshot
from vgpuadm.ops.session import Session
from vgpuadm.ops.unit import vgpuadm_command
from vgpuadm.plan import devices as device_plans
from vgpuadm.plan import ondemand
from vgpuadm.plan.domains import Domains, device_keys
from vgpuadm.plan.guest import remove_steps
from vgpuadm.steps import LIBVIRT_HOOK, Plan, Step, WriteManagedFile, WritePolicyFile
from vgpuadm.virt import hookcall
from vgpuadm.virt.conn import library_version
from vgpuadm.virt.xml import domain_identity


@dataclass(frozen=True)
class HookRunResult:
    domain: str
    phase: str  # "start", "stop" or "" (an operation the hook leaves alone)
    plan: Plan
    applied: tuple[str, ...]
    left: tuple[str, ...] = ()  # at stop: devices the metadata names that another domain owns, left alone

    def to_json(self) -> dict[str, Any]:
        return {"domain": self.domain, "phase": self.phase, "steps": self.plan.describe(),
                "applied": list(self.applied), "left": list(self.left)}  # fmt: skip


def run(root: str | None, domain: str, operation: str, sub_operation: str, domain_xml: bytes) -> HookRunResult:
    """Make (start) or free (stop) the on-demand devices of `domain`, whose XML libvirt gave on stdin."""
    phase = hookcall.phase_of(operation, sub_operation)
    if not phase:
        return HookRunResult(domain, "", Plan.of([], f"{operation}/{sub_operation}: nothing to do"), ())
    text, doc = hookcall.read_domain_xml(domain_xml, domain)
    if not hookcall.has_on_demand(doc):
        # most domains: no lock, no discovery, and a pending journal never blocks their start
        return HookRunResult(domain, phase, Plan.of([], f"domain {domain} has no on-demand devices"), ())
    return run_on_demand(root, domain, phase, text)


def run_on_demand(root: str | None, domain: str, phase: str, domain_xml: str) -> HookRunResult:
    """`run` for a domain whose XML hookcall has checked and found on-demand devices in (cli/hookrun.py checks it
    before loading this module)."""
    with Session.open(root) as s:  # s.virt is never opened here
        owners = foreign_owners(s.domains_on_disk(), domain_xml)
        left: list[str] = []
        _name, wanted = ondemand.requests(domain_xml, s.host_key)
        if phase == "start":
            plan = _start_plan(s, domain_xml, wanted)
            for device in _touched(plan.steps, wanted):
                if device in owners:
                    raise ConflictError(
                        f"its vgpuadm metadata names {device} as on-demand, and domain {owners[device]} owns it",
                        f"a device is made, freed and rebound only for the domain that owns it; remove the request "
                        f"(vgpuadm destroy --vm {domain} --uuid {device})",
                    )
        else:
            plan, left = _stop_plan(s, domain_xml, wanted, owners)
        applied = s.execute(plan).applied if not plan.empty else ()
    return HookRunResult(domain, phase, plan, tuple(applied), tuple(left))


def _start_plan(s: Session, domain_xml: str, wanted: Sequence[Allocation]) -> Plan:
    """plan_start, with the MIG GPU instances its MIG-backed vGPUs need made first, as `create` makes them
    (plan/devices.py), and each instance made recorded (on-demand-mig record) for the stop to destroy."""
    types = sorted({a.type_id for a in wanted if a.type_id})
    mig = host_mig.read_host(s.root) if types and device_plans.mig_may_need(s.snap, types) else device_plans.NO_MIG
    planning = device_plans.mig_project(s.snap, mig, types)
    plan = ondemand.plan_start(planning, domain_xml)
    steps, added, _state = device_plans.mig_for_vgpus(planning, mig, plan.steps, wanted)
    new = {a.uuid or a.address or "": a.extra["mig_instance"] for a in added if "mig_instance" in a.extra}
    if not new:
        return plan
    made, text = read_made(s.root.path)
    return Plan.of([*steps, WritePolicyFile(MADE, made_text({**made, **new}), text)], plan.summary)


def _stop_plan(s: Session, domain_xml: str, wanted: Sequence[Allocation],
               owners: Mapping[str, str]) -> tuple[Plan, list[str]]:  # fmt: skip
    """plan_stop, less the requests whose device (or a function their give-back rebinds) another domain owns, then
    the GPU instances the start made for the vGPUs that go (never one made by hand or for another vGPU)."""
    snap, drivers = s.snap, load_drivers(s.root.path)
    plan = ondemand.plan_stop(snap, domain_xml, drivers)
    mine: list[Allocation] = list(wanted)
    left: list[str] = []
    if any(d in owners for d in _touched(plan.steps, wanted)):
        mine, left = [], []
        for a in wanted:
            theirs = [d for d in _touched(remove_steps(snap, [a], dict(drivers)), [a]) if d in owners]
            if theirs:
                left += [f"left {d} alone: domain {owners[d]} owns it" for d in theirs if not any(d in x for x in left)]
            else:
                mine.append(a)
        plan = Plan.of(remove_steps(snap, mine, dict(drivers)), plan.summary)
    made, text = read_made(s.root.path)
    gone = [_made_for(snap, a, made[key]) for a in mine if (key := a.uuid or a.address or "") in made]
    if not gone:
        return plan, left
    release, _state = device_plans.mig_release(snap, host_mig.read_host(s.root), gone)
    rest = {k: v for k, v in made.items() if k not in {a.uuid or a.address for a in gone}}
    return Plan.of([*plan.steps, *release, WritePolicyFile(MADE, made_text(rest), text)], plan.summary), left


def _hook(name: str, text: str | None, previous: str | None) -> WriteManagedFile:
    """The step writing (text None: removing) vgpuadm's hook file `name` (io/hookfile.py NAMES)."""
    return WriteManagedFile(LIBVIRT_HOOK, hookfile.host_path(name), text, previous)


def _made_for(snap: HostSnapshot, a: Allocation, instance: str) -> Allocation:
    """`a` as `create` records it: the GPU instance made for it, and the parent its mdev was placed on."""
    have = snap.mdevs.get(a.uuid or "")
    parent = a.parent or (have.parent if have is not None else None)
    return dataclasses.replace(a, parent=parent, extra={**a.extra, "mig_instance": instance})


def foreign_owners(domains: Domains, domain_xml: str) -> dict[str, str]:
    """Device id (mdev UUID, PCI address) → the other domain of this host that owns it now: every device a running
    domain references, and every device a stopped one references that is not an on-demand request of it (a request
    takes a device only while its domain runs; several stopped domains may ask for the same GPU)."""
    me = domain_identity(domain_xml)
    out: dict[str, str] = {}
    for name, d in sorted(domains.by_name.items()):
        if name == me[0] or (me[1] and d.uuid.lower() == me[1].lower()):
            continue
        asked = set() if d.running else {k for a in d.allocations if a.on_demand for k in device_keys(a)}
        for key in d.references():
            if key not in asked:
                out.setdefault(key[1], name)
    return out


MADE = "on-demand-mig"  # io/policyfile.py: the GPU instances the hook made, per on-demand vGPU
DEVICE_FIELDS = frozenset({"uuid", "address", "id", "vf"})  # the Step fields that name the device a step changes


def _touched(steps: Iterable[Step], wanted: Sequence[Allocation]) -> list[str]:
    """Every device id the allocations name and the steps make, free, type or rebind (lower-case)."""
    ids = [key for a in wanted for _kind, key in device_keys(a)]
    for step in steps:
        for f in dataclasses.fields(step):
            value = getattr(step, f.name)
            if f.name in DEVICE_FIELDS and isinstance(value, str) and value:
                ids.append(value.lower())
    return list(dict.fromkeys(ids))


# -- install / uninstall / status ------------------------------------------------------------------------------------

QEMU_D_SINCE = (6, 5, 0)  # libvirt runs every executable in hooks/qemu.d/ since 6.5.0 (libvirt.org/hooks.html)
NEXT_STEP = "systemctl reload libvirtd (or virtqemud): libvirt looks for hook scripts when it starts and on reload"


@dataclass(frozen=True)
class HookInstallResult:
    path: str  # the host path of the hook libvirt runs (/etc/libvirt/hooks/qemu.d/vgpuadm or …/qemu)
    command: tuple[str, ...]  # what the hook runs (before `hook run …`)
    plan: Plan
    applied: tuple[str, ...]
    dry_run: bool
    installed: bool  # after the command (what it would be, with dry_run)
    current: bool  # the file says what install writes, 0755, owned by root
    chained: str | None = None  # the host path of the script the single `qemu` script chains
    why: str = ""  # why this form of the hook (the libvirt version found), "" when it was asked for

    @property
    def changed(self) -> bool:
        return bool(self.applied) and not self.dry_run

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "command": list(self.command), "changed": self.changed, "dry_run": self.dry_run,
                "installed": self.installed, "current": self.current, "chained": self.chained,
                "steps": self.plan.describe(), "next": NEXT_STEP if self.changed else "", "why": self.why}  # fmt: skip


def hook_command(root: HostRoot, command: list[str] | None = None) -> list[str]:
    """The vgpuadm the hook runs, with --root when the root is not `/`."""
    return [*(command or vgpuadm_command()), *([] if root.is_host else ["--root", root.path])]


def _current(root: str, name: str, text: str) -> bool:
    return hookfile.read_hook(root, name) == text and hookfile.mode_and_owner(root, name) == (hookfile.MODE, 0)


def hook_form(version: tuple[int, int, int]) -> tuple[bool, str]:
    """Whether libvirt `version` needs the single qemu script (it predates hooks/qemu.d/), and why."""
    shown = ".".join(map(str, version))
    if version >= QEMU_D_SINCE:
        return False, f"libvirt {shown} runs every script in hooks/qemu.d/ (since 6.5.0)"
    return True, f"libvirt {shown} predates hooks/qemu.d/ (6.5.0): the single hooks/qemu script, chaining one there"


def install(
    root: str | None,
    *,
    single_script: bool | None = None,
    dry_run: bool = False,
    command: list[str] | None = None,
    libvirt_version: tuple[int, int, int] | None = None,
) -> HookInstallResult:
    """Write the hook: hooks/qemu.d/vgpuadm, or (`single_script`, for libvirt < 6.5) hooks/qemu, chaining a qemu
    script that is there already (kept as qemu.vgpuadm-chained). Nothing to do when it is there and current.
    `single_script=None` chooses by the installed libvirt's version (`libvirt_version`, else the library's)."""
    why = ""
    if single_script is None:
        single_script, why = hook_form(libvirt_version or library_version())
    with Session.changing(root, dry_run=dry_run, needs_sys=False) as s:
        r = s.root.path
        cmd = hook_command(s.root, command)
        name = hookfile.SCRIPT if single_script else hookfile.DIR_HOOK
        text = hookfile.render(cmd, name)
        previous = hookfile.read_hook(r, name)
        steps: list[Step] = []
        chained = None
        if name == hookfile.SCRIPT and previous is not None and not hookfile.is_ours(previous):
            kept = hookfile.read_hook(r, hookfile.CHAINED)
            if kept is not None:
                raise ConflictError(
                    f"{hookfile.host_path(hookfile.SCRIPT)} is not vgpuadm's and "
                    f"{hookfile.host_path(hookfile.CHAINED)} exists already",
                    "merge them by hand, or use the hooks/qemu.d/ directory (vgpuadm hook install)",
                )
            steps.append(_hook(hookfile.CHAINED, previous, None))
        if previous != text or hookfile.mode_and_owner(r, name) != (hookfile.MODE, 0):
            steps.append(_hook(name, text, previous))
        if name == hookfile.SCRIPT and (steps or hookfile.read_hook(r, hookfile.CHAINED) is not None):
            chained = hookfile.host_path(hookfile.CHAINED)
        plan = Plan.of(steps, f"install the vgpuadm qemu hook {hookfile.host_path(name)}")
        applied = s.execute(plan, dry_run=dry_run).applied if steps else ()
        current = dry_run or _current(r, name, text)
        if chained and not (dry_run or hookfile.read_hook(r, hookfile.CHAINED) is not None):
            chained = None
        return HookInstallResult(hookfile.host_path(name), tuple(cmd), plan, tuple(applied), dry_run, True, current,
                                 chained, why)  # fmt: skip


def uninstall(root: str | None, *, dry_run: bool = False) -> HookInstallResult:
    """Remove vgpuadm's hook (either form); a chained script goes back to hooks/qemu. A file vgpuadm did not write
    is left alone."""
    with Session.changing(root, dry_run=dry_run, needs_sys=False) as s:
        r = s.root.path
        steps: list[Step] = []
        chained = None
        shown = hookfile.host_path(hookfile.DIR_HOOK)
        mine = hookfile.read_hook(r, hookfile.DIR_HOOK)
        if mine is not None and hookfile.is_ours(mine):
            steps.append(_hook(hookfile.DIR_HOOK, None, mine))
        script = hookfile.read_hook(r, hookfile.SCRIPT)
        if script is not None and hookfile.is_ours(script):
            shown = hookfile.host_path(hookfile.SCRIPT)
            kept = hookfile.read_hook(r, hookfile.CHAINED)
            if kept is not None:
                steps += [_hook(hookfile.SCRIPT, kept, script), _hook(hookfile.CHAINED, None, kept)]
                chained = hookfile.host_path(hookfile.CHAINED)
            else:
                steps.append(_hook(hookfile.SCRIPT, None, script))
        plan = Plan.of(steps, "remove the vgpuadm qemu hook")
        applied = s.execute(plan, dry_run=dry_run).applied if steps else ()
        return HookInstallResult(shown, (), plan, tuple(applied), dry_run, False, False, chained)


def status(root: str | None, *, command: list[str] | None = None) -> HookInstallResult:
    """Which form is installed and whether it says what `hook install` (run as this vgpuadm) writes. Read-only."""
    with Session.read(root) as s:
        r = s.root.path
        cmd = hook_command(s.root, command)
        for name in (hookfile.DIR_HOOK, hookfile.SCRIPT):
            text = hookfile.read_hook(r, name)
            if text is not None and hookfile.is_ours(text):
                chained = hookfile.read_hook(r, hookfile.CHAINED) if name == hookfile.SCRIPT else None
                return HookInstallResult(
                    hookfile.host_path(name), tuple(cmd), Plan.of([], ""), (), False, True,
                    _current(r, name, hookfile.render(cmd, name)),
                    hookfile.host_path(hookfile.CHAINED) if chained is not None else None,
                )  # fmt: skip
    return HookInstallResult(hookfile.host_path(hookfile.DIR_HOOK), tuple(cmd), Plan.of([], ""), (), False, False,
                             False)  # fmt: skip
