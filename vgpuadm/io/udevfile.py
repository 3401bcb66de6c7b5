"""vgpuadm's udev rule as `vgpuadm udev install` writes it under <root>/etc/udev/rules.d: its text
(templates/udev/, the one source, with the vgpuadm command filled in) and its file, 0644. Commands write and remove
it through a managed-file step (steps.WriteManagedFile: lock, journal, undo); reads never follow a symlink."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

from vgpuadm.errors import UsageError
from vgpuadm.host.paths import UDEV_RULES_DIR
from vgpuadm.host.root import read_config, remove_config, write_config
from vgpuadm.virt.xml import template_dir

RULE = "61-vgpuadm.rules"  # after 60-mdevctl.rules, which answers the same parent registration for mdevctl
NAMES = (RULE,)
MARK = "# vgpuadm udev rule:"  # the first line of the file vgpuadm writes
_COMMAND = "@VGPUADM@"
MODE = 0o644
# A word udev's RUN+= takes as it is: udev splits the value at spaces and substitutes `$…` and `%…` in it.
_PLAIN = re.compile(r"[A-Za-z0-9/._+:@=,-]+")


def host_path(name: str = RULE) -> str:
    return f"{UDEV_RULES_DIR}/{name}"


def rule_file(root: str, name: str = RULE) -> str:
    """<root>/etc/udev/rules.d/<name>, for vgpuadm's own rule file only."""
    if name not in NAMES:
        raise UsageError(f"{name!r} is not vgpuadm's udev rule", f"vgpuadm writes {', '.join(NAMES)}")
    return os.path.join(root, UDEV_RULES_DIR.lstrip("/"), name)


def render(command: Sequence[str]) -> str:
    """The rule's text, each RUN naming `command` (e.g. ["/usr/local/bin/vgpuadm"], `--root DIR` for another root)."""
    if not command or not os.path.isabs(command[0]):
        raise UsageError(f"{' '.join(command) or 'the command'} is not an absolute path",
                         "udev runs programs without a PATH")  # fmt: skip
    for word in command:
        if not _PLAIN.fullmatch(word):
            raise UsageError(f"{word!r} cannot be written into a udev rule's RUN",
                             "install vgpuadm under a path of letters, digits and /._+:@=,- only")  # fmt: skip
    with open(os.path.join(template_dir(), "udev", RULE), encoding="utf-8") as f:
        text = f.read()
    if _COMMAND not in text or not is_ours(text):
        raise UsageError(f"the udev rule template {RULE} is malformed", "this is a bug in vgpuadm; report it")
    return text.replace(_COMMAND, " ".join(command))


def is_ours(text: str | None) -> bool:
    return (text or "").startswith(MARK)


def read_rule(root: str, name: str = RULE) -> str | None:
    """The file's current text, None when there is none."""
    return read_config(root, rule_file(root, name))


def write_rule(root: str, name: str, text: str) -> None:
    """Write the file atomically, 0644 whatever the umask; missing directories are created 0755."""
    write_config(root, rule_file(root, name), text, mode=MODE)


def remove_rule(root: str, name: str) -> bool:
    """Remove the file; False when there was none."""
    return remove_config(root, rule_file(root, name))
