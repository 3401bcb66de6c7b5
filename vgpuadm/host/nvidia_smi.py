"""nvidia-smi: where it is and running it (bounded). The one module that starts nvidia-smi; its outputs are parsed
by host/nvidia_smi_mig.py (`mig -lgip/-lgipp/-lgi/-lci/-lcip`) and host/nvidia_smi_vgpu.py (`vgpu -s/-c/-q`, `-q -x`).

Which binary: `<root>/usr/bin/nvidia-smi` when the root is not `/` and has one (a simulated or captured host brings
its own), else `$VGPUADM_NVIDIA_SMI`, else `nvidia-smi` on PATH.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from vgpuadm.errors import HostIOError, NotFoundError
from vgpuadm.host.nvidia_smi_vgpu import parse_type_blocks
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


def require(root: HostRoot, why: str) -> str:
    """The binary, or a one-line error saying where it was looked for (a host whose GPUs need it)."""
    binary = locate(root)
    if binary is None:
        raise NotFoundError(
            f"nvidia-smi not found; it is needed to {why}",
            "install NVIDIA's vGPU host driver package (it brings nvidia-smi), or set VGPUADM_NVIDIA_SMI to its path",
        )
    return binary


@dataclass(frozen=True)
class Result:
    """One finished nvidia-smi run: exit status and its (bounded, decoded) output."""

    returncode: int
    stdout: str
    stderr: str

    def message(self) -> str:
        """The first non-empty line nvidia-smi printed, for an error message."""
        for line in (self.stderr + "\n" + self.stdout).splitlines():
            if line.strip():
                return line.strip()[:200]
        return f"exit status {self.returncode}"


def invoke(root: HostRoot, args: list[str], why: str) -> Result:
    """Run nvidia-smi with `args` (a changing command: the executor calls this); errors are one line."""
    import subprocess  # see locate()

    binary = require(root, why)
    try:
        proc = subprocess.run(
            [binary, *args], capture_output=True, timeout=TIMEOUT, check=False, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired as exc:
        raise HostIOError(f"nvidia-smi {' '.join(args)} did not answer in {TIMEOUT:.0f} s",
                          "check the GPU with `nvidia-smi -q`; a wedged GPU needs a reset") from exc  # fmt: skip
    except OSError as exc:
        raise HostIOError(f"cannot run {binary}: {exc.strerror}", "check VGPUADM_NVIDIA_SMI / PATH") from exc
    return Result(proc.returncode, proc.stdout[:MAX_OUTPUT].decode("utf-8", "replace"),
                  proc.stderr[:MAX_OUTPUT].decode("utf-8", "replace"))  # fmt: skip


def parse_supported_types(text: str) -> dict[str, tuple[tuple[int, str], ...]]:
    """`nvidia-smi vgpu -s -v`: PCI address (0000:18:00.0) → every (type id, name) the GPU supports."""
    return {addr: tuple((t.type_id, t.name) for t in types) for addr, types in parse_type_blocks(text).items()}
