"""`vgpuadm udev install|uninstall|status`: the udev rule that re-converges a GPU when its vGPU interface appears
again after a GPU reset or a driver reload (an mdev parent registering, an SR-IOV PF or an NVIDIA VF bound to its
driver). The rule runs `vgpuadm udev run` (ops/udevrun.py: debounce and hand-off). The file is written by a
managed-file step (WriteManagedFile) through the executor (lock, journal, undo); udev is then told to read its
rules again (`udevadm control --reload`) when the root is this host's and udevadm is installed."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from typing import Any

from vgpuadm.errors import ConflictError
from vgpuadm.host.root import HostRoot
from vgpuadm.io import udevfile
from vgpuadm.ops.hook import hook_command
from vgpuadm.ops.session import Session
from vgpuadm.steps import UDEV_RULE, Plan, WriteManagedFile

UDEVADM = ("/usr/bin/udevadm", "/bin/udevadm", "/sbin/udevadm", "/usr/sbin/udevadm")
RELOAD_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class UdevResult:
    path: str  # the host path, /etc/udev/rules.d/61-vgpuadm.rules
    command: tuple[str, ...]  # what each RUN names before `udev run …` (install), () otherwise
    plan: Plan
    applied: tuple[str, ...]
    dry_run: bool
    installed: bool  # after the command (what it would be, with dry_run)
    current: bool  # the file says what install writes
    ours: bool = True  # the file there (if any) is vgpuadm's
    reload: str = ""  # what became of udev's rules: reloaded, or why not

    @property
    def changed(self) -> bool:
        return bool(self.applied) and not self.dry_run

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "command": list(self.command), "changed": self.changed, "dry_run": self.dry_run,
                "installed": self.installed, "current": self.current, "ours": self.ours,
                "steps": self.plan.describe(), "reload": self.reload}  # fmt: skip


def _step(text: str | None, previous: str | None) -> WriteManagedFile:
    return WriteManagedFile(UDEV_RULE, udevfile.host_path(), text, previous)


def reload_rules(root: HostRoot) -> str:
    """Tell udevd to read its rules again: what happened, as one line."""
    if not root.is_host:
        return f"udev not reloaded: the root is {root.path}, not this host's /"
    udevadm = next((p for p in UDEVADM if os.access(p, os.X_OK)), None)
    if udevadm is None:
        return "udev not reloaded: udevadm is not installed (udevd reads the rule when it starts)"
    try:
        r = subprocess.run([udevadm, "control", "--reload"], capture_output=True, text=True,
                           timeout=RELOAD_TIMEOUT_S, check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"udev not reloaded: {udevadm} control --reload failed ({exc}); run it once udevd runs"
    if r.returncode != 0:
        why = (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]
        return f"udev not reloaded: {udevadm} control --reload: {why} (udevd reads the rule when it starts)"
    return f"udev reloaded its rules ({udevadm} control --reload)"


def install(root: str | None, *, dry_run: bool = False, command: list[str] | None = None) -> UdevResult:
    """Write the rule, each RUN naming `command` (default: this vgpuadm, with --root when the root is not `/`);
    nothing to do when it is there and current. A file of that name vgpuadm did not write is never overwritten."""
    with Session.changing(root, dry_run=dry_run, needs_sys=False) as s:
        cmd = hook_command(s.root, command)
        text = udevfile.render(cmd)
        previous = udevfile.read_rule(s.root.path)
        if previous is not None and not udevfile.is_ours(previous):
            raise ConflictError(
                f"{udevfile.host_path()} is not vgpuadm's (it does not start with {udevfile.MARK!r})",
                "move it away (or merge it by hand), then run `vgpuadm udev install` again",
            )
        plan = Plan.of([] if previous == text else [_step(text, previous)], f"install {udevfile.host_path()}")
        applied = s.execute(plan, dry_run=dry_run).applied if not plan.empty else ()
        reload = reload_rules(s.root) if applied and not dry_run else ""
        return UdevResult(udevfile.host_path(), tuple(cmd), plan, tuple(applied), dry_run, True, True, True, reload)


def uninstall(root: str | None, *, dry_run: bool = False) -> UdevResult:
    """Remove vgpuadm's rule; a file of that name vgpuadm did not write is left alone."""
    with Session.changing(root, dry_run=dry_run, needs_sys=False) as s:
        previous = udevfile.read_rule(s.root.path)
        ours = previous is None or udevfile.is_ours(previous)
        steps = [_step(None, previous)] if previous is not None and ours else []
        plan = Plan.of(steps, f"remove {udevfile.host_path()}")
        applied = s.execute(plan, dry_run=dry_run).applied if steps else ()
        reload = reload_rules(s.root) if applied and not dry_run else ""
        installed = previous is not None and (not ours or dry_run)
        return UdevResult(udevfile.host_path(), (), plan, tuple(applied), dry_run, installed, False, ours, reload)


def status(root: str | None, *, command: list[str] | None = None) -> UdevResult:
    """Whether the rule is there and says what `udev install` (run as this vgpuadm) would write. Read-only."""
    with Session.read(root) as s:
        cmd = hook_command(s.root, command)
        current = udevfile.read_rule(s.root.path)
    ours = current is None or udevfile.is_ours(current)
    return UdevResult(udevfile.host_path(), tuple(cmd), Plan.of([], ""), (), False, current is not None,
                      current == udevfile.render(cmd), ours)  # fmt: skip
