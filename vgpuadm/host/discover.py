"""snapshot(sysfs) → HostSnapshot: read PCI display functions and their companions, mdev parents, types and
devices, and NVIDIA vendor-VFIO VFs. Pure reading. One odd device becomes a warning, never a stopped discovery.

Layout detection follows shared/docs/vgpu-sysfs.md §0, from sysfs only, never from the GPU model.

`model_names`: GPU model names ("Tesla P4") from the PCI ID database, pci.ids: under the host root first (a simulated
or imported host ships its own), then this system's. The file is untrusted input: read bounded, only the vendors asked
for are parsed, and names are kept printable and short.
"""

from __future__ import annotations

import errno
import os
import stat

from vgpuadm.catalog import sriov_boards
from vgpuadm.catalog.vendor_types import vendor_vf_types
from vgpuadm.errors import HostIOError
from vgpuadm.host import nvidia_smi
from vgpuadm.host.paths import PCI_IDS
from vgpuadm.host.root import HostRoot
from vgpuadm.host.sysfs import DirScan, Sysfs, check_root
from vgpuadm.model import (
    HostSnapshot,
    Layout,
    Mdev,
    MdevParent,
    PciFunction,
    VendorVf,
    VfPool,
    VgpuType,
    describe_nvidia_name,
    is_nvidia_type,
    is_pci_address,
    parse_creatable,
    parse_description,
    profile_of,
)

PCI_DEVICES = "/sys/bus/pci/devices"
MDEV_BUS = "/sys/class/mdev_bus"
MDEV_DEVICES = "/sys/bus/mdev/devices"
IOMMU_GROUPS = "/sys/kernel/iommu_groups"
DRM_CLASS = "/sys/class/drm"


def snapshot(sysfs: Sysfs, *, types: bool = True, names: bool = False, details: bool = True) -> HostSnapshot:
    """Read the host. `types=False` skips the mdev type directories (every parent then lists no types): the
    commands that never show types (`gpus`) save thousands of reads on a big layout B host. `names=True` also
    looks the GPUs' model names up in pci.ids (model_names, below) for tables and messages. `details=False` skips the
    PCI attributes only the GPU listings, inventory, doctor and placement read (_DETAIL_ATTRS: they read None):
    `types` shows none of them, and they were ~700 of its files on a 128-VF host."""
    check_root(sysfs.root)
    warnings: list[str] = []
    listed: dict[int, list[str]] = {}
    with_nvidia: set[str] = set()
    functions = _read_functions(sysfs, warnings, listed, details, with_nvidia)
    groups = _read_groups(sysfs, functions, listed)
    parents = _read_mdev_parents(sysfs, functions, warnings, types)
    mdevs = _read_mdevs(sysfs, warnings)
    vendor_vfs = _with_supported_types(sysfs, _read_vendor_vfs(sysfs, functions, warnings, with_nvidia))
    layouts = {addr: _layout(fn, parents, vendor_vfs) for addr, fn in functions.items() if fn.is_display}
    for addr, fn in functions.items():
        # A PF whose VFs carry the vGPUs (layouts B and C) takes its VFs' layout: it is no passthrough candidate.
        vf_layouts = sorted({layouts[vf] for vf in fn.virtfns if vf in layouts} & {Layout.MDEV_VF, Layout.VENDOR_VFIO})
        if addr in layouts and vf_layouts:
            layouts[addr] = vf_layouts[0]
    for name, parent in parents.items():
        layouts.setdefault(name, parent.layout)
    pools = _read_vf_pools(sysfs, functions, warnings)
    for pf, pool in pools.items():
        layouts.update(dict.fromkeys([pf, *(vf for vf in pool.vfs if vf in functions)], Layout.VF_POOL))
    return HostSnapshot(
        root=sysfs.root,
        simulated=sysfs.simulated,
        functions=functions,
        mdev_parents=parents,
        mdevs=mdevs,
        vendor_vfs=vendor_vfs,
        iommu_groups=groups,
        layouts=layouts,
        warnings=tuple(warnings),
        machine_id=HostRoot(sysfs.root).machine_id(),
        vf_pools=pools,
        render_nodes=_read_render_nodes(sysfs),
        models=_models(sysfs.root, functions) if names else None,
    )


def _models(root: str, functions: dict[str, PciFunction]) -> dict[str, str]:
    gpus = [fn for fn in functions.values() if fn.is_display]
    found = model_names(root, {(fn.vendor_id, fn.device_id) for fn in gpus})
    return {fn.address: found[key] for fn in gpus if (key := (fn.vendor_id, fn.device_id)) in found}


def _layout(fn: PciFunction, parents: dict[str, MdevParent], vfs: dict[str, VendorVf]) -> Layout:
    if fn.address in parents:
        return Layout.MDEV_VF if fn.physfn else Layout.MDEV_PF
    if fn.address in vfs:
        return Layout.VENDOR_VFIO
    if fn.sriov_total_vfs and fn.driver == "nvidia" and not fn.sriov_num_vfs:
        return Layout.SRIOV_PF
    return Layout.PASSTHROUGH


def _read_functions(
    sysfs: Sysfs,
    warnings: list[str],
    listed: dict[int, list[str]],
    details: bool = True,
    with_nvidia: set[str] | None = None,
) -> dict[str, PciFunction]:
    """Display functions, their SR-IOV relatives and every function sharing their IOMMU groups. The IOMMU group
    members it lists land in `listed`, for _read_groups; the functions whose directory has an `nvidia` entry in
    `with_nvidia`, for _read_vendor_vfs."""
    addresses = sysfs.listdir(PCI_DEVICES)
    classes: dict[str, str] = {}
    for addr in addresses:
        try:
            classes[addr] = sysfs.read(f"{PCI_DEVICES}/{addr}/class").strip()
        except HostIOError as exc:
            if exc.errno in (errno.EXDEV, errno.ELOOP) or sysfs.is_dir(f"{PCI_DEVICES}/{addr}"):
                warnings.append(f"skipped PCI function {addr}: {exc.message}")
            else:
                warnings.append(f"skipped PCI function {addr}: {PCI_DEVICES}/{addr} is a dangling link")
    # SR-IOV PFs of any class too: `sriov enable` and `vfio bind` act on them and their VFs by address.
    wanted = [
        a
        for a, c in classes.items()
        if c.startswith(("0x03", "0x12")) or sysfs.exists(f"{PCI_DEVICES}/{a}/sriov_totalvfs")
    ]
    by_slot: dict[str, list[str]] = {}
    for a in addresses:
        by_slot.setdefault(a.rpartition(".")[0], []).append(a)
    out: dict[str, PciFunction] = {}
    skipped: set[str] = set()
    todo = list(wanted)
    with sysfs.scan(PCI_DEVICES) as bus:  # every function's bus entry read through one descriptor
        while todo:
            addr = todo.pop()
            if addr in out or addr in skipped or addr not in classes:
                continue
            try:
                fn = _read_function(sysfs, bus, addr, classes[addr], warnings, details, with_nvidia)
            except HostIOError as exc:
                warnings.append(f"skipped PCI function {addr}: {exc.message}")
                skipped.add(addr)
                continue
            out[addr] = fn
            todo.extend(fn.virtfns)
            if fn.physfn:
                todo.append(fn.physfn)
            if fn.iommu_group is not None and fn.is_display:
                members = listed[fn.iommu_group] = sysfs.listdir(f"{IOMMU_GROUPS}/{fn.iommu_group}/devices")
                todo.extend(members)
            todo.extend(a for a in by_slot.get(fn.slot, ()) if a != addr)
    for addr, fn in list(out.items()):
        if fn.physfn and fn.physfn not in out:  # a VF stands with its PF: the snapshot never names a missing one
            warnings.append(f"skipped PCI function {addr}: its PF {fn.physfn} was skipped")
            del out[addr]
    return dict(sorted(out.items()))


def _read_function(
    sysfs: Sysfs,
    bus: DirScan,
    addr: str,
    class_code: str,
    warnings: list[str],
    details: bool = True,
    with_nvidia: set[str] | None = None,
) -> PciFunction:
    """`bus`: Sysfs.scan of PCI_DEVICES, where the function's entry is; `details`: as snapshot's; `addr` goes into
    `with_nvidia` when its directory has an `nvidia` entry."""
    wanted = _FUNCTION_ATTRS if details else _CORE_ATTRS
    d = f"{PCI_DEVICES}/{addr}"
    real = bus.resolve_link(addr)
    # The directory's scandir, links and attributes through one descriptor of it (Sysfs.scan).
    with sysfs.scan(real) as dir_:
        # One scandir tells which optional attributes and links exist, so absent ones cost no failed open().
        entries = dir_.entries()
        if with_nvidia is not None and "nvidia" in entries:
            with_nvidia.add(addr)
        numbered = [e for e in entries if e.startswith("virtfn") and e[6:].isdecimal()]  # ^virtfn(\d+)$
        # A link's error is raised where it would have been read one by one.
        links = dir_.link_names([*numbered, *(n for n in ("iommu_group", "driver", "physfn") if entries.get(n))])
        virtfns = []
        for entry in numbered:
            target = links[entry]
            if isinstance(target, HostIOError):
                raise target
            if target:
                virtfns.append((int(entry[6:]), target))

        # The attributes present. On any error the single reads below run instead, so messages name the path
        # users know.
        try:
            got = dir_.read_attrs(tuple(n for n in wanted if n in entries))
        except HostIOError:
            got = {}

    def text(name: str) -> str | None:
        return got[name] if got.get(name) is not None else sysfs.read_opt(f"{d}/{name}")

    def link(name: str) -> str | None:
        target = links.get(name)
        if isinstance(target, HostIOError):
            raise target
        return target

    def opt(name: str) -> str | None:
        return _strip(text(name)) if name in entries and name in wanted else None

    def num(name: str) -> int | None:
        # An odd optional number is a warning naming the file, never a lost GPU.
        if name not in entries or name not in wanted:
            return None
        try:
            return _int(text(name), f"{d}/{name}")
        except HostIOError as exc:
            warnings.append(f"PCI function {addr}: {exc.message}")
            return None

    def required(name: str) -> str:
        value = got.get(name)
        return (value if value is not None else sysfs.read(f"{d}/{name}")).strip()

    boot_vga = num("boot_vga")
    override = opt("driver_override")
    try:
        group = _group_number(link("iommu_group"), f"{d}/iommu_group")
    except HostIOError as exc:
        warnings.append(f"PCI function {addr}: {exc.message}")
        group = None
    return PciFunction(
        address=addr,
        vendor_id=required("vendor"),
        device_id=required("device"),
        class_code=class_code,
        subsystem_vendor_id=opt("subsystem_vendor"),
        subsystem_device_id=opt("subsystem_device"),
        driver=link("driver"),
        driver_override=None if override in (None, "", "(null)") else override,
        iommu_group=group,
        numa_node=num("numa_node"),
        boot_vga=None if boot_vga is None else bool(boot_vga),
        sriov_total_vfs=num("sriov_totalvfs"),
        sriov_num_vfs=num("sriov_numvfs"),
        virtfns=tuple(t for _, t in sorted(virtfns)),
        physfn=link("physfn"),
        is_bridge=class_code.startswith("0x0604") or "pci_bus" in entries,
        sysfs_path=real,
    )


_FUNCTION_ATTRS = ("vendor", "device", "subsystem_vendor", "subsystem_device", "driver_override", "numa_node",
                   "boot_vga", "sriov_totalvfs", "sriov_numvfs")  # fmt: skip
_DETAIL_ATTRS = ("subsystem_vendor", "subsystem_device", "driver_override", "numa_node", "boot_vga")
_CORE_ATTRS = tuple(n for n in _FUNCTION_ATTRS if n not in _DETAIL_ATTRS)


def _int(text: str | None, host_path: str) -> int | None:
    """As Sysfs.read_int, on text already read."""
    if text is None:
        return None
    try:
        return int(text.strip())
    except ValueError:
        raise HostIOError(f"{host_path} holds {text.strip()[:40]!r}, not an integer", path=host_path) from None


def _strip(text: str | None) -> str | None:
    return text.strip() if text is not None else None


def _group_number(name: str | None, host_path: str) -> int | None:
    if name is None:
        return None
    if not name.isdigit():
        raise HostIOError(f"{host_path} points at {name!r}, not an IOMMU group number", path=host_path)
    return int(name)


def _read_groups(
    sysfs: Sysfs, functions: dict[str, PciFunction], listed: dict[int, list[str]]
) -> dict[int, tuple[str, ...]]:
    numbers = sorted({fn.iommu_group for fn in functions.values() if fn.iommu_group is not None})
    return {n: tuple(listed[n] if n in listed else sysfs.listdir(f"{IOMMU_GROUPS}/{n}/devices")) for n in numbers}


def _read_mdev_parents(
    sysfs: Sysfs, functions: dict[str, PciFunction], warnings: list[str], with_types: bool = True
) -> dict[str, MdevParent]:
    out = {}
    described: _Described = {}  # this snapshot's share of _DESCRIBED (see _make_type)
    for name in sysfs.listdir(MDEV_BUS):
        d = f"{MDEV_BUS}/{name}"
        try:
            fn = functions.get(name)
            physfn = fn.physfn if fn else sysfs.link_name(f"{d}/physfn")
            layout = Layout.MDEV_VF if physfn else Layout.MDEV_PF
            real = fn.sysfs_path if fn else sysfs.resolve_link(d)
            raw = sysfs.read_subdirs(f"{real}/mdev_supported_types", _TYPE_ATTRS) if with_types else {}
            types = []
            for type_id, attrs in raw.items():
                try:
                    types.append(_make_type(name, layout, d, type_id, attrs, described))
                except HostIOError as exc:
                    warnings.append(f"skipped type {type_id} on {name}: {exc.message}")
            out[name] = MdevParent(
                name=name,
                sysfs_path=real,
                layout=layout,
                pci_address=name if fn is not None or sysfs.exists(f"{PCI_DEVICES}/{name}") else None,
                types=tuple(types),
            )
        except HostIOError as exc:
            warnings.append(f"skipped mdev parent {name}: {exc.message}")
    return out


_TYPE_ATTRS = ("available_instances", "name", "description", "device_api")


def _make_type(
    parent: str, layout: Layout, d: str, type_id: str, a: dict[str, str | None], described: _Described | None = None
) -> VgpuType:
    """One mdev type from its attributes; `d` is its parent's host path as users see it (/sys/class/mdev_bus/…).
    `described`: one snapshot's _describe answers, each with its own copy of the attributes, which that snapshot's
    types of the same texts share (records never change them; 20 copies, not 2,560, on a 128-VF host). The
    process-wide cache's dicts never leave this module: a caller changing one snapshot's attributes changes no
    later snapshot."""
    raw = a["available_instances"]
    try:
        available = int(raw)  # type: ignore[arg-type]  # None is caught below; int() strips whitespace itself
    except (TypeError, ValueError):
        path = f"{d}/mdev_supported_types/{type_id}/available_instances"
        if raw is None:
            raise HostIOError(f"{path} is missing", path=path) from None
        raise HostIOError(f"{path} holds {raw.strip()[:40]!r}, not an integer", path=path) from None
    key = (type_id, a["name"], a["description"], a["device_api"])
    found = described.get(key) if described is not None else None
    if found is None:
        shared = _DESCRIBED.get(key)
        if shared is None:
            shared = _DESCRIBED[key] = _describe(*key)
        found = (*shared[:6], dict(shared[6]))
        if described is not None:
            described[key] = found
    name, description, device_api, profile, max_instances, fb, attrs = found
    return VgpuType(
        parent, layout, type_id, name, profile, available, max_instances, fb, device_api, description, attrs
    )


# _describe's answers by its arguments (as functools.cache, whose import brings collections onto the read path).
_Described = dict[
    tuple[str, str | None, str | None, str | None],
    tuple[str, str, str, str, int | None, int | None, dict[str, str | int]],
]
_DESCRIBED: _Described = {}


def _describe(
    type_id: str, raw_name: str | None, raw_description: str | None, raw_device_api: str | None
) -> tuple[str, str, str, str, int | None, int | None, dict[str, str | int]]:
    """Name, description, device API, profile, max instances, framebuffer and attributes of a type's texts.
    Cached: every VF of a GPU lists the same types, so a big layout B host parses each text once, not per VF."""
    name = (raw_name or "").strip() or type_id
    description = (raw_description or "").strip()
    attrs = parse_description(description)
    nvidia = is_nvidia_type(type_id)
    info = describe_nvidia_name(name) if nvidia else None
    if info is not None:
        attrs = {**info.attributes(), **attrs}
    max_instances = attrs.get("max_instance")
    fb = attrs.get("framebuffer_mib")
    if fb is None and info is not None:
        fb = info.framebuffer_mib
    return (
        name,
        description,
        (raw_device_api or "").strip(),
        profile_of(name) if nvidia else name,
        max_instances if isinstance(max_instances, int) else None,
        fb if isinstance(fb, int) else None,
        attrs,
    )


def _read_mdevs(sysfs: Sysfs, warnings: list[str]) -> dict[str, Mdev]:
    out = {}
    for uuid in sysfs.listdir(MDEV_DEVICES):
        d = f"{MDEV_DEVICES}/{uuid}"
        try:
            real = sysfs.resolve_link(d)
            type_id = sysfs.link_name(f"{d}/mdev_type")
            if type_id is None or not sysfs.exists(real):
                warnings.append(f"skipped mdev {uuid}: {d} is a dangling link or has no mdev_type")
                continue
            params = sysfs.read_opt(f"{d}/nvidia/vgpu_params")
            out[uuid] = Mdev(
                uuid=uuid,
                type_id=type_id,
                parent=os.path.basename(os.path.dirname(real)),
                iommu_group=_group_number(sysfs.link_name(f"{d}/iommu_group"), f"{d}/iommu_group"),
                vgpu_params=params.strip() if params is not None else None,
            )
        except HostIOError as exc:
            warnings.append(f"skipped mdev {uuid}: {exc.message}")
    return out


def _with_supported_types(sysfs: Sysfs, vfs: dict[str, VendorVf]) -> dict[str, VendorVf]:
    """A layout C VF lists nothing in creatable_vgpu_types while it runs a vGPU or its GPU has no room, so names
    of what the GPU supports come from the driver (`nvidia-smi vgpu -s -v`), as types with no free instance. Asked
    only when some VF lists nothing; without nvidia-smi those VFs keep offering nothing."""
    if not any(not vf.creatable for vf in vfs.values()):
        return vfs
    text = nvidia_smi.run(HostRoot(sysfs.root), *nvidia_smi.VGPU_SUPPORTED)
    supported = nvidia_smi.parse_supported_types(text) if text else {}
    out = dict(vfs)
    for addr, vf in vfs.items():
        listed = supported.get(vf.physfn or "")
        if not vf.creatable and listed:
            offered = tuple(t.with_available(0) for t in vendor_vf_types(addr, listed))
            out[addr] = VendorVf(addr, vf.physfn, vf.creatable, vf.current_type, vf.vgpu_params, offered,
                                 vf.placement_id)  # fmt: skip
    return out


_PLACEMENT_MAX = 4096  # placement slots a GPU may have (the largest board has a few hundred)


def _placement(text: str | None, host_path: str) -> int | None:
    """nvidia/placement_id: -1 or empty (none chosen: the driver chooses; the real L40S capture in
    tests/data/harvester-a2 reads empty) or a slot number; anything else is refused with the path."""
    if text is None:
        return None
    value = text.strip() or "-1"
    if value == "-1" or (value.isdecimal() and len(value) <= 4 and int(value) < _PLACEMENT_MAX):
        return int(value)
    raise HostIOError(f"{host_path} holds {value[:40]!r}, not a placement ID", "check the NVIDIA driver")


def _read_vendor_vfs(
    sysfs: Sysfs, functions: dict[str, PciFunction], warnings: list[str], with_nvidia: set[str] | None = None
) -> dict[str, VendorVf]:
    """`with_nvidia`: the functions whose directory has an `nvidia` entry (_read_functions' scans); the others
    have no nvidia/creatable_vgpu_types to read (a 128-VF layout B host: 136 failed opens)."""
    out = {}
    for addr, fn in functions.items():
        if not fn.is_display or (with_nvidia is not None and addr not in with_nvidia):
            continue
        d = f"{PCI_DEVICES}/{addr}/nvidia"
        try:
            text = sysfs.read_opt(f"{d}/creatable_vgpu_types")
            if text is None:
                continue
            current = sysfs.read_int(f"{d}/current_vgpu_type") or 0
            params = sysfs.read_opt(f"{d}/vgpu_params")
            placement = sysfs.read_opt(f"{d}/placement_id")
            creatable = tuple(parse_creatable(text))
            out[addr] = VendorVf(
                address=addr,
                physfn=fn.physfn,
                creatable=creatable,
                offered=vendor_vf_types(addr, creatable),
                current_type=current,
                vgpu_params=params.strip() if params is not None else None,
                placement_id=_placement(placement, f"{d}/placement_id"),
            )
        except HostIOError as exc:
            warnings.append(f"skipped vendor-VFIO VF {addr}: {exc.message}")
    return out


# -- SR-IOV VF pools (AMD Instinct under GIM, Intel i915/xe: docs/reference/sriov-gpus.md) --------------------------

VFIO_VARIANTS = {"xe": "xe-vfio-pci"}  # PF driver → the VFIO variant driver for its VFs (migration), when loaded
_IN_USE_DRIVERS = ("vfio-pci", *VFIO_VARIANTS.values())


def _read_vf_pools(sysfs: Sysfs, functions: dict[str, PciFunction], warnings: list[str]) -> dict[str, VfPool]:
    """Every display-class PF with sriov_totalvfs that is not NVIDIA's: its VFs (the ones that exist, and the rest
    predicted from sriov_offset/sriov_stride, PCIe SR-IOV §9.3.3.9-10), which are free, and one VF's share."""
    out = {}
    for addr, fn in functions.items():
        if fn.is_vf or not fn.is_display or not fn.sriov_total_vfs or fn.vendor_id == sriov_boards.NVIDIA:
            continue
        d = f"{PCI_DEVICES}/{addr}"
        try:
            offset = sysfs.read_int(f"{d}/sriov_offset")
            stride = sysfs.read_int(f"{d}/sriov_stride")
            autoprobe = (sysfs.read_opt(f"{d}/sriov_drivers_autoprobe") or "1").strip() != "0"
            per_vf = _per_vf_quota(sysfs, fn)
        except HostIOError as exc:
            warnings.append(f"skipped SR-IOV VF pool {addr}: {exc.message}")
            continue
        vfs = list(fn.virtfns)
        if offset is not None and stride is not None and len(vfs) < fn.sriov_total_vfs:
            vfs += _predicted_vfs(addr, offset, stride, fn.sriov_total_vfs)[len(vfs) :]
        elif len(vfs) < fn.sriov_total_vfs and not vfs:
            warnings.append(
                f"SR-IOV VF pool {addr}: no sriov_offset/sriov_stride, so its VFs are unknown until enabled"
            )
        num = fn.sriov_num_vfs or 0
        variant = VFIO_VARIANTS.get(fn.driver or "")
        if variant and not sysfs.exists(f"/sys/bus/pci/drivers/{variant}"):
            variant = None
        if num:
            free = tuple(v for v in fn.virtfns if v in functions and functions[v].driver not in _IN_USE_DRIVERS)
        else:
            free = tuple(vfs)  # create enables all of them first
        vfs_now = num or fn.sriov_total_vfs
        fb = per_vf.get("framebuffer_mib") or sriov_boards.vf_share_mib(fn.vendor_id, fn.device_id, vfs_now)
        if fb:
            per_vf["framebuffer_mib"] = fb
        board = sriov_boards.board_name(fn.vendor_id, fn.device_id)
        shares = f"{vfs_now} VFs" + (f" × {fb} MiB" if fb else "") + (" (enabled)" if num else " (when enabled)")
        t = VgpuType(addr, Layout.VF_POOL, sriov_boards.pool_type_id(fn.vendor_id, fn.device_id), f"{board} VF",
                     f"{board}-VF", len(free), fn.sriov_total_vfs, fb, "vfio-pci", shares, dict(per_vf))  # fmt: skip
        out[addr] = VfPool(addr, fn.sriov_total_vfs, num, tuple(vfs), free, autoprobe, variant, per_vf, (t,))
    return out


def _predicted_vfs(pf: str, offset: int, stride: int, total: int) -> list[str]:
    """VF n's routing ID is the PF's + First VF Offset + n × VF Stride (PCIe SR-IOV); the domain stays the PF's."""
    dom, rest = pf.split(":", 1)
    bus, devfn = rest.split(":")
    slot, func = devfn.split(".")
    rid = (int(bus, 16) << 8) | (int(slot, 16) << 3) | int(func, 16)
    out = []
    for n in range(total):
        r = rid + offset + n * stride
        if r > 0xFFFF:
            break
        out.append(f"{dom}:{r >> 8:02x}:{(r >> 3) & 0x1F:02x}.{r & 7:x}")
    return out


# Per-VF provisioning files, VF 1 read as the pool's share (auto-provisioning is uniform): Intel's i915 backport
# (drm/cardN/prelim_iov/vfN/gt/lmem_quota, bytes) and upstream xe (sriov_admin/vfN/profile/vram_quota, Linux 7.0).
_QUOTA_FILES = ("lmem_quota", "ggtt_quota", "contexts_quota", "doorbells_quota", "exec_quantum_ms",
                "preempt_timeout_us", "vram_quota")  # fmt: skip


def _per_vf_quota(sysfs: Sysfs, fn: PciFunction) -> dict[str, int]:
    real = fn.sysfs_path
    dirs = [f"{real}/drm/{card}/prelim_iov/vf1/gt" for card in sysfs.listdir(f"{real}/drm") if card.startswith("card")]
    for d in [*dirs, f"{real}/sriov_admin/vf1/profile"]:
        out = {name: v for name in _QUOTA_FILES if (v := sysfs.read_int(f"{d}/{name}")) is not None}
        if out:
            memory = out.get("lmem_quota") or out.get("vram_quota")
            if memory:
                out["framebuffer_mib"] = memory // (1024 * 1024)
            return out
    return {}


def _read_render_nodes(sysfs: Sysfs) -> dict[str, str]:
    """/sys/class/drm/renderD<N> → the PCI address its `device` link names (what virtio-gpu renders on)."""
    out = {}
    for name in sysfs.listdir(DRM_CLASS):
        if name.startswith("renderD") and name[7:].isdecimal() and len(name) <= 12:
            link = f"{DRM_CLASS}/{name}/device"
            device = os.path.basename(sysfs.resolve(link)) if sysfs.exists(link) else ""
            out[name] = device if is_pci_address(device) else ""
    return out


MAX_PCI_IDS = 16 * 1024 * 1024  # pci.ids is ~1.4 MB in 2024
MAX_NAME = 60


def model_names(root: str, ids: set[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """(vendor, device) as `0x10de`, `0x1bb3` → the model: the bracketed marketing name when the entry has one
    (`GP104GL [Tesla P4]` → `Tesla P4`), else the entry. Ids the database lacks are left out."""
    if not ids:
        return {}
    host = HostRoot(root)
    candidates = [host.real(p) for p in PCI_IDS]
    if not host.is_host:
        candidates += list(PCI_IDS)
    for path in candidates:
        data = _read(path)
        if data is not None:
            return _parse(data, ids)
    return {}


def _read(path: str) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(MAX_PCI_IDS + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    return data[:MAX_PCI_IDS]


def _parse(data: bytes, ids: set[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """Only the wanted vendors' sections are decoded and read (the NVIDIA one is ~1,500 of ~38,000 lines)."""
    wanted: dict[str, set[str]] = {}
    for vendor_id, device_id in ids:
        wanted.setdefault(vendor_id.lower().removeprefix("0x"), set()).add(device_id.lower().removeprefix("0x"))
    out: dict[tuple[str, str], str] = {}
    for vendor, devices in wanted.items():
        head = f"{vendor}  ".encode()
        start = -1 if data.startswith(head) else data.find(b"\n" + head)  # start + 1: the vendor line
        if len(vendor) != 4 or (start < 0 and not data.startswith(head)):
            continue
        end = _next_vendor(data, start + 1)
        for line in data[start + 1 : end].decode("utf-8", "replace").splitlines()[1:]:
            if not line.startswith("\t") or line.startswith("\t\t"):
                continue
            device, _, name = line[1:].partition("  ")
            if device.lower() in devices:
                out[(f"0x{vendor}", f"0x{device.lower()}")] = _clean(name)
    return {k: v for k, v in out.items() if v}


_VENDOR_START = frozenset(b"0123456789abcdefABCDEFC")  # a line that starts a vendor (or the class list: "C 00 …")


def _next_vendor(data: bytes, start: int) -> int:
    """Where the newline before the next vendor line after `start` is, else the end of `data` (no `re`: the read
    commands' fast path loads this module)."""
    i = data.find(b"\n", start)
    while i != -1 and i + 1 < len(data):
        if data[i + 1] in _VENDOR_START:
            return i
        i = data.find(b"\n", i + 1)
    return len(data)


def _clean(name: str) -> str:
    name = name.strip()
    if "[" in name and name.endswith("]"):
        name = name[name.rindex("[") + 1 : -1]
    name = "".join(c if c.isprintable() else "?" for c in name).strip()
    return name if len(name) <= MAX_NAME else name[: MAX_NAME - 1] + "…"
