"""How the executor carries out the libvirt steps (vgpuadm/virt/steps.py) through the context's VirtConn.

`HANDLERS` lists (step class, apply, undo, is_applied) for `vgpuadm.executor.register`; vgpuadm.api registers
them (virt sits below the executor, so it cannot register itself). Undo handlers look before they act: after a
crash they may run for a step that never happened.
"""

from __future__ import annotations

from typing import Any

from vgpuadm.errors import UsageError
from vgpuadm.virt.steps import AttachHostdev, DetachHostdev, SetMetadata, SetVirtioGl
from vgpuadm.virt.xml import (
    NS,
    PREFIX,
    HostdevRef,
    has_virtio_gl,
    parse_hostdevs,
    same_metadata,
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


def has_hostdev(ctx: Any, domain: str, device_xml: str) -> bool:
    want = _ref(device_xml)
    return any((r.kind, r.key) == (want.kind, want.key) for r in parse_hostdevs(_virt(ctx).xml(domain)))


def _attach(s: AttachHostdev | DetachHostdev, ctx: Any) -> None:
    _virt(ctx).attach(s.domain, s.device_xml)


def _detach(s: AttachHostdev | DetachHostdev, ctx: Any) -> None:
    _virt(ctx).detach(s.domain, s.device_xml)


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


def _virtio_gl(s: SetVirtioGl, ctx: Any, enable: bool) -> None:
    virt = _virt(ctx)
    current = virt.xml(s.domain, inactive=True)
    if has_virtio_gl(current, s.rendernode) == enable:
        return
    if enable:
        virt.define(with_virtio_gl(current, s.rendernode, s.graphics)[0])
    else:
        virt.define(without_virtio_gl(current, s.rendernode, s.previous_video))


HANDLERS: list[tuple[type, Any, Any, Any]] = [
    (AttachHostdev, _attach, _undo_attach, lambda s, ctx: has_hostdev(ctx, s.domain, s.device_xml)),
    (DetachHostdev, _detach, _undo_detach, lambda s, ctx: not has_hostdev(ctx, s.domain, s.device_xml)),
    (SetMetadata, _set_metadata, _undo_metadata, _metadata_applied),
    (
        SetVirtioGl,
        lambda s, ctx: _virtio_gl(s, ctx, s.enable),
        lambda s, ctx: _virtio_gl(s, ctx, not s.enable),
        lambda s, ctx: has_virtio_gl(_virt(ctx).xml(s.domain, inactive=True), s.rendernode) == s.enable,
    ),
]
