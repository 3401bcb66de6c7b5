"""One long-lived process that runs `vgpuadm ARGS…` in-process, as tests/conftest.py's `cli` fixture does, for the
CLI fuzz target (tests/fuzz/test_cli.py).

Why a process of its own: libvirt allows one embedded driver root per process for the process's life, so the
pytest worker must never open one (another test in the same worker could not); this process opens the fuzz root's
embedded driver once and keeps it for every input. Requests and answers are JSON lines on the process's original
stdin and stdout (fds 0 and 1 are then pointed at /dev/null and stderr, so that nothing else can reach them); the CLI's own stdout/stderr, and anything written to sys.stdout/sys.stderr behind the Console's back, come back in
the answer. Requests:
  {"op": "run", "argv": [...]}                     → {"code", "out", "err"}
  {"op": "define", "names": [...]}                 → {} (diskless domains in the root's embedded driver)
  {"op": "domains"}                                → {"xml": {name: persistent XML}}
  {"op": "reset", "pristine": DIR, "xml": {...}}   → {} (the tree copied back from DIR, domains redefined)
"""

from __future__ import annotations

import io
import json
import os
import shutil
import sys

from vgpuadm.cli.app import run
from vgpuadm.cli.console import Console
from vgpuadm.virt.conn import VirtConn, embed_uri
from vgpuadm.virt.xml import domain_definition

LIBVIRT_DIR = os.path.join("var", "lib", "vgpuadm", "libvirt")  # the embedded driver's root: kept across resets


def _run(argv: list[str]) -> dict[str, object]:
    out, err = io.StringIO(), io.StringIO()
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    try:
        code = run(argv, Console(out, err))
    except BaseException as exc:
        code = -1
        err.write(f"ESCAPED run(): {type(exc).__name__}: {exc}\n")
    finally:
        sys.stdout, sys.stderr = saved
    return {"code": code, "out": out.getvalue(), "err": err.getvalue()}


def _domains(root: str) -> dict[str, str]:
    with VirtConn(embed_uri(root)) as conn:
        return {name: conn.xml(name) for name in conn.list_domains()}


def _reset(root: str, pristine: str, xml: dict[str, str]) -> None:
    """Copy the pristine tree back over everything but the embedded driver's directory, then make the driver's
    domains those of the pristine tree again (through libvirt: it keeps its domains in memory)."""
    for name in os.listdir(root):
        path = os.path.join(root, name)
        if name == "var":
            continue
        shutil.rmtree(path) if os.path.isdir(path) and not os.path.islink(path) else os.unlink(path)
    var = os.path.join(root, "var")
    for top, dirs, files in os.walk(var, topdown=True):
        rel = os.path.relpath(top, root)
        if rel == LIBVIRT_DIR:
            dirs[:] = []
            continue
        for name in files:
            os.unlink(os.path.join(top, name))
        for name in list(dirs):
            if os.path.islink(os.path.join(top, name)):
                os.unlink(os.path.join(top, name))
                dirs.remove(name)
    for name in os.listdir(pristine):
        src, dst = os.path.join(pristine, name), os.path.join(root, name)
        if name == "var":
            _copy_var(src, dst)
        elif os.path.isdir(src) and not os.path.islink(src):
            shutil.copytree(src, dst, symlinks=True)
        else:
            shutil.copy2(src, dst, follow_symlinks=False)
    with VirtConn(embed_uri(root)) as conn:
        for name in set(conn.list_domains()) - set(xml):
            conn.undefine(name)
        for text in xml.values():
            conn.define(text)


def _copy_var(src: str, dst: str) -> None:
    for top, dirs, files in os.walk(src):
        rel = os.path.relpath(top, os.path.dirname(src))
        if rel == LIBVIRT_DIR:
            dirs[:] = []
            continue
        target = os.path.join(dst, os.path.relpath(top, src))
        os.makedirs(target, exist_ok=True)
        shutil.copystat(top, target)
        for name in files:
            shutil.copy2(os.path.join(top, name), os.path.join(target, name), follow_symlinks=False)


def main() -> None:
    root = sys.argv[1]
    # Held open for the process's life: libvirt registers the embedded driver anew on each first open after the
    # last connection closed, and refuses after ~20 ("Too many drivers"); with this one open, it stays registered.
    keeper = VirtConn(embed_uri(root))
    keeper.list_domains()
    requests, answers = os.fdopen(os.dup(0), "r"), os.fdopen(os.dup(1), "w")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(2, 1)
    os.close(null)
    for line in requests:
        req = json.loads(line)
        if req["op"] == "run":
            answer: dict[str, object] = _run(req["argv"])
        elif req["op"] == "define":
            with VirtConn(embed_uri(root)) as conn:
                for name in req["names"]:
                    conn.define(domain_definition(name, memory_mib=64, vnc=True))
            answer = {}
        elif req["op"] == "domains":
            answer = {"xml": _domains(root)}
        else:
            _reset(root, req["pristine"], req["xml"])
            answer = {}
        answers.write(json.dumps(answer) + "\n")
        answers.flush()


if __name__ == "__main__":
    main()
