"""The `vgpuadm snapshot` archive (a .tar.gz): writing it, and extracting one a user hands us, which is untrusted.

Extraction never trusts a member: only directories, regular files and relative symlinks that stay inside the
target are taken; names are plain relative paths (no `/…`, no `..`, no `.`), under the top-level names a snapshot
has; nothing is written through a link (links are made last, and no member may sit under one); permission bits are
kept but set-id, sticky and execute bits on files are dropped; the archive, each file, the total and the member
count are bounded. Any violation refuses the whole archive before anything is written.
"""

from __future__ import annotations

import json
import os
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from vgpuadm.errors import UsageError
from vgpuadm.host.capture import MAX_FILE, MAX_MEMBERS, Member
from vgpuadm.host.root import (
    chmod_beneath,
    makedirs_beneath,
    resolve_links,
    symlink_beneath,
    undo_fill,
    write_beneath,
)
from vgpuadm.host.sysfs import SIM_MARKER

MAX_ARCHIVE = 64 << 20  # bytes of the compressed archive
MAX_TOTAL = 128 << 20  # bytes of all files once extracted
MAX_NAME = 4096
TOP_LEVEL = frozenset({"sys", "proc", "etc", "vgpuadm-snapshot", "usr", SIM_MARKER})
USR = "usr/share/misc/pci.ids"  # the one file a snapshot holds under usr/ (and the directories above it)
HINT = "give an archive written by `vgpuadm snapshot OUT.tar.gz`"


def write(path: str, members: Iterable[Member]) -> int:
    """Write the archive atomically (0600: it describes the host; host/root.write_beneath in its directory);
    returns the member count. Deterministic: sorted names, owner root, time 0."""
    import io

    count = 0
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.PAX_FORMAT) as tf:
        for m in sorted(members, key=lambda m: m.path):
            info = tarfile.TarInfo(m.path.lstrip("/"))
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "root", "root"
            info.mode = m.mode
            if m.kind == "dir":
                info.type = tarfile.DIRTYPE
                tf.addfile(info)
            elif m.kind == "link":
                info.type, info.linkname, info.mode = tarfile.SYMTYPE, m.target, 0o777
                tf.addfile(info)
            else:
                info.size = len(m.data)
                tf.addfile(info, io.BytesIO(m.data))
            count += 1
    write_beneath(os.path.dirname(os.path.abspath(path)), os.path.basename(path), buf.getvalue(), mode=0o600)
    return count


@dataclass(frozen=True)
class Extracted:
    files: int
    links: int
    dirs: int
    model: dict[str, Any] | None  # the simulated host's hardware model, when the archive carries its marker


def _refuse(source: str, what: str) -> UsageError:
    return UsageError(f"{source}: {what}; nothing was written", HINT)


def _check_name(source: str, name: str) -> str:
    clean = name.rstrip("/")
    parts = clean.split("/")
    if (not clean or clean.startswith("/") or len(clean) > MAX_NAME or "\0" in clean
            or any(p in ("", ".", "..") or len(p) > 255 for p in parts)):  # fmt: skip
        raise _refuse(source, f"member {name[:80]!r} is not a plain relative path")
    if (parts[0] not in TOP_LEVEL or (parts[0] == SIM_MARKER and len(parts) > 1)
            or (parts[0] == "usr" and parts != USR.split("/")[: len(parts)])):  # fmt: skip
        raise _refuse(source, f"member {name[:80]!r} is not part of a host snapshot")
    return clean


def extract(source: str, dest: str) -> Extracted:
    """Extract archive `source` into `dest` (a new or empty directory), refusing what a snapshot cannot hold."""
    try:
        size = os.path.getsize(source)
    except OSError as exc:
        raise UsageError(f"{source}: {exc.strerror}", HINT) from None
    if size > MAX_ARCHIVE:
        raise _refuse(source, f"the archive is {size} bytes, more than {MAX_ARCHIVE}")
    dirs: dict[str, int] = {}
    files: dict[str, tuple[int, bytes]] = {}
    links: dict[str, str] = {}
    total = 0
    try:
        with tarfile.open(source, mode="r:gz") as tf:
            for count, info in enumerate(tf, 1):
                if count > MAX_MEMBERS:
                    raise _refuse(source, f"more than {MAX_MEMBERS} members")
                name = _check_name(source, info.name)
                if name in dirs or name in files or name in links:
                    raise _refuse(source, f"member {name[:80]!r} appears twice")
                if info.isdir():
                    dirs[name] = (info.mode & 0o755) | 0o700
                elif info.isreg():
                    if info.size > MAX_FILE:
                        raise _refuse(source, f"member {name[:80]!r} holds {info.size} bytes, more than {MAX_FILE}")
                    total += info.size
                    if total > MAX_TOTAL:
                        raise _refuse(source, f"the files hold more than {MAX_TOTAL} bytes")
                    f = tf.extractfile(info)
                    data = f.read(MAX_FILE + 1) if f else b""
                    files[name] = (info.mode & 0o666, data)
                elif info.issym():
                    target = info.linkname
                    where = os.path.normpath(os.path.join(os.path.dirname(name), target))
                    if target.startswith("/") or where == ".." or where.startswith("../") or "\0" in target:
                        raise _refuse(source, f"link {name[:80]!r} points out of the host root ({target[:80]!r})")
                    links[name] = target
                else:
                    raise _refuse(source, f"member {name[:80]!r} is neither a file, a directory nor a link")
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise _refuse(source, f"not a readable .tar.gz ({exc})") from None
    for name in [*dirs, *files, *links]:
        parts = name.split("/")
        for i in range(1, len(parts)):
            above = "/".join(parts[:i])
            if above in links or above in files:
                raise _refuse(source, f"member {name[:80]!r} sits under {above[:80]!r}, which is not a directory")
    by_path = {"/" + name: target for name, target in links.items()}
    for name, target in sorted(links.items()):
        if resolve_links("/" + name, by_path) is None:  # a chain of links, each inside as text, can climb out
            raise _refuse(source, f"link {name[:80]!r} leads out of the host root through the archive's links "
                                  f"({target[:80]!r})")  # fmt: skip
    model = None
    if SIM_MARKER in files:
        model = check_model(f"{source}: {SIM_MARKER}", files[SIM_MARKER][1].decode("utf-8", "replace"))
    _write(dest, dirs, files, links)
    return Extracted(len(files), len(links), len(dirs), model)


def _write(dest: str, dirs: dict[str, int], files: dict[str, tuple[int, bytes]], links: dict[str, str]) -> None:
    """Lay the members into `dest` by descriptor (host/root.py): no link is followed at any component, so even a
    chain of the archive's own links cannot carry a member outside; on any failure nothing is left behind."""
    if os.path.isdir(dest) and os.listdir(dest):
        raise UsageError(f"{dest} is not empty", "give a new or empty directory for the imported host")
    made = not os.path.lexists(dest)
    os.makedirs(dest, exist_ok=True)
    try:
        for name in sorted(dirs):
            makedirs_beneath(dest, name)
        for name, (mode, data) in sorted(files.items()):
            write_beneath(dest, name, data, mode=mode, sync=False)
        for name, target in sorted(links.items()):
            symlink_beneath(dest, name, target)
        for name, mode in sorted(dirs.items(), reverse=True):  # last: a directory made read-only still got its files
            chmod_beneath(dest, name, mode)
    except BaseException as exc:
        undo_fill(dest, made)
        if isinstance(exc, OSError):
            raise UsageError(f"{dest}: {exc.strerror or exc}; nothing was written", HINT) from None
        raise


_MODEL_CHARS = frozenset("\n ,-./0123456789:=_()+@#%" + "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")


def check_model(source: str, text: str) -> dict[str, Any]:
    """The hardware model of an imported simulated host, checked before the simulated kernel builds paths from it:
    a JSON object whose keys and strings use only the characters models use, hold no `..` component, and name
    only /sys paths when absolute."""

    def bad(why: str) -> UsageError:
        return UsageError(f"{source}: the simulated host's model {why}; nothing was written", HINT)

    def walk(value: Any, depth: int) -> None:
        if depth > 20:
            raise bad("nests too deep")
        if isinstance(value, dict):
            for k, v in value.items():
                walk(k, depth + 1)
                walk(v, depth + 1)
        elif isinstance(value, list):
            for v in value:
                walk(v, depth + 1)
        elif isinstance(value, str):
            if len(value) > 4096 or not set(value) <= _MODEL_CHARS or ".." in value.split("/"):
                raise bad(f"holds {value[:60]!r}")
            if value.startswith("/") and not value.startswith("/sys/"):
                raise bad(f"names {value[:60]!r}, outside /sys")
        elif not (value is None or isinstance(value, (bool, int, float))):
            raise bad("holds a value of an unknown kind")

    try:
        doc = json.loads(text)
    except ValueError:
        raise bad("is not JSON") from None
    if not isinstance(doc, dict):
        raise bad("is not an object")
    walk(doc, 0)
    return doc
