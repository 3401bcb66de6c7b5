"""Declarative plans (`vgpuadm apply -f plan.yaml`): load and validate a plan file, then diff the desired devices
per VM against the allocations the domains already own. Pure: no host, no libvirt.

Every error in a plan file names the place: `plan.yaml:7: vms.web01.count: must be ≥ 1`. Locations come from
PyYAML's node marks, so the plan is composed into nodes once, checked against vgpuadm/schemas/plan-v1.schema.json,
and only then turned into Python values.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vgpuadm import modes
from vgpuadm.errors import ConflictError
from vgpuadm.model import Allocation, join_params, normalise_params, same_params
from vgpuadm.modes.virtio_gpu import TYPE as VIRTIO_GL
from vgpuadm.plan.policies import GpuSpec


@dataclass(frozen=True)
class Display:
    enabled: bool = False
    ramfb: bool = False


@dataclass(frozen=True)
class VmSpec:
    """What one VM should own: `count` devices of `type`, or the functions in `passthrough`; and/or virtio-gl."""

    name: str
    type: str | None = None
    count: int = 1
    passthrough: tuple[str, ...] = ()
    gpu: str | None = None
    policy: str = "pack"
    numa: int | None = None
    params: str = ""  # vgpu_params as written to sysfs ("frame_rate_limiter=0, disable_vnc=1"); "" = none
    display: Display = Display()
    force: bool = False  # pass a GPU through even when vgpuadm calls it unsafe (not in plan files: the module's force)
    on_demand: bool = False  # recorded now, made by the qemu hook when the domain starts (vgpuadm hook install)
    virtio_gl: bool = False  # a virtio-gpu with 3D besides (or instead of) the type/passthrough devices
    virtio_gl_gpu: str | None = None  # render on this GPU's node (else the lowest numbered)
    line: int = 0  # where the VM is named in the plan file (for messages)
    key_lines: dict[str, int] = field(default_factory=dict, hash=False, compare=False)  # key → line

    def line_of(self, key: str) -> int:
        return self.key_lines.get(key, self.line)


@dataclass(frozen=True)
class DesiredPlan:
    source: str
    vms: dict[str, VmSpec]
    gpus: dict[str, GpuSpec] = field(default_factory=dict)


@dataclass(frozen=True)
class Add:
    """Create `count` devices of `type_id` (typed), give the VM the function `address` (passthrough), or give it
    a virtio-gl device (`virtio_gl`)."""

    vm: str
    spec: VmSpec
    type_id: str | None = None
    count: int = 1
    address: str | None = None
    virtio_gl: bool = False


@dataclass(frozen=True)
class SetParams:
    allocation: Allocation
    params: str


@dataclass(frozen=True)
class Diff:
    adds: tuple[Add, ...] = ()
    removes: tuple[Allocation, ...] = ()
    set_params: tuple[SetParams, ...] = ()
    kept: tuple[Allocation, ...] = ()
    untouched: tuple[str, ...] = ()  # domains with devices the plan does not name (left alone without --prune)
    gpus: tuple[str, ...] = ()  # `~ gpu …` lines: host-policy changes (plan/policies.py)
    missing: tuple[Allocation, ...] = ()  # kept devices the host lacks (after a reboot): brought back as restore does

    @property
    def empty(self) -> bool:
        return not (self.adds or self.removes or self.set_params or self.gpus or self.missing)

    @property
    def instances_needed(self) -> int:
        return sum(a.count for a in self.adds)

    def lines(self) -> list[str]:
        """The diff as text: `+` added, `-` removed, `~` changed, in VM order."""
        out: list[tuple[str, int, str]] = []
        gone: dict[str, int] = {}
        for a in self.missing:
            gone[a.domain] = gone.get(a.domain, 0) + 1
        for vm, n in gone.items():
            out.append((vm, -1, f"! {vm}: {n} device{'s' if n > 1 else ''} missing (brought back as restore does)"))
        for r in self.removes:
            out.append((r.domain, 0, f"- {r.domain}: {describe_allocation(r)}"))
        for p in self.set_params:
            a = p.allocation
            out.append(
                (a.domain, 1, f"~ {a.domain}: {describe_allocation(a)} vgpu_params {a.params or ''!r} → {p.params!r}")
            )
        for add in self.adds:
            what = f"passthrough {add.address}" if add.address else f"{add.type_id} ×{add.count}"
            if add.virtio_gl:
                what = VIRTIO_GL + (f" on {add.spec.virtio_gl_gpu}" if add.spec.virtio_gl_gpu else "")
            what += " on demand" if add.spec.on_demand else ""
            if not add.address and not add.virtio_gl and add.count != add.spec.count:  # the VM has some already
                what += f" ({add.spec.count} in all)"  # the plan's count is the total
            out.append((add.vm, 2, f"+ {add.vm}: {what}"))
        return [*self.gpus, *(text for _, _, text in sorted(out, key=lambda t: (t[0], t[1])))]


def describe_allocation(a: Allocation) -> str:
    return modes.of(a).plan_line(a)


def format_params(params: str | Mapping[str, Any] | None) -> str:
    """vgpu_params text as written to sysfs, `k=v, k=v` (reference §2.5): a mapping's pairs (booleans as 1/0), or a
    string in either form (comma- or space-separated). UsageError on a malformed key or value."""
    if params is None:
        return ""
    if isinstance(params, str):
        return normalise_params(params)
    return normalise_params(join_params(f"{k}={int(v) if isinstance(v, bool) else v}" for k, v in params.items()))


def params_equal(a: str | None, b: str | None) -> bool:
    """Same vgpu_params regardless of order and form: `a=1, b=2` (written now) equals `a=1 b=2` (written by earlier
    versions, and still recorded in older domains' metadata)."""
    return same_params(a, b)


# -- diff --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Current:
    """What exists now: every domain's allocations and which domains run."""

    allocations: Sequence[Allocation] = ()
    running: frozenset[str] = frozenset()
    domains: frozenset[str] = field(default_factory=frozenset)  # every defined domain (named or not in the plan)


def diff(desired: DesiredPlan, current: Current, resolved_types: Mapping[str, str], *, prune: bool = False) -> Diff:
    """Changes that turn `current` into `desired`. `resolved_types` maps each VM's written type to the type_id the
    host knows it by (the API resolves names like "GRID P4-1Q" against discovery). Pure."""
    by_vm: dict[str, list[Allocation]] = {}
    for a in current.allocations:
        by_vm.setdefault(a.domain, []).append(a)
    adds: list[Add] = []
    removes: list[Allocation] = []
    set_params: list[SetParams] = []
    kept: list[Allocation] = []
    virtio_adds: list[Add] = []
    for name in sorted(desired.vms):
        spec = desired.vms[name]
        owned = sorted(by_vm.get(name, []), key=lambda a: a.slot)
        virtio = [a for a in owned if not modes.of(a).hostdev]  # the domain's <video>, apart from hostdevs
        owned = [a for a in owned if modes.of(a).hostdev]
        kept.extend(virtio[:1] if spec.virtio_gl else [])
        removes.extend(virtio[1:] if spec.virtio_gl else virtio)
        if spec.virtio_gl and not virtio:  # after every VM's hostdevs, so it takes the slot after theirs
            virtio_adds.append(Add(vm=name, spec=spec, type_id=VIRTIO_GL, virtio_gl=True))
        if not spec.type and not spec.passthrough:
            removes.extend(owned)
            continue
        if spec.passthrough:
            # A listed address names a GPU: it is passed through with its whole IOMMU group (its audio function),
            # recorded as one allocation per function whose `parent` is the GPU.
            want = set(spec.passthrough)
            covered: set[str] = set()
            for a in owned:
                if modes.of(a).whole_gpu and ({a.address, a.parent} & want) and a.on_demand == spec.on_demand:
                    covered.update(k for k in (a.address, a.parent) if k and k in want)
                    kept.append(a)
                else:
                    removes.append(a)
            adds.extend(Add(vm=name, spec=spec, address=addr) for addr in spec.passthrough if addr not in covered)
            continue
        type_id = resolved_types.get(spec.type or "", spec.type or "")
        matching = [a for a in owned if not modes.of(a).whole_gpu
                    and a.type_id == type_id and a.on_demand == spec.on_demand]  # fmt: skip
        removes.extend(a for a in owned if a not in matching)
        removes.extend(matching[spec.count :])
        for a in matching[: spec.count]:
            kept.append(a)
            if not params_equal(a.params, spec.params):
                set_params.append(SetParams(a, spec.params))
        if len(matching) < spec.count:
            adds.append(Add(vm=name, spec=spec, type_id=type_id, count=spec.count - len(matching)))
    adds.extend(virtio_adds)
    untouched = sorted(vm for vm in by_vm if vm not in desired.vms)
    if prune:
        removes.extend(a for vm in untouched for a in by_vm[vm])
        untouched = []
    return Diff(tuple(adds), tuple(removes), tuple(set_params), tuple(kept), tuple(untouched))


def check_safe(d: Diff, running: Iterable[str]) -> None:
    """Refuse to take a device from a running VM, or to change its parameters (the driver reads them at start)."""
    live = set(running)
    for a in d.removes:
        if a.domain in live:
            raise ConflictError(
                f"domain {a.domain} is running and owns {describe_allocation(a)} that the plan would remove",
                f"shut {a.domain} down first (virsh shutdown {a.domain}), then apply again",
            )
    for p in d.set_params:
        if p.allocation.domain in live:
            raise ConflictError(
                f"domain {p.allocation.domain} is running; vgpu_params of {describe_allocation(p.allocation)} "
                "can only change while it is off",
                f"shut {p.allocation.domain} down first, then apply again",
            )
