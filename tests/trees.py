"""What a test reads of a simulated host tree to prove it was not written: every entry under one GPU's device
directory with its bytes (or link target), inode and mtime, so that any write, replace or re-creation shows."""

from __future__ import annotations

import os
from pathlib import Path


def written(root: Path, pf: str) -> dict[str, tuple[bytes | str, int, int]]:
    """Every entry under the GPU `pf`'s device directory: bytes (or link target), inode, mtime — a write changes one."""
    top = (root / "sys/bus/pci/devices" / pf).resolve()
    out: dict[str, tuple[bytes | str, int, int]] = {}
    for dirpath, dirnames, filenames in os.walk(top):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            body: bytes | str = (os.readlink(path) if os.path.islink(path) else "dir" if os.path.isdir(path)
                                 else Path(path).read_bytes())  # fmt: skip
            out[os.path.relpath(path, top)] = (body, st.st_ino, st.st_mtime_ns)
    return out
