"""Apply / undo / is-applied handler of the one managed-file step (steps.WriteManagedFile): mdevctl definitions under
<root>/etc/mdevctl.d, vgpuadm's systemd unit under <root>/etc/systemd/system, libvirt's qemu hook under
<root>/etc/libvirt/hooks, vgpuadm's udev rule under <root>/etc/udev/rules.d and the host-policy files, listed in
HANDLERS like the kernel steps' in executor/__init__.py. Each kind's file goes through its io module, which checks
the name's grammar again, keeps the path under the root and holds the file's mode; every undo checks first."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from vgpuadm.executor import ExecContext, HandlerRow
from vgpuadm.host.paths import POLICY_FILES
from vgpuadm.io import hookfile, mdevctl, policyfile, udevfile, unitfile
from vgpuadm.steps import (
    FILE_KINDS,
    HOST_POLICY,
    LIBVIRT_HOOK,
    MDEVCTL_DEFINITION,
    SYSTEMD_UNIT,
    UDEV_RULE,
    WriteManagedFile,
)


class _Io(NamedTuple):
    """A kind's io functions, each given the root and the file's name (the path below the kind's directory)."""

    read: Callable[[str, str], str | None]
    write: Callable[[str, str, str], object]
    remove: Callable[[str, str], object]


def _parent_uuid(name: str) -> tuple[str, str]:
    parent, _, uuid = name.partition("/")
    return parent, uuid


_POLICY_NAMES = {path: name for name, path in POLICY_FILES.items()}
_IO: dict[str, _Io] = {
    MDEVCTL_DEFINITION: _Io(
        lambda root, name: mdevctl.read_file(root, *_parent_uuid(name)),
        lambda root, name, text: mdevctl.write_file(root, *_parent_uuid(name), text=text),
        lambda root, name: mdevctl.remove_file(root, *_parent_uuid(name)),
    ),
    SYSTEMD_UNIT: _Io(unitfile.read_unit, unitfile.write_unit, unitfile.remove_unit),
    LIBVIRT_HOOK: _Io(hookfile.read_hook, hookfile.write_hook, hookfile.remove_hook),
    UDEV_RULE: _Io(udevfile.read_rule, udevfile.write_rule, udevfile.remove_rule),
    HOST_POLICY: _Io(
        policyfile.read_file, policyfile.write_file, lambda root, name: policyfile.write_file(root, name, None)
    ),
}


def _name(s: WriteManagedFile) -> str:
    directory = FILE_KINDS[s.file].directory
    return s.path.removeprefix(directory + "/") if directory else _POLICY_NAMES.get(s.path, s.path)


def _put(s: WriteManagedFile, ctx: ExecContext, text: str | None) -> None:
    io = _IO[s.file]
    if text is None:
        io.remove(ctx.root, _name(s))
    else:
        io.write(ctx.root, _name(s), text)


def _read(s: WriteManagedFile, ctx: ExecContext) -> str | None:
    return _IO[s.file].read(ctx.root, _name(s))


def _undo(s: WriteManagedFile, ctx: ExecContext) -> None:
    if _read(s, ctx) != s.previous:
        _put(s, ctx, s.previous)


HANDLERS: list[HandlerRow] = [
    (WriteManagedFile, lambda s, ctx: _put(s, ctx, s.text), _undo, lambda s, ctx: _read(s, ctx) == s.text),
]
