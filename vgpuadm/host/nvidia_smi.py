"""nvidia-smi: where it is and running it (bounded). The one module that starts nvidia-smi; its outputs are parsed
by host/nvidia_smi_mig.py (`mig -lgip/-lgipp/-lgi/-lci/-lcip`) and host/nvidia_smi_vgpu.py (`vgpu -s/-c/-q`, `-q -x`).

Which binary: `<root>/usr/bin/nvidia-smi` when the root is not `/` and has one (a simulated or captured host brings
its own), else `$VGPUADM_NVIDIA_SMI`, else `nvidia-smi` on PATH.
"""

from __future__ import annotations

import os

from vgpuadm.errors import HostIOError, NotFoundError
from vgpuadm.host.root import NVIDIA_SMI, HostRoot

TIMEOUT = 20.0  # seconds; nvidia-smi waits on the driver, which can hang on a wedged GPU
MAX_OUTPUT = 4 << 20  # bytes of output believed

# Every nvidia-smi call that reads (discovery, the read commands, planning). They go through `run` or `read`,
# which accept only these, and `vgpuadm snapshot` records each one (ops/snapshot.py), so a captured host replays
# every read: a new read is added here or it cannot run.
VGPU_SUPPORTED = ("vgpu", "-s", "-v")
QUERY = ("-q",)
QUERY_XML = ("-q", "-x")
VGPU_QUERY = ("vgpu", "-q")
VGPU_SCHEDULER = ("vgpu", "-ss")
MIG_GI_PROFILES = ("mig", "-lgip")
MIG_GI_PLACEMENTS = ("mig", "-lgipp")
MIG_GPU_INSTANCES = ("mig", "-lgi")
READS = (VGPU_SUPPORTED, QUERY, QUERY_XML, VGPU_QUERY, VGPU_SCHEDULER, MIG_GI_PROFILES, MIG_GI_PLACEMENTS,
         MIG_GPU_INSTANCES)  # fmt: skip
# Live figures (the exporter's): read like the others, never captured (a snapshot's would be stale at once).
GPU_USAGE = ("--query-gpu=pci.bus_id,utilization.gpu,utilization.memory,memory.used,memory.total,mig.mode.current",
             "--format=csv")  # fmt: skip
LIVE_READS = (GPU_USAGE,)


def _check_read(args: tuple[str, ...]) -> None:
    if args not in READS and args not in LIVE_READS:
        raise ValueError(f"nvidia-smi {' '.join(args)} is not in host/nvidia_smi.READS (a snapshot would miss it)")


def locate(root: HostRoot) -> str | None:
    import shutil  # stdlib, but only hosts whose VFs need the driver's word pay for it

    own = None if root.is_host else root.executable(NVIDIA_SMI)
    if own is not None:
        return own
    return os.environ.get("VGPUADM_NVIDIA_SMI") or shutil.which("nvidia-smi")


def run(root: HostRoot, *args: str) -> str | None:
    """nvidia-smi's standard output, or None when it is missing, fails or times out (callers then know less).
    `args`: one of READS."""
    import subprocess  # see locate()

    _check_read(args)
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


class Result:
    """One finished nvidia-smi run: exit status and its (bounded, decoded) output. (A plain class: this module is
    on the read commands' fast path, which never loads dataclasses.)"""

    __slots__ = ("returncode", "stderr", "stdout")

    def __init__(self, returncode: int, stdout: str, stderr: str) -> None:
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr

    def message(self) -> str:
        """The first non-empty line nvidia-smi printed, for an error message."""
        for line in (self.stderr + "\n" + self.stdout).splitlines():
            if line.strip():
                return line.strip()[:200]
        return f"exit status {self.returncode}"


def read(root: HostRoot, args: tuple[str, ...], why: str) -> Result:
    """A read (one of READS) whose failure the caller reports: `invoke`'s answer."""
    _check_read(args)
    return invoke(root, list(args), why)


def capture(root: HostRoot, args: tuple[str, ...]) -> Result | None:
    """A read (one of READS) as `vgpuadm snapshot` records it: exit status, output and errors; None when there is
    no nvidia-smi or it does not answer."""
    try:
        return read(root, args, "capture the host")
    except (HostIOError, NotFoundError):
        return None


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


def type_blocks(text: str) -> dict[str, list[dict[str, str]]]:
    """`nvidia-smi vgpu -s -v` / `vgpu -c -v`: PCI address → the key/value block of each `vGPU Type ID`, in the
    order printed (a key's first value). host/nvidia_smi_vgpu.py types them; discovery needs only id and name."""
    out: dict[str, list[dict[str, str]]] = {}
    gpu: list[dict[str, str]] | None = None
    block: dict[str, str] | None = None
    for line in text.splitlines():
        if line.startswith("GPU "):
            address = pci_address(line[4:])
            gpu, block = (out.setdefault(address, []) if address else None), None
            continue
        key, colon, value = line.partition(":")
        if not colon or gpu is None:
            continue
        key, value = key.strip(), value.strip()
        if key == "vGPU Type ID":
            block = {}
            gpu.append(block)
        if block is not None:
            block.setdefault(key, value)
    return out


def parse_supported_types(text: str) -> dict[str, tuple[tuple[int, str], ...]]:
    """`nvidia-smi vgpu -s -v`: PCI address (0000:18:00.0) → every (type id, name) the GPU supports."""
    out: dict[str, tuple[tuple[int, str], ...]] = {}
    for address, blocks in type_blocks(text).items():
        found = []
        for block in blocks:
            type_id = leading_int(block["vGPU Type ID"], 0)
            if type_id is not None and block.get("Name"):
                found.append((type_id, block["Name"]))
        out[address] = tuple(found)
    return out


def leading_int(value: str, base: int = 10) -> int | None:
    """The number a report's value starts with (`0x586 (1414)` with base 0, `18176 MiB`), else None."""
    try:
        return int(value.split()[0], base)
    except (ValueError, IndexError):
        return None


_HEX = frozenset("0123456789abcdefABCDEF")


def pci_address(text: str) -> str | None:
    """`00000000:18:00.0` (nvidia-smi's 8-digit domain) → `0000:18:00.0`, else None."""
    parts = text.strip().split(":")
    if len(parts) != 3 or "." not in parts[2]:
        return None
    bus_slot, function = parts[2].split(".", 1)
    if not all(p and set(p) <= _HEX for p in (parts[0], parts[1], bus_slot)) or not function.isdigit():
        return None  # int() would take a sign, `_` or spaces: -100000000:01:00.0 was "-100000000:01:00.0"
    try:
        domain, bus, slot, fn = int(parts[0], 16), int(parts[1], 16), int(bus_slot, 16), int(function)
    except ValueError:
        return None
    if domain > 0xFFFF or bus > 0xFF or slot > 0x1F or fn > 7:
        return None
    return f"{domain:04x}:{bus:02x}:{slot:02x}.{fn}"
