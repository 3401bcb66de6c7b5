"""The campaign drives the real CLI against the root's embedded libvirt through tests/libvirt/embedded_host.py."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "libvirt"))
