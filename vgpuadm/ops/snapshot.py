"""`vgpuadm snapshot OUT.tar.gz` and `vgpuadm sim import ARCHIVE DIR`.

The snapshot runs discovery on a recording Sysfs (host/capture.py) and archives exactly what it read, plus what
`doctor` looks at (the kernel command line, the module, driver and IOMMU group lists), the redacted machine-id,
nvidia-smi's outputs where it is present (UUIDs and serials redacted), the pci.ids entries of the GPUs' model
names, and — from a simulated host — its marker,
so the import is a simulated host again. `sim import` extracts such an archive safely (io/snapshot_archive.py) or
turns a `umockdev-record` file into a root (host/umockdev.py).

An imported simulated host has the simulated kernel and tools (writes behave as on the original); a snapshot of a
real host becomes a root every read command and `doctor` can read, whose nvidia-smi replays the captured outputs.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from vgpuadm.errors import UsageError
from vgpuadm.host import nvidia_smi
from vgpuadm.host.capture import RecordingSysfs, Redactor, record, redact_machine_id
from vgpuadm.host.discover import snapshot
from vgpuadm.host.inputs import read_head
from vgpuadm.host.paths import PCI_IDS
from vgpuadm.host.root import MACHINE_ID, NVIDIA_SMI, HostRoot, read_beneath, undo_fill, write_beneath
from vgpuadm.host.sysfs import SIM_MARKER, check_root
from vgpuadm.host.umockdev import load as load_umockdev
from vgpuadm.io import snapshot_archive
from vgpuadm.sim.profiles import install_tools

FORMAT = 1
MACHINE_ID_NOTE = "not the id: the first 32 hex digits of a salted sha256 of it (stable per host)"
MANIFEST = "/vgpuadm-snapshot/manifest.json"
SMI_DIR = "/vgpuadm-snapshot/nvidia-smi"
# nvidia-smi runs captured: file name → arguments — every read the tool makes (host/nvidia_smi.READS), so that
# a captured host answers discovery, `mig status|profiles|instances`, the inventory's MIG section and the policies.
# `<name>.txt` holds the output; `<name>.stderr` and `<name>.status` the errors and exit status when it failed.
SMI_RUNS = {"-".join(a.lstrip("-") for a in args) + ".txt": args for args in nvidia_smi.READS}
# What `doctor` reads beyond discovery, so that it can judge an imported host too.
DOCTOR_READS = {"/proc/cmdline": "read", "/sys/module": "list", "/sys/bus/pci/drivers": "list",
                "/sys/kernel/iommu_groups": "list"}  # fmt: skip


@dataclass(frozen=True)
class SnapshotResult:
    path: str
    members: int
    simulated: bool
    nvidia_smi: tuple[str, ...]  # the runs captured
    redacted_uuids: int

    def to_json(self) -> dict[str, object]:
        return {"path": self.path, "members": self.members, "simulated": self.simulated,
                "nvidia_smi": list(self.nvidia_smi), "redacted_uuids": self.redacted_uuids}  # fmt: skip


def take(root: str | None, out: str) -> SnapshotResult:
    """Capture what discovery reads on `root` into the archive `out`."""
    where = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(where):
        raise UsageError(
            f"{out}: directory {where} does not exist", "create it, or name the archive in an existing one"
        )
    host = HostRoot(root)
    check_root(host.path)
    if not out.endswith((".tar.gz", ".tgz")):
        raise UsageError(f"{out}: a snapshot is a .tar.gz", "name the output like host.tar.gz")
    rec = RecordingSysfs(host.path)
    snap = snapshot(rec, names=True)
    for path, what in DOCTOR_READS.items():
        rec.touched.setdefault(path, what)
    redactor = Redactor()
    c = record(host.path, rec.touched, redactor)
    machine_id = host.read_small(MACHINE_ID)  # never through a link, never a FIFO: a snapshot must not hang
    if machine_id is not None:
        c.add_text(MACHINE_ID, redact_machine_id(machine_id))
    if host.simulated:
        c.add("/" + SIM_MARKER, "read")
    models = {(fn.vendor_id, fn.device_id): snap.models[a] for a, fn in snap.functions.items() if a in snap.models}
    if models:
        c.add_text(PCI_IDS[0], _pci_ids(models))
    runs = []
    for name, args in SMI_RUNS.items():
        result = nvidia_smi.capture(host, args)
        if result is None:
            continue
        c.add_text(f"{SMI_DIR}/{name}", redactor.text(result.stdout))
        if result.returncode:
            stem = name.removesuffix(".txt")
            c.add_text(f"{SMI_DIR}/{stem}.stderr", redactor.text(result.stderr))
            c.add_text(f"{SMI_DIR}/{stem}.status", f"{result.returncode & 0xFF}\n")
        runs.append(" ".join(args))
    manifest = {"format": FORMAT, "simulated": host.simulated, "nvidia_smi": runs,
                "redacted": {"gpu_uuids": len(redactor.uuids), "serial_numbers": True,
                             "machine_id": MACHINE_ID_NOTE}}  # fmt: skip
    c.add_text(MANIFEST, json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    count = snapshot_archive.write(out, c.members.values())
    return SnapshotResult(out, count, host.simulated, tuple(runs), len(redactor.uuids))


def _pci_ids(models: dict[tuple[str, str], str]) -> str:
    """The pci.ids entries discovery used (its model names), as a pci.ids of their own: not the whole database."""
    lines = ["# the pci.ids entries of this host's GPUs, captured by vgpuadm snapshot"]
    for vendor in sorted({v for v, _ in models}):
        lines.append(f"{vendor.removeprefix('0x')}  -")
        lines += [f"\t{d.removeprefix('0x')}  {name}" for (v, d), name in sorted(models.items()) if v == vendor]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class ImportResult:
    kind: str  # snapshot | umockdev
    directory: str
    simulated: bool
    files: int

    def line(self) -> str:
        what = "simulated host" if self.simulated else "captured host (read commands and doctor; writes stay files)"
        return f"imported a {self.kind} ({self.files} files) into {self.directory} as a {what} (use --root {self.directory})"


_REPLAY = """#!/bin/sh
# nvidia-smi of a captured host (written by `vgpuadm sim import`): replays what `vgpuadm snapshot` recorded.
d=$(cd "$(dirname "$0")/../.." && pwd)/vgpuadm-snapshot/nvidia-smi
replay() {{
  cat "$d/$1.txt"
  [ -f "$d/$1.stderr" ] && cat "$d/$1.stderr" >&2
  [ -f "$d/$1.status" ] && exit "$(cat "$d/$1.status")"
  exit 0
}}
case "$*" in
{cases}esac
echo "nvidia-smi (captured host): nothing was recorded for: $*" >&2
exit 2
"""


def _install_replay(dest: str, runs: dict[str, str]) -> None:
    cases = "".join(f'  "{args}") replay "{name.removesuffix(".txt")}" ;;\n' for name, args in runs.items())
    write_beneath(dest, NVIDIA_SMI, _REPLAY.format(cases=cases).encode(), mode=0o755, sync=False)


def import_(source: str, dest: str) -> ImportResult:
    """A snapshot archive (gzip) or a umockdev-record file → a host root at `dest` (new or empty)."""
    magic = read_head(source, 2, "give a snapshot .tar.gz or a umockdev-record file")
    if magic != b"\x1f\x8b":
        loaded = load_umockdev(source, dest)
        return ImportResult("umockdev recording", dest, False, loaded.devices)
    made = not os.path.lexists(dest)
    extracted = snapshot_archive.extract(source, dest)
    try:  # the tools go by descriptor beneath `dest`: the archive's links never carry them outside it
        if extracted.model is not None:
            install_tools(dest, extracted.model)
        else:
            runs = {name: " ".join(args) for name, args in SMI_RUNS.items()
                    if _captured(dest, f"{SMI_DIR}/{name}")}  # fmt: skip
            if runs:
                _install_replay(dest, runs)
    except BaseException as exc:
        undo_fill(dest, made)
        if isinstance(exc, OSError):
            raise UsageError(f"{source}: {exc.strerror or exc}; nothing was written", snapshot_archive.HINT) from None
        raise
    return ImportResult("snapshot", dest, extracted.model is not None, extracted.files)


def _captured(top: str, rel: str) -> bool:
    """Whether `rel` is a regular file under `top`, reached through no link."""
    try:
        return read_beneath(top, rel, limit=0, truncate=True) is not None
    except OSError:
        return False
