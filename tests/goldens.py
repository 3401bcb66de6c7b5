"""The one golden-file helper: a test compares its output with a reviewed file; `VGPUADM_UPDATE_GOLDENS=1` rewrites
the files instead (review the change with `git diff tests/golden`)."""

from __future__ import annotations

import os
from pathlib import Path

UPDATE = os.environ.get("VGPUADM_UPDATE_GOLDENS") == "1"


def golden(path: Path, actual: str) -> str:
    """The golden text at `path` to compare `actual` with; with VGPUADM_UPDATE_GOLDENS=1, `actual` is written first."""
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(actual)
    assert path.exists(), f"no golden file {path}: run with VGPUADM_UPDATE_GOLDENS=1 and review the diff"
    return path.read_text()
