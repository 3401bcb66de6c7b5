"""mdevctl interop: `mdevctl export` writes an mdevctl definition (start=auto) per mdev the domains own, so
mdevctl's udev rule can bring them back at boot; `mdevctl import` creates the mdevs definitions describe. Both run in
one Session under the host lock; the mdevs are planned by the mdev mode like every other create, the definition
files written by WriteMdevctlDefinition steps through the same executor (journal, undo)."""

from __future__ import annotations

from dataclasses import dataclass

from vgpuadm import modes
from vgpuadm.catalog.capacity import consume
from vgpuadm.io import mdevctl
from vgpuadm.io.domainxml import read_domain_dir
from vgpuadm.model import Allocation
from vgpuadm.modes.mdev import MODE as MDEV
from vgpuadm.ops.session import Session
from vgpuadm.steps import Plan, Step, WriteMdevctlDefinition


def export(
    root: str | None, *, connect: str | None = None, domain_xml_dir: str | None = None, from_host: bool = False
) -> list[tuple[mdevctl.Definition, bool]]:
    """Write an mdevctl definition (start=auto) for every mdev the domains own, or with `from_host` for every
    mdev that exists now. Returns each definition and whether its file changed."""
    with Session.open(root, connect) as s:
        snap = s.snap
        if from_host:
            defs = [mdevctl.definition(m.parent, m.uuid, m.type_id, (m.vgpu_params or "").strip() or None)
                    for m in snap.mdevs.values()]  # fmt: skip
        else:
            doms = read_domain_dir(domain_xml_dir, snap.host_key) if domain_xml_dir else s.domains()
            defs = [mdevctl.definition(a.parent, a.uuid, a.type_id, a.params)
                    for a in doms.allocations if modes.of(a) is MDEV and a.parent and a.uuid and a.type_id]  # fmt: skip
        defs.sort(key=lambda d: (d.parent, d.uuid))
        out: list[tuple[mdevctl.Definition, bool]] = []
        steps: list[Step] = []
        for d in defs:
            text = mdevctl.render(d)
            previous = mdevctl.read_file(s.root.path, d.parent, d.uuid)  # also checks parent, UUID and path
            out.append((d, previous != text))
            if previous != text:
                steps.append(WriteMdevctlDefinition(d.parent, d.uuid, text, previous))
        s.execute(Plan.of(steps, "write mdevctl definitions"))  # lock (held), journal, undo
        return out


@dataclass(frozen=True)
class ImportResult:
    plan: Plan
    applied: tuple[str, ...]
    problems: tuple[str, ...]


def import_(root: str | None, *, check: bool = False, include_manual: bool = False) -> ImportResult:
    """Create the mdevs that mdevctl definitions describe and that do not exist yet (start=auto ones, or all)."""
    with Session.open(root) as s:
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
            return ImportResult(plan, tuple(plan.describe()), tuple(problems))
        result = s.execute(plan)
        return ImportResult(plan, result.applied, tuple(problems))
