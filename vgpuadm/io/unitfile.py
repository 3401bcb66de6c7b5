"""The systemd unit that runs `vgpuadm restore` at boot: its text (templates/systemd/, the one source, ExecStart
filled in with the vgpuadm command that installs it) and its file under <root>/etc/systemd/system. Commands write
and remove it through a managed-file step (steps.WriteManagedFile: lock, journal, undo); reads never follow a
symlink."""

from __future__ import annotations

import os
import re
import urllib.parse
from collections.abc import Sequence

from vgpuadm.errors import UsageError
from vgpuadm.host.paths import UNIT_DIR
from vgpuadm.host.root import read_config, remove_config, write_config
from vgpuadm.virt.xml import readme_path, template_dir

RESTORE_UNIT = "vgpuadm-restore.service"
EXPORTER_UNIT = "vgpuadm-exporter.service"  # `vgpuadm exporter` (ops/exporter.py); its command carries its options
UNITS = (RESTORE_UNIT, EXPORTER_UNIT)
_MARK = "ExecStart=@VGPUADM@"
_DOCS = "@README@"
_PLAIN = re.compile(r"^[A-Za-z0-9/._+:@=,-]+$")


def _word(arg: str) -> str:
    """One ExecStart word: systemd specifiers (%) and variables ($) doubled; quoted when it needs quoting."""
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in arg):  # a newline would end ExecStart, quoted or not
        raise UsageError(f"{arg!r} cannot be written into a systemd unit", "use paths without control characters")
    text = arg.replace("%", "%%").replace("$", "$$")
    if _PLAIN.fullmatch(text):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render(command: Sequence[str], name: str = RESTORE_UNIT) -> str:
    """The unit's text with ExecStart running `command` (e.g. ["/root/.local/bin/vgpuadm"]) + `restore …`."""
    if not command or not os.path.isabs(command[0]):
        raise UsageError(f"{' '.join(command) or 'the command'} is not an absolute path", "systemd needs one")
    with open(os.path.join(template_dir(), "systemd", name), encoding="utf-8") as f:
        text = f.read()
    if text.count(_MARK) != 1:
        raise UsageError(f"the unit template {name} has no single {_MARK} line", "this is a bug in vgpuadm; report it")
    docs = "file://" + urllib.parse.quote(readme_path())  # the installed README: a page that exists on this host
    return text.replace(_MARK, "ExecStart=" + " ".join(_word(a) for a in command)).replace(_DOCS, docs)


def exec_start(command: Sequence[str], name: str = RESTORE_UNIT) -> str:
    """The unit's ExecStart= line as render() writes it for `command`, flags and all."""
    (line,) = [x for x in render(command, name).splitlines() if x.startswith("ExecStart=")]
    return line


def host_path(name: str) -> str:
    return f"{UNIT_DIR}/{name}"


def unit_file(root: str, name: str) -> str:
    """<root>/etc/systemd/system/<name>, for one of vgpuadm's own units only."""
    if name not in UNITS:
        raise UsageError(f"{name!r} is not a vgpuadm unit", f"vgpuadm installs {', '.join(UNITS)}")
    return os.path.join(root, UNIT_DIR.lstrip("/"), name)


def read_unit(root: str, name: str) -> str | None:
    """The unit file's current text, None when there is none."""
    return read_config(root, unit_file(root, name))


def write_unit(root: str, name: str, text: str) -> None:
    """Write the unit atomically, mode 0644 whatever the umask; <root>/etc/systemd/system is created 0755 when
    absent."""
    write_config(root, unit_file(root, name), text, mode=0o644)


def remove_unit(root: str, name: str) -> bool:
    """Remove the unit file; False when there was none."""
    return remove_config(root, unit_file(root, name))
