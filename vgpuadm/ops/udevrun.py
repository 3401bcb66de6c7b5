"""`vgpuadm udev run --parent NAME | --gpu ADDR`: what vgpuadm's udev rule (ops/udev.py) runs for each matching
uevent. It must return at once and cost little (udevd waits for it, and kills what it leaves behind), so this module
imports no orchestrator: it checks the device name, debounces and hands the work off.

Debounce: one empty file per GPU or mdev parent under <root>/run/vgpuadm/udev (0700, the lock's directory), made
O_EXCL. The event that makes it hands off one run; any other event for that device while the file is there (the run
waits its settle delay, or runs) is dropped. The run removes the file when it is done; a file older than STALE_S
(a run killed) no longer holds events back. A VF names its GPU (its physfn), so the VFs of one GPU binding one after
the other give one run.

Hand-off: `systemd-run --no-block` when systemd runs the host (a transient service, ordered after libvirt and the
boot restore when those start in the same boot), else a detached child in its own session, its output on
/dev/null. The run is `vgpuadm udev run … --worker`: after SETTLE_S it re-converges that one device
(`vgpuadm restore` for it, its outcome in the system log) — see cli/udevrun.py."""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from vgpuadm.errors import ConflictError, UsageError
from vgpuadm.host.paths import UDEV_PENDING
from vgpuadm.host.root import open_dir_beneath
from vgpuadm.model import PARENT_PATTERN, PCI_PATTERN

SETTLE_S = 2.0  # after the first event, before the run: the rest of a reset's events arrive meanwhile
STALE_S = 900.0  # a pending file this old belongs to a run that died: it no longer holds events back
KINDS = ("gpu", "parent")
SYSTEMD_RUN = ("/usr/bin/systemd-run", "/bin/systemd-run")
_PCI = re.compile(PCI_PATTERN)
_PARENT = re.compile(PARENT_PATTERN)
# A transient unit's ordering: after these when they start in the same boot (a unit not installed is a no-op).
AFTER = ("vgpuadm-restore.service", "libvirtd.service", "virtqemud.service")
KEEP_ENV = ("PYTHONPATH", "VGPUADM_DEBUG")  # what the run needs of this process's environment under systemd-run


@dataclass(frozen=True)
class Target:
    """The device a udev event names, canonical: `kind` "gpu" (a PCI address, a VF's own PF) or "parent"."""

    kind: str
    name: str

    def describe(self) -> str:
        return f"{'GPU' if self.kind == 'gpu' else 'mdev parent'} {self.name}"


def target(root: str, kind: str, name: str) -> Target:
    """The device of `udev run --<kind> <name>`, checked once here; a VF's address becomes its PF's."""
    if kind not in KINDS:
        raise UsageError(f"udev run takes --gpu ADDR or --parent NAME, not --{kind}", "the udev rule passes one")
    if kind == "gpu":
        if not _PCI.fullmatch(name):
            raise UsageError(f"{name!r} is not a PCI address", "the udev rule passes $kernel, e.g. 0000:01:00.0")
        try:
            pf = os.path.basename(os.readlink(os.path.join(root, "sys/bus/pci/devices", name, "physfn")))
        except OSError:
            pf = name
        return Target(kind, pf if _PCI.fullmatch(pf) else name)
    if not _PARENT.fullmatch(name):
        raise UsageError(f"{name!r} is not an mdev parent name", "the udev rule passes $kernel, e.g. mtty")
    return Target(kind, name)


def claim(root: str, t: Target, now: float | None = None) -> bool:
    """Make `t`'s pending file; False when one is there already (a run is pending or running: drop this event)."""
    fd = open_dir_beneath(root, UDEV_PENDING.lstrip("/"), create=0o700)
    try:
        for _ in range(2):
            try:
                os.close(os.open(t.name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                                 dir_fd=fd))  # fmt: skip
                return True
            except FileExistsError:
                st = os.stat(t.name, dir_fd=fd, follow_symlinks=False)
                if (time.time() if now is None else now) - st.st_mtime < STALE_S:
                    return False
                os.unlink(t.name, dir_fd=fd)  # a run that died left it
        return False
    finally:
        os.close(fd)


def release(root: str, t: Target) -> None:
    """Remove `t`'s pending file: the next event for it hands off a run again."""
    try:
        fd = open_dir_beneath(root, UDEV_PENDING.lstrip("/"))
    except FileNotFoundError:
        return
    try:
        os.unlink(t.name, dir_fd=fd)
    except FileNotFoundError:
        pass
    finally:
        os.close(fd)


def systemd_run_argv(systemd_run: str, argv: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """The systemd-run command that starts `argv` as a transient service: not waited for, collected when done,
    ordered after libvirt and the boot restore, with the environment the run needs (a service starts with none)."""
    keep = [f"--setenv={k}={env[k]}" for k in KEEP_ENV if env.get(k)]
    after = [f"--property=After={u}" for u in AFTER]
    return [systemd_run, "--no-block", "--quiet", "--collect", "--description=vgpuadm: restore after a udev event",
            *after, *keep, *argv]  # fmt: skip


def hand_off(argv: Sequence[str], env: Mapping[str, str] | None = None) -> str:
    """Start `argv` so that it outlives udev's event: a transient systemd service when systemd runs the host, else
    a detached child. What was used, as a word."""
    env = os.environ if env is None else env
    systemd_run = next((p for p in SYSTEMD_RUN if os.access(p, os.X_OK)), None)
    if systemd_run and os.path.isdir("/run/systemd/system"):
        subprocess.run(systemd_run_argv(systemd_run, argv, env), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=30, check=True)  # fmt: skip
        return "systemd-run"
    subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     start_new_session=True, close_fds=True, cwd="/", env=dict(env))  # fmt: skip
    return "detached"


def trigger(root: str, t: Target, worker: Sequence[str], spawn: Callable[[Sequence[str]], str] | None = None) -> str:
    """One udev event for `t`: hand `worker` off (`spawn`, default hand_off) unless a run for `t` is pending or
    running. What happened, as one line for the system log."""
    if not claim(root, t):
        return f"udev: {t.describe()}: a run is already pending; this event is dropped"
    try:
        how = (spawn or hand_off)(worker)
    except (OSError, subprocess.SubprocessError) as exc:
        release(root, t)
        raise ConflictError(f"udev: {t.describe()}: the run could not be started: {exc}",
                         "check that systemd-run works (or run `vgpuadm restore` by hand)") from None  # fmt: skip
    return f"udev: {t.describe()} appeared again: re-converging it in {SETTLE_S:g} s ({how})"
