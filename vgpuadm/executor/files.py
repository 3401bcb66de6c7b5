"""Apply / undo / is-applied handlers for the file steps (mdevctl definitions under <root>/etc/mdevctl.d, vgpuadm's
systemd units under <root>/etc/systemd/system, libvirt's qemu hook under <root>/etc/libvirt/hooks),
listed in HANDLERS like executor/kernel.py. Every path goes through io.mdevctl.definition_file, which
checks the parent and UUID grammars and keeps the path under <root>/etc/mdevctl.d; every undo checks first."""

from __future__ import annotations

from vgpuadm.executor import ExecContext, HandlerRow
from vgpuadm.io.hookfile import read_hook, remove_hook, write_hook
from vgpuadm.io.mdevctl import read_file, remove_file, write_file
from vgpuadm.io.unitfile import read_unit, remove_unit, write_unit
from vgpuadm.steps import (
    RemoveHookFile,
    RemoveMdevctlDefinition,
    RemoveUnitFile,
    WriteHookFile,
    WriteMdevctlDefinition,
    WriteUnitFile,
)


def _apply_write(s: WriteMdevctlDefinition, ctx: ExecContext) -> None:
    write_file(ctx.root, s.parent, s.uuid, s.text)


def _undo_write(s: WriteMdevctlDefinition, ctx: ExecContext) -> None:
    current = read_file(ctx.root, s.parent, s.uuid)
    if current == s.previous:
        return
    if s.previous is None:
        remove_file(ctx.root, s.parent, s.uuid)
    else:
        write_file(ctx.root, s.parent, s.uuid, s.previous)


def _written(s: WriteMdevctlDefinition, ctx: ExecContext) -> bool:
    return read_file(ctx.root, s.parent, s.uuid) == s.text


def _apply_remove(s: RemoveMdevctlDefinition, ctx: ExecContext) -> None:
    remove_file(ctx.root, s.parent, s.uuid)


def _undo_remove(s: RemoveMdevctlDefinition, ctx: ExecContext) -> None:
    if read_file(ctx.root, s.parent, s.uuid) is None:
        write_file(ctx.root, s.parent, s.uuid, s.previous)


def _undo_write_unit(s: WriteUnitFile, ctx: ExecContext) -> None:
    current = read_unit(ctx.root, s.name)
    if current == s.previous:
        return
    if s.previous is None:
        remove_unit(ctx.root, s.name)
    else:
        write_unit(ctx.root, s.name, s.previous)


def _apply_remove_unit(s: RemoveUnitFile, ctx: ExecContext) -> None:
    remove_unit(ctx.root, s.name)


def _undo_remove_unit(s: RemoveUnitFile, ctx: ExecContext) -> None:
    if read_unit(ctx.root, s.name) is None:
        write_unit(ctx.root, s.name, s.previous)


def _undo_write_hook(s: WriteHookFile, ctx: ExecContext) -> None:
    if read_hook(ctx.root, s.hook) == s.previous:
        return
    if s.previous is None:
        remove_hook(ctx.root, s.hook)
    else:
        write_hook(ctx.root, s.hook, s.previous)


def _undo_remove_hook(s: RemoveHookFile, ctx: ExecContext) -> None:
    if read_hook(ctx.root, s.hook) is None:
        write_hook(ctx.root, s.hook, s.previous)


def _apply_remove_hook(s: RemoveHookFile, ctx: ExecContext) -> None:
    remove_hook(ctx.root, s.hook)


HANDLERS: list[HandlerRow] = [
    (WriteMdevctlDefinition, _apply_write, _undo_write, _written),
    (
        RemoveMdevctlDefinition,
        _apply_remove,
        _undo_remove,
        lambda s, ctx: read_file(ctx.root, s.parent, s.uuid) is None,
    ),
    (
        WriteUnitFile,
        lambda s, ctx: write_unit(ctx.root, s.name, s.text),
        _undo_write_unit,
        lambda s, ctx: read_unit(ctx.root, s.name) == s.text,
    ),
    (RemoveUnitFile, _apply_remove_unit, _undo_remove_unit, lambda s, ctx: read_unit(ctx.root, s.name) is None),
    (
        WriteHookFile,
        lambda s, ctx: write_hook(ctx.root, s.hook, s.text),
        _undo_write_hook,
        lambda s, ctx: read_hook(ctx.root, s.hook) == s.text,
    ),
    (RemoveHookFile, _apply_remove_hook, _undo_remove_hook, lambda s, ctx: read_hook(ctx.root, s.hook) is None),
]
