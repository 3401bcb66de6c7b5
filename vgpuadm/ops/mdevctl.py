"""mdevctl interop: `mdevctl export` writes an mdevctl definition (start=auto) per mdev the domains own, so
mdevctl's udev rule can bring them back at boot; `mdevctl import` creates the mdevs definitions describe. Both run in
one Session under the host lock; the mdevs are planned by the mdev mode like every other create, the definition
files written by managed-file steps (WriteManagedFile) through the same executor (journal, undo)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vgpuadm import modes
from vgpuadm.catalog.capacity import consume
from vgpuadm.io import mdevctl
from vgpuadm.io.domainxml import read_domain_dir
from vgpuadm.model import Allocation
from vgpuadm.modes.mdev import MODE as MDEV
from vgpuadm.ops.session import Session
from vgpuadm.steps import MDEVCTL_DEFINITION, CreateMdev, Plan, Step, WriteManagedFile


@dataclass(frozen=True)
class ExportResult:
    written: list[tuple[mdevctl.Definition, bool]]  # each definition and whether its file changed (would change)
    plan: Plan
    dry_run: bool

    def to_json(self) -> dict[str, Any]:
        """The `mdevctl export --json` document (vgpuadm/schemas/change.schema.json)."""
        return change_json(self.plan, self.dry_run, [d.uuid for d, changed in self.written if changed])


def change_json(plan: Plan, dry_run: bool, devices: list[str]) -> dict[str, Any]:
    return {"changed": not dry_run and not plan.empty, "dry_run": dry_run, "summary": plan.summary,
            "steps": list(plan.describe()), "devices": devices}  # fmt: skip


def export(
    root: str | None,
    *,
    connect: str | None = None,
    domain_xml_dir: str | None = None,
    from_host: bool = False,
    dry_run: bool = False,
) -> ExportResult:
    """Write an mdevctl definition (start=auto) for every mdev the domains own, or with `from_host` for every
    mdev that exists now; each definition and whether its file changed (dry_run: would change; nothing is
    written, and only reading needs no root)."""
    with Session.changing(root, connect, dry_run=dry_run) as s:
        snap = s.snap
        if from_host:
            defs = [mdevctl.definition(m.parent, m.uuid, m.type_id, (m.vgpu_params or "").strip() or None)
                    for m in snap.mdevs.values()]  # fmt: skip
        else:
            doms = read_domain_dir(domain_xml_dir, snap.host_key) if domain_xml_dir else s.domains()
            defs = [mdevctl.definition(*rec) for a in doms.allocations if (rec := modes.of(a).mdev_record(a))]
        defs.sort(key=lambda d: (d.parent, d.uuid))
        out: list[tuple[mdevctl.Definition, bool]] = []
        steps: list[Step] = []
        for d in defs:
            text = mdevctl.render(d)
            previous = mdevctl.read_file(s.root.path, d.parent, d.uuid)  # also checks parent, UUID and path
            out.append((d, previous != text))
            if previous != text:
                steps.append(WriteManagedFile(MDEVCTL_DEFINITION, d.host_path, text, previous))
        plan = Plan.of(steps, "write mdevctl definitions")
        s.execute(plan, dry_run=dry_run)  # lock (held), journal, undo
        return ExportResult(out, plan, dry_run)


@dataclass(frozen=True)
class ImportResult:
    plan: Plan
    applied: tuple[str, ...]
    problems: tuple[str, ...]
    dry_run: bool = False

    def to_json(self) -> dict[str, Any]:
        """The `mdevctl import --json` document (vgpuadm/schemas/change.schema.json)."""
        made = [] if self.dry_run else [s.uuid for s in self.plan.steps if isinstance(s, CreateMdev)]
        return change_json(self.plan, self.dry_run, made)


def import_(root: str | None, *, check: bool = False, include_manual: bool = False) -> ImportResult:
    """Create the mdevs that mdevctl definitions describe and that do not exist yet (start=auto ones, or all)."""
    with Session.changing(root, dry_run=check) as s:
        snap = s.snap
        steps: list[Step] = []
        problems: list[str] = []
        vsnap = snap
        for d in mdevctl.read_definitions(s.root.path):
            if d.start != "auto" and not include_manual:
                continue
            if d.uuid in vsnap.mdevs:
                have = vsnap.mdevs[d.uuid]
                if (have.parent, have.type_id) != (d.parent, d.mdev_type):
                    problems.append(f"{d.host_path}: {d.uuid} exists as {have.type_id} on {have.parent}")
                continue
            parent = vsnap.mdev_parents.get(d.parent)
            t = next((t for t in parent.types if t.type_id == d.mdev_type), None) if parent else None
            if t is None:
                problems.append(f"{d.host_path}: no type {d.mdev_type} on parent {d.parent}")
                continue
            other = [k for k, _ in d.attrs if k != mdevctl.PARAMS_ATTR]
            if other:
                problems.append(f"{d.host_path}: attributes {', '.join(other)} are not supported; created without them")
            steps.extend(MDEV.plan_create(vsnap, t, d.uuid, d.params or ""))
            vsnap = consume(vsnap, [Allocation("", MDEV.name, d.mdev_type, d.parent, d.uuid)])
        plan = Plan.of(steps, "create mdevs from mdevctl definitions")
        if check or plan.empty:
            return ImportResult(plan, tuple(plan.describe()), tuple(problems), check)
        result = s.execute(plan)
        return ImportResult(plan, result.applied, tuple(problems))
