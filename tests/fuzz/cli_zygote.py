"""A fork server for the CLI fuzz target (tests/fuzz/test_cli.py): it imports vgpuadm, libvirt-python and the CLI's
libraries once, then runs every `vgpuadm ARGS…` in a child forked for that input alone, as `python -m vgpuadm` would
run it (vgpuadm.cli.app.run with the default Console, fds 0/1/2 being /dev/null or the input's stdin and two files).

Why a child per input: libvirt allows one embedded driver root per process and registers the driver anew on every
reopen (it refuses after ~20: "Too many drivers"), so in-process runs cannot open the fuzz root's embedded driver
hundreds of times; a fresh child opens it once and exits, which also frees the driver's pid-file lock. Forking a
warm server costs ~0.1 s per input against ~1 s for a cold `python -m vgpuadm`. The server itself never opens
libvirt (it checks), so a child inherits no connection, thread or driver state.

A child that runs longer than the request's timeout is killed with its process group and reported as a hang.
Requests and answers are JSON lines on the server's original stdin and stdout:
  {"op": "run", "argv": [...], "timeout": s, "stdin": text|null} → {"code", "out", "err", "hang", "seconds"}
  {"op": "define", "root": DIR, "names": [...]}                   → {"code", "err"} (diskless domains, embedded)
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import select
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable

ESCAPED = 99  # a child whose run() raised: the answer's err holds the traceback


def _warm(root: str) -> None:
    """Import what the CLI imports lazily, and run read commands that never open libvirt."""
    import importlib
    import pkgutil

    import libvirt  # noqa: F401 — imported (not opened) here so that no child pays for it
    import lxml.etree  # noqa: F401

    import vgpuadm
    from vgpuadm.cli.app import run
    from vgpuadm.cli.console import Console
    from vgpuadm.virt import conn

    for mod in pkgutil.walk_packages(vgpuadm.__path__, "vgpuadm."):
        if not mod.name.endswith("__main__"):
            importlib.import_module(mod.name)
    for argv in (["--help"], ["mdev", "create", "--help"], ["--root", root, "gpus"], ["--root", root, "types"],
                 ["--root", root, "devices", "--json"], ["sim", "list"], ["man"]):  # fmt: skip
        run(argv, Console(io.StringIO(), io.StringIO()))
    assert conn._embedded_root is None, "the fork server opened libvirt: its children would inherit the driver"
    assert threading.active_count() == 1, "the fork server started a thread: forked children could deadlock"


def _child(argv: list[str], stdin: str | None, out_path: str, err_path: str) -> None:
    os.setpgid(0, 0)  # its own group: a timeout kills whatever it started too
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    if stdin is None:
        fd0 = os.open(os.devnull, os.O_RDONLY)
    else:
        fd0, path = tempfile.mkstemp()
        os.write(fd0, stdin.encode(errors="surrogateescape"))
        os.lseek(fd0, 0, os.SEEK_SET)
        os.unlink(path)
    os.dup2(fd0, 0)
    for fd, path in ((1, out_path), (2, err_path)):
        f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(f, fd)
        os.close(f)
    sys.stdin = open(0, closefd=False)  # noqa: SIM115
    sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
    from vgpuadm.cli.app import run

    code = ESCAPED
    try:
        code = run(argv)
    except BaseException:
        sys.stderr.write("ESCAPED run(): " + traceback.format_exc())
    finally:
        for s in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                s.flush()
        os._exit(code)


def _define(root: str, names: list[str], err_path: str) -> None:
    os.dup2(os.open(err_path, os.O_WRONLY), 2)
    from vgpuadm.virt.conn import VirtConn, embed_uri
    from vgpuadm.virt.xml import domain_definition

    with VirtConn(embed_uri(root)) as conn:
        for name in names:
            conn.define(domain_definition(name, memory_mib=64, vnc=True))


def _wait(pid: int, timeout: float) -> tuple[int | None, float, float]:
    """(exit code or None if it was killed for running too long, seconds, CPU seconds)."""
    start = time.monotonic()
    pidfd = os.pidfd_open(pid)
    try:
        ready, _, _ = select.select([pidfd], [], [], timeout)
        if not ready:
            os.killpg(pid, signal.SIGKILL)
            _, _, use = os.wait4(pid, 0)
            return None, time.monotonic() - start, use.ru_utime + use.ru_stime
        _, status, use = os.wait4(pid, 0)
        return os.waitstatus_to_exitcode(status), time.monotonic() - start, use.ru_utime + use.ru_stime
    finally:
        os.close(pidfd)


def _fork(target: Callable[[], None], timeout: float) -> tuple[int | None, float, float]:
    pid = os.fork()
    if pid == 0:
        try:
            target()
        except BaseException:
            traceback.print_exc()
            os._exit(ESCAPED)
        os._exit(0)
    with contextlib.suppress(OSError):  # also here: the child may not have run yet when a timeout strikes
        os.setpgid(pid, pid)
    return _wait(pid, timeout)


def main() -> None:
    root, scratch = sys.argv[1], sys.argv[2]
    requests, answers = os.fdopen(os.dup(0), "r"), os.fdopen(os.dup(1), "w")
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
    os.chdir(scratch)
    _warm(root)
    tmp = tempfile.mkdtemp(prefix="vgpuadm-fuzz-io-")
    out_path, err_path = os.path.join(tmp, "out"), os.path.join(tmp, "err")
    answers.write("{}\n")
    answers.flush()
    for line in requests:
        req = json.loads(line)
        for path in (out_path, err_path):
            open(path, "w").close()
        if req["op"] == "run":
            target = functools.partial(_child, req["argv"], req.get("stdin"), out_path, err_path)
        else:
            target = functools.partial(_define, req["root"], req["names"], err_path)
        code, seconds, cpu = _fork(target, req["timeout"])
        with open(out_path, errors="replace") as o, open(err_path, errors="replace") as e:
            answer = {
                "code": code,
                "out": o.read(),
                "err": e.read(),
                "hang": code is None,
                "seconds": seconds,
                "cpu": cpu,
            }
        answers.write(json.dumps(answer) + "\n")
        answers.flush()


if __name__ == "__main__":
    main()
