"""What `vgpuadm snapshot` puts in its archive: exactly the files discovery reads, found by running discovery on a
Sysfs that records every path it touches, then copying those paths (and the links leading to them) from the root.

A file discovery reads is copied with its text; every link on the way is copied as a link with its own target, so
the copy resolves the way the host did; every other entry of a directory copied (what discovery only lists or tests
for, and the files the verbs write) is an empty placeholder with its mode — a PCI function's `config` or
`resource0` is never opened. Serial numbers and GPU UUIDs are
redacted from every text copied (`Redactor`).
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from dataclasses import dataclass

from vgpuadm.errors import HostIOError, UsageError
from vgpuadm.host.root import read_beneath
from vgpuadm.host.sysfs import DirScan, Sysfs

MAX_FILE = 1 << 20  # bytes copied of one file (sysfs attributes hold at most a page)
MAX_MEMBERS = 200_000  # paths in one snapshot (a 16-GPU layout B host has ~60,000)
MAX_HOPS = 40  # links followed for one path (the kernel's own limit)

_GPU_UUID = re.compile(r"\b(GPU|MIG)-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")
_SERIAL = re.compile(r"(?im)^(\s*Serial Number\s*:\s*)(\S.*)$|(<serial>)([^<]*)(</serial>)")


class Redactor:
    """Replaces GPU/MIG UUIDs by stable placeholders (the same UUID always gets the same one, so the captured
    outputs still agree with each other) and serial numbers by REDACTED."""

    def __init__(self) -> None:
        self.uuids: dict[str, str] = {}

    def _uuid(self, m: re.Match[str]) -> str:
        key = m.group(0).lower()
        if key not in self.uuids:
            self.uuids[key] = f"{m.group(1)}-00000000-0000-0000-0000-{len(self.uuids) + 1:012d}"
        return self.uuids[key]

    def text(self, text: str) -> str:
        text = _GPU_UUID.sub(self._uuid, text)
        return _SERIAL.sub(lambda m: f"{m.group(1)}REDACTED" if m.group(1) is not None else
                           f"{m.group(3)}REDACTED{m.group(5)}", text)  # fmt: skip


def redact_machine_id(text: str) -> str:
    """A machine-id stands for the host: keep a salted digest (stable per host, not the id itself)."""
    return hashlib.sha256(b"vgpuadm-snapshot\0" + text.strip().encode()).hexdigest()[:32] + "\n"


class RecordingSysfs(Sysfs):
    """A read-only Sysfs that notes every host path it is asked about, with what was asked: `read` (the text),
    `list` (the directory's entries) or `exists` (that it is there, and what kind of file)."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.touched: dict[str, str] = {}

    def _note(self, host_path: str, what: str) -> None:
        if self.touched.get(host_path, "exists") == "exists":  # the first touch, or a look that becomes a read
            self.touched[host_path] = what

    def read(self, host_path: str) -> str:
        self._note(host_path, "read")
        return super().read(host_path)

    def read_opt(self, host_path: str) -> str | None:
        self._note(host_path, "read")
        return super().read_opt(host_path)

    def read_tree(self, host_dir: str, wanted: dict[str, tuple[str, ...]]) -> dict[str, dict[str, str | None]]:
        self._note(host_dir, "exists")
        for sub, names in wanted.items():
            for name in names:
                self._note(f"{host_dir}/{sub}/{name}" if sub else f"{host_dir}/{name}", "read")
        return super().read_tree(host_dir, wanted)

    def read_subdirs(self, host_dir: str, names: tuple[str, ...]) -> dict[str, dict[str, str | None]]:
        # As Sysfs.read_subdirs is defined: through the noting listdir and read_tree.
        return self.read_tree(host_dir, dict.fromkeys(self.listdir(host_dir), names))

    def scan(self, host_dir: str) -> DirScan:
        # As Sysfs.scan answers: through the noting entries, link_names and read_attrs, one path at a time.
        return _NotedScan(self, host_dir)

    def exists(self, host_path: str) -> bool:
        self._note(host_path, "exists")
        return super().exists(host_path)

    def is_dir(self, host_path: str) -> bool:
        self._note(host_path, "exists")
        return super().is_dir(host_path)

    def listdir(self, host_path: str) -> list[str]:
        self._note(host_path, "list")
        return super().listdir(host_path)

    def entries(self, host_path: str) -> dict[str, bool]:
        self._note(host_path, "list")
        return super().entries(host_path)

    def readlink(self, host_path: str) -> str | None:
        self._note(host_path, "exists")
        return super().readlink(host_path)

    def link_names(self, host_dir: str, names: list[str]) -> dict[str, str | HostIOError | None]:
        for name in names:
            self._note(f"{host_dir}/{name}", "exists")
        return super().link_names(host_dir, names)

    def resolve(self, host_path: str) -> str:
        self._note(host_path, "exists")
        return super().resolve(host_path)

    def write(self, host_path: str, data: str, hint: str = "") -> None:
        raise UsageError("a snapshot never writes to the host", "this is a bug in the snapshot's reader")


class _NotedScan(DirScan):
    """RecordingSysfs.scan: each read through the RecordingSysfs's own, by path, so that each is noted."""

    def __enter__(self) -> DirScan:
        return self

    def entries(self) -> dict[str, bool]:
        return self.sysfs.entries(self.host_dir)

    def link_names(self, names: list[str]) -> dict[str, str | HostIOError | None]:
        return self.sysfs.link_names(self.host_dir, names)

    def resolve_link(self, name: str) -> str:
        return self.sysfs.resolve_link(f"{self.host_dir}/{name}")

    def read_attrs(self, names: tuple[str, ...]) -> dict[str, str | None]:
        return self.sysfs.read_attrs(self.host_dir, names)


@dataclass(frozen=True)
class Member:
    """One archive member: a directory, a file (text or placeholder) or a link, at a host path."""

    path: str  # host path, /sys/...
    kind: str  # dir | file | link
    mode: int = 0o755
    data: bytes = b""
    target: str = ""  # link target, as the link holds it


class Collector:
    """Copies host paths from a root into Members, following links as the kernel does."""

    def __init__(self, root: str, redactor: Redactor) -> None:
        self.root = os.path.abspath(root)
        self.redactor = redactor
        self.members: dict[str, Member] = {}

    def _real(self, host_path: str) -> str:
        return os.path.join(self.root, host_path.lstrip("/"))

    def _put(self, m: Member) -> None:
        old = self.members.get(m.path)
        if old is not None and (old.kind != "file" or old.data or m.kind != "file"):
            return  # a copied text is never replaced by a placeholder
        if len(self.members) >= MAX_MEMBERS:
            raise UsageError(
                f"the snapshot would hold more than {MAX_MEMBERS} files", "this host is too big to capture"
            )
        self.members[m.path] = m

    def _leaf(self, host_path: str, st: os.stat_result, what: str) -> None:
        mode = stat.S_IMODE(st.st_mode)
        if stat.S_ISDIR(st.st_mode):
            self._put(Member(host_path, "dir", mode))
            if what == "list":
                self.entries(host_path)
        elif stat.S_ISREG(st.st_mode):
            data = b""
            if what == "read":
                try:  # regular files only, by descriptor beneath the root: a FIFO swapped in never hangs it
                    data = read_beneath(self.root, host_path, limit=MAX_FILE, truncate=True) or b""
                except OSError:
                    data = b""  # discovery saw the same error; the copy reads as empty
                data = self.redactor.text(data.decode("utf-8", "replace")).encode()
            self._put(Member(host_path, "file", mode, data))

    def entries(self, host_dir: str) -> None:
        """Every entry of a copied directory, by kind (an unreadable directory: none, as discovery saw)."""
        try:
            names = sorted(os.listdir(self._real(host_dir)))
        except OSError:
            return
        for name in names:
            self._entry(f"{host_dir.rstrip('/')}/{name}")

    def _entry(self, host_path: str) -> None:
        """A directory entry discovery listed: its kind only (links keep their target, files are placeholders)."""
        try:
            st = os.lstat(self._real(host_path))
        except OSError:
            return
        if stat.S_ISLNK(st.st_mode):
            target = os.readlink(self._real(host_path))
            if target.startswith("/"):
                target = os.path.relpath(target, os.path.dirname(host_path))
            self._put(Member(host_path, "link", target=target))
        elif stat.S_ISDIR(st.st_mode):
            self._put(Member(host_path, "dir", stat.S_IMODE(st.st_mode)))
        elif stat.S_ISREG(st.st_mode):
            self._put(Member(host_path, "file", stat.S_IMODE(st.st_mode)))

    def add(self, host_path: str, what: str, hops: int = 0) -> None:
        """Copy `host_path` and every link on its way; `what` as RecordingSysfs notes it."""
        parts = [p for p in host_path.split("/") if p]
        cur = ""
        for i, name in enumerate(parts):
            cur = f"{cur}/{name}"
            try:
                st = os.lstat(self._real(cur))
            except OSError:
                return  # absent: the copy lacks it too
            if stat.S_ISLNK(st.st_mode):
                target = os.readlink(self._real(cur))
                if target.startswith("/"):  # the copy's links stay inside the copy
                    target = os.path.relpath(target, os.path.dirname(cur))
                self._put(Member(cur, "link", target=target))
                if hops >= MAX_HOPS:
                    return
                resolved = os.path.normpath(os.path.join(os.path.dirname(cur), target, *parts[i + 1 :]))
                if resolved.startswith("/.."):
                    return
                self.add(resolved, what, hops + 1)
                return
            if i < len(parts) - 1:
                self._put(Member(cur, "dir", stat.S_IMODE(st.st_mode)))
            else:
                self._leaf(cur, st, what)

    def add_text(self, host_path: str, text: str, mode: int = 0o644) -> None:
        """A file whose text the snapshot makes itself (nvidia-smi outputs, the redacted machine-id)."""
        parts = [p for p in host_path.split("/") if p]
        for i in range(1, len(parts)):
            self._put(Member("/" + "/".join(parts[:i]), "dir", 0o755))
        self._put(Member(host_path, "file", mode, text.encode()))


def record(root: str, touched: dict[str, str], redactor: Redactor) -> Collector:
    """Copy every path a RecordingSysfs noted; then every directory copied under /sys gets its entries
    (placeholders), so the files the verbs write (`create`, `remove`, `bind`, `driver_override`…) are there in the
    copy too. Elsewhere (/proc/cmdline) only what was read is copied."""
    c = Collector(root, redactor)
    for host_path, what in sorted(touched.items()):
        c.add(host_path, what)
    for m in [m for m in c.members.values() if m.kind == "dir" and (m.path + "/").startswith("/sys/")]:
        c.entries(m.path)  # only under /sys: /proc's hundreds of entries are not what the verbs write
    return c
