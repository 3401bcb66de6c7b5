"""GPU model names ("Tesla P4") from the PCI ID database, pci.ids: under the host root first (a simulated or
imported host ships its own), then this system's. The file is untrusted input: read bounded, only the vendors
asked for are parsed, and names are kept printable and short."""

from __future__ import annotations

import os
import re
import stat

from vgpuadm.host.paths import PCI_IDS
from vgpuadm.host.root import HostRoot

MAX_PCI_IDS = 16 * 1024 * 1024  # pci.ids is ~1.4 MB in 2024
MAX_NAME = 60


def model_names(root: str, ids: set[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """(vendor, device) as `0x10de`, `0x1bb3` → the model: the bracketed marketing name when the entry has one
    (`GP104GL [Tesla P4]` → `Tesla P4`), else the entry. Ids the database lacks are left out."""
    if not ids:
        return {}
    host = HostRoot(root)
    candidates = [host.real(p) for p in PCI_IDS]
    if not host.is_host:
        candidates += list(PCI_IDS)
    for path in candidates:
        data = _read(path)
        if data is not None:
            return _parse(data, ids)
    return {}


def _read(path: str) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(MAX_PCI_IDS + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    return data[:MAX_PCI_IDS]


def _parse(data: bytes, ids: set[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """Only the wanted vendors' sections are decoded and read (the NVIDIA one is ~1,500 of ~38,000 lines)."""
    wanted: dict[str, set[str]] = {}
    for vendor_id, device_id in ids:
        wanted.setdefault(vendor_id.lower().removeprefix("0x"), set()).add(device_id.lower().removeprefix("0x"))
    out: dict[tuple[str, str], str] = {}
    for vendor, devices in wanted.items():
        head = f"{vendor}  ".encode()
        start = -1 if data.startswith(head) else data.find(b"\n" + head)  # start + 1: the vendor line
        if len(vendor) != 4 or (start < 0 and not data.startswith(head)):
            continue
        end = len(data)
        for m in _NEXT_VENDOR.finditer(data, start + 1):
            end = m.start()
            break
        for line in data[start + 1 : end].decode("utf-8", "replace").splitlines()[1:]:
            if not line.startswith("\t") or line.startswith("\t\t"):
                continue
            device, _, name = line[1:].partition("  ")
            if device.lower() in devices:
                out[(f"0x{vendor}", f"0x{device.lower()}")] = _clean(name)
    return {k: v for k, v in out.items() if v}


_NEXT_VENDOR = re.compile(rb"\n(?=[0-9a-fA-FC])")  # a line that starts a vendor (or the class list: "C 00 …")


def _clean(name: str) -> str:
    name = name.strip()
    if "[" in name and name.endswith("]"):
        name = name[name.rindex("[") + 1 : -1]
    name = "".join(c if c.isprintable() else "?" for c in name).strip()
    return name if len(name) <= MAX_NAME else name[: MAX_NAME - 1] + "…"
