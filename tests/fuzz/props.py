"""The properties every fuzzed input must keep, shared by the parser-level and the CLI targets."""

from __future__ import annotations

import hashlib
import io
import os

from vgpuadm.cli.console import Console
from vgpuadm.errors import VgpuadmError

KNOWN_CODES = {0, 1, 2, 3, 4, 5, 6, 7, 8, 77}  # vgpuadm/errors.py; 70 is "internal error", 130 an interrupt


def clean_error(exc: VgpuadmError) -> str:
    """'' when the error prints (through the CLI's Console, as every command's error does) as one `error:` line
    and at most one `hint:` line, else what is wrong."""
    if not isinstance(exc.message, str) or not exc.message or not isinstance(exc.hint, str):
        return f"{type(exc).__name__} has no message text: {exc.message!r}"
    err = io.StringIO()
    Console(io.StringIO(), err).error(exc)
    return clean_run(exc.exit_code, "", err.getvalue())


def clean_run(code: int, out: str, err: str) -> str:
    """'' when a CLI run ended cleanly: success, or a known non-zero code with stderr = warnings, then one `error:`
    line and an optional `hint:` line; never a traceback or an internal error."""
    if "Traceback" in out or "Traceback" in err:
        return "a traceback was printed"
    if code not in KNOWN_CODES:
        return f"exit code {code}"
    lines = err.splitlines()
    if code == 0:
        odd = [x for x in lines if not x.startswith("warning: ")]
        return f"exit 0 with stderr lines {odd[:2]!r}" if odd else ""
    while lines and lines[0].startswith("warning: "):
        lines.pop(0)
    if not lines or not lines[0].startswith("error: ") or len(lines) > 2 or (len(lines) == 2 and not
                                                                            lines[1].startswith("hint: ")):  # fmt: skip
        return f"exit {code} without one `error:` line and an optional `hint:` line: {err[-600:]!r}"
    if lines[0].startswith("error: internal error: "):  # vgpuadm's own (exit 70); libvirt's text may say it too
        return "internal error"
    return ""


def tree_hash(top: str, skip: frozenset[str] = frozenset()) -> str:
    """A hash of a directory tree: every entry's relative path, type, mode and content (a link's target), without
    the relative paths in `skip` (and what is below them)."""
    h = hashlib.blake2b(digest_size=16)
    for here, dirs, files in os.walk(top):
        rel = os.path.relpath(here, top)
        dirs[:] = sorted(d for d in dirs if os.path.normpath(os.path.join(rel, d)) not in skip)
        for name in sorted(files) + [d for d in dirs if os.path.islink(os.path.join(here, d))]:
            path = os.path.join(here, name)
            relpath = os.path.normpath(os.path.join(rel, name))
            if relpath in skip:
                continue
            st = os.lstat(path)
            h.update(f"{relpath}\0{st.st_mode}\0".encode())
            if os.path.islink(path):
                h.update(os.readlink(path).encode(errors="surrogateescape"))
            elif os.path.isfile(path):
                with open(path, "rb") as f:
                    h.update(f.read())
        for d in dirs:
            h.update(f"{os.path.normpath(os.path.join(rel, d))}/\0".encode())
    return h.hexdigest()
