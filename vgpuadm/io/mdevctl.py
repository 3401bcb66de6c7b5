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
import tempfile
from dataclasses import dataclass

from vgpuadm.errors import HostIOError, UsageError

CONFIG_DIR = "/etc/mdevctl.d"
PARAMS_ATTR = "nvidia/vgpu_params"
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


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
    attrs = ((PARAMS_ATTR, params),) if params else ()
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
            if not _UUID.match(name):
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
    """Write one definition atomically (temp file, fsync, rename). False when the file already says the same."""
    path = _real(root, d.host_path)
    text = render(d)
    try:
        with open(path, encoding="utf-8") as f:
            if f.read() == text:
                return False
    except OSError:
        pass
    try:
        os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".vgpuadm-")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
    except OSError as exc:
        raise HostIOError(
            f"writing {d.host_path} failed: {exc.strerror}",
            "run as root, or point --root at a writable host root",
            path=d.host_path,
            errno=exc.errno,
        ) from None
    return True


def remove_definition(root: str, d: Definition) -> bool:
    path = _real(root, d.host_path)
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise HostIOError(f"removing {d.host_path} failed: {exc.strerror}", path=d.host_path, errno=exc.errno) from None
    with contextlib.suppress(OSError):  # tidy the parent dir only when it is empty
        os.rmdir(os.path.dirname(path))
    return True
