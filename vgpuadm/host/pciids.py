"""GPU model names ("Tesla P4") from the PCI ID database, pci.ids: under the host root first (a simulated or
imported host ships its own), then this system's. The file is untrusted input: read bounded, only the vendors
asked for are parsed, and names are kept printable and short."""

from __future__ import annotations

import os
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
        text = _read(path)
        if text is not None:
            return _parse(text, ids)
    return {}


def _read(path: str) -> str | None:
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
    return data[:MAX_PCI_IDS].decode("utf-8", "replace")


def _parse(text: str, ids: set[tuple[str, str]]) -> dict[tuple[str, str], str]:
    wanted: dict[str, set[str]] = {}
    for vendor_id, device_id in ids:
        wanted.setdefault(vendor_id.lower().removeprefix("0x"), set()).add(device_id.lower().removeprefix("0x"))
    out: dict[tuple[str, str], str] = {}
    vendor: str | None = None
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        if line[0] != "\t":
            if line.startswith("C "):  # the device class list at the end: no vendors after it
                break
            vendor = line[:4].lower() if line[:4].lower() in wanted else None
            continue
        if vendor is None or line.startswith("\t\t"):
            continue
        device, _, name = line[1:].partition("  ")
        if device.lower() in wanted[vendor]:
            out[(f"0x{vendor}", f"0x{device.lower()}")] = _clean(name)
    return {k: v for k, v in out.items() if v}


def _clean(name: str) -> str:
    name = name.strip()
    if "[" in name and name.endswith("]"):
        name = name[name.rindex("[") + 1 : -1]
    name = "".join(c if c.isprintable() else "?" for c in name).strip()
    return name if len(name) <= MAX_NAME else name[: MAX_NAME - 1] + "…"
