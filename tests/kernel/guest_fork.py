"""`vgpuadm ARGV` as separate processes forked from the guest suite's pytest, after vgpuadm is imported.

Each child is a real, separate vgpuadm process (its own pid, its own try at the host lock, its own libvirt
connection and sysfs writes) that runs the CLI's entry point on its argv and exits with its code. They share only
the interpreter start: under TCG a fresh `python -m vgpuadm` spends ~30 s importing, which dominated the tests that
need a process of their own (the 16-way race, a command that may block in the kernel)."""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import sys
import tempfile
import time
from collections.abc import Callable

from vgpuadm.cli.app import run
from vgpuadm.cli.console import Console

# What the commands forked here load, imported once before the fork.
PRELOAD = (
    "vgpuadm.api",
    "vgpuadm.ops.guest",
    "vgpuadm.ops.host",
    "vgpuadm.cli.app",
    "vgpuadm.cli.host",
    "libvirt",
    "typer.main",
)  # the api imports each orchestrator on first use: the ones the forked commands run


class Hung(Exception):
    """A child outlived its time; `on_timeout` ran, and then the child ended with (code, stdout, stderr)."""

    def __init__(self, outcome: tuple[int, str, str]) -> None:
        super().__init__(outcome[2].strip())
        self.outcome = outcome


def forked(
    argvs: list[list[str]],
    *,
    env: dict[str, str] | None = None,
    timeout: float | None = None,
    on_timeout: Callable[[], None] | None = None,
) -> list[tuple[int, str, str]]:
    """`vgpuadm ARGV` for each argv, all at once, each in a forked child: [(exit code, stdout, stderr)]. `env`: set
    in the children only. Output goes to the files as it is written: a child that os._exit()s in the middle (the
    executor's test crash hook) keeps what it printed.

    With `timeout`: a child still running after that many seconds gets `on_timeout()` (e.g. stop the domain whose
    device the child waits for in the kernel), is then waited for, and Hung is raised with its outcome."""
    for module in PRELOAD:
        importlib.import_module(module)
    sys.stdout.flush()
    sys.stderr.flush()
    children = []
    with contextlib.ExitStack() as files:
        for argv in argvs:
            out, err = (files.enter_context(tempfile.TemporaryFile(buffering=0)) for _ in range(2))
            pid = os.fork()
            if pid == 0:  # the child: one vgpuadm run, then out without pytest's cleanup
                code = 70
                try:
                    os.environ.update(env or {})
                    streams = (io.TextIOWrapper(f, encoding="utf-8", write_through=True) for f in (out, err))
                    code = run(argv, Console(*streams))
                finally:
                    os._exit(code)
            children.append((pid, out, err))
        deadline = None if timeout is None else time.monotonic() + timeout
        results, hung = [], False
        for pid, out, err in children:
            status = _wait(pid, deadline)
            if status is None:
                hung = True
                if on_timeout is not None:
                    on_timeout()
                _, status = os.waitpid(pid, 0)
            out.seek(0)
            err.seek(0)
            results.append((os.waitstatus_to_exitcode(status), out.read().decode(), err.read().decode()))
    if hung:
        raise Hung(results[0] if len(results) == 1 else (70, "", "\n".join(r[2] for r in results)))
    return results


def _wait(pid: int, deadline: float | None) -> int | None:
    """The child's wait status, or None when it still runs at `deadline`."""
    if deadline is None:
        return os.waitpid(pid, 0)[1]
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.2)
