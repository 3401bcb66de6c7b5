"""The one registry of GPU sharing modes: each mode is one file (mdev, vf_vgpu, passthrough, sriov, mig, vf_pool,
virtio_gpu) implementing modes/base.py's Mode; `for_layout` maps a discovered layout to its mode, `for_type` a type to
the mode that makes its devices, `for_name` the mode an allocation records ("mdev", "vf", "pci", "pool", "virtio-gl").

A new sharing mode is one new file plus one line: an entry point in the `vgpuadm.modes` group (model.MODES_GROUP) of
the distribution that ships the file (another distribution, or a test: tests/libvirt/test_a_new_mode_is_one_file.py),
e.g. in its pyproject.toml (a mode vgpuadm itself ships is its entry in MODES instead, plus, when it records devices,
its member of model.DeviceMode, which the hook's fast path reads without this registry):

    [project.entry-points."vgpuadm.modes"]
    serial = "vgpuadm_serial:MODE"

The installed distributions' entry points in that group are loaded once, when a mode is first looked up by type (or
a name or layout no built-in mode has); each names
a Mode instance whose name is the entry point's name (so that metadata recording the mode can be read before the
registry is imported: model.known_device_mode), given to `register`. Only installed distributions are read — what
is on the interpreter's sys.path when it starts, as for any import — never a module named by a vgpuadm option, an
environment variable of vgpuadm's, a plan file or domain metadata. `register` takes a mode whose name and layouts are
not taken; the mode records its devices under its name (declared to the model with what one of them holds of its
GPU: Mode.holds), and may claim types that another mode's layout offers (Mode.claims: for_type asks the added modes
first; the create planners record each device under the mode that planned it: plan/devices.plan_create's made_by).
What an added mode cannot add: a host object discovery does not read (HostSnapshot), a layout, a Holding, a Step
kind, a restore phase, a hostdev other than an mdev or a PCI one."""

import dataclasses

from vgpuadm.errors import UsageError
from vgpuadm.model import (
    MODES_GROUP,
    Allocation,
    DeviceKey,
    HostSnapshot,
    Layout,
    VgpuType,
    declare_device_mode,
    mode_entry_points,
)
from vgpuadm.modes import mdev, mig, passthrough, sriov, vf_pool, vf_vgpu, virtio_gpu
from vgpuadm.modes.base import Mode
from vgpuadm.virt import xml

MODES: tuple[Mode, ...] = (
    mdev.MODE,
    vf_vgpu.MODE,
    passthrough.MODE,
    sriov.MODE,
    mig.MODE,
    vf_pool.MODE,
    virtio_gpu.MODE,
)
_BY_LAYOUT: dict[Layout, Mode] = {layout: m for m in MODES for layout in m.layouts}
_BY_NAME: dict[str, Mode] = {m.name: m for m in MODES}
_ADDED: list[Mode] = []  # registered modes (entry points), asked first by for_type


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
    return for_type(t) if t is not None else mdev.MODE


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
    for mode in MODES:
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


__all__ = [
    "MODES",
    "Mode",
    "adopt",
    "describe",
    "for_layout",
    "for_name",
    "for_type",
    "for_type_on",
    "handle",
    "hostdev_as_attached",
    "hostdev_xml",
    "key",
    "of",
    "register",
]
