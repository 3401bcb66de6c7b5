"""The guest verbs: `create`, `destroy`, `passthrough`, `release`. Each runs in one Session (lock, snapshot, one
domain scan), asks plan/guest.py for ONE plan per domain (kernel steps + libvirt steps + the metadata record) and
hands it to the executor, so a failed attach rolls back the device it just made."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from vgpuadm import modes
from vgpuadm.errors import ConflictError, NotFoundError, VgpuadmError
from vgpuadm.executor import load_drivers
from vgpuadm.host import mig as host_mig
from vgpuadm.model import Allocation, pci_address
from vgpuadm.ops.session import Session
from vgpuadm.plan import devices as device_plans
from vgpuadm.plan import guest as planner
from vgpuadm.plan.domains import with_recorded
from vgpuadm.steps import Plan

Progress = Callable[[int, int, str], None]


@dataclass
class GuestResult:
    """What a guest command did (or, with dry_run, would do)."""

    domain: str
    uri: str
    plan: Plan
    dry_run: bool
    devices: list[Allocation]  # what the domain owns afterwards
    added: list[Allocation] = field(default_factory=list)
    removed: list[Allocation] = field(default_factory=list)
    shown: list[Allocation] = field(default_factory=list)  # the added or removed devices whose hostdev XML it shows
    message: str = ""
    warnings: list[str] = field(default_factory=list)  # accepted, but the operator should know (printed to stderr)

    @property
    def hostdevs(self) -> list[str]:
        """The hostdev XML of the devices it shows, rendered when a report asks for it (-v, --json)."""
        return [modes.hostdev_xml(a) for a in self.shown]

    @property
    def changed(self) -> bool:
        return not self.plan.empty and not self.dry_run

    def to_json(self) -> dict[str, Any]:
        return {
            "domain": self.domain,
            "uri": self.uri,
            "changed": self.changed,
            "dry_run": self.dry_run,
            "message": self.message,
            "steps": self.plan.describe(),
            "added": [allocation_json(a) for a in self.added],
            "removed": [allocation_json(a) for a in self.removed],
            "devices": [allocation_json(a) for a in self.devices],
            "hostdevs": self.hostdevs,
            "warnings": self.warnings,
        }


def allocation_json(a: Allocation) -> dict[str, Any]:
    return {
        "slot": a.slot,
        "mode": a.mode,
        "type_id": a.type_id,
        "parent": a.parent,
        "uuid": a.uuid,
        "address": a.address,
        "params": a.params,
        "options": dict(sorted(a.extra.items())),
    }


def create(
    root: str | None,
    vm: str,
    type_name: str,
    count: int = 1,
    *,
    connect: str | None = None,
    dry_run: bool = False,
    progress: Progress | None = None,
    **options: Any,
) -> GuestResult:
    """Give domain `vm` `count` devices of `type_name` in total (gpu, policy, numa, display, ramfb, params)."""
    return create_many(root, [(vm, count)], type_name, connect=connect, dry_run=dry_run, progress=progress,
                       **options)[0]  # fmt: skip


def create_many(
    root: str | None,
    requests: Sequence[tuple[str, int]],
    type_name: str,
    *,
    connect: str | None = None,
    dry_run: bool = False,
    progress: Progress | None = None,
    **options: Any,
) -> list[GuestResult]:
    """Provision several domains (name, total count) with one type under one lock, one discovery and one libvirt
    connection. Placement is joint; each domain's plan is applied (or rolled back) as a unit, in order. When one
    fails, the domains before it keep their devices and the error says which they are."""
    with Session.changing(root, connect, dry_run=dry_run) as s:
        snap = s.snap
        running = sorted({vm for vm, _ in requests} & s.domains().running) if options.get("on_demand") else []
        if running:  # the hook makes on-demand devices as the domain starts: a running one would never get them
            raise ConflictError(
                f"domain {running[0]} is running; an on-demand device is made when its domain starts",
                f"shut it down first (virsh shutdown {running[0]}), or give it the device now without --on-demand",
            )
        xmls = [(s.domain_xml(vm), count) for vm, count in requests]
        planning = with_recorded(snap, s.domains())  # what restore will bring back is taken
        mig = host_mig.read_host(s.root) if device_plans.mig_may_need(planning, [type_name]) else device_plans.NO_MIG
        planning = device_plans.mig_project(planning, mig, [type_name])
        plans = planner.plan_create_many(planning, xmls, type_name, taken=s.domains().users(), mig=mig, **options)
        done: list[str] = []
        for p in plans:
            try:
                s.execute(p.plan, dry_run=dry_run, progress=progress)
            except VgpuadmError as exc:
                if len(plans) > 1:
                    exc.message = f"domain {p.name}: {exc.message}"
                    exc.args = (exc.message,)
                    if done:
                        exc.hint += f"; already provisioned before it: {', '.join(done)}"
                raise
            if p.added or p.removed:
                done.append(p.name)
        return [
            GuestResult(p.name, s.uri, p.plan, dry_run, p.after, p.added, p.removed,
                        shown=p.added, message=p.plan.summary,
                        warnings=p.warnings)
            for p in plans
        ]  # fmt: skip


# -- destroy ---------------------------------------------------------------------------------------------------------


def destroy(
    root: str | None,
    vm: str,
    *,
    uuid: str | None = None,
    all_: bool = False,
    connect: str | None = None,
    dry_run: bool = False,
    progress: Progress | None = None,
    forget: bool = False,
) -> GuestResult:
    with Session.changing(root, connect, dry_run=dry_run) as s:
        dom = s.domain_xml(vm)
        plan, gone, after = planner.plan_destroy(s.snap, dom, s.domains().users(besides=vm), uuid=uuid, all_=all_,
                                                 drivers=load_drivers(s.root.path), forget=forget)  # fmt: skip
        if not forget and any(
            "mig_instance" in a.extra for a in gone
        ):  # the GPU instances vgpuadm made for them go after them
            release, _ = device_plans.mig_release(s.snap, host_mig.read_host(s.root), gone)
            plan = Plan(plan.steps + tuple(release), plan.summary)
        s.execute(plan, dry_run=dry_run, progress=progress)
        return GuestResult(
            vm, s.uri, plan, dry_run, after, removed=gone, shown=gone,
            message=plan.summary if gone or not plan.empty else f"domain {vm} owns no vgpuadm devices",
        )  # fmt: skip


# -- passthrough / release -------------------------------------------------------------------------------------------


def passthrough(
    root: str | None,
    gpu: str,
    vm: str,
    *,
    connect: str | None = None,
    force: bool = False,
    rom_file: str | None = None,
    dry_run: bool = False,
    progress: Progress | None = None,
    on_demand: bool = False,
) -> GuestResult:
    with Session.changing(root, connect, dry_run=dry_run) as s:
        dom = s.domain_xml(vm)
        plan, added, after = planner.plan_passthrough(s.snap, dom, gpu, s.domains().users(), force=force,
                                                      rom_file=rom_file, on_demand=on_demand,
                                                      running=vm in s.domains().running)  # fmt: skip
        s.execute(plan, dry_run=dry_run, progress=progress)
        return GuestResult(vm, s.uri, plan, dry_run, after, added,
                           shown=added, message=plan.summary)  # fmt: skip


def release(
    root: str | None,
    gpu: str,
    *,
    connect: str | None = None,
    dry_run: bool = False,
    progress: Progress | None = None,
) -> GuestResult:
    """Take a passed-through GPU back from whichever domain has it (per vgpuadm metadata) and give it back to its
    host drivers. With no domain holding it, only the drivers are restored. `gpu` is checked here, once (the CLI
    hands it over canonical already; a Python caller may not)."""
    gpu = pci_address(gpu)
    with Session.changing(root, connect, dry_run=dry_run) as s:
        if gpu not in s.snap.functions:
            raise NotFoundError(
                f"No PCI function {gpu} on this host", s.snap.skipped(gpu, "run `vgpuadm gpus` to list GPUs")
            )
        plan, holders, gone = planner.plan_release(s.snap, s.domains(), gpu, load_drivers(s.root.path))
        s.execute(plan, dry_run=dry_run, progress=progress)
        return GuestResult(", ".join(holders) or "no domain", s.uri, plan, dry_run, [], removed=gone,
                           shown=gone, message=plan.summary)  # fmt: skip


# -- adopt -----------------------------------------------------------------------------------------------------------


@dataclass
class AdoptResult(GuestResult):
    """What `adopt` recorded (would record), and the hostdevs it left alone because no mode knows them here."""

    skipped: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {**super().to_json(), "skipped": self.skipped}


def adopt(
    root: str | None,
    vm: str,
    *,
    connect: str | None = None,
    dry_run: bool = False,
    progress: Progress | None = None,
) -> AdoptResult:
    """Record in `vm`'s vgpuadm metadata the devices its XML already gives it (plan/guest.plan_adopt), through the
    same definition step every guest verb writes the metadata with."""
    with Session.changing(root, connect, dry_run=dry_run) as s:
        if vm not in s.domains().by_name:
            s.virt.xml(vm)  # raises NotFoundError naming the domain
            raise ConflictError(
                f"domain {vm}'s vgpuadm metadata names another host", "adopt it on the host its metadata names"
            )
        plan, added, after, skipped = planner.plan_adopt(s.snap, s.domains(), vm)
        s.execute(plan, dry_run=dry_run, progress=progress)
        return AdoptResult(vm, s.uri, plan, dry_run, after, added, message=plan.summary, skipped=skipped)
