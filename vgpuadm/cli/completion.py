"""Shell completion (bash, zsh, fish: typer's `--install-completion` / `--show-completion`) with values from the
host root: `--type` completes the types the host offers (ids and NVIDIA profiles), `--gpu`/`--parent`/`--vf` and
the address arguments the GPU and VF addresses, `--vm` the domains libvirt keeps on disk under the root.

A completer is cheap (one discovery, or one directory listing for VMs — libvirt is never opened) and never
fails: whatever goes wrong, it offers nothing and the shell falls back to its default.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from vgpuadm import api

LIBVIRT_QEMU_ETC = "/etc/libvirt/qemu"  # qemu:///system's persistent domain XML
EMBED_QEMU_ETC = f"{api.EMBED_LIBVIRT}/etc/qemu"  # the embedded driver's, under a simulated root
MAX_VALUES = 2000  # offered per completion; a shell shows no more usefully


def _root(ctx: Any) -> api.HostRoot:
    top = ctx.find_root() if ctx is not None else None
    return api.HostRoot((top.params.get("root") if top is not None else None) or None)


def _matching(values: set[str], incomplete: str) -> list[str]:
    return sorted(v for v in values if v.startswith(incomplete))[:MAX_VALUES]


def types(ctx: Any, incomplete: str) -> list[str]:
    snap = api.read_host(_root(ctx).sysfs())
    found: set[str] = set()
    for parent in snap.mdev_parents.values():
        for t in parent.types:
            found.update((t.type_id, t.profile))
    for vf in snap.vendor_vfs.values():
        for t in vf.offered:
            found.update((t.type_id, t.profile))
    return _matching({v for v in found if v and " " not in v}, incomplete)


def gpus(ctx: Any, incomplete: str) -> list[str]:
    snap = api.read_host(_root(ctx).sysfs(), types=False)
    found = {fn.address for fn in snap.functions.values() if fn.is_display} | set(snap.mdev_parents)
    return _matching(found, incomplete)


def vms(ctx: Any, incomplete: str) -> list[str]:
    root = _root(ctx)
    where = EMBED_QEMU_ETC if root.simulated else LIBVIRT_QEMU_ETC
    try:
        names = os.listdir(root.real(where))
    except OSError:
        return []
    return _matching({n[: -len(".xml")] for n in names if n.endswith(".xml")}, incomplete)


def _safe(fn: Callable[[Any, str], list[str]]) -> Callable[[Any, Any, str], list[str]]:
    def complete(ctx: Any, _param: Any, incomplete: str) -> list[str]:
        try:
            return fn(ctx, incomplete)
        except Exception:  # a completer never fails: it offers nothing
            return []

    return complete


COMPLETERS = {
    "--type": _safe(types),
    "--gpu": _safe(gpus),
    "--parent": _safe(gpus),
    "--vf": _safe(gpus),
    "--vm": _safe(vms),
}
ADDRESS_ARGUMENTS = frozenset({"gpu", "pf", "vf"})  # `vfio bind GPU`, `sriov enable PF`, `vf clear VF`


def attach(command: Any) -> None:
    """Give every option and argument of the click command tree that takes one of these values its completer."""
    for param in getattr(command, "params", ()):
        opts = getattr(param, "opts", ())
        chosen = next((COMPLETERS[o] for o in opts if o in COMPLETERS), None)
        if chosen is None and getattr(param, "param_type_name", "") == "argument" and param.name in ADDRESS_ARGUMENTS:
            chosen = COMPLETERS["--gpu"]
        if chosen is not None:
            param._custom_shell_complete = chosen
    for sub in getattr(command, "commands", {}).values():
        attach(sub)
