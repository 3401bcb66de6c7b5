"""`vgpuadm unit install|uninstall|status`: the systemd unit that runs `vgpuadm restore` at boot, written to
<root>/etc/systemd/system with ExecStart naming the vgpuadm being run (a pip/pipx install has no /usr/bin/vgpuadm).
The file is written by a managed-file step (WriteManagedFile) through the executor (lock, journal, undo); systemctl
is left to the user (daemon-reload, enable), as the next step the command prints."""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from typing import Any

from vgpuadm.io import unitfile
from vgpuadm.ops.session import Session
from vgpuadm.steps import SYSTEMD_UNIT, Plan, Step, WriteManagedFile

NEXT_STEP = f"systemctl daemon-reload && systemctl enable {unitfile.RESTORE_UNIT}"


def _steps(name: str, text: str | None, previous: str | None) -> list[Step]:
    """The step making unit `name`'s file `text` (None: no file) where it is `previous`; none when it is that already."""
    return [] if previous == text else [WriteManagedFile(SYSTEMD_UNIT, unitfile.host_path(name), text, previous)]


def next_step(name: str) -> str:
    """What the user runs after `name` is installed."""
    return f"systemctl daemon-reload && systemctl enable {'--now ' if name != unitfile.RESTORE_UNIT else ''}{name}"


def vgpuadm_command(argv0: str | None = None) -> list[str]:
    """The absolute command that runs this vgpuadm: the console script it was started as (sys.argv[0], looked up
    on PATH when bare), else this interpreter with `-m vgpuadm`."""
    argv0 = sys.argv[0] if argv0 is None else argv0
    if os.path.basename(argv0) == "vgpuadm":
        found = argv0 if os.sep in argv0 else shutil.which(argv0)
        if found and os.path.isfile(found) and os.access(found, os.X_OK):
            return [os.path.abspath(found)]
    return [os.path.abspath(sys.executable), "-m", "vgpuadm"]


@dataclass(frozen=True)
class UnitResult:
    unit: str
    path: str  # the host path, /etc/systemd/system/<unit>
    command: tuple[str, ...]  # ExecStart's command (install), () otherwise
    plan: Plan
    applied: tuple[str, ...]
    dry_run: bool
    installed: bool  # after the command (what it would be, with dry_run)
    current: bool  # the file says what install would write

    @property
    def changed(self) -> bool:
        return bool(self.applied) and not self.dry_run

    def to_json(self) -> dict[str, Any]:
        return {
            "unit": self.unit,
            "path": self.path,
            "command": list(self.command),
            "changed": self.changed,
            "dry_run": self.dry_run,
            "installed": self.installed,
            "current": self.current,
            "steps": self.plan.describe(),
            "next": next_step(self.unit) if self.installed else "",
        }


def _run(root: str | None, dry_run: bool, make: Any, name: str = unitfile.RESTORE_UNIT) -> UnitResult:
    with Session.changing(root, dry_run=dry_run, needs_sys=False) as s:
        previous = unitfile.read_unit(s.root.path, name)
        plan, command, text = make(previous)
        result = s.execute(plan, dry_run=dry_run) if not plan.empty else None
        applied = result.applied if result else ()
        after = previous if dry_run or plan.empty else unitfile.read_unit(s.root.path, name)
        if dry_run and not plan.empty:
            after = text
        return UnitResult(name, unitfile.host_path(name), tuple(command), plan,
                          applied, dry_run, after is not None, after is not None and after == text)  # fmt: skip


def install(root: str | None, *, dry_run: bool = False, command: list[str] | None = None,
            name: str = unitfile.RESTORE_UNIT) -> UnitResult:  # fmt: skip
    """Write unit `name` (the restore unit by default) with ExecStart running `command` (default: this vgpuadm);
    nothing to do when the file already says exactly that."""
    cmd = command or vgpuadm_command()
    text = unitfile.render(cmd, name)

    def make(previous: str | None) -> tuple[Plan, list[str], str]:
        return Plan.of(_steps(name, text, previous), f"install {name}"), cmd, text

    return _run(root, dry_run, make, name)


def uninstall(root: str | None, *, dry_run: bool = False, name: str = unitfile.RESTORE_UNIT) -> UnitResult:
    """Remove unit `name`'s file (systemctl disable is the user's, before)."""

    def make(previous: str | None) -> tuple[Plan, list[str], str | None]:
        return Plan.of(_steps(name, None, previous), f"remove {name}"), [], None

    return _run(root, dry_run, make, name)


def status(root: str | None, *, command: list[str] | None = None) -> UnitResult:
    """Whether the unit file is there and says what `unit install` (run as this vgpuadm) would write. Read-only."""
    cmd = command or vgpuadm_command()
    text = unitfile.render(cmd)
    with Session.read(root) as s:
        current = unitfile.read_unit(s.root.path, unitfile.RESTORE_UNIT)
    return UnitResult(unitfile.RESTORE_UNIT, unitfile.host_path(unitfile.RESTORE_UNIT), tuple(cmd), Plan.of([], ""),
                      (), False, current is not None, current == text)  # fmt: skip
