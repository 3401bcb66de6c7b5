"""virsh against the libvirtd of the lane's guest (tests/kernel/guest), for the guest suite's fixtures and tests."""

from __future__ import annotations

import subprocess

URI = "qemu:///system"


def virsh(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["virsh", "-c", URI, *args], capture_output=True, text=True, timeout=900)
    if check:
        assert result.returncode == 0, f"virsh {' '.join(args)}: {result.stderr.strip()}"
    return result
