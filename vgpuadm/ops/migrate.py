"""`vgpuadm migrate check`: read this host (the VM's recorded devices, the snapshot) and the target's inventory,
and ask the pure check (plan/migration.py) how each device can move there. `migrate prepare|run|abort`: a move,
this host's part through its own Session and the target's through its vgpuadm (io/remote.py Peer: `migrate
incoming|finish|abort` there), whose JSON answer is checked where it enters (_answer, schema migrate-step).

A shut-off VM (or any with --offline) moves cold: the target defines the domain with its own devices, this host
undefines it and frees its devices. A running VM whose check says live moves live: the same target part first —
the target defines the domain *before* the migration (`migrate incoming`, inactive, with the devices its own planner
made under its journal and lock, recorded incoming), because libvirt takes an incoming migration onto an inactive
persistent domain of the same name and UUID, and so a move that stops anywhere leaves on the target a definition that
`show`, `inventory` and `reconcile` report and `migrate abort` removes, exactly as a cold move's. Then libvirt moves
the running guest (VirtConn.migrate_live: live, persistent on the target, undefined here, never post-copy) with its
live and persistent XML rewritten for the target (plan/migration.py destination_xml: its devices' hostdevs, vgpuadm's
metadata as the target records it); then this host frees its devices and the target drops the incoming mark. A
failed migration leaves the guest running here: the target's part is undone (`migrate abort` there) and the mark
here dropped. Killed after libvirt moved the guest, this host's devices are leaked (`reconcile --fix` frees them)
and the target's `migrate finish` ends the move there (its `migrate abort` refuses: the VM runs there)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import orjson

from vgpuadm import schemas
from vgpuadm.catalog.migration import GpuDriver, TargetHost, target_host
from vgpuadm.errors import CapacityError, ConflictError, HostIOError, NotFoundError, UsageError, VgpuadmError
from vgpuadm.executor import load_drivers
from vgpuadm.host import mig as host_mig
from vgpuadm.host import nvidia_smi
from vgpuadm.host.inputs import read_input
from vgpuadm.io import remote
from vgpuadm.model import Allocation, mdev_uuid, moving
from vgpuadm.ops.guest import Progress, allocation_json
from vgpuadm.ops.session import Session
from vgpuadm.plan import devices as device_plans
from vgpuadm.plan import guest as planner
from vgpuadm.plan import migration
from vgpuadm.plan.domains import with_recorded
from vgpuadm.report.merge import MAX_REPORT, load_report, parse_report
from vgpuadm.steps import Plan, Step
from vgpuadm.virt import xml
from vgpuadm.virt.conn import VirtConn

TARGET_HINT = (
    "give the target's libvirt URI (--to qemu+ssh://root@gpu2/system: its vgpuadm is asked over ssh), or "
    "run `vgpuadm inventory --json > target.json` there and pass --target-inventory target.json"
)


def check(
    root: str | None,
    vm: str,
    *,
    connect: str | None = None,
    to: str | None = None,
    target_inventory: str | None = None,
    postcopy: bool = False,
    offline: bool = False,
    target_root: str | None = None,
    target_connect: str | None = None,
) -> migration.MoveCheck:
    """How each device of `vm` can move to the target host: the one `target_inventory` describes, else the simulated
    host `target_root` on this machine, else the one the libvirt URI `to` names, whose vgpuadm is asked over ssh
    (NotFoundError: no such domain; UsageError: no target or a bad inventory; HostIOError: the target did not
    answer)."""
    if target_inventory:
        target = target_host(load_report(target_inventory), target_inventory)
    elif target_root:
        target = _target_inventory(remote.peer(None, target_root, target_connect))
    elif to:
        argv, host = remote.ssh_command(to)
        where = f"the inventory {host} sent"
        target = target_host(parse_report(remote.run(argv, host, MAX_REPORT), where), where)
    else:
        raise UsageError("migrate check needs the target host: --to URI or --target-inventory FILE", TARGET_HINT)
    with Session.read(root, connect) as s:
        d = s.domains().by_name.get(vm)
        if d is None:
            s.virt.xml(vm)  # raises NotFoundError naming the domain
            return migration.check(s.snap, vm, None, (), target, postcopy=postcopy, offline=offline)
        return migration.check(s.snap, d.name, d.running, d.allocations, target, postcopy=postcopy, offline=offline,
                               drivers=_drivers(s))  # fmt: skip


def _drivers(s: Session) -> dict[str, GpuDriver]:
    """What this host's NVIDIA driver reports per GPU that a live move needs to match (`nvidia-smi -q -x`; nothing
    without nvidia-smi or when it fails: the check then says what it did not compare)."""
    if nvidia_smi.locate(s.root) is None:
        return {}
    try:
        gpus = host_mig.gpu_modes(s.root)
    except VgpuadmError:
        return {}
    return {g.address: GpuDriver(g.ecc, g.driver_version) for g in gpus}


# -- moving it: `migrate prepare|run|abort` here, `migrate incoming|finish|abort` on the target ----------------------

STEP_SCHEMA = "vgpuadm-migrate-step/1"
MAX_ANSWER = 4 * 1024 * 1024  # bytes of the target's answer to one migrate verb
MAX_DEFINITION = 1024 * 1024  # bytes of the domain definition the target is given
DEFINITION_HINT = "this verb is the target's part of `vgpuadm migrate run`: run that on the source host"


@dataclass
class MoveStep:
    """One host's part of a move (the answer of `migrate incoming|finish|abort --json`, checked where it enters):
    the steps it ran (or would run), where the move stands there afterwards, and what the domain records there."""

    domain: str
    host: str
    dry_run: bool
    changed: bool
    state: str
    steps: list[str]
    devices: list[Allocation] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"schema": STEP_SCHEMA, "domain": self.domain, "host": self.host, "dry_run": self.dry_run,
                "changed": self.changed, "state": self.state, "steps": self.steps,
                "devices": [allocation_json(a) for a in self.devices]}  # fmt: skip


@dataclass
class MoveResult:
    """What `migrate prepare|run|abort` did (or, dry, would do) on each host, in order: (where, step) pairs."""

    domain: str
    target: str
    dry_run: bool
    state: str
    steps: list[tuple[str, str]]
    devices: list[Allocation]  # what the domain records on the target afterwards

    def to_json(self) -> dict[str, Any]:
        return {"schema": STEP_SCHEMA, "domain": self.domain, "host": self.target, "dry_run": self.dry_run,
                "changed": bool(self.steps) and not self.dry_run, "state": self.state,
                "steps": [f"{where}: {step}" for where, step in self.steps],
                "devices": [allocation_json(a) for a in self.devices]}  # fmt: skip


def parse_answer(data: bytes, where: str, vm: str) -> MoveStep:
    """The target's answer (`where` names it), checked against its schema (migrate-step) and the metadata's
    grammars here, where it enters: HostIOError on the first thing out of them."""
    import jsonschema  # heavy (~40 ms): only on the path that has an answer to check, never for `migrate check`

    try:
        doc = orjson.loads(data)
        schemas.validate("migrate-step", doc)
    except (ValueError, UnicodeDecodeError):
        raise HostIOError(f"{where} is not JSON", "check the vgpuadm version there") from None
    except jsonschema.ValidationError as exc:
        raise HostIOError(f"{where} is no vgpuadm-migrate-step/1 document: {exc.message[:120]}",
                          "check the vgpuadm version there (both hosts need the same)") from None  # fmt: skip
    if doc["domain"] != vm:
        raise HostIOError(f"{where} is about domain {doc['domain'][:80]!r}, not {vm}", "check the vgpuadm there")
    devices = []
    for d in doc["devices"]:
        a = Allocation(vm, d["mode"], d["type_id"], d["parent"], d["uuid"], address=d["address"], params=d["params"],
                       slot=d["slot"], extra=d["options"])  # fmt: skip
        try:
            xml.metadata_xml([a])  # the metadata grammar (mode, option names and values), as if recorded here
        except VgpuadmError as exc:
            raise HostIOError(f"{where}: device #{d['slot']}: {exc.message}", "check the vgpuadm there") from None
        devices.append(a)
    return MoveStep(vm, doc["host"], doc["dry_run"], doc["changed"], doc["state"], doc["steps"], devices)


def _call(
    peer: remote.Peer, args: list[str], vm: str, *, stdin: bytes | None = None, dry_run: bool = False
) -> MoveStep:
    data = peer.call([*args, *(["--dry-run"] if dry_run else [])], MAX_ANSWER, stdin=stdin)
    return parse_answer(data, f"the answer {peer.name} sent", vm)


def _marking(plan: Plan) -> list[str]:
    """A mark plan's one step, in the words of its summary (its DefineDomain says only what it records)."""
    return [f"step 1/1 {plan.summary}"] if plan.steps else []


def _state(allocations: list[Allocation]) -> str:
    return moving(allocations) or "none"


def incoming(
    root: str | None, vm: str, definition: str, type_name: str, count: int, *, uuids: tuple[str, ...] = (),
    params: tuple[str, ...] = (), display: bool = False, ramfb: bool = False, connect: str | None = None,
    dry_run: bool = False,
) -> MoveStep:  # fmt: skip
    """The target's part of a move (`migrate incoming`, run by the source's `migrate prepare|run`): define domain
    `vm` from `definition` (its XML without vgpuadm's devices and metadata, read from a file or stdin) and give it
    `count` devices of `type_name` through this host's own planner, recorded as incoming. Done already (the same
    move run again after it stopped): nothing to do."""
    text = read_input(definition, "domain definition", DEFINITION_HINT, limit=MAX_DEFINITION, pipes=True)
    try:
        portable = text.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError("the domain definition is not UTF-8", DEFINITION_HINT) from None
    name, _uuid = xml.domain_identity(xml.parse_domain(portable))
    if name != vm or xml.parse_allocations(portable) or xml.parse_hostdevs(portable):
        raise UsageError(f"the domain definition is not domain {vm}'s without vgpuadm metadata and hostdevs",
                         DEFINITION_HINT)  # fmt: skip
    checked = tuple(mdev_uuid(u, "the source's mdev UUIDs") for u in uuids)
    with Session.changing(root, connect, dry_run=dry_run) as s:
        d = s.domains().by_name.get(vm)
        if d is not None and moving(d.allocations) == migration.INCOMING:
            return MoveStep(vm, s.host_key, dry_run, False, migration.INCOMING, [], list(d.allocations))
        if d is not None or vm in s.virt.list_domains():
            raise ConflictError(f"domain {vm} is defined on this host already",
                                f"undefine it here (virsh undefine {vm}) or move the VM to another host")  # fmt: skip
        planning = with_recorded(s.snap, s.domains())
        mig = host_mig.read_host(s.root) if device_plans.mig_may_need(planning, [type_name]) else device_plans.NO_MIG
        planning = device_plans.mig_project(planning, mig, [type_name])  # as `create` plans a MIG-backed type
        [made] = planner.plan_create_many(planning, [(portable, count)], type_name, display=display, ramfb=ramfb,
                                          params=params, taken=s.domains().users(), uuids=checked,
                                          mig=mig)  # fmt: skip
        plan = migration.incoming_plan(vm, portable, made.plan, made.after, s.host_key, "incoming")
        s.execute(plan, dry_run=dry_run)
        after = migration.marked(made.after, migration.INCOMING)
        return MoveStep(vm, s.host_key, dry_run, not dry_run, migration.INCOMING, plan.describe(), after)


def finish(root: str | None, vm: str, *, connect: str | None = None, dry_run: bool = False) -> MoveStep:
    """The target's last part (`migrate finish`): the domain's devices here stop recording the move."""
    with Session.changing(root, connect, dry_run=dry_run) as s:
        d = s.domains().by_name.get(vm)
        if d is None:
            s.virt.xml(vm)  # NotFoundError naming the domain
            raise ConflictError(f"domain {vm}'s vgpuadm metadata names another host", "finish it on that host")
        if moving(d.allocations) != migration.INCOMING:
            return MoveStep(vm, s.host_key, dry_run, False, _state(list(d.allocations)), [], list(d.allocations))
        plan = migration.mark_plan(vm, list(d.allocations), None, s.host_key, d.xml)
        s.execute(plan, dry_run=dry_run)
        return MoveStep(vm, s.host_key, dry_run, not dry_run, "moved", _marking(plan),
                        migration.marked(d.allocations, None))  # fmt: skip


def abort_here(root: str | None, vm: str, *, connect: str | None = None, dry_run: bool = False) -> MoveStep:
    """Undo this host's part of a move that stopped half-way: an incoming domain is undefined and its devices
    freed; an outgoing one's devices stop recording the move (the VM stays here as it was). Nothing to do for a
    domain that records no move, or that is not here."""
    with Session.changing(root, connect, dry_run=dry_run) as s:
        d = s.domains().by_name.get(vm)
        state = moving(d.allocations) if d is not None else None
        if d is None or state is None:
            return MoveStep(vm, s.host_key, dry_run, False, "none", [], list(d.allocations) if d else [])
        owned = list(d.allocations)
        if state == migration.INCOMING and d.running:
            raise ConflictError(f"domain {vm} runs here: it moved here live, this host's domain is the VM now",
                                f"end the move here: `vgpuadm migrate finish --vm {vm}`")  # fmt: skip
        if state == migration.OUTGOING:
            plan = migration.mark_plan(vm, owned, None, s.host_key, d.xml)
            after, lines = migration.marked(owned, None), _marking(plan)
        else:
            plan = migration.leaving_plan(s.snap, vm, s.virt.xml(vm, secure=True), owned, load_drivers(s.root.path),
                                          "the move is aborted", _mig_release(s, owned))  # fmt: skip
            after, lines = [], plan.describe()
        s.execute(plan, dry_run=dry_run)
        return MoveStep(vm, s.host_key, dry_run, not dry_run, "none", lines, after)


def abort(root: str | None, vm: str, *, to: str | None = None, target_root: str | None = None,
          target_connect: str | None = None, connect: str | None = None, dry_run: bool = False) -> MoveResult:  # fmt: skip
    """`migrate abort`: the target's part undone first (when it is named), then this host's."""
    steps: list[tuple[str, str]] = []
    name = "this host"
    if to or target_root:
        peer = remote.peer(to, target_root, target_connect)
        with Session.read(root, connect) as s:
            if vm not in s.domains().by_name:  # it left: the target's copy is the VM now
                raise ConflictError(f"domain {vm} is not on this host: its move is done, the target's domain is the "
                                    f"VM now", f"end the move there: `vgpuadm migrate finish --vm {vm}` on the target")  # fmt: skip
        name = peer.name
        there = _call(peer, ["migrate", "abort", "--vm", vm, "--json"], vm, dry_run=dry_run)
        steps += [(peer.name, step) for step in there.steps]
    here = abort_here(root, vm, connect=connect, dry_run=dry_run)
    steps += [("this host", step) for step in here.steps]
    return MoveResult(vm, name, dry_run, "none", steps, [])


def move(root: str | None, vm: str, *, to: str | None = None, target_root: str | None = None,
         target_connect: str | None = None, migrate_uri: str | None = None, connect: str | None = None,
         dry_run: bool = False, offline: bool = False, finish: bool = True,
         progress: Progress | None = None) -> MoveResult:  # fmt: skip
    """`migrate run` (`finish`) and `migrate prepare` (not `finish`): move `vm` to the target — cold when its
    domain is stopped (or `offline`), live when it runs and the check says its devices move live. Check (the
    target's inventory), mark its devices outgoing here, have the target make its own and record them incoming
    (`migrate incoming`); then, to finish, move the domain (cold: undefine it here; live: libvirt moves the running
    guest, `migrate_uri` its data address) and free its devices here, and have the target drop the mark (`migrate
    finish`). A failure before the domain leaves this host undoes the target's part (`migrate abort` there) and the
    mark here; a move that stopped half-way goes on when run again."""
    peer = remote.peer(to, target_root, target_connect)
    data_uri = remote.migrate_uri(migrate_uri)
    target = _target_inventory(peer)
    steps: list[tuple[str, str]] = []
    with Session.changing(root, connect, dry_run=dry_run) as s:
        if target_root and os.path.realpath(target_root) == os.path.realpath(s.root.path):
            raise UsageError("the target is this host", "give another host's root (--target-root) or URI (--to)")
        d = s.domains().by_name.get(vm)
        if d is None:
            try:
                s.virt.xml(vm)
            except NotFoundError as exc:  # run again after the domain left: the move may be done but not ended there
                exc.hint = (f"if its move to {peer.name} went through, end it there: `vgpuadm migrate finish --vm "
                            f"{vm}` on the target; else {exc.hint}")  # fmt: skip
                raise
            raise ConflictError(f"domain {vm}'s vgpuadm metadata names another host", "move it from that host")
        owned = list(d.allocations)
        live = d.running
        if live and offline:
            raise ConflictError(f"domain {vm} is running: --offline moves a VM with its domain stopped (cold)",
                                f"shut it down (virsh shutdown {vm}) and run this again, or drop --offline to move "
                                "it live")  # fmt: skip
        req = migration.request(vm, owned)
        if d.unrecorded():
            raise ConflictError(f"domain {vm} has hostdevs vgpuadm does not record ({d.unrecorded()[0][1]}): they "
                                "name this host's devices", f"detach them (virsh edit {vm}), or record them with "
                                f"`vgpuadm adopt --vm {vm}`, and run this again")  # fmt: skip
        if moving(owned) != migration.OUTGOING:
            verdict = migration.check(s.snap, vm, d.running, owned, target, offline=offline,
                                      drivers=_drivers(s) if live else None)  # fmt: skip
            blocked = next((dev for dev in verdict.devices if dev.move == "no"), None)
            if blocked is not None:
                raise CapacityError(f"domain {vm} cannot move to {peer.name}: {blocked.what}: {blocked.reasons[0]}",
                                    "see `vgpuadm migrate check` for each device")  # fmt: skip
            cold = next((dev for dev in verdict.devices if dev.move == "cold"), None)
            if live and cold is not None:
                raise ConflictError(f"domain {vm} is running and moves only stopped: {cold.what}: {cold.reasons[0]}",
                                    f"shut it down (virsh shutdown {vm}) and run this again (a cold move); see "
                                    "`vgpuadm migrate check` for each device")  # fmt: skip
        secure = s.virt.xml(vm, secure=True)
        portable = migration.portable_xml(secure, owned).encode()
        mark = migration.mark_plan(vm, owned, migration.OUTGOING, s.host_key, d.xml)
        s.execute(mark, dry_run=dry_run, progress=progress)
        steps += [("this host", step) for step in _marking(mark)]
        try:
            there = _call(peer, [*req.argv(vm), "--definition", "-"], vm, stdin=portable, dry_run=dry_run)
        except VgpuadmError as exc:
            _undo_mark(s, vm, dry_run, exc)
            raise
        steps += [(peer.name, step) for step in there.steps]
        if not finish:
            return MoveResult(vm, peer.name, dry_run, migration.OUTGOING, steps, there.devices)
        s.refresh()
        if live:
            steps += _leave_live(s, peer, vm, owned, there, data_uri, dry_run, progress)
        else:
            current = s.virt.xml(vm, secure=True) if not dry_run else secure
            leave = migration.leaving_plan(s.snap, vm, current, migration.marked(owned, migration.OUTGOING),
                                           load_drivers(s.root.path), f"moved to {peer.name}", _mig_release(s, owned))  # fmt: skip
            try:
                s.execute(leave, dry_run=dry_run, progress=progress)
            except VgpuadmError as exc:  # the executor put this host back; the target's part goes
                _abort_there(peer, vm, exc)
                _undo_mark(s, vm, dry_run, exc)
                raise
            steps += [("this host", step) for step in leave.describe()]
    if dry_run:
        steps.append((peer.name, f"record domain {vm}'s devices as settled (the move is over)"))
        return MoveResult(vm, peer.name, dry_run, "moved", steps, there.devices)
    try:
        done = _call(peer, ["migrate", "finish", "--vm", vm, "--json"], vm)
    except VgpuadmError as exc:
        raise HostIOError(f"domain {vm} moved to {peer.name}, but it did not record the move as over: {exc.message}",
                          f"run `vgpuadm migrate finish --vm {vm}` there (never `migrate abort`: the VM is there now)"
                          ) from None  # fmt: skip
    steps += [(peer.name, step) for step in done.steps]
    return MoveResult(vm, peer.name, dry_run, "moved", steps, done.devices)


def _leave_live(s: Session, peer: remote.Peer, vm: str, owned: list[Allocation], there: MoveStep,
                data_uri: str | None, dry_run: bool, progress: Progress | None) -> list[tuple[str, str]]:  # fmt: skip
    """This host's end of a live move: libvirt moves the running guest to the target's definition (its live and
    persistent XML rewritten for the target's devices and metadata), then this host frees its devices. A failed
    migration undoes the target's part and the mark here (the guest runs on here); a failure to free the devices
    once the guest left says how to free them (the move itself is done)."""
    line = (f"move running domain {vm} live to {peer.name} (libvirt: live, post-copy off, persistent there, "
            "undefined here)")  # fmt: skip
    if not dry_run:
        live_xml = migration.destination_xml(s.virt.xml(vm, inactive=False, secure=True, migratable=True), owned,
                                             there.devices, there.host)  # fmt: skip
        persistent_xml = migration.destination_xml(s.virt.xml(vm, secure=True), owned, there.devices, there.host)
        try:
            with VirtConn(peer.libvirt) as target:
                s.virt.migrate_live(vm, target, live_xml=live_xml, persistent_xml=persistent_xml, data_uri=data_uri)
        except VgpuadmError as exc:  # libvirt leaves the guest running here: the target's part goes, the mark too
            exc.hint = (
                f"{vm} runs here as before and the target's part is undone: fix what libvirt says, run this again"
            )
            _abort_there(peer, vm, exc)
            _undo_mark(s, vm, dry_run, exc)
            raise
        s.refresh()
    free = migration.freeing_plan(s.snap, vm, owned, load_drivers(s.root.path), f"moved live to {peer.name}",
                                  _mig_release(s, owned))  # fmt: skip
    try:
        s.execute(free, dry_run=dry_run, progress=progress)
    except VgpuadmError as exc:
        raise ConflictError(f"domain {vm} moved live to {peer.name}, but its devices here were not freed: "
                            f"{exc.message}", "free them with `vgpuadm reconcile --fix` here, then run `vgpuadm "
                            f"migrate finish --vm {vm}` there") from None  # fmt: skip
    return [("this host", line), *(("this host", step) for step in free.describe())]


def _mig_release(s: Session, gone: list[Allocation]) -> list[Step]:
    """The MIG GPU instances vgpuadm made for the devices `gone` (as `destroy` releases them)."""
    if not any("mig_instance" in a.extra for a in gone):
        return []
    return device_plans.mig_release(s.snap, host_mig.read_host(s.root), gone)[0]


def _target_inventory(peer: remote.Peer) -> TargetHost:
    """The target's `vgpuadm inventory --json`, checked where it enters (report/merge.py, catalog/migration.py)."""
    where = f"the inventory {peer.name} sent"
    return target_host(parse_report(peer.call(["inventory", "--json"], MAX_REPORT), where), where)


def _undo_mark(s: Session, vm: str, dry_run: bool, exc: VgpuadmError) -> None:
    """The outgoing mark of `vm` dropped again after the move failed (`exc`); when that fails too, the hint says
    how to finish."""
    if dry_run:
        return
    try:
        s.refresh()
        d = s.domains().by_name[vm]
        s.execute(migration.mark_plan(vm, list(d.allocations), None, s.host_key, d.xml))
    except (VgpuadmError, KeyError):
        exc.hint += f"; then `vgpuadm migrate abort --vm {vm}` here"


def _abort_there(peer: remote.Peer, vm: str, exc: VgpuadmError) -> None:
    try:
        _call(peer, ["migrate", "abort", "--vm", vm, "--json"], vm)
    except VgpuadmError as failed:
        exc.hint += f"; the target's part stays ({failed.message}): `vgpuadm migrate abort --vm {vm}` there"
