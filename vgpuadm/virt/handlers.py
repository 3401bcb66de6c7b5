"""How the executor carries out the libvirt steps (vgpuadm/steps.py) through the context's VirtConn.

`HANDLERS` lists (step class, apply, undo, is_applied[, lane]): ops/session.py adds them to the executor's table for
the plans a Session runs (virt sits below the executor, so it cannot import it). A DefineDomain's lane is its domain:
the executor runs consecutive definitions of distinct domains concurrently over the one VirtConn (libvirt's
connections serve calls from several threads; libvirtd runs them on its worker pool). Undo handlers look before they act: after a
crash they may run for a step that never happened.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from vgpuadm.errors import ConflictError, NotFoundError, UsageError, VgpuadmError
from vgpuadm.model import MDEV_KEY
from vgpuadm.polling import wait_until
from vgpuadm.steps import AttachHostdev, DefineDomain, DetachHostdev, DomainDefinition, SetMetadata, SetVirtioGl
from vgpuadm.virt.xml import (
    NS,
    PREFIX,
    HostdevRef,
    for_libvirt_metadata,
    has_virtio_gl,
    hostdev_elements,
    hostdev_key,
    parse_domain,
    parse_hostdevs,
    redefine,
    same_metadata,
    stamped,
    to_string,
    with_virtio_gl,
    without_virtio_gl,
)


def _virt(ctx: Any) -> Any:
    if ctx.virt is None:
        raise UsageError(
            "this change needs libvirt but no libvirt connection was given",
            "pass --connect URI (or run on a simulated root, which uses libvirt's embedded driver)",
        )
    return ctx.virt


def _ref(device_xml: str) -> HostdevRef:
    refs = parse_hostdevs(f"<domain><devices>{device_xml}</devices></domain>")
    if len(refs) != 1:
        raise UsageError(f"not one hostdev element: {device_xml[:60]!r}", "this is a bug in vgpuadm; report it")
    return refs[0]


def _element(device_xml: str) -> Any:
    found = hostdev_elements(device_xml)
    if len(found) != 1:
        raise UsageError(f"not one hostdev element: {device_xml[:60]!r}", "this is a bug in vgpuadm; report it")
    return found[0]


def has_hostdev(ctx: Any, domain: str, device_xml: str) -> bool:
    want = _ref(device_xml)
    return any((r.kind, r.key) == (want.kind, want.key) for r in parse_hostdevs(_virt(ctx).xml(domain)))


def _attach(s: AttachHostdev | DetachHostdev, ctx: Any) -> None:
    _virt(ctx).attach(s.domain, s.device_xml)


def _detach(s: AttachHostdev | DetachHostdev, ctx: Any) -> None:
    """Out of the persistent definition; out of the running guest first, confirmed (see `unplug`): with both flags
    at once libvirt would save the definition while the guest still holds the device."""
    virt = _virt(ctx)
    if virt.is_active(s.domain, fresh=False):
        el = _element(s.device_xml)
        if hostdev_key(el) in _live_keys(virt, s.domain):
            unplug(virt, s.domain, el)
        virt.detach(s.domain, s.device_xml, config_only=True)
        return
    virt.detach(s.domain, s.device_xml)


def _undo_attach(s: AttachHostdev, ctx: Any) -> None:
    if has_hostdev(ctx, s.domain, s.device_xml):
        _detach(s, ctx)


def _undo_detach(s: DetachHostdev, ctx: Any) -> None:
    if not has_hostdev(ctx, s.domain, s.device_xml):
        _attach(s, ctx)


def _set_metadata(s: SetMetadata, ctx: Any) -> None:
    _virt(ctx).set_metadata(s.domain, PREFIX, NS, s.element or None)


def _undo_metadata(s: SetMetadata, ctx: Any) -> None:
    _virt(ctx).set_metadata(s.domain, PREFIX, NS, s.previous or None)


def _metadata_applied(s: SetMetadata, ctx: Any) -> bool:

    return same_metadata(_virt(ctx).get_metadata(s.domain, NS), s.element)


def _defined(s: DefineDomain, ctx: Any) -> bool:
    return _has_effect(parse_domain(_virt(ctx).xml(s.domain)), s)


def _has_effect(doc: Any, s: DefineDomain) -> bool:
    """Whether a persistent definition has the step's effect: its hostdevs in, the detached ones out, the metadata."""
    keys = {(r.kind, r.key) for r in parse_hostdevs(doc)}
    if any(hostdev_key(el) not in keys for el in hostdev_elements(s.attach)):
        return False
    if any(hostdev_key(el) in keys for el in hostdev_elements(s.detach)):
        return False
    return same_metadata(_element_of(doc), s.element)


def _element_of(doc: Any) -> str | None:
    el = doc.find(f"metadata/{{{NS}}}{PREFIX}")
    return None if el is None else to_string(el)


UNPLUG_WAIT = 10  # seconds, from the request, that a running guest has to release a device it is unplugged from
UNPLUG_POLL = 0.25  # seconds between two looks at the live definition while waiting


def _live_keys(virt: Any, domain: str) -> set[tuple[str, str] | None]:
    return {hostdev_key(el) for el in parse_domain(virt.xml(domain, inactive=False)).findall("devices/hostdev")}


def unplug(
    virt: Any,
    domain: str,
    el: Any,
    *,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Unplug one hostdev from the running guest and confirm it left. libvirt's detach can return with the unplug
    only requested: PCIe hot-unplug completes when the guest OS acknowledges it, libvirt waits 5 s and then returns
    anyway ("detach request sent"; virDomainDetachDeviceFlags says to recheck the live XML or await the
    DEVICE_REMOVED event). QEMU then still holds the device, and removing the mdev or unbinding the VF would block
    in the kernel. So the live XML is read until the device is gone, UNPLUG_WAIT s from the request at most;
    otherwise ConflictError, and nothing else is touched."""
    key = hostdev_key(el)
    deadline = time.monotonic() + UNPLUG_WAIT
    virt.detach_live(domain, to_string(el))
    left = deadline - time.monotonic()  # libvirt itself waited some of it
    if wait_until(lambda: key in _live_keys(virt, domain), lambda present: not present, left, UNPLUG_POLL,
                  max_interval=UNPLUG_POLL, sleep=sleep):  # fmt: skip
        what = f"mdev {key[1]}" if key and key[0] == MDEV_KEY else f"PCI device {key[1] if key else '?'}"
        raise ConflictError(
            f"the guest of domain {domain} has not released {what} (PCIe unplug not acknowledged within "
            f"{UNPLUG_WAIT} s); nothing removed",
            f"the guest OS must accept hot-unplug; or shut the domain down (virsh -c {virt.quoted_uri} shutdown "
            f"{domain}) and run the command again",
        )


def _live_change(s: DefineDomain, ctx: Any) -> tuple[list[str], list[str], dict[tuple[str, str] | None, Any]]:
    """Unplug `detach` and hot-plug `attach` in the running guest (each only when needed). Returns what was plugged
    and unplugged (for undoing it when the define fails) and the live hostdev elements by key afterwards."""
    virt = _virt(ctx)
    plugged: list[str] = []
    unplugged: list[str] = []
    try:
        live = _live_keys(virt, s.domain)
        for el in hostdev_elements(s.detach):
            if hostdev_key(el) in live:
                unplug(virt, s.domain, el)
                unplugged.append(to_string(el))
        for el in hostdev_elements(s.attach):
            if hostdev_key(el) not in live:
                virt.attach_live(s.domain, to_string(el))
                plugged.append(to_string(el))
        after = parse_domain(virt.xml(s.domain, inactive=False)).findall("devices/hostdev")
    except VgpuadmError:
        _unlive(ctx, s.domain, plugged, unplugged)
        raise
    return plugged, unplugged, {hostdev_key(el): el for el in after}


def _unlive(ctx: Any, domain: str, plugged: list[str], unplugged: list[str]) -> None:
    for device in reversed(plugged):
        with contextlib.suppress(VgpuadmError):
            unplug(_virt(ctx), domain, _element(device))
    for device in reversed(unplugged):
        with contextlib.suppress(VgpuadmError):
            _virt(ctx).attach_live(domain, device)


def _define(s: DefineDomain, ctx: Any, *, stamp: bool = True) -> None:
    """One persistent write (defineXML of the current secure definition with the change applied); when the domain
    runs, the live hot-plug/unplug first, and the devices go into the definition at the guest addresses the live
    guest gave them. The metadata is stamped with the time of the change (`stamp`; an undo puts the old one back)."""
    virt = _virt(ctx)
    element = stamped(s.element, _now()) if stamp and s.element else s.element
    plugged: list[str] = []
    unplugged: list[str] = []
    attach = s.attach
    if virt.is_active(s.domain, fresh=False):
        plugged, unplugged, live = _live_change(s, ctx)
        elements = []
        for el in hostdev_elements(s.attach):
            el = live.get(hostdev_key(el), el)
            for alias in el.findall("alias"):  # libvirt's live names; a definition keeps only user aliases
                el.remove(alias)
            elements.append(to_string(el))
        attach = "".join(elements)
    try:
        current = parse_domain(virt.xml(s.domain, secure=True))
        if not _has_effect(current, s):
            virt.define(redefine(current, add=attach, remove=s.detach, element=element))
        if virt.is_active(s.domain, fresh=False):
            virt.set_metadata(s.domain, PREFIX, NS, for_libvirt_metadata(element) if element else None,
                              live_only=True)  # fmt: skip
    except VgpuadmError:
        _unlive(ctx, s.domain, plugged, unplugged)
        raise


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _reversed(s: DefineDomain) -> DefineDomain:
    return dataclasses.replace(s, attach=s.detach, detach=s.attach, element=s.previous, previous=s.element)


def _undo_define(s: DefineDomain, ctx: Any) -> None:
    """The same change reversed: the old hostdevs and metadata back; each part only when it is not there yet."""
    _define(_reversed(s), ctx, stamp=False)


def _virtio_gl(s: SetVirtioGl, ctx: Any, enable: bool) -> None:
    virt = _virt(ctx)
    current = virt.xml(s.domain, inactive=True)
    if has_virtio_gl(current, s.rendernode) == enable:
        return
    if enable:
        virt.define(with_virtio_gl(current, s.rendernode, s.graphics)[0])
    else:
        virt.define(without_virtio_gl(current, s.rendernode, s.previous_video))


def _exists(virt: Any, domain: str) -> bool:
    try:
        virt.domain(domain)
    except NotFoundError:
        return False
    return True


def _definition(s: DomainDefinition, ctx: Any, defined: bool) -> None:
    """Define the domain from the step's XML, or undefine it (never a running one: a cold move's source is shut
    off; its NVRAM file stays, for the operator to copy); each only when it is not so already."""
    virt = _virt(ctx)
    if _exists(virt, s.domain) == defined:
        return
    if defined:
        virt.define(s.xml)
        return
    if virt.is_active(s.domain):
        raise ConflictError(f"domain {s.domain} is running: it is not undefined", f"shut it down (virsh shutdown "
                            f"{s.domain}) and run the command again")  # fmt: skip
    virt.undefine(s.domain, keep_nvram=True)


HANDLERS: list[tuple[Any, ...]] = [
    (
        DomainDefinition,
        lambda s, ctx: _definition(s, ctx, s.defined),
        lambda s, ctx: _definition(s, ctx, not s.defined),
        lambda s, ctx: _exists(_virt(ctx), s.domain) == s.defined,
    ),
    (AttachHostdev, _attach, _undo_attach, lambda s, ctx: has_hostdev(ctx, s.domain, s.device_xml)),
    (DetachHostdev, _detach, _undo_detach, lambda s, ctx: not has_hostdev(ctx, s.domain, s.device_xml)),
    (SetMetadata, _set_metadata, _undo_metadata, _metadata_applied),
    (DefineDomain, _define, _undo_define, _defined, lambda s: s.domain),  # lane: definitions of distinct domains
    (
        SetVirtioGl,
        lambda s, ctx: _virtio_gl(s, ctx, s.enable),
        lambda s, ctx: _virtio_gl(s, ctx, not s.enable),
        lambda s, ctx: has_virtio_gl(_virt(ctx).xml(s.domain, inactive=True), s.rendernode) == s.enable,
    ),
]
