"""`vgpuadm doctor`: read what the checks need from one host root (any root: this host, a simulated or an imported
one), without the lock and without changing anything, and run the pure checks of report/doctor.py.

Which tools count: nvidia-smi and sriov-manage as the verbs find them (the root's own on a simulated or captured
root). QEMU and mdevctl are the ones libvirt and udev run: this machine's on `/` and on a simulated root (libvirt's
embedded driver runs this machine's QEMU), the root's own on any other root.
"""

from __future__ import annotations

import os
import shutil

from vgpuadm import modes
from vgpuadm.errors import VgpuadmError
from vgpuadm.executor import load_drivers, pending_summary, read_journal
from vgpuadm.host import nvidia_smi
from vgpuadm.host.paths import PROC_CMDLINE
from vgpuadm.host.root import SRIOV_MANAGE, HostRoot
from vgpuadm.host.sysfs import check_root
from vgpuadm.model import HostSnapshot
from vgpuadm.ops.restore import drift_of
from vgpuadm.ops.session import Session
from vgpuadm.plan.domains import Domains, missing_recorded
from vgpuadm.plan.reconcile import find_leaks
from vgpuadm.plan.restore import DEVICE_PHASES
from vgpuadm.report.doctor import Check, HostFacts, run_checks

QEMU = ("/usr/bin/qemu-system-x86_64", "/usr/libexec/qemu-kvm", "/usr/bin/qemu-kvm", "/usr/bin/kvm")
MDEVCTL = ("/usr/sbin/mdevctl", "/usr/bin/mdevctl")
MAX_CMDLINE = 4096  # the kernel's COMMAND_LINE_SIZE on x86 is 2048; anything longer is not a command line


def _machine_tool(root: HostRoot, candidates: tuple[str, ...]) -> str | None:
    own = root.is_host or root.simulated
    for host_path in candidates:
        if os.access(host_path, os.X_OK) if own else root.has_executable(host_path):
            return host_path
    if own:
        found = shutil.which(os.path.basename(candidates[0]))
        return found
    return None


def _tools(root: HostRoot) -> dict[str, str | None]:
    smi = nvidia_smi.locate(root)
    return {
        "sriov-manage": SRIOV_MANAGE if root.has_executable(SRIOV_MANAGE) else None,
        "nvidia-smi": (("/" + os.path.relpath(smi, root.path)) if smi and smi.startswith(root.path + "/") else smi),
        "qemu": _machine_tool(root, QEMU),
        "mdevctl": _machine_tool(root, MDEVCTL),
    }


def facts(root: str | None, connect: str | None = None) -> HostFacts:
    """Everything the checks judge, read once."""
    with Session.read(root, connect) as s:
        check_root(s.root.path)
        sysfs = s.sysfs
        snap = s.snap
        cmdline = s.root.read_small(PROC_CMDLINE, MAX_CMDLINE)  # not sysfs: only <root>/sys is kernel-file reading
        modules = frozenset(sysfs.listdir("/sys/module")) if sysfs.is_dir("/sys/module") else None
        journal = journal_error = None
        try:
            doc = read_journal(s.root.path)
        except VgpuadmError as exc:
            journal_error = exc.message
        else:
            if doc is not None:
                journal = pending_summary(doc)
        version = error = hint = leaks = missing = claimed = drift = None
        unrecorded: tuple[tuple[str, str], ...] = ()
        uses_ramfb = False
        try:
            version = s.virt.lib_version()
            doms = s.domains()
            uses_ramfb = any("ramfb='on'" in x or 'ramfb="on"' in x for x in doms.xml.values())
            leaks = tuple(
                (lk.kind, lk.id, lk.detail) for lk in find_leaks(snap, doms.owned(), load_drivers(s.root.path))
            )
            missing = tuple((a.domain, modes.describe(a)) for a in missing_recorded(snap, doms))
            claimed = tuple((key, tuple(names)) for (_, key), names in sorted(doms.claims().items()) if len(names) > 1)
            unrecorded = _unrecorded(snap, doms)
            drift = tuple(x for x in drift_of(s, doms).drift if x.split(":", 1)[0] not in DEVICE_PHASES)
        except VgpuadmError as exc:  # also LibvirtMissingError: no libvirt-python
            error, hint = exc.message, exc.hint
        return HostFacts(
            snap=snap,
            iommu_group_count=len(sysfs.listdir("/sys/kernel/iommu_groups")),
            cmdline=cmdline,
            modules=modules,
            pci_drivers=frozenset(sysfs.listdir("/sys/bus/pci/drivers")),
            tools=_tools(s.root),
            libvirt_uri=s.uri,
            libvirt_version=version,
            libvirt_error=error,
            libvirt_hint=hint,
            uses_ramfb=uses_ramfb,
            journal=journal,
            journal_error=journal_error,
            leaks=leaks,
            missing=missing,
            claimed_twice=claimed,
            unrecorded=unrecorded,
            drift=drift,
        )


def _unrecorded(snap: HostSnapshot, doms: Domains) -> tuple[tuple[str, str], ...]:
    """(domain, "mdev U") for each device a domain's XML gives it that no domain's metadata records and that
    `vgpuadm adopt` could record (a vGPU or GPU function of this host: not a NIC passed through by hand)."""
    bare = doms.unrecorded()
    return tuple(
        (name, f"{ref.kind} {ref.key}")
        for name, d in sorted(doms.by_name.items())
        for ref in dict.fromkeys(d.hostdevs)
        if (ref.kind, ref.key) in bare and modes.adopt(snap, ref, name, d.uuid, 0) is not None
    )


def doctor(root: str | None, connect: str | None = None) -> tuple[HostFacts, list[Check]]:
    f = facts(root, connect)
    return f, run_checks(f)
