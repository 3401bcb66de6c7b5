"""tree_state(root): the kernel-visible state of a simulated host as a plain dict, for exact comparisons
(byte-identical rollback, remove undoing create, reboot).

{relpath: ("file", bytes) | ("link", target) | ("dir",)} over `sys/` and `dev/`; the simulator's own files (the
marker with its faults, the lock, temp files) are not kernel state and are left out.
"""

from __future__ import annotations

import os

Entry = tuple[str] | tuple[str, bytes] | tuple[str, str]


def tree_state(root: str | os.PathLike[str], subdirs: tuple[str, ...] = ("sys", "dev")) -> dict[str, Entry]:
    root = os.fspath(root)
    out: dict[str, Entry] = {}
    for sub in subdirs:
        top = os.path.join(root, sub)
        if not os.path.isdir(top):
            continue
        out[sub] = ("dir",)
        for dirpath, dirnames, filenames in os.walk(top):
            for name in dirnames + filenames:
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                if os.path.islink(path):
                    out[rel] = ("link", os.readlink(path))
                elif os.path.isdir(path):
                    out[rel] = ("dir",)
                else:
                    with open(path, "rb") as f:
                        out[rel] = ("file", f.read())
    return dict(sorted(out.items()))


def diff(before: dict[str, Entry], after: dict[str, Entry]) -> dict[str, tuple[Entry | None, Entry | None]]:
    """{relpath: (before, after)} for every entry that differs; {} when the trees are identical."""
    keys = sorted(set(before) | set(after))
    return {k: (before.get(k), after.get(k)) for k in keys if before.get(k) != after.get(k)}
