"""The small interface every GPU sharing mode implements, the id and parameter grammars the modes share, and the
one registry that maps a layout, a type or a recorded mode to its Mode (filled by modes/__init__.py's `ship` and by
`register`; how a mode is added: modes/__init__.py's docstring).

A mode validates a request against a HostSnapshot, plans Steps (pure: it never reads the host) and says what the
libvirt hostdev needs (`hostdev_spec`): mdev → {"mode": "mdev", "uuid"}; vendor-VFIO VF → {"mode": "vf", "address",
"managed": "no"}; passthrough → {"mode": "pci", "functions": [...], "managed": "yes"}.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from vgpuadm.catalog.migration import Landing, TargetHost, vgpu_landing
from vgpuadm.errors import UsageError
from vgpuadm.model import (
    MODES_GROUP,
    Allocation,
    DeviceKey,
    Holding,
    HostSnapshot,
    Layout,
    VgpuType,
    declare_device_mode,
    mode_entry_points,
    pci_key,
)
from vgpuadm.steps import Plan, Step
from vgpuadm.usage import DriverUsage, GpuUsage, VgpuUsage
from vgpuadm.virt import xml

HostdevSpec = dict[str, Any]
# What a mode plans to bring one recorded device back after a reboot (plan/restore.py): independent units (one that
# fails is rolled back alone) and the problems that keep the device from coming back, one line each.
Rebuild = tuple[list[Plan], list[str]]
RECREATE_VGPUS = "re-create vGPUs"  # the summary of a unit that makes a vGPU again


class Mode(ABC):
    """One GPU sharing mode. `name` is what Allocation.mode records ("mdev", "vf", "pci").

    Besides planning, a mode answers every per-device question the rest of the program asks about an Allocation
    it records — its ownership key, what it is called, the host device it lives on, the vgpu_params it has now,
    the hostdev (or video) it renders, the restore phase that makes it — so callers never branch on the mode."""

    name: ClassVar[str]
    layouts: ClassVar[tuple[Layout, ...]]
    # The restore phase (plan/restore.PHASES) that makes this mode's devices again after a reboot; None: nothing to
    # make on the host.
    restore_phase: ClassVar[str | None] = None
    # What a reset of the device's GPU (nvidia-smi -r, a recovered Xid, a reload of its driver) loses of this mode's
    # devices, in words; restore (`--gpu`) makes it again in `restore_phase`. (): a reset loses nothing of them.
    reset_loses: ClassVar[tuple[str, ...]] = ()
    # The device is a whole GPU (with its IOMMU group's companions), given and taken back as one.
    whole_gpu: ClassVar[bool] = False
    # The vendor driver of the parent GPU must be bound for the device to exist (vGPU modes).
    needs_vendor_driver: ClassVar[bool] = False
    # The guest gets a <hostdev>; False for a device that is the domain's own <video>/<graphics> (virtio-gl).
    hostdev: ClassVar[bool] = True
    # What one recorded device of this mode holds of its GPU's shared capacity (the capacity model applies it as
    # data: model.holding). The built-in recorded modes' are model.DeviceMode's; an added mode's is declared from it.
    holds: ClassVar[Holding] = Holding.NOTHING

    def claims(self, t: VgpuType) -> bool:
        """Whether this mode makes the devices of `t` although `t`'s layout is another mode's (modes.for_type asks
        the added modes first); the built-in modes take their layouts' types and claim none."""
        return False

    def key(self, a: Allocation) -> DeviceKey | None:
        """The ownership key of `a`'s host device (what a domain's <hostdev> names); None: no host device."""
        return pci_key(a.address) if a.address else None

    def describe(self, a: Allocation) -> str:
        """`a` in a sentence: "mdev 3b1c… (nvidia-63)", "VF 0000:41:00.4 (nvidia-1414)", "PCI function …"."""
        return f"PCI function {a.address}"

    def handle(self, a: Allocation) -> str:
        """How the user names `a`'s device (`destroy --uuid`): devices with one handle go and come as one."""
        return self.device_id(a) or ""

    def plan_line(self, a: Allocation) -> str:
        """`a` as a plan's diff names it: "nvidia-63 3b1c… on 0000:01:00.0", "passthrough 0000:65:00.0"."""
        ident = a.uuid or a.address
        return f"{a.type_id} {ident} on {a.parent}" if a.parent and a.parent != ident else f"{a.type_id} {ident}"

    def display(self, a: Allocation) -> tuple[bool, bool]:
        """(display on, ramfb on): what `a`'s hostdev asks of the domain's graphics (libvirt refuses a display
        without <graphics>, and more than one vGPU with ramfb)."""
        return False, False

    def host_device(self, a: Allocation) -> str | None:
        """The host device `a` lives on: the mdev parent, the VF, the passed-through function."""
        return a.address or a.parent

    def current_params(self, snapshot: HostSnapshot, a: Allocation) -> str | None:
        """The vgpu_params `a`'s device has on the host now (None: no such device, or no parameters here)."""
        return None

    def params_step(self, snapshot: HostSnapshot, a: Allocation, params: str) -> Step | None:
        """The step that writes vgpu_params `params` to `a`'s device (None: this mode's devices take none)."""
        return None

    def definition_step(self, a: Allocation, enable: bool) -> Step | None:
        """A device that is not a <hostdev> (virtio-gl's <video>/<graphics>) is given or taken by its own step;
        None for hostdevs, which go into the domain's one definition (DefineDomain)."""
        return None

    def hostdev_xml(self, a: Allocation) -> str:
        """The libvirt element(s) the domain gets for `a` (a <hostdev>, or <video>/<graphics>)."""
        raise UsageError(f"domain {a.domain}: {a.mode} devices render no XML", "this is a bug in vgpuadm; report it")

    # -- restore after a reboot (plan/restore.py): the questions its phases ask about a recorded device ----------

    def device_shown(self, snapshot: HostSnapshot, a: Allocation) -> bool:
        """Whether the host shows the device `a` lives on (host_device) yet: restore waits for it to register."""
        return (self.host_device(a) or "") in snapshot.functions

    def sriov_pf(self, snapshot: HostSnapshot, a: Allocation) -> str | None:
        """The SR-IOV PF whose VFs bring `a`'s device back, when the allocation names it (None: restore looks for
        the PF on the device's bus)."""
        return None

    def heterogeneous_gpu(self, snapshot: HostSnapshot, a: Allocation) -> str | None:
        """The GPU that must be in heterogeneous (mixed-size) mode for `a`'s recorded placement ID (None: no such
        record)."""
        return None

    def plan_rebuild(self, snapshot: HostSnapshot, a: Allocation, done: set[str]) -> Rebuild:
        """The work that makes `a`'s device again in its restore phase (`restore_phase`), nothing when it is there.
        `done`: the host devices this phase already brought back; a mode whose devices come back as a whole group
        adds the group's, so that the group is planned once."""
        return [], []

    def restore_params(self, snapshot: HostSnapshot, a: Allocation) -> Step | None:
        """The step that writes `a`'s recorded vgpu_params to its device again, where the device exists and has
        other parameters (None: nothing to write)."""
        return None

    # -- on demand (plan/ondemand.py): what the qemu hook makes when the domain starts ----------------------------

    # An on-demand device of this mode gets its GPU when its domain starts (placed by the capacity model from the
    # recorded type and hints, as `create` places it); False: the allocation names its device from the first.
    placed_at_start: ClassVar[bool] = False

    @abstractmethod
    def validate(self, snapshot: HostSnapshot, device_id: str) -> None:
        """Raise a VgpuadmError when `device_id` cannot be used in this mode on this host."""

    @abstractmethod
    def hostdev_spec(self, snapshot: HostSnapshot, device_id: str) -> HostdevSpec:
        """What the libvirt hostdev template needs for `device_id` (an mdev UUID, a VF or GPU address)."""

    def plan_free(self, snapshot: HostSnapshot, a: Allocation, drivers: Mapping[str, str]) -> list[Step]:
        """Steps that free what allocation `a` holds on the host ([] when it does not exist now)."""
        return []

    def missing(self, snapshot: HostSnapshot, a: Allocation) -> bool:
        """Whether the device a domain records for `a` is absent from the host (restore brings it back)."""
        return False

    def record_problem(self, a: Allocation) -> str | None:
        """Why a recorded `a` can never be restored whatever the host shows (None: it can)."""
        return None

    # -- what the reports, the placement and the create planner ask (report/*, plan/devices.py, ops/demo.py) -------

    # A paravirtual device (QEMU emulates it): nothing on the host to own, to make or to miss.
    paravirtual: ClassVar[bool] = False
    # A GPU of this mode's layout shares nothing until its SR-IOV VFs are enabled (`vgpuadm sriov enable`).
    needs_vfs: ClassVar[bool] = False

    def device_id(self, a: Allocation) -> str | None:
        """The id the host names `a`'s device by, as the device lists show it: an mdev UUID, else a PCI address."""
        return a.address

    def device_label(self, a: Allocation) -> str | None:
        """`a`'s device as a sentence names it before its type ("mdev U", "VF A"); None for a whole function, which
        the host's label of it names."""
        return None

    def mdev_record(self, a: Allocation) -> tuple[str, str, str, str | None] | None:
        """The mdev `a` is on the host, as mdevctl defines one: (parent, UUID, type, vgpu_params); None when `a`
        is no mdev, or records no parent yet (`mdevctl export`)."""
        return None

    def present(self, snapshot: HostSnapshot, a: Allocation) -> bool:
        """The device exists on the host now as `a` records it (`show`'s `present`): the mdev or the VF running its
        type, the function bound to vfio-pci, the render node."""
        fn = snapshot.functions.get(a.address or "")
        return fn is not None and fn.driver == "vfio-pci"

    def adopt(self, snapshot: HostSnapshot, ref: xml.HostdevRef, domain: str, domain_uuid: str, slot: int
              ) -> Allocation | None:  # fmt: skip
        """The allocation that records a device a domain's <hostdev> `ref` already gives it (attached by hand, or
        for mdevctl) as this mode would have recorded it, read from the host now; None: not a device of this mode
        here (`vgpuadm adopt` asks every mode)."""
        return None

    # -- metrics (report/usage.py): how the device maps to the driver's usage records ----------------------------

    def usage(self, snapshot: HostSnapshot, a: Allocation, driver: DriverUsage) -> VgpuUsage | GpuUsage | None:
        """The driver's usage record of `a`'s device: its running vGPU's (VgpuUsage), or, for a device that is a
        whole GPU, the GPU's own figures (GpuUsage); None when the driver reports none (no guest runs on it, or
        the driver does not see the device, like a GPU bound to vfio-pci)."""
        return None

    # -- migration (plan/migration.py, `vgpuadm migrate check`): how the device moves to another host -----------

    def live_move(self, a: Allocation) -> str | None:
        """Why `a`'s device cannot move while its domain runs (None: it can, where the target has room for it)."""
        return f"vgpuadm moves no {self.name} device live"

    def room_on(self, snapshot: HostSnapshot, target: TargetHost, a: Allocation, taken: Counter[str]) -> Landing:
        """Where the target would make the device `a` records: what it takes there (counted in `taken` by the
        caller) and the GPU, or why the target has nothing for it."""
        return Landing(why_not=f"vgpuadm does not move {self.name} devices")

    def move_refusal(self, a: Allocation) -> str | None:
        """Why `vgpuadm migrate prepare|run` cannot make `a`'s device on the target from its type, as `create` makes
        one there (None: it can)."""
        return f"vgpuadm does not move {self.name} devices to another host yet"

    def plan_instance(self, snapshot: HostSnapshot, t: VgpuType, ask: Instance) -> Made:
        """One more device of `t` on the parent placement chose: the steps that make it and what a domain's
        allocation of it records."""
        raise UsageError(f"{t.type_id} on {t.parent}: {self.name} devices are not created", "this is a bug in vgpuadm")


def type_room(snapshot: HostSnapshot, target: TargetHost, a: Allocation, taken: Counter[str]) -> Landing:
    """Mode.room_on for a device of a vGPU or pool type (an mdev, a layout C VF, a pool VF): a target GPU with a
    free device of the same type id and name, from a board it can move to live where one has room."""
    if not a.type_id:
        return Landing(why_not="the device records no type")
    gpu = snapshot.physical_gpu(a.parent) if a.parent else None
    name = next((t.name for t in snapshot.types() if t.type_id == a.type_id), None)
    return vgpu_landing(target, a.type_id, name, snapshot.models.get(gpu) if gpu else None, taken)


@dataclass(frozen=True)
class Made:
    """One device a create plan makes (Mode.plan_instance): the steps that make it, its id (an mdev UUID, a VF
    address), the mode that makes it, and what a domain's allocation of it records: its type, parent, UUID or
    address, the mode's own record (`extra`: a placement ID, a pool VF's former host driver), and whether it carries
    the request's vgpu_params and display options; `placed_at_start`: the mode's (Mode.placed_at_start), for the
    record of an on-demand request (`request`)."""

    steps: tuple[Step, ...]
    device: str
    mode: str
    type_id: str
    parent: str | None
    uuid: str | None = None
    address: str | None = None
    extra: Mapping[str, str] = field(default_factory=dict)
    params: bool = True
    display: bool = False
    placed_at_start: bool = False

    def allocation(
        self, domain: str, *, slot: int, domain_uuid: str | None, params: str, display: Mapping[str, str]
    ) -> Allocation:
        """The device as `domain` records it, in `slot`."""
        return Allocation(domain, self.mode, self.type_id, self.parent, uuid=self.uuid, address=self.address,
                          params=(params or None) if self.params else None, domain_uuid=domain_uuid, slot=slot,
                          extra={**(display if self.display else {}), **self.extra})  # fmt: skip

    def request(
        self, domain: str, *, slot: int, domain_uuid: str | None, params: str, display: Mapping[str, str],
        options: Mapping[str, str],
    ) -> Allocation:  # fmt: skip
        """The device as an on-demand request of `domain` records it, in `slot`: placed at start, it keeps no
        parent now and records the request's display and placement `options`; else the device the hostdev names
        is chosen now (`device`: taken from here on), typed at start."""
        if self.placed_at_start:
            return Allocation(domain, self.mode, self.type_id, None, uuid=self.uuid, params=params or None,
                              domain_uuid=domain_uuid, slot=slot, extra={**display, **options})  # fmt: skip
        return Allocation(domain, self.mode, self.type_id, self.device, address=self.device, params=params or None,
                          domain_uuid=domain_uuid, slot=slot, extra={"on_demand": "yes"})  # fmt: skip


@dataclass
class Instance:
    """What one device of a create plan (plan/devices.plan_create) may need, asked for only by the mode that needs
    it: its vgpu_params, its mdev UUID (given or drawn), its placement ID (heterogeneous mode), the VFs it must not
    take (other domains' and this plan's), the PFs this plan already enables (updated)."""

    params: str
    uuid: Callable[[], str]
    placement: Callable[[], int | None]
    exclude: Callable[[], Collection[str]]
    enabling: set[str]


# -- the registry ----------------------------------------------------------------------------------------------------
# Filled by modes/__init__.py (`ship`, the modes vgpuadm ships) and by `register` (the modes entry points add).
_SHIPPED: list[Mode] = []
_BY_LAYOUT: dict[Layout, Mode] = {}
_BY_NAME: dict[str, Mode] = {}
_ADDED: list[Mode] = []  # registered modes (entry points), asked first by for_type


def ship(*shipped: Mode) -> tuple[Mode, ...]:
    """Put the modes vgpuadm ships in the registry (modes/__init__.py, once); returns them."""
    _SHIPPED.extend(shipped)
    _BY_LAYOUT.update({layout: m for m in shipped for layout in m.layouts})
    _BY_NAME.update({m.name: m for m in shipped})
    return shipped


def register(mode: Mode) -> Mode:
    """Add `mode` to the registry (what an entry point in the `vgpuadm.modes` group names); returns it. ValueError
    when it is no Mode, its name is taken, or it claims a layout another mode handles."""
    if not isinstance(mode, Mode):
        raise ValueError(f"{mode!r} is not a vgpuadm Mode")
    if mode.name in _BY_NAME or any(layout in _BY_LAYOUT for layout in mode.layouts):
        raise ValueError(f"mode {mode.name!r} is already registered (or its layouts are handled)")
    declare_device_mode(mode.name, mode.holds)
    _BY_NAME[mode.name] = mode
    _BY_LAYOUT.update({layout: mode for layout in mode.layouts})
    _ADDED.append(mode)
    return mode


def _load_entry_points() -> None:
    """Register the modes installed distributions declare (see the module's docstring)."""
    for ep in mode_entry_points():
        try:
            mode = ep.load()
            if getattr(mode, "name", None) != ep.name:
                raise ValueError(f"it names a mode called {getattr(mode, 'name', None)!r}")
            register(mode)
        except Exception as exc:  # whatever a broken distribution raises: one line, not a traceback
            raise UsageError(
                f"The mode {ep.name} = {ep.value} ({MODES_GROUP} entry point) cannot be added: {exc}",
                "fix or uninstall the distribution that declares it (pip show -f NAME lists its files)",
            ) from None


_loaded = False


def _added() -> list[Mode]:
    """The added modes, their entry points loaded on first need: a lookup of a built-in mode by name or layout (what
    restore and the hook do) never pays for importlib.metadata (~30 ms)."""
    global _loaded
    if not _loaded:
        _loaded = True
        _load_entry_points()
    return _ADDED


def for_type(t: VgpuType) -> Mode:
    """The mode that makes devices of `t`: an added mode that claims it, else the mode of its layout."""
    for m in _added():
        if m.claims(t):
            return m
    return for_layout(t.layout)


def for_type_on(snap: HostSnapshot, parent: str | None, type_id: str | None) -> Mode:
    """The mode of an mdev of `type_id` made on `parent` (a CreateMdev): for_type of that type as `snap` shows it,
    the mdev mode when `snap` shows no such type there."""
    p = snap.mdev_parents.get(parent or "")
    t = next((t for t in p.types if t.type_id == type_id), None) if p is not None else None
    return for_type(t) if t is not None else for_name("mdev")


def for_layout(layout: Layout | str) -> Mode:
    """The mode that handles devices of `layout`."""
    try:
        key = Layout(layout)
        if key not in _BY_LAYOUT:
            _added()
        return _BY_LAYOUT[key]
    except (KeyError, ValueError):
        raise UsageError(
            f'No mode handles layout "{layout}"', f"layouts: {', '.join(m.value for m in Layout)}"
        ) from None


def for_name(name: str) -> Mode:
    """The mode recorded as Allocation.mode ("mdev", "vf", "pci", "pool", "virtio-gl")."""
    mode = _BY_NAME.get(name)
    if mode is None and _added():
        mode = _BY_NAME.get(name)
    if mode is None:
        raise UsageError(f'Unknown device mode "{name}"', "modes: mdev, vf, pci, pool, virtio-gl"
                         + "".join(f", {m.name}" for m in _ADDED))  # fmt: skip
    return mode


def of(a: Allocation) -> Mode:
    """The mode of a recorded device: every per-device question about `a` goes to it."""
    return _BY_NAME[a.mode] if a.mode in _BY_NAME else for_name(a.mode)


def key(a: Allocation) -> DeviceKey | None:
    """The ownership key of `a`'s host device (None: nothing on the host, e.g. virtio-gl)."""
    return of(a).key(a)


def adopt(snapshot: HostSnapshot, ref: xml.HostdevRef, domain: str, domain_uuid: str, slot: int) -> Allocation | None:
    """The allocation that records the device a domain's <hostdev> `ref` already gives it, from the first mode that
    knows the device on this host (None: no mode does — it is not there now, or not a GPU device)."""
    for mode in _SHIPPED:
        a = mode.adopt(snapshot, ref, domain, domain_uuid, slot)
        if a is not None:
            return a
    return None


def describe(a: Allocation) -> str:
    return of(a).describe(a)


def handle(a: Allocation) -> str:
    return of(a).handle(a)


def hostdev_xml(a: Allocation) -> str:
    return of(a).hostdev_xml(a)


def hostdev_as_attached(a: Allocation, domain_xml: str) -> str:
    """hostdev_xml(a) with the guest PCI address the domain gives the device now, so that a detach undone puts it
    back where the guest saw it (libvirt would otherwise take the next free slot, and several devices detached in
    one plan would come back in swapped places)."""
    want = key(a)
    if a.extra.get("guest_address") or not domain_xml or want is None:
        return hostdev_xml(a)
    for ref in xml.parse_hostdevs(domain_xml):
        if (ref.kind, ref.key) == want and ref.guest_address is not None:
            extra = {**a.extra, "guest_address": str(ref.guest_address)}
            if ref.guest_address.multifunction:
                extra["multifunction"] = "on"
            return hostdev_xml(dataclasses.replace(a, extra=extra))
    return hostdev_xml(a)
