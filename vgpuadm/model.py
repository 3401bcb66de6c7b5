"""Frozen data the whole program passes around: what discovery found (HostSnapshot) and its parts.

Nothing here reads the host; discovery (host/discover.py) builds these, everything else only reads them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from vgpuadm.naming import describe_nvidia_name


class Layout(StrEnum):
    """How a PCI function shares its GPU (shared/docs/vgpu-sysfs.md §0)."""

    MDEV_PF = "mdev-pf"  # A: mdev types on a physical function (P4, T4, GVT-g, mtty…)
    MDEV_VF = "mdev-vf"  # B: mdev types on an SR-IOV VF, at most one vGPU per VF
    VENDOR_VFIO = "vendor-vfio"  # C: NVIDIA nvidia/current_vgpu_type on a VF
    SRIOV_PF = "sriov-pf"  # an NVIDIA SR-IOV PF whose VFs are not enabled yet (sriov-manage -e)
    PASSTHROUGH = "passthrough"  # D: whole-function passthrough candidate


MDEV_LAYOUTS = (Layout.MDEV_PF, Layout.MDEV_VF)


@dataclass(frozen=True)
class PciFunction:
    """One PCI function as sysfs shows it. Ids are kept in the kernel's text form ("0x10de", "0x030200")."""

    address: str
    vendor_id: str
    device_id: str
    class_code: str
    subsystem_vendor_id: str | None = None
    subsystem_device_id: str | None = None
    driver: str | None = None
    driver_override: str | None = None
    iommu_group: int | None = None
    numa_node: int | None = None
    boot_vga: bool | None = None
    sriov_total_vfs: int | None = None
    sriov_num_vfs: int | None = None
    virtfns: tuple[str, ...] = ()
    physfn: str | None = None
    is_bridge: bool = False
    sysfs_path: str = ""  # host path of the real device directory (/sys/devices/...)

    @property
    def is_display(self) -> bool:
        return self.class_code.startswith("0x03")

    @property
    def is_vf(self) -> bool:
        return self.physfn is not None

    @property
    def slot(self) -> str:
        """The address without the function number: 0000:65:00."""
        return self.address.rsplit(".", 1)[0]


@dataclass(frozen=True)
class VgpuType:
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
    attributes: dict[str, str | int] = field(default_factory=dict, hash=False, compare=False)

    @property
    def numeric_id(self) -> int | None:
        """NVIDIA's vGPU type id (63 for nvidia-63), None for other vendors."""
        prefix, _, number = self.type_id.rpartition("-")
        return int(number) if prefix == "nvidia" and number.isdigit() else None


@dataclass(frozen=True)
class MdevParent:
    """A device under /sys/class/mdev_bus: a PCI function (PF or VF) or a virtual device such as mtty."""

    name: str  # 0000:01:00.0, or mtty for non-PCI parents
    sysfs_path: str
    layout: Layout
    pci_address: str | None
    types: tuple[VgpuType, ...]


@dataclass(frozen=True)
class Mdev:
    """An existing mediated device."""

    uuid: str
    type_id: str
    parent: str
    iommu_group: int | None = None
    vgpu_params: str | None = None


@dataclass(frozen=True)
class VendorVf:
    """A layout C virtual function: its creatable type list and the type it runs (0 = none)."""

    address: str
    physfn: str | None
    creatable: tuple[tuple[int, str], ...]
    current_type: int
    vgpu_params: str | None = None

    @property
    def in_use(self) -> bool:
        return self.current_type != 0


@dataclass(frozen=True)
class HostSnapshot:
    """Everything discovery read from one host root, at one moment."""

    root: str
    simulated: bool
    functions: dict[str, PciFunction]
    mdev_parents: dict[str, MdevParent]
    mdevs: dict[str, Mdev]
    vendor_vfs: dict[str, VendorVf]
    iommu_groups: dict[int, tuple[str, ...]]
    layouts: dict[str, Layout]
    warnings: tuple[str, ...] = ()

    @property
    def gpus(self) -> list[PciFunction]:
        """Display-class functions (class 0x03xx), PFs and VFs, sorted by address."""
        return [f for _, f in sorted(self.functions.items()) if f.is_display]

    def types(self) -> list[VgpuType]:
        """Every vGPU type of every parent: mdev types (A/B) and layout C creatable types."""
        out = [t for p in self.mdev_parents.values() for t in p.types]
        out.extend(t for vf in self.vendor_vfs.values() for t in vendor_vf_types(vf, self))
        return sorted(out, key=lambda t: (t.parent, t.numeric_id or 0, t.type_id))

    def physical_gpu(self, address: str) -> str:
        """The PF that a VF belongs to (itself for a PF or a non-PCI parent)."""
        fn = self.functions.get(address)
        return fn.physfn if fn is not None and fn.physfn else address

    def group_members(self, address: str) -> tuple[str, ...]:
        fn = self.functions.get(address)
        if fn is None or fn.iommu_group is None:
            return (address,)
        return self.iommu_groups.get(fn.iommu_group, (address,))


def vendor_vf_types(vf: VendorVf, snapshot: HostSnapshot | None = None) -> list[VgpuType]:
    """Layout C: a listed creatable type can be made once on this VF while it runs nothing."""
    out = []
    for type_num, name in vf.creatable:
        info = describe_nvidia_name(name)
        out.append(
            VgpuType(
                parent=vf.address,
                layout=Layout.VENDOR_VFIO,
                type_id=f"nvidia-{type_num}",
                name=name,
                profile=info.profile,
                available_instances=0 if vf.in_use else 1,
                max_instances=None,
                framebuffer_mib=info.framebuffer_mib,
                device_api="vfio-pci",
                description="",
                attributes=info.attributes(),
            )
        )
    return out


@dataclass(frozen=True)
class Allocation:
    """One device a domain owns, as recorded in the domain's vgpuadm <metadata> (the source of truth for
    ownership, restore and the inventory's "owned by" column)."""

    domain: str
    mode: str  # "mdev" (layouts A/B), "vf" (layout C), "pci" (layout D passthrough)
    type_id: str | None = None  # nvidia-63, nvidia-1414; None for passthrough
    parent: str | None = None  # mdev parent, or the VF itself for layout C
    uuid: str | None = None  # mdev UUID
    address: str | None = None  # VF address (layout C) or passed-through function (layout D)
    params: str | None = None  # vgpu_params as written
    domain_uuid: str | None = None
    slot: int = 0  # index among the domain's vgpuadm devices (deterministic UUIDs derive from it)
    extra: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
