"""`vgpuadm udev run --parent NAME | --gpu ADDR [--worker]`: what vgpuadm's udev rule runs for an mdev parent that
registers again or a GPU bound to its driver again (vgpuadm/ops/udevrun.py: the debounce and the hand-off). Without
--worker it returns at once: the first event for a device hands off one run, the others while that run is pending
or running are dropped. The run (--worker) waits the settle delay, then restores that device's recorded devices
(`restore --gpu` or `--parent` for it alone). Everything either says goes to the
system log (ident vgpuadm), nothing to a terminal. cli/fast.py runs both without the typer app."""

import os
import sys
import time
from collections.abc import Sequence

from vgpuadm import api
from vgpuadm.cli import declarative
from vgpuadm.cli.console import SyslogConsole, logged
from vgpuadm.errors import VgpuadmError

TYPE_CHECKING = False  # `typing` stays off the fast path udevd waits for
if TYPE_CHECKING:
    from typing import TextIO

RESTORE_TIMEOUT_S = 60.0  # the run's wait for mdev parents to register, as `restore`'s default


def _self_command() -> list[str]:
    """How this process was started, up to its vgpuadm arguments: [python, -m, vgpuadm] or [python, script]."""
    if os.path.basename(sys.argv[0]) == "vgpuadm":  # the console script; the run starts in /
        return [sys.executable, os.path.abspath(sys.argv[0])]
    if os.path.basename(sys.argv[0]) == "__main__.py" and len(sys.orig_argv) >= len(sys.argv):
        return [sys.executable, *sys.orig_argv[1 : len(sys.orig_argv) - len(sys.argv) + 1]]
    return [sys.executable, "-m", "vgpuadm"]


def scope(kind: str, name: str) -> dict[str, tuple[str, ...]]:
    """restore's keyword for one GPU (`gpus`) or mdev parent (`parents`)."""
    return {"gpus" if kind == "gpu" else "parents": (name,)}


def run_udev(root: str | None, kind: str, name: str, worker: bool, argv: Sequence[str] = (),
             err: "TextIO | None" = None) -> int:  # fmt: skip
    """`argv`: the command line, told to another vgpuadm waiting for the host lock; `err`: where an error goes
    besides the system log (the command's stderr)."""
    log = SyslogConsole(err=err)
    try:
        top = api.HostRoot(root).path
        t = api.udevrun.target(top, kind, name)
    except VgpuadmError as exc:
        log.error(exc)
        return exc.exit_code
    if not worker:
        run = [
            *_self_command(),
            *(["--root", top] if top != "/" else []),
            "udev",
            "run",
            f"--{t.kind}",
            t.name,
            "--worker",
        ]
        return logged(log, lambda: log.line(api.udevrun.trigger(top, t, run)))
    api.set_lock_policy(None, log.warn, ("vgpuadm", *argv))
    try:
        time.sleep(api.udevrun.SETTLE_S)
        scoped = scope(t.kind, t.name)
        log.line(f"udev: {t.describe()}: restoring its recorded devices")
        restore = declarative.restore
        return logged(log, lambda: restore(log, root, None, None, RESTORE_TIMEOUT_S, False, False, **scoped))
    except Exception as exc:  # a bug of ours: still one line in the log, since nobody sees this run's stderr
        log.error(VgpuadmError(f"internal error: {type(exc).__name__}: {exc}",
                               "run `VGPUADM_DEBUG=1 vgpuadm restore` for the traceback and report it"))  # fmt: skip
        return 70
    finally:
        api.udevrun.release(top, t)
        api.set_lock_policy()
