"""libvirt's qemu hook as vgpuadm installs it under <root>/etc/libvirt/hooks: its text (templates/libvirt-hook/,
the one source, with the vgpuadm command filled in) and its files. Either `qemu.d/vgpuadm` (libvirt ≥ 6.5 runs
every executable in hooks/qemu.d/) or the single `qemu` script, which chains a script that was there before
(kept beside it as `qemu.vgpuadm-chained`). Commands write and remove them through managed-file steps
(steps.WriteManagedFile: lock, journal, undo): atomically, 0755, never through a symlink."""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence

from vgpuadm.errors import UsageError
from vgpuadm.host.paths import LIBVIRT_HOOKS
from vgpuadm.host.root import read_config, remove_config, write_config
from vgpuadm.virt.xml import template_dir

DIR_HOOK = "qemu.d/vgpuadm"
SCRIPT = "qemu"
CHAINED = "qemu.vgpuadm-chained"
NAMES = (DIR_HOOK, SCRIPT, CHAINED)
_TEMPLATES = {DIR_HOOK: "qemu.d-vgpuadm", SCRIPT: "qemu"}
MARK = "# vgpuadm qemu hook:"  # the second line of every script vgpuadm writes
_COMMAND = "@VGPUADM@"
MODE = 0o755


def host_path(name: str) -> str:
    return f"{LIBVIRT_HOOKS}/{name}"


def hook_file(root: str, name: str) -> str:
    """<root>/etc/libvirt/hooks/<name>, for vgpuadm's own hook files only."""
    if name not in NAMES:
        raise UsageError(f"{name!r} is not a vgpuadm hook file", f"vgpuadm writes {', '.join(NAMES)}")
    return os.path.join(root, LIBVIRT_HOOKS.lstrip("/"), name)


def render(command: Sequence[str], name: str) -> str:
    """The hook's text, running `command` (e.g. ["/usr/local/bin/vgpuadm"], with `--root DIR` for another root)."""
    if not command or not os.path.isabs(command[0]):
        raise UsageError(f"{' '.join(command) or 'the command'} is not an absolute path", "libvirt runs hooks "
                         "with a minimal environment")  # fmt: skip
    with open(os.path.join(template_dir(), "libvirt-hook", _TEMPLATES[name]), encoding="utf-8") as f:
        text = f.read()
    if _COMMAND not in text or not is_ours(text):
        raise UsageError(f"the hook template {name} is malformed", "this is a bug in vgpuadm; report it")
    return text.replace(_COMMAND, shlex.join(command))


def is_ours(text: str | None) -> bool:
    lines = (text or "").splitlines()
    return len(lines) > 1 and lines[1].startswith(MARK)


def read_hook(root: str, name: str) -> str | None:
    """The file's current text, None when there is none."""
    return read_config(root, hook_file(root, name))


def mode_and_owner(root: str, name: str) -> tuple[int, int] | None:
    try:
        st = os.lstat(hook_file(root, name))
    except FileNotFoundError:
        return None
    return st.st_mode & 0o7777, st.st_uid


def write_hook(root: str, name: str, text: str) -> None:
    """Write the file atomically, 0755 whatever the umask; missing directories are created 0755."""
    write_config(root, hook_file(root, name), text, mode=MODE)


def remove_hook(root: str, name: str) -> bool:
    """Remove the file; False when there was none."""
    return remove_config(root, hook_file(root, name))
