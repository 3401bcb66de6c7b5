"""Frozen data the whole program passes around: what discovery found (HostSnapshot) and its parts.

Nothing here reads the host; discovery (host/discover.py) builds these, everything else only reads them.

The records are small hand-written classes, not `@dataclass(frozen=True)`: importing dataclasses (it imports
inspect, ast, dis and tokenize) and generating the methods of these classes cost ~17 ms of every cold start, more
than half of the `vgpuadm types --json` budget (bench/bench_cold_start.py). They keep what callers rely on:
keyword or positional construction with the same defaults, immutability (assigning a field raises
AttributeError), `==` and `hash` over the compared fields (`attributes` and `extra` are left out, as before), a
dataclass-style repr, and `dataclasses.replace/fields/asdict` (see _DataclassFields). For mypy, `_record` marks
them dataclass-like (PEP 681), so it still checks construction, `dataclasses.replace` and writes to fields.

The grammar of vGPU type names is here too, with the other identities: parse NVIDIA profile names and type
descriptions, and resolve what a user typed to one type (resolve_type). Accepted spellings (shared/docs/vgpu-sysfs.md
§2.2): `nvidia-63`, `GRID P4-1Q`, `P4-1Q`, and for layout C `nvidia-<id>` or the bare numeric id. Matching is
case-insensitive.
"""

from __future__ import annotations

import os
import sys

from vgpuadm.errors import NotFoundError, UsageError

# A device UUID as sysfs, libvirt and vgpuadm write it (lower-case, 8-4-4-4-12); compiled where it is matched.
UUID_PATTERN = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
# A PCI address in the one canonical form sysfs names it (pci_address() below makes it from what users type): the
# grammar every stored value (metadata, journal, mdevctl files, policy state) is held to; slots are 00…1f.
PCI_PATTERN = r"[0-9a-f]{4}:[0-9a-f]{2}:[01][0-9a-f]\.[0-7]"
# An mdev parent: a PCI function, or the device name of a virtual parent (the kernel's mtty, mdpy, mbochs).
PARENT_PATTERN = PCI_PATTERN + r"|[A-Za-z][A-Za-z0-9_-]{0,63}"
# A driver release as nvidia-smi prints it (host 580.159.04, a guest's 550.54.14); inventory-v1's driver_version.
VERSION_PATTERN = r"[0-9][0-9.]{0,31}"

TYPE_CHECKING = False  # `typing` stays off the fast path of the read commands (bench/bench_cold_start.py)
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from enum import StrEnum
    from typing import Any, ClassVar, TypeVar, dataclass_transform

    _T = TypeVar("_T")

    @dataclass_transform(frozen_default=True)
    def _record(cls: type[_T]) -> type[_T]: ...

else:

    def _record(cls):
        return cls

    class _StrEnumType(type):
        """The metaclass of StrEnum at run time (for mypy, StrEnum is enum.StrEnum): the `enum` module, with the
        functools and collections it imports, was ~3 ms of every cold start (bench/bench_cold_start.py) for three
        enums. Members keep what enum.StrEnum gives and callers rely on: each is an instance of its class and a str
        equal to (and hashing as) its value; `Layout("mdev-pf")` (or a member) is the member, anything else a
        ValueError with enum's message; iteration and len() in definition order; a member cannot be reassigned."""

        def __new__(mcs, name, bases, namespace):
            values = {k: v for k, v in namespace.items() if not k.startswith("_") and type(v) is str}
            cls = super().__new__(mcs, name, bases, {k: v for k, v in namespace.items() if k not in values})
            members = []
            for key, value in values.items():
                member = str.__new__(cls, value)
                member._name_, member._value_ = key, value
                type.__setattr__(cls, key, member)
                members.append(member)
            cls._members_ = tuple(members)
            cls._by_value_ = {m._value_: m for m in members}
            return cls

        def __call__(cls, value):
            try:
                return cls._by_value_[value]
            except (KeyError, TypeError):
                raise ValueError(f"{value!r} is not a valid {cls.__qualname__}") from None

        def __iter__(cls):
            return iter(cls._members_)

        def __len__(cls):
            return len(cls._members_)

        def __setattr__(cls, name, value):
            if isinstance(cls.__dict__.get(name), cls):
                raise AttributeError(f"cannot reassign member {name!r}")
            super().__setattr__(name, value)

        def __repr__(cls):
            return f"<enum {cls.__name__!r}>"

    class StrEnum(str, metaclass=_StrEnumType):
        """enum.StrEnum's members as callers use them: `.name`, `.value` (a plain str), enum's repr, str() and
        format() as the value; copies and pickles are the member itself."""

        @property
        def name(self):
            return self._name_

        @property
        def value(self):
            return self._value_

        def __repr__(self):
            return f"<{type(self).__name__}.{self._name_}: {self._value_!r}>"

        __str__ = str.__str__
        __format__ = str.__format__

        def __reduce_ex__(self, protocol):
            return type(self), (self._value_,)

        def __copy__(self):
            return self

        def __deepcopy__(self, memo):
            return self


class Layout(StrEnum):
    """How a PCI function shares its GPU (shared/docs/vgpu-sysfs.md §0)."""

    MDEV_PF = "mdev-pf"  # A: mdev types on a physical function (P4, T4, GVT-g, mtty…)
    MDEV_VF = "mdev-vf"  # B: mdev types on an SR-IOV VF, at most one vGPU per VF
    VENDOR_VFIO = "vendor-vfio"  # C: NVIDIA nvidia/current_vgpu_type on a VF
    SRIOV_PF = "sriov-pf"  # an NVIDIA SR-IOV PF whose VFs are not enabled yet (sriov-manage -e)
    PASSTHROUGH = "passthrough"  # D: whole-function passthrough candidate
    VF_POOL = "vf-pool"  # an AMD/Intel SR-IOV PF whose VFs go to guests whole (docs/reference/sriov-gpus.md)

    # What differs per layout, declared once as data: catalog/capacity.py applies it (it may not import the modes),
    # placement, naming and the reports read it.
    @property
    def sharing(self) -> str:
        """The layout's sharing rule: "one-size" (B/C: one vGPU per VF, one framebuffer size per GPU), "one-type"
        (A: one vGPU type per GPU for NVIDIA; catalog/capacity turns it into "kernel" for other mdev drivers, whose
        types share one budget), or "whole" (no vGPU sharing)."""
        return _SHARING.get(self, "whole")

    @property
    def one_vgpu_per_vf(self) -> bool:
        """Layouts B and C: each parent is a VF that holds at most one vGPU."""
        return self.sharing == "one-size"

    @property
    def parent_is_device(self) -> bool:
        """Layout C: the parent VF is itself the device a guest gets (a VF a domain names takes nothing else)."""
        return self is Layout.VENDOR_VFIO

    @property
    def types_by_number(self) -> bool:
        """Layout C: the driver lists and sets types by number (nvidia/creatable_vgpu_types, current_vgpu_type),
        and a VF lists none while it or its GPU is full (nvidia-smi names them then)."""
        return self is Layout.VENDOR_VFIO

    @property
    def summary(self) -> str:
        """The layout in a few words ("layout A: mdev vGPUs on the GPU"); its name where there is none."""
        return _SUMMARY.get(self, str(self))


_SHARING = {Layout.MDEV_PF: "one-type", Layout.MDEV_VF: "one-size", Layout.VENDOR_VFIO: "one-size"}
_SUMMARY = {
    Layout.MDEV_PF: "layout A: mdev vGPUs on the GPU",
    Layout.MDEV_VF: "layout B: mdev vGPUs on its VFs",
    Layout.VENDOR_VFIO: "layout C: a vGPU type per VF",
    Layout.PASSTHROUGH: "layout D: whole-GPU passthrough",
}

MDEV_LAYOUTS = (Layout.MDEV_PF, Layout.MDEV_VF)


class DeviceMode(StrEnum):
    """What a device a domain owns is, as Allocation.mode and the metadata's `mode` attribute record it."""

    MDEV = "mdev"  # layouts A/B: <hostdev type='mdev'> by UUID
    VF = "vf"  # layout C: the vendor-VFIO VF, <hostdev type='pci' managed='no'>
    PCI = "pci"  # layout D: whole-function passthrough, <hostdev type='pci'> with <driver name='vfio'/>
    POOL = "pool"  # a VF of an SR-IOV VF pool bound to vfio-pci (or a variant driver), <hostdev managed='no'>
    VIRTIO_GL = "virtio-gl"  # a paravirtual virtio-gpu with 3D through a host render node: <video> + <graphics>

    @property
    def holds(self) -> Holding:
        """What one device of this mode holds of its GPU's shared capacity (model.holding: any mode's)."""
        return holding(self)


class Holding(StrEnum):
    """What a device a domain owns takes from its GPU while it exists, and gives back when it goes."""

    MDEV_INSTANCE = "mdev-instance"  # one instance of its type on its mdev parent (layouts A/B)
    VF_TYPE = "vf-type"  # its layout C VF, set to its type (at its placement ID in heterogeneous mode)
    POOL_VF = "pool-vf"  # one VF of its SR-IOV pool
    NOTHING = "nothing"  # a whole function (counted by its driver binding) or a paravirtual device


_HOLDS: dict[str, Holding] = {
    DeviceMode.MDEV: Holding.MDEV_INSTANCE,
    DeviceMode.VF: Holding.VF_TYPE,
    DeviceMode.POOL: Holding.POOL_VF,
    DeviceMode.PCI: Holding.NOTHING,
    DeviceMode.VIRTIO_GL: Holding.NOTHING,
}
_MODE_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-")
# The entry-point group of the modes other distributions add (vgpuadm/modes/__init__.py); an entry point's name is
# its mode's name, so that metadata naming an added mode is read before the registry is imported (the qemu hook's
# fast path reads it without the registry).
MODES_GROUP = "vgpuadm.modes"
_installed: frozenset[str] | None = None


def declare_device_mode(name: str, holds: Holding) -> None:
    """Make `name` a device mode an Allocation (and a domain's metadata) may record, holding `holds`: how the mode
    registry (vgpuadm/modes/__init__.py) adds a mode that is not one of DeviceMode's members."""
    if not (0 < len(name) <= 32 and name[0].isalpha() and set(name) <= _MODE_CHARS) or _HOLDS.get(name, holds) != holds:
        raise ValueError(f"device mode {name!r} cannot be declared (as {holds})")
    _HOLDS[name] = Holding(holds)


def _installed_modes() -> frozenset[str]:
    """The names of the modes installed distributions add (read once, only when a name is not a known mode)."""
    global _installed
    if _installed is None:
        _installed = frozenset(ep.name for ep in mode_entry_points())
    return _installed


def mode_entry_points() -> list[Any]:
    """The entry points of MODES_GROUP that installed distributions declare (importlib.metadata's), by name.
    importlib.metadata (~20 ms of imports, a fiftieth of an `apply -f`) is imported only when some distribution
    may declare one: see _may_declare_modes."""
    if not _may_declare_modes():
        return []
    from importlib.metadata import entry_points  # lazily: see the docstring

    return sorted(entry_points(group=MODES_GROUP), key=lambda ep: ep.name)


def _may_declare_modes() -> bool:
    """False only when no distribution can declare a MODES_GROUP entry point: no finder but the standard path
    finder lists distributions, and no `*.dist-info` / `*.egg-info` directory in a sys.path directory has an
    entry_points.txt naming the group (where importlib.metadata looks). A zip or an egg on sys.path, or an
    unreadable directory, is left to importlib.metadata (True)."""
    from importlib.machinery import PathFinder  # importlib stays off the read commands' fast path (cold start)

    if any(hasattr(f, "find_distributions") and f is not PathFinder for f in sys.meta_path):
        return True
    for entry in sys.path:
        path = entry or "."
        if not os.path.isdir(path) or path.lower().endswith(".egg"):
            if os.path.exists(path):
                return True
            continue
        try:
            names = os.listdir(path)
        except OSError:
            return True
        for name in names:
            if name.lower().endswith((".dist-info", ".egg-info")):
                try:
                    with open(os.path.join(path, name, "entry_points.txt"), "rb") as f:
                        if MODES_GROUP.encode() in f.read(1 << 20):
                            return True
                except (FileNotFoundError, NotADirectoryError):
                    continue
                except OSError:
                    return True
    return False


def known_device_mode(text: str | None) -> bool:
    """Whether `text` names a device mode: a DeviceMode member, one the registry declared, or an installed one."""
    return text is not None and (text in _HOLDS or text in _installed_modes())


def device_mode(text: str) -> str:
    """The recorded mode `text` names (see known_device_mode): its DeviceMode member, else itself; ValueError else."""
    try:
        return DeviceMode(text)
    except ValueError:
        if not known_device_mode(text):
            raise
    return text


def holding(mode: str) -> Holding:
    """What one device of `mode` holds of its GPU's shared capacity (catalog/capacity.py's consume and release
    apply it as data)."""
    return _HOLDS[mode]


class _DataclassFields:
    """`dataclasses.replace/fields/asdict` know a dataclass by its `__dataclass_fields__`. A record builds its own
    on first use, from a throwaway dataclass with the same field names: dataclasses is imported only then."""

    def __init__(self) -> None:
        self._made: dict[type, dict[str, Any]] = {}

    def __get__(self, obj: object, cls: type[_Record]) -> dict[str, Any]:
        if cls not in self._made:
            import dataclasses

            self._made[cls] = vars(dataclasses.make_dataclass(cls.__name__, cls._fields))["__dataclass_fields__"]
        return self._made[cls]


class _Record:
    """Base of the records: fields are the class annotations, in order; set once by __init__, never again."""

    _fields: ClassVar[tuple[str, ...]] = ()
    _compared: ClassVar[tuple[str, ...]] = ()
    _uncompared: ClassVar[tuple[str, ...]] = ()  # left out of == and hash

    if not TYPE_CHECKING:  # mypy knows the records as dataclasses already
        __dataclass_fields__ = _DataclassFields()

    def __init_subclass__(cls) -> None:
        cls._fields = tuple(cls.__annotations__)
        cls._compared = tuple(f for f in cls._fields if f not in cls._uncompared)

    def _key(self) -> tuple[object, ...]:
        values = self.__dict__
        return tuple([values[f] for f in self._compared])

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _Record) or other.__class__ is not self.__class__:
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        values = self.__dict__
        return f"{type(self).__qualname__}({', '.join([f'{f}={values[f]!r}' for f in self._fields])})"

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r}")


@_record
class PciFunction(_Record):
    """One PCI function as sysfs shows it. Ids are kept in the kernel's text form ("0x10de", "0x030200")."""

    address: str
    vendor_id: str
    device_id: str
    class_code: str
    subsystem_vendor_id: str | None
    subsystem_device_id: str | None
    driver: str | None
    driver_override: str | None
    iommu_group: int | None
    numa_node: int | None
    boot_vga: bool | None
    sriov_total_vfs: int | None
    sriov_num_vfs: int | None
    virtfns: tuple[str, ...]
    physfn: str | None
    is_bridge: bool
    sysfs_path: str  # host path of the real device directory (/sys/devices/...)

    def __init__(
        self,
        address: str,
        vendor_id: str,
        device_id: str,
        class_code: str,
        subsystem_vendor_id: str | None = None,
        subsystem_device_id: str | None = None,
        driver: str | None = None,
        driver_override: str | None = None,
        iommu_group: int | None = None,
        numa_node: int | None = None,
        boot_vga: bool | None = None,
        sriov_total_vfs: int | None = None,
        sriov_num_vfs: int | None = None,
        virtfns: tuple[str, ...] = (),
        physfn: str | None = None,
        is_bridge: bool = False,
        sysfs_path: str = "",
    ) -> None:
        self.__dict__.update(
            address=address,
            vendor_id=vendor_id,
            device_id=device_id,
            class_code=class_code,
            subsystem_vendor_id=subsystem_vendor_id,
            subsystem_device_id=subsystem_device_id,
            driver=driver,
            driver_override=driver_override,
            iommu_group=iommu_group,
            numa_node=numa_node,
            boot_vga=boot_vga,
            sriov_total_vfs=sriov_total_vfs,
            sriov_num_vfs=sriov_num_vfs,
            virtfns=virtfns,
            physfn=physfn,
            is_bridge=is_bridge,
            sysfs_path=sysfs_path,
        )

    @property
    def is_display(self) -> bool:
        """A GPU: display class 0x03, or processing accelerator 0x12 (AMD Instinct MI300X and later list as one)."""
        return self.class_code.startswith(("0x03", "0x12"))

    @property
    def is_vf(self) -> bool:
        return self.physfn is not None

    @property
    def slot(self) -> str:
        """The address without the function number: 0000:65:00."""
        return self.address.rsplit(".", 1)[0]


@_record
class VgpuType(_Record):
    """One creatable vGPU type on one parent: an mdev type dir (A/B) or a creatable_vgpu_types entry (C)."""

    parent: str
    layout: Layout
    type_id: str  # sysfs type dir name (nvidia-63, i915-GVTg_V5_4, mtty-2) or nvidia-<id> for layout C
    name: str  # as the kernel prints it (GRID P4-1Q); the type id when the driver has no name file
    profile: str  # last token of the name for NVIDIA (P4-1Q), else the name
    available_instances: int
    max_instances: int | None
    framebuffer_mib: int | None
    device_api: str
    description: str
    attributes: dict[str, str | int]
    _uncompared = ("attributes",)

    def __init__(
        self,
        parent: str,
        layout: Layout,
        type_id: str,
        name: str,
        profile: str,
        available_instances: int,
        max_instances: int | None,
        framebuffer_mib: int | None,
        device_api: str,
        description: str,
        attributes: dict[str, str | int] | None = None,
    ) -> None:
        self.__dict__.update(
            parent=parent,
            layout=layout,
            type_id=type_id,
            name=name,
            profile=profile,
            available_instances=available_instances,
            max_instances=max_instances,
            framebuffer_mib=framebuffer_mib,
            device_api=device_api,
            description=description,
            attributes={} if attributes is None else attributes,
        )

    def with_available(self, n: int) -> VgpuType:
        """The same type with `n` free instances."""
        values = dict(self.__dict__)
        values["available_instances"] = n
        return VgpuType(**values)

    @property
    def numeric_id(self) -> int | None:
        """NVIDIA's vGPU type id (63 for nvidia-63), None for other vendors."""
        return nvidia_type_number(self.type_id)


@_record
class MdevParent(_Record):
    """A device under /sys/class/mdev_bus: a PCI function (PF or VF) or a virtual device such as mtty."""

    name: str  # 0000:01:00.0, or mtty for non-PCI parents
    sysfs_path: str
    layout: Layout
    pci_address: str | None
    types: tuple[VgpuType, ...]

    def __init__(
        self, name: str, sysfs_path: str, layout: Layout, pci_address: str | None, types: tuple[VgpuType, ...]
    ) -> None:
        self.__dict__.update(name=name, sysfs_path=sysfs_path, layout=layout, pci_address=pci_address, types=types)


@_record
class Mdev(_Record):
    """An existing mediated device."""

    uuid: str
    type_id: str
    parent: str
    iommu_group: int | None
    vgpu_params: str | None

    def __init__(
        self, uuid: str, type_id: str, parent: str, iommu_group: int | None = None, vgpu_params: str | None = None
    ) -> None:
        self.__dict__.update(
            uuid=uuid, type_id=type_id, parent=parent, iommu_group=iommu_group, vgpu_params=vgpu_params
        )


@_record
class VendorVf(_Record):
    """A layout C virtual function: its creatable type list and the type it runs (0 = none)."""

    address: str
    physfn: str | None
    creatable: tuple[tuple[int, str], ...]
    current_type: int
    vgpu_params: str | None
    offered: tuple[VgpuType, ...]  # the creatable types as VgpuType records (one instance each while free)
    placement_id: int | None  # nvidia/placement_id (heterogeneous mode; -1: the driver chooses); None: no file

    def __init__(
        self,
        address: str,
        physfn: str | None,
        creatable: tuple[tuple[int, str], ...],
        current_type: int,
        vgpu_params: str | None = None,
        offered: tuple[VgpuType, ...] = (),
        placement_id: int | None = None,
    ) -> None:
        self.__dict__.update(
            address=address,
            physfn=physfn,
            creatable=creatable,
            current_type=current_type,
            vgpu_params=vgpu_params,
            offered=offered,
            placement_id=placement_id,
        )

    @property
    def in_use(self) -> bool:
        return self.current_type != 0

    @property
    def current_type_id(self) -> str:
        """The type id of the vGPU type the VF is set to (nvidia-<current_type>)."""
        return nvidia_type_id(self.current_type)


@_record
class VfPool(_Record):
    """An SR-IOV PF whose VFs are handed to guests whole (AMD Instinct under GIM, Intel i915/xe): how many VFs it
    has and may have, their addresses (predicted from sriov_offset/sriov_stride while disabled), which are free
    (no driver, or a host driver; not on vfio-pci or `variant`), and what one VF gets (`per_vf`: framebuffer_mib
    and the driver's provisioning values). `offered` is the pool as one VgpuType (one instance per free VF)."""

    pf: str
    total_vfs: int
    num_vfs: int
    vfs: tuple[str, ...]
    free: tuple[str, ...]
    autoprobe: bool
    variant: str | None  # a VFIO variant driver the host has for these VFs (xe-vfio-pci), else None
    per_vf: dict[str, int]
    offered: tuple[VgpuType, ...]
    _uncompared = ("per_vf",)

    def __init__(
        self,
        pf: str,
        total_vfs: int,
        num_vfs: int,
        vfs: tuple[str, ...],
        free: tuple[str, ...],
        autoprobe: bool = True,
        variant: str | None = None,
        per_vf: dict[str, int] | None = None,
        offered: tuple[VgpuType, ...] = (),
    ) -> None:
        self.__dict__.update(
            pf=pf,
            total_vfs=total_vfs,
            num_vfs=num_vfs,
            vfs=vfs,
            free=free,
            autoprobe=autoprobe,
            variant=variant,
            per_vf={} if per_vf is None else per_vf,
            offered=offered,
        )


@_record
class HostSnapshot(_Record):
    """Everything discovery read from one host root, at one moment."""

    root: str
    simulated: bool
    functions: dict[str, PciFunction]
    mdev_parents: dict[str, MdevParent]
    mdevs: dict[str, Mdev]
    vendor_vfs: dict[str, VendorVf]
    iommu_groups: dict[int, tuple[str, ...]]
    layouts: dict[str, Layout]
    warnings: tuple[str, ...]
    machine_id: str  # <root>/etc/machine-id (or the host name): the host part of deterministic mdev UUIDs
    vf_pools: dict[str, VfPool]  # PF address → its SR-IOV VF pool (AMD/Intel)
    render_nodes: dict[str, str]  # DRM render node (renderD128) → the PCI address of its GPU ("" when not PCI)
    models: dict[str, str]  # GPU address → model name from pci.ids ("Tesla P4"); only when discovery was asked
    # GPU address → catalog.hetero.GpuPolicy (heterogeneous mode, placements, scheduler), read by host/hetero.py
    # through nvidia-smi when the driver has placement IDs; {} otherwise (typed there: this module imports no layer)
    policies: dict[str, Any]
    # device id (mdev UUID, VF address) → the domain it is counted for although the kernel lacks it: a recorded
    # device awaiting `vgpuadm restore` (plan/domains.with_recorded); {} in what discovery reads
    reserved: dict[str, str]
    _uncompared = ("models",)

    def __init__(
        self,
        root: str,
        simulated: bool,
        functions: dict[str, PciFunction],
        mdev_parents: dict[str, MdevParent],
        mdevs: dict[str, Mdev],
        vendor_vfs: dict[str, VendorVf],
        iommu_groups: dict[int, tuple[str, ...]],
        layouts: dict[str, Layout],
        warnings: tuple[str, ...] = (),
        machine_id: str = "",
        vf_pools: dict[str, VfPool] | None = None,
        render_nodes: dict[str, str] | None = None,
        models: dict[str, str] | None = None,
        policies: dict[str, Any] | None = None,
        reserved: dict[str, str] | None = None,
    ) -> None:
        self.__dict__.update(
            root=root,
            simulated=simulated,
            functions=functions,
            mdev_parents=mdev_parents,
            mdevs=mdevs,
            vendor_vfs=vendor_vfs,
            iommu_groups=iommu_groups,
            layouts=layouts,
            warnings=warnings,
            machine_id=machine_id,
            vf_pools={} if vf_pools is None else vf_pools,
            render_nodes={} if render_nodes is None else render_nodes,
            models={} if models is None else models,
            policies={} if policies is None else policies,
            reserved={} if reserved is None else reserved,
        )

    def label(self, address: str) -> str:
        """`0000:01:00.0 (Tesla P4)` when the model is known (pci.ids), else the address (a PF's name for a VF)."""
        model = self.models.get(address) or self.models.get(self.physical_gpu(address))
        return f"{address} ({model})" if model else address

    @property
    def host_key(self) -> str:
        """Who made a domain's devices, as its vgpuadm metadata records it: the machine-id on a real host, the root
        on a simulated one (several simulated hosts may share one libvirtd, with the same PCI addresses)."""
        return f"sim:{self.root}" if self.simulated else self.machine_id

    @property
    def gpus(self) -> list[PciFunction]:
        """GPU functions (class 0x03xx, or 0x12xx accelerators), PFs and VFs, sorted by address."""
        return [f for _, f in sorted(self.functions.items()) if f.is_display]

    @property
    def has_placement_ids(self) -> bool:
        """Whether the host's driver has placement IDs (some layout C VF carries nvidia/placement_id): only then are
        the GPUs' heterogeneous mode and placements read from nvidia-smi (host/hetero.py)."""
        return any(vf.placement_id is not None for vf in self.vendor_vfs.values())

    def types(self) -> list[VgpuType]:
        """Every vGPU type of every parent: mdev types (A/B) and layout C creatable types."""
        out = [t for p in self.mdev_parents.values() for t in p.types]
        out.extend(t if not vf.in_use else t.with_available(0) for vf in self.vendor_vfs.values() for t in vf.offered)
        out.extend(t for pool in self.vf_pools.values() for t in pool.offered)
        # Each type id's number once (a big layout B host lists the same 20 ids on every one of 1,024 VFs).
        numbers = {type_id: nvidia_type_number(type_id) or 0 for type_id in {t.type_id for t in out}}
        return sorted(out, key=lambda t: (t.parent, numbers[t.type_id], t.type_id))

    def skipped(self, address: str, hint: str) -> str:
        """Why discovery skipped `address` (its warning) when it did, else `hint`: a command naming a device that a
        broken or hostile tree hid says what hid it."""
        heads = (
            f"skipped PCI function {address}: ",
            f"skipped vendor-VFIO VF {address}: ",
            f"skipped mdev parent {address}: ",
        )
        return next((w for w in self.warnings if w.startswith(heads)), hint)

    def physical_gpu(self, address: str) -> str:
        """The PF that a VF belongs to (itself for a PF or a non-PCI parent)."""
        fn = self.functions.get(address)
        return fn.physfn if fn is not None and fn.physfn else address

    def group_members(self, address: str) -> tuple[str, ...]:
        fn = self.functions.get(address)
        if fn is None or fn.iommu_group is None:
            return (address,)
        return self.iommu_groups.get(fn.iommu_group, (address,))


@_record
class Allocation(_Record):
    """One device a domain owns, as recorded in the domain's vgpuadm <metadata> (the source of truth for
    ownership, restore and the inventory's "owned by" column)."""

    domain: str
    mode: str  # a DeviceMode member, or a mode the registry declared (declare_device_mode)
    type_id: str | None  # nvidia-63, nvidia-1414; None for passthrough
    parent: str | None  # mdev parent, or the VF itself for layout C
    uuid: str | None  # mdev UUID
    address: str | None  # VF address (layout C) or passed-through function (layout D)
    params: str | None  # vgpu_params as written
    domain_uuid: str | None
    slot: int  # index among the domain's vgpuadm devices (deterministic UUIDs derive from it)
    extra: dict[str, str]
    _uncompared = ("extra",)

    def __init__(
        self,
        domain: str,
        mode: DeviceMode | str,
        type_id: str | None = None,
        parent: str | None = None,
        uuid: str | None = None,
        address: str | None = None,
        params: str | None = None,
        domain_uuid: str | None = None,
        slot: int = 0,
        extra: dict[str, str] | None = None,
    ) -> None:
        self.__dict__.update(
            domain=domain,
            mode=device_mode(mode),
            type_id=type_id,
            parent=parent,
            uuid=uuid,
            address=address,
            params=params,
            domain_uuid=domain_uuid,
            slot=slot,
            extra={} if extra is None else extra,
        )

    @property
    def on_demand(self) -> bool:
        """Made when the domain starts and removed when it stops (libvirt's qemu hook, `vgpuadm hook run`)."""
        return self.extra.get("on_demand") == "yes"

    @property
    def moving(self) -> str | None:
        """Where a move of its domain to another host stands here (`vgpuadm migrate`): "incoming", "outgoing", or
        None when it is not on the move."""
        return self.extra.get(MIGRATION)


MIGRATION = "migration"  # the metadata option of a device on the move (its grammar: virt/xml.py)


def moving(allocations: Iterable[Allocation]) -> str | None:
    """Where a domain's move to or from another host stands here, as its devices record it: "incoming",
    "outgoing", or None (`vgpuadm migrate`)."""
    return next((a.moving for a in allocations if a.moving), None)


# -- id grammars, parsed once here ------------------------------------------------------------------------------------

_HEX = frozenset("0123456789abcdefABCDEF")
PCI_HINT = "write it as DDDD:BB:SS.F, e.g. 0000:65:00.0 (lspci -D shows them; the 0000: may be left out)"


def parse_pci_address(text: str) -> tuple[int, int, int, int]:
    """`[DDDD:]BB:SS.F` (hex, any case; the domain defaults to 0000) → (domain, bus, slot, function); UsageError
    naming the text otherwise."""
    head, dot, fn = text.strip().rpartition(".")
    parts = head.split(":")
    if len(parts) == 2:
        parts.insert(0, "0")
    widths = (4, 2, 2)
    if (not dot or len(parts) != 3 or len(fn) != 1 or fn not in "01234567"
            or any(not p or len(p) > w or not set(p) <= _HEX for p, w in zip(parts, widths, strict=True))):  # fmt: skip
        raise UsageError(f"{text!r} is not a PCI address", PCI_HINT)
    dom, bus, slot = (int(p, 16) for p in parts)
    if slot > 0x1F:
        raise UsageError(f"{text!r} is not a PCI address: slot {parts[2]} > 1f", "PCI slots are 00…1f")
    return dom, bus, slot, int(fn)


def pci_address(text: str) -> str:
    """The canonical form of a PCI address as sysfs names it: 01:00.0 → 0000:01:00.0, lower-case hex."""
    dom, bus, slot, fn = parse_pci_address(text)
    return f"{dom:04x}:{bus:02x}:{slot:02x}.{fn:x}"


_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


def mdev_parent_name(text: str) -> str:
    """An mdev parent as a user names it: a PCI address (canonical form; short forms are fine) or the device name
    of a virtual parent (the kernel's mtty: PARENT_PATTERN's other half); UsageError naming the text otherwise."""
    virtual = 0 < len(text) <= 64 and text[0].isascii() and text[0].isalpha() and set(text) <= _NAME_CHARS
    if virtual and not is_pci_address(text):
        return text
    try:
        return pci_address(text)
    except UsageError:
        raise UsageError(
            f"{text[:80]!r} is not an mdev parent name", f"{PCI_HINT}; or a virtual parent's name such as mtty"
        ) from None


def is_pci_address(text: str) -> bool:
    try:
        parse_pci_address(text)
    except UsageError:
        return False
    return True


# The ownership key of a host device, as a domain's <hostdev> names it: ("mdev", UUID) or ("pci", host address).
# Every "who holds this device" question compares these; one constructor each, so they are spelled once.
DeviceKey = tuple[str, str]
MDEV_KEY = "mdev"
PCI_KEY = "pci"


def mdev_key(uuid: str) -> DeviceKey:
    return (MDEV_KEY, uuid.lower())


def pci_key(address: str) -> DeviceKey:
    return (PCI_KEY, address)


INVENTORY_SCHEMA = "vgpuadm-inventory/1"  # `vgpuadm inventory --json` (report/inventory.py), what merge reads
NVIDIA_TYPE_PREFIX = "nvidia-"  # NVIDIA's vGPU type ids: nvidia-63 (an mdev type dir), nvidia-1414 (layout C)


def nvidia_type_id(number: int) -> str:
    """The type id vgpuadm writes for NVIDIA's vGPU type `number` (the driver's numeric id): nvidia-<number>."""
    return f"{NVIDIA_TYPE_PREFIX}{number}"


def is_nvidia_type(type_id: str) -> bool:
    """Whether `type_id` names an NVIDIA vGPU type (nvidia-63; nvidia-<number> on layout C)."""
    return type_id.startswith(NVIDIA_TYPE_PREFIX)


def type_id_order(type_id: str) -> tuple[str, int, str]:
    """The order type rows are listed in: by the id's prefix, then by the number after its last "-" as a number
    (nvidia-63 before nvidia-100)."""
    prefix, _, num = type_id.rpartition("-")
    return (prefix, int(num), "") if num.isdigit() else (type_id, 0, "")


def nvidia_type_number(type_id: str) -> int | None:
    """NVIDIA's numeric id of a type id (63 for nvidia-63), None for other vendors' ids."""
    prefix, _, number = type_id.rpartition("-")
    return int(number) if prefix == "nvidia" and number.isdigit() else None


# A fixed namespace for vgpuadm's uuid5 derivations (never change it: stored domain XML depends on it).
DEVICE_NAMESPACE = "6f1c1f0e-3b1e-5a43-9d0c-766770756164"


def device_uuid(host_id: str, domain_uuid: str, slot: int) -> str:
    """The mdev UUID vgpuadm gives a domain's `slot`-th device on this host (lower-case, as the kernel prints it):
    the same host, domain and slot always give the same UUID, so devices re-made after a reboot have the UUIDs the
    domain XML already names."""
    from uuid import UUID, uuid5  # uuid imports platform and re: kept off the read commands' fast path

    return str(uuid5(UUID(DEVICE_NAMESPACE), f"{host_id}/{domain_uuid.lower()}/{slot}"))


def mdev_uuid(text: str, hint: str = "or omit --uuid") -> str:
    """The canonical lower-case form of an mdev UUID as typed (any case, 36 characters, 8-4-4-4-12 hex), else
    UsageError whose hint ends with `hint`."""
    value = text.strip().lower()
    parts = value.split("-")
    if len(value) != 36 or [len(p) for p in parts] != [8, 4, 4, 4, 12] or not set(value) <= _HEX | {"-"}:
        raise UsageError(
            f'Malformed UUID "{text}"', f"give 36 characters like 83b8f4f2-509f-382f-3c1e-e6bfe0fa1001, {hint}"
        )
    return value


def device_key(text: str) -> str:
    """A device id as the user typed it (an mdev UUID or a PCI address) in the form the host names it."""
    return pci_address(text) if is_pci_address(text) else text.strip().lower()


# -- vgpu_params (reference §2.5): the one grammar -----------------------------------------------------------------
# One pair is `key=value`: a key such as `frame_rate_limiter` or `vgpu-placement-id` (a letter or _, then letters,
# digits, _ and -, at most 64 characters); a value of 1-256 characters holding neither whitespace nor a comma, so the
# list splits unambiguously on both. At most 64 pairs. Checked without `re` (the read commands' fast path).
PARAM_SEPARATOR = ", "  # what NVIDIA documents: `echo "frame_rate_limiter=0, disable_vnc=1" > vgpu_params`
MAX_PARAMS = 64
_KEY_FIRST = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_")
_KEY_REST = _KEY_FIRST | frozenset("0123456789-")


def is_param(pair: str) -> bool:
    """Whether `pair` is one vgpu_params pair `key=value` of the grammar above."""
    key, eq, value = pair.partition("=")
    return (bool(eq) and 0 < len(key) <= 64 and key[0] in _KEY_FIRST and set(key) <= _KEY_REST
            and 0 < len(value) <= 256 and not any(c.isspace() or c == "," for c in value))  # fmt: skip


def split_params(text: str | None) -> list[str]:
    """The `key=value` pairs of vgpu_params text, read in either form: comma-separated as NVIDIA documents and as
    this tool writes (`a=1, b=2`), or space-separated as earlier versions wrote (`a=1 b=2`). Not validated."""
    return (text or "").replace(",", " ").split()


def join_params(pairs: Iterable[str]) -> str:
    """The canonical text of vgpu_params pairs: `k=v, k=v` ("" for none)."""
    return PARAM_SEPARATOR.join(pairs)


def same_params(a: str | None, b: str | None) -> bool:
    """Same vgpu_params whatever the form (commas or spaces) and order: the driver reads a set of pairs."""
    return sorted(split_params(a)) == sorted(split_params(b))


def params_text(text: str) -> bool:
    """Whether `text` is vgpu_params as vgpuadm writes them (the journal's check): at most 64 pairs, 4 KiB."""
    pairs = split_params(text)
    return len(text) <= 4096 and len(pairs) <= MAX_PARAMS and all(map(is_param, pairs))


def normalise_params(text: str) -> str:
    """Validate vgpu_params text in either form and return the canonical `k=v, k=v`; UsageError on a bad pair."""
    pairs = split_params(text)
    for w in pairs:
        if not is_param(w):
            raise UsageError(
                f'Malformed vgpu parameter "{w}"',
                "write key=value, e.g. --param frame_rate_limiter=0",
            )
    if len(pairs) > MAX_PARAMS:
        raise UsageError(f"{len(pairs)} vgpu parameters given", f"give at most {MAX_PARAMS}")
    return join_params(pairs)


def params_now(text: str | None) -> str | None:
    """vgpu_params a device has on the host now, as a record keeps them (`k=v, k=v`; None for none)."""
    return join_params(split_params(text)) or None


def check_params(params: str, type_id: str) -> str:
    """Normalise vgpu_params (reference §2.5) given as `k=v, k=v` or `k=v k=v` to `k=v, k=v`; only NVIDIA types
    take them."""
    if not split_params(params):
        return ""
    if not is_nvidia_type(type_id):
        raise UsageError(f"{type_id} takes no vgpu_params", "vgpu_params exist only for NVIDIA vGPU types")
    return normalise_params(params)


# -- vGPU type names ------------------------------------------------------------------------------------------------
# The parsers below split instead of using regular expressions: importing `re` and compiling the patterns cost
# ~3 ms of every cold start, and discovery parses a name and a description per type. Each keeps the grammar of
# the pattern it replaced, noted above it; `str.isdecimal` is exactly what `\d` matches.
_NV_KEYS = ("num_heads", "frl_config", "framebuffer", "max_resolution", "max_instance")
_GVT_KEYS = ("low_gm_size", "high_gm_size", "fence", "resolution", "weight")


class NvidiaName:
    """What an NVIDIA vGPU name says: `NVIDIA H200X-1-18C` → board H200X, 1 MIG slice, 18 GB, C series.
    A plain read-only-by-convention class rather than a dataclass (see vgpuadm/model.py for why)."""

    __slots__ = ("board", "framebuffer_mib", "profile", "series", "slices", "variant")

    def __init__(
        self,
        profile: str,
        board: str | None = None,
        slices: int | None = None,
        framebuffer_mib: int | None = None,
        series: str | None = None,
        variant: str | None = None,
    ) -> None:
        self.profile = profile
        self.board = board
        self.slices = slices
        self.framebuffer_mib = framebuffer_mib
        self.series = series
        self.variant = variant

    def attributes(self) -> dict[str, str | int]:
        out: dict[str, str | int] = {}
        if self.board:
            out["board"] = self.board
        if self.series:
            out["series"] = self.series
        if self.slices is not None:
            out["mig_slices"] = self.slices
        if self.variant:
            out["variant"] = self.variant
        return out


def profile_of(name: str) -> str:
    """The last whitespace-separated token (vgpu-device-manager's shortName convention)."""
    parts = name.split()
    return parts[-1] if parts else name


def describe_nvidia_name(name: str) -> NvidiaName:
    # <board>[-<slices>]-<fb GB><series>[ME|4], case-insensitive; fb 0 means 512 MB (M60-0B). Board names may
    # contain hyphens; the board is the shortest prefix that leaves a valid rest (as `^(.+?)(?:-(\d+))?-…$`).
    profile = profile_of(name)
    parts = profile.split("-")
    last = parts[-1]
    digits = next((i for i, c in enumerate(last) if not c.isdecimal()), len(last))
    series, variant = last[digits : digits + 1].upper(), last[digits + 1 :]
    if len(parts) < 2 or not digits or series not in ("A", "B", "C", "Q") or variant.upper() not in ("", "ME", "4"):
        return NvidiaName(profile=profile)
    slices = None
    board = "-".join(parts[:-1])
    if len(parts) >= 3 and parts[-2].isdecimal() and "-".join(parts[:-2]):
        slices, board = int(parts[-2]), "-".join(parts[:-2])
    if not board:
        return NvidiaName(profile=profile)
    fb_gb = int(last[:digits])
    return NvidiaName(
        profile=profile,
        board=board,
        slices=slices,
        framebuffer_mib=512 if fb_gb == 0 else fb_gb * 1024,
        series=series,
        variant=variant or None,
    )


def parse_description(text: str) -> dict[str, str | int]:
    """Parse an mdev type description: NVIDIA's one-liner or GVT-g's key: value lines. Unknown text → {}."""
    text = text.strip()
    nvidia = _nvidia_description(text)
    if nvidia is not None:
        return nvidia
    out: dict[str, str | int] = {}
    for line in text.splitlines():
        # (low_gm_size|high_gm_size|fence|resolution|weight):\s*(\S+)
        key, colon, value = line.strip().partition(":")
        value = value.lstrip()
        if not colon or key not in _GVT_KEYS or not value or len(value.split()) != 1:
            continue
        if value.endswith("MB") and value[:-2].isdigit():
            out[key.replace("_size", "_mib")] = int(value[:-2])
        elif value.isdigit():
            out[key] = int(value)
        else:
            out[key] = value
    return out


def _nvidia_description(text: str) -> dict[str, str | int] | None:
    # num_heads=(\d+), frl_config=(\d+), framebuffer=(\d+)M, max_resolution=(\d+x\d+), max_instance=(\d+)
    fields = text.split(", ")
    if len(fields) != 5:
        return None
    values = []
    for field, key in zip(fields, _NV_KEYS, strict=True):
        k, eq, v = field.partition("=")
        if k != key or not eq:
            return None
        values.append(v)
    heads, frl, fb, res, most = values
    width, x, height = res.partition("x")
    if not (fb.endswith("M") and fb[:-1].isdecimal() and x and width.isdecimal() and height.isdecimal()):
        return None
    if not (heads.isdecimal() and frl.isdecimal() and most.isdecimal()):
        return None
    return {
        "num_heads": int(heads),
        "frl_config": int(frl),
        "framebuffer_mib": int(fb[:-1]),
        "max_resolution": res,
        "max_instance": int(most),
    }


def parse_creatable(text: str) -> list[tuple[int, str]]:
    """Parse nvidia/creatable_vgpu_types: header `ID    : vGPU Name`, `%-5d : name` rows, blank lines,
    single or multiple spaces, and the colon-less form `1428 NVIDIA H200X-141C` all occur."""
    import re  # layout C hosts only: keeps `re` off the other hosts' read commands

    out = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or re.match(r"^ID\s*:", line, re.IGNORECASE):
            continue
        m = re.match(r"^(\d+)\s*:?\s*(.+?)$", line)
        if m:
            out.append((int(m[1]), m[2].strip()))
    return out


def _spellings(t: VgpuType) -> set[str]:
    names = {t.type_id.lower(), t.name.lower(), t.profile.lower()}
    if t.numeric_id is not None and t.layout.types_by_number:
        names.add(str(t.numeric_id))
    return names


def resolve_type(types: Sequence[VgpuType], wanted: str, where: str = "this host") -> list[VgpuType]:
    """All types (on any parent) that `wanted` names, sharing one type_id. Unknown → NotFoundError with
    the closest spellings."""
    key = " ".join(wanted.split()).lower()
    hits = [t for t in types if key in _spellings(t)]
    ids = {t.type_id for t in hits}
    if len(ids) > 1:
        listed = ", ".join(sorted(ids))
        raise NotFoundError(
            f'Type "{wanted}" is ambiguous on {where}: {listed}', "name the type id, e.g. --type nvidia-63"
        )
    if hits:
        return hits
    raise NotFoundError(f'Unknown type "{wanted}" on {where}{_suggest(types, key)}', _list_hint(types))


def _suggest(types: Iterable[VgpuType], key: str) -> str:
    """Up to three types whose id, name or profile is within a few edits of `key` (a swap of two neighbouring
    characters is one edit: nvidia-36 → nvidia-63), closest first; among equals, the same characters reordered
    first, then the host's order."""
    limit = max(1, len(key) // 3)
    best: dict[str, tuple[int, bool, int, VgpuType]] = {}
    for order, t in enumerate(types):
        for s in _spellings(t):
            d = edit_distance(key, s)
            if d <= limit:
                rank = (d, sorted(s) != sorted(key), order, t)
                if t.type_id not in best or rank[:3] < best[t.type_id][:3]:
                    best[t.type_id] = rank
    seen = []
    for *_, t in sorted(best.values(), key=lambda r: r[:3])[:3]:
        seen.append(f"{t.type_id} ({t.name})" if t.name != t.type_id else t.type_id)
    return f"; did you mean {' or '.join(seen)}?" if seen else ""


def edit_distance(a: str, b: str) -> int:
    """Optimal string alignment distance: insertions, deletions, substitutions and adjacent swaps cost 1."""
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb))
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                cur[j] = min(cur[j], prev2[j - 2] + 1)
        prev2, prev = prev, cur
    return prev[-1]


def _list_hint(types: Sequence[VgpuType]) -> str:
    return "run `vgpuadm types` to list the types this host offers" if types else "this host offers no vGPU types"


def mig_profile_name(type_name: str) -> str | None:
    """The GPU-instance profile a MIG-backed type's name asks for (`NVIDIA H200X-1-18C` → 1g.18gb); None for a
    time-sliced type."""
    info = describe_nvidia_name(type_name)
    if info.slices is None or info.framebuffer_mib is None:
        return None
    me = "+me" if (info.variant or "").upper() == "ME" else ""
    return f"{info.slices}g.{info.framebuffer_mib // 1024}gb{me}"
