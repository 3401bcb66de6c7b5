"""nvidia-smi: where it is, running it (bounded), and parsers for its text output. Tested on real H200 output
(tests/data/h200-passthrough-guest/nvidia-host.txt) and on the `vgpu -s -v` layout the driver prints.

Which binary: `<root>/usr/bin/nvidia-smi` when the root is not `/` and has one (a simulated or captured host brings
its own), else `$VGPUADM_NVIDIA_SMI`, else `nvidia-smi` on PATH.
"""

from __future__ import annotations

import os

from vgpuadm.host.root import NVIDIA_SMI, HostRoot

TIMEOUT = 20.0  # seconds; nvidia-smi waits on the driver, which can hang on a wedged GPU
MAX_OUTPUT = 4 << 20  # bytes of output believed


def locate(root: HostRoot) -> str | None:
    import shutil  # stdlib, but only hosts whose VFs need the driver's word pay for it

    if not root.is_host and root.has_executable(NVIDIA_SMI):
        return root.real(NVIDIA_SMI)
    return os.environ.get("VGPUADM_NVIDIA_SMI") or shutil.which("nvidia-smi")


def run(root: HostRoot, *args: str) -> str | None:
    """nvidia-smi's standard output, or None when it is missing, fails or times out (callers then know less)."""
    import subprocess  # see locate()

    binary = locate(root)
    if binary is None:
        return None
    try:
        proc = subprocess.run(
            [binary, *args], capture_output=True, timeout=TIMEOUT, check=False, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    return proc.stdout[:MAX_OUTPUT].decode("utf-8", "replace")


def _pci_address(text: str) -> str | None:
    """`00000000:18:00.0` (nvidia-smi's 8-digit domain) → `0000:18:00.0`, else None."""
    parts = text.strip().split(":")
    if len(parts) != 3 or "." not in parts[2]:
        return None
    bus_slot, function = parts[2].split(".", 1)
    try:
        return f"{int(parts[0], 16):04x}:{int(parts[1], 16):02x}:{int(bus_slot, 16):02x}.{int(function)}"
    except ValueError:
        return None


def parse_supported_types(text: str) -> dict[str, tuple[tuple[int, str], ...]]:
    """`nvidia-smi vgpu -s -v`: PCI address (0000:18:00.0) → every (type id, name) the GPU supports."""
    out: dict[str, list[tuple[int, str]]] = {}
    gpu: list[tuple[int, str]] | None = None
    type_id: int | None = None
    for line in text.splitlines():
        if line.startswith("GPU "):
            address = _pci_address(line[4:])
            gpu = out.setdefault(address, []) if address else None
            type_id = None
            continue
        key, colon, value = line.partition(":")
        if not colon or gpu is None:
            continue
        key, value = key.strip(), value.strip()
        if key == "vGPU Type ID":
            try:
                type_id = int(value, 0)
            except ValueError:
                type_id = None
        elif key == "Name" and type_id is not None:
            gpu.append((type_id, value))
            type_id = None
    return {k: tuple(v) for k, v in out.items()}
