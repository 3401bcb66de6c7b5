"""mdevctl interop: write and read persistent mdev definitions, `/etc/mdevctl.d/<parent>/<uuid>` under the host
root (reference §7). mdevctl's udev rule starts `"start": "auto"` definitions when their parent registers, so an
exported host gets its mdevs back at boot even without `vgpuadm restore`.

The file format is mdevctl's own: JSON with two-space indent and no trailing newline, keys in the order mdevctl
writes them (`mdev_type`, `start`, `attrs`); `attrs` is an ordered list of one-key objects written to the mdev's
sysfs after creation (`nvidia/vgpu_params` for NVIDIA parameters).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
from dataclasses import dataclass

from vgpuadm.errors import HostIOError, UsageError
from vgpuadm.host.root import (
    MDEVCTL_DIR,
    file_error,
    list_beneath,
    open_dir_beneath,
    read_beneath,
    remove_beneath,
    write_beneath,
)
from vgpuadm.model import PCI_PATTERN, UUID_PATTERN, join_params, split_params

CONFIG_DIR = MDEVCTL_DIR
PARAMS_ATTR = "nvidia/vgpu_params"
_UUID = re.compile(UUID_PATTERN)
_PCI = re.compile(PCI_PATTERN)
# A parent that is not a PCI function (mtty, mdpy, mbochs): one plain sysfs device name, never a path component
# that walks ("." or "..") or a hidden file.
_DEVICE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_:.-]*$")


@dataclass(frozen=True)
class Definition:
    parent: str
    uuid: str
    mdev_type: str
    start: str = "auto"  # auto | manual
    attrs: tuple[tuple[str, str], ...] = ()

    @property
    def host_path(self) -> str:
        return f"{CONFIG_DIR}/{self.parent}/{self.uuid}"

    @property
    def params(self) -> str | None:
        return next((v for k, v in self.attrs if k == PARAMS_ATTR), None)


def definition(parent: str, uuid: str, mdev_type: str, params: str | None = None, start: str = "auto") -> Definition:
    text = join_params(split_params(params))  # either form in, NVIDIA's `k=v, k=v` out (reference §2.5)
    attrs = ((PARAMS_ATTR, text),) if text else ()
    return Definition(parent=parent, uuid=uuid.lower(), mdev_type=mdev_type, start=start, attrs=attrs)


def render(d: Definition) -> str:
    """The file text exactly as mdevctl 1.2 writes it (serde_json pretty, no trailing newline)."""
    doc = {"mdev_type": d.mdev_type, "start": d.start, "attrs": [{k: v} for k, v in d.attrs]}
    return json.dumps(doc, indent=2)


def parse(text: str, parent: str, uuid: str, where: str) -> Definition:
    try:
        doc = json.loads(text)
        mdev_type = doc["mdev_type"]
        start = doc.get("start", "manual")
        attrs = tuple((str(k), str(v)) for item in doc.get("attrs", []) for k, v in item.items())
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise UsageError(
            f"{where} is not an mdevctl definition ({type(exc).__name__}: {exc})",
            "fix or remove the file; `mdevctl list --defined` shows what mdevctl reads",
        ) from None
    if start not in ("auto", "manual") or not isinstance(mdev_type, str):
        raise UsageError(f"{where}: start must be auto or manual, mdev_type a string", "fix or remove the file")
    return Definition(parent=parent, uuid=uuid, mdev_type=mdev_type, start=start, attrs=attrs)


def _check(parent: str, uuid: str) -> str:
    """`<parent>/<uuid>` under /etc/mdevctl.d, checked before any path is built: `parent` is a PCI address (or a
    plain device name such as mtty), `uuid` a lower-case UUID."""
    if not (_PCI.fullmatch(parent) or _DEVICE_NAME.fullmatch(parent)) or ".." in parent:
        raise UsageError(f"mdevctl definition parent {parent!r} is not a PCI address", "use DDDD:BB:DD.F")
    if not _UUID.fullmatch(uuid):
        raise UsageError(f"mdevctl definition UUID {uuid!r} is not a UUID", "use the lower-case 8-4-4-4-12 form")
    return f"{CONFIG_DIR}/{parent}/{uuid}"


def definition_file(root: str, parent: str, uuid: str) -> str:
    """The real path of <root>/etc/mdevctl.d/<parent>/<uuid> (grammar checked); files are only ever opened
    beneath the root through host/root.py, so no link at any component is followed."""
    return os.path.join(root, _check(parent, uuid).lstrip("/"))


def _failed(verb: str, where: str, exc: OSError | UnicodeDecodeError, hint: str = "") -> HostIOError:
    return file_error(verb, where, exc, hint, "remove it; mdevctl definitions are plain files in plain directories")


def read_file(root: str, parent: str, uuid: str) -> str | None:
    """The current text of a definition file, None when there is none."""
    where = _check(parent, uuid)
    try:
        data = read_beneath(root, where)
        return None if data is None else data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise _failed("read", where, exc) from None


def write_file(root: str, parent: str, uuid: str, text: str) -> None:
    """Write a definition file atomically (host/root.write_beneath: temp file, fsync, rename, directory fsync),
    0644 like mdevctl's own files; a created directory is 0755; no link at any component is written through."""
    where = _check(parent, uuid)
    try:
        write_beneath(root, where, text.encode("utf-8"), mode=0o644)
    except OSError as exc:
        raise _failed("write", where, exc, "run as root, or point --root at a writable host root") from None


def remove_file(root: str, parent: str, uuid: str) -> bool:
    """Remove a definition file (and its parent directory when that is left empty); False when there was none."""
    where = _check(parent, uuid)
    try:
        removed = remove_beneath(root, where)
    except OSError as exc:
        raise _failed("remove", where, exc) from None
    if removed:
        with contextlib.suppress(OSError):  # tidy the parent dir only when it is empty (rmdir never follows a link)
            dfd = open_dir_beneath(root, CONFIG_DIR)
            try:
                os.rmdir(parent, dir_fd=dfd)
            finally:
                os.close(dfd)
    return removed


def read_definitions(root: str) -> list[Definition]:
    """Every definition under <root>/etc/mdevctl.d, sorted by parent then UUID. Non-UUID file names (mdevctl's
    own scripts.d directory, editor backups) are not definitions and are skipped, as mdevctl does. A link, FIFO or
    device where a definition or its parent directory is refused (HostIOError), never followed or opened."""
    out: list[Definition] = []
    try:
        parents = list_beneath(root, CONFIG_DIR) or []
    except OSError as exc:
        raise _failed("read", CONFIG_DIR, exc) from None
    for parent, mode in parents:
        if parent == "scripts.d" or not (stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
            continue
        try:
            names = list_beneath(root, f"{CONFIG_DIR}/{parent}") or []
        except OSError as exc:
            raise _failed("read", f"{CONFIG_DIR}/{parent}", exc) from None
        for name, _ in names:
            if not _UUID.fullmatch(name):
                continue
            where = f"{CONFIG_DIR}/{parent}/{name}"
            try:
                data = read_beneath(root, where)
            except OSError as exc:
                raise _failed("read", where, exc) from None
            if data is not None:
                out.append(parse(data.decode("utf-8", "replace"), parent, name, where))
    return out


def write_definition(root: str, d: Definition) -> bool:
    """Write one definition atomically (see write_file). False when the file already says the same. Commands go
    through a managed-file step instead (steps.WriteManagedFile: lock, journal, undo)."""
    text = render(d)
    if read_file(root, d.parent, d.uuid) == text:
        return False
    write_file(root, d.parent, d.uuid, text)
    return True


def remove_definition(root: str, d: Definition) -> bool:
    return remove_file(root, d.parent, d.uuid)
