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
from dataclasses import dataclass

from vgpuadm.errors import HostIOError, UsageError
from vgpuadm.host.files import read_nofollow, write_atomic
from vgpuadm.host.root import MDEVCTL_DIR
from vgpuadm.model import PCI_PATTERN, UUID_PATTERN
from vgpuadm.modes.base import join_params, split_params

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


def _real(root: str, host_path: str) -> str:
    return os.path.join(root, host_path.lstrip("/"))


def definition_file(root: str, parent: str, uuid: str) -> str:
    """The real path of <root>/etc/mdevctl.d/<parent>/<uuid>, checked before any path is built: `parent` is a PCI
    address (or a plain device name such as mtty), `uuid` a lower-case UUID, and the path resolves under
    <root>/etc/mdevctl.d (a symlinked parent directory or file pointing out is refused)."""
    where = f"{CONFIG_DIR}/{parent}/{uuid}"
    if not (_PCI.fullmatch(parent) or _DEVICE_NAME.fullmatch(parent)) or ".." in parent:
        raise UsageError(f"mdevctl definition parent {parent!r} is not a PCI address", "use DDDD:BB:DD.F")
    if not _UUID.fullmatch(uuid):
        raise UsageError(f"mdevctl definition UUID {uuid!r} is not a UUID", "use the lower-case 8-4-4-4-12 form")
    base = _real(root, CONFIG_DIR)
    path = os.path.join(base, parent, uuid)
    real_base = os.path.realpath(base)
    for p in (os.path.dirname(path), path):
        if os.path.islink(p) or not os.path.realpath(p).startswith(real_base + os.sep):
            raise HostIOError(
                f"refusing to write {where}: {p[len(root.rstrip('/')) :] or p} is a symlink or leaves {CONFIG_DIR}",
                "remove the symlink; mdevctl definitions are plain files in plain directories",
                path=where,
            )
    return path


def read_file(root: str, parent: str, uuid: str) -> str | None:
    """The current text of a definition file, None when there is none."""
    try:
        return read_nofollow(definition_file(root, parent, uuid))
    except OSError as exc:
        where = f"{CONFIG_DIR}/{parent}/{uuid}"
        raise HostIOError(f"reading {where} failed: {exc.strerror}", path=where, errno=exc.errno) from None


def write_file(root: str, parent: str, uuid: str, text: str) -> None:
    """Write a definition file atomically: a temp file (O_CREAT|O_EXCL|O_NOFOLLOW) in its directory, fsync,
    rename, directory fsync. 0644 like mdevctl's own files; a created parent directory is 0755."""
    path = definition_file(root, parent, uuid)
    where = f"{CONFIG_DIR}/{parent}/{uuid}"
    try:
        if not os.path.isdir(os.path.dirname(path)):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            os.chmod(os.path.dirname(path), 0o755)
            definition_file(root, parent, uuid)  # re-check: nothing was swapped in while creating it
        write_atomic(path, text)
    except OSError as exc:
        raise HostIOError(
            f"writing {where} failed: {exc.strerror}",
            "run as root, or point --root at a writable host root",
            path=where,
            errno=exc.errno,
        ) from None


def remove_file(root: str, parent: str, uuid: str) -> bool:
    """Remove a definition file (and its parent directory when that is left empty); False when there was none."""
    path = definition_file(root, parent, uuid)
    where = f"{CONFIG_DIR}/{parent}/{uuid}"
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise HostIOError(f"removing {where} failed: {exc.strerror}", path=where, errno=exc.errno) from None
    with contextlib.suppress(OSError):  # tidy the parent dir only when it is empty
        os.rmdir(os.path.dirname(path))
    return True


def read_definitions(root: str) -> list[Definition]:
    """Every definition under <root>/etc/mdevctl.d, sorted by parent then UUID. Non-UUID file names (mdevctl's
    own scripts.d directory, editor backups) are not definitions and are skipped, as mdevctl does."""
    base = _real(root, CONFIG_DIR)
    out: list[Definition] = []
    for parent in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        pdir = os.path.join(base, parent)
        if parent == "scripts.d" or not os.path.isdir(pdir):
            continue
        for name in sorted(os.listdir(pdir)):
            if not _UUID.fullmatch(name):
                continue
            where = f"{CONFIG_DIR}/{parent}/{name}"
            try:
                with open(os.path.join(pdir, name), encoding="utf-8") as f:
                    text = f.read()
            except OSError as exc:
                raise HostIOError(f"reading {where} failed: {exc.strerror}", path=where, errno=exc.errno) from None
            out.append(parse(text, parent, name, where))
    return out


def write_definition(root: str, d: Definition) -> bool:
    """Write one definition atomically (see write_file). False when the file already says the same. Commands go
    through the WriteMdevctlDefinition step instead (lock, journal, undo)."""
    text = render(d)
    if read_file(root, d.parent, d.uuid) == text:
        return False
    write_file(root, d.parent, d.uuid, text)
    return True


def remove_definition(root: str, d: Definition) -> bool:
    return remove_file(root, d.parent, d.uuid)
