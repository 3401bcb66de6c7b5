"""`vgpuadm doctor`'s checks: pure functions from what was read about a host (`HostFacts`) to pass/warn/fail
results, each with a fix hint. ops/doctor.py gathers the facts; nothing here reads the host.

Statuses: `pass` (fine), `warn` (works, but a risk or a step an operator may still need), `fail` (something a
vgpuadm verb needs is missing or unsafe). The command exits 1 when any check fails.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vgpuadm import modes
from vgpuadm.model import HostSnapshot, Layout, PciFunction

PASS, WARN, FAIL = "pass", "warn", "fail"
NVIDIA = "0x10de"
# libvirt features vgpuadm writes, and the release that introduced each (shared/docs/vgpu-sysfs.md §6.5).
LIBVIRT_MDEV = (3, 2, 0)  # <hostdev type='mdev'>
LIBVIRT_RAMFB = (5, 10, 0)  # ramfb='on' (display: {ramfb: true} in a plan)
IOMMU_FLAGS = ("intel_iommu=on", "amd_iommu=on", "amd_iommu=force_isolation", "iommu=force")


@dataclass(frozen=True)
class Check:
    """One result: `check` is a stable id, `detail` says what was found, `hint` how to fix it (empty on pass)."""

    check: str
    status: str
    detail: str
    hint: str = ""

    def to_json(self) -> dict[str, str]:
        return {"check": self.check, "status": self.status, "detail": self.detail, "hint": self.hint}


@dataclass(frozen=True)
class HostFacts:
    """What ops/doctor.py read. None means "could not be read on this root" (a check then says so)."""

    snap: HostSnapshot
    iommu_group_count: int
    cmdline: str | None  # <root>/proc/cmdline
    modules: frozenset[str] | None  # names under <root>/sys/module; None when the root has no sys/module
    pci_drivers: frozenset[str]  # names under /sys/bus/pci/drivers
    tools: dict[str, str | None]  # tool → host path found, or None
    libvirt_uri: str
    libvirt_version: tuple[int, int, int] | None
    libvirt_error: str | None
    uses_ramfb: bool  # some domain of this host asks for ramfb
    journal: str | None  # the pending change's summary; None when there is none
    journal_error: str | None  # the journal exists but is unreadable/unsafe
    leaks: tuple[tuple[str, str, str], ...] | None  # (kind, id, detail); None when libvirt cannot say who owns what
    # (domain, device) the domains record that the host lacks; None when libvirt cannot say
    missing: tuple[tuple[str, str], ...] | None = None
    # (device id, the domains that all claim it) for a device more than one domain references
    claimed_twice: tuple[tuple[str, tuple[str, ...]], ...] | None = None
    # (domain, device) a domain's XML gives it that no vgpuadm metadata records and `vgpuadm adopt` could record
    unrecorded: tuple[tuple[str, str], ...] = ()
    # what differs from the record besides missing devices (`restore --check`'s lines: VFs, MIG mode and GPU
    # instances, host policies, vgpu_params after a GPU reset or a driver reload); None when libvirt cannot say
    drift: tuple[str, ...] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    libvirt_hint: str | None = None  # what to do about libvirt_error (no daemon, no permission, no libvirt-python)


def _version(v: tuple[int, int, int]) -> str:
    return ".".join(map(str, v))


def _gpus(snap: HostSnapshot) -> list[PciFunction]:
    """Physical display functions (VFs are judged through their PF)."""
    return [fn for fn in snap.functions.values() if fn.is_display and not fn.physfn]


def check_iommu(f: HostFacts) -> Check:
    cmd = f" (kernel command line: {' '.join(a for a in (f.cmdline or '').split() if 'iommu' in a) or 'no iommu flag'})"
    shown = cmd if f.cmdline is not None else ""
    if f.iommu_group_count:
        return Check("iommu", PASS, f"IOMMU on: {f.iommu_group_count} groups in /sys/kernel/iommu_groups{shown}")
    flags = [a for a in (f.cmdline or "").split() if a in IOMMU_FLAGS]
    hint = (
        "enable VT-d/AMD-Vi in the firmware; the kernel has the flag but made no groups"
        if flags
        else "add intel_iommu=on (Intel) or amd_iommu=on (AMD) to the kernel command line, enable VT-d/AMD-Vi in "
        "the firmware and reboot"
    )
    return Check("iommu", FAIL, f"IOMMU off: /sys/kernel/iommu_groups is empty{shown}", hint)


def check_vfio(f: HostFacts) -> Check:
    missing = []
    if "vfio-pci" not in f.pci_drivers:
        missing.append("vfio-pci (no /sys/bus/pci/drivers/vfio-pci)")
    if f.modules is not None and not ({"vfio_iommu_type1", "iommufd"} & f.modules):
        missing.append("vfio_iommu_type1 (no /sys/module/vfio_iommu_type1)")
    if missing:
        return Check("vfio", FAIL, f"VFIO missing: {', '.join(missing)}",
                     "modprobe vfio-pci vfio_iommu_type1 (and list them in /etc/modules-load.d/vfio.conf)")  # fmt: skip
    return Check(
        "vfio", PASS, "vfio-pci driver registered" + ("" if f.modules is None else ", vfio_iommu_type1 loaded")
    )


def check_vendor_drivers(f: HostFacts) -> list[Check]:
    """Per GPU: is the driver its layout needs bound, and does NVIDIA's vGPU manager publish types?"""
    if not _gpus(f.snap):
        return [Check("gpus", WARN, "no GPU found (no display-class PCI function under /sys/bus/pci/devices)",
                      "check the card is seated and seen: lspci -nn | grep -i -e vga -e 3d -e display")]  # fmt: skip
    out = []
    for fn in _gpus(f.snap):
        layout = f.snap.layouts.get(fn.address, Layout.PASSTHROUGH)
        name = f"driver {fn.address}"
        if fn.driver is None:
            out.append(Check(name, WARN, f"{fn.address} ({layout}) has no driver bound",
                             f"load its driver (modprobe nvidia for NVIDIA) or bind it: vgpuadm vfio bind {fn.address}"))  # fmt: skip
        elif modes.for_layout(layout).needs_vfs:
            out.append(Check(name, WARN, f"{fn.address} on {fn.driver}: SR-IOV capable, no VFs enabled "
                             f"(0/{fn.sriov_total_vfs})", f"vgpuadm sriov enable {fn.address}"))  # fmt: skip
        elif fn.vendor_id == NVIDIA and fn.driver == "nvidia" and modes.for_layout(layout).whole_gpu:
            out.append(Check(name, PASS, f"{fn.address} on nvidia: passthrough only (no vGPU types: those need "
                             "NVIDIA's vGPU host driver and its nvidia-vgpud/nvidia-vgpu-mgr services)"))  # fmt: skip
        else:
            out.append(Check(name, PASS, f"{fn.address} on {fn.driver}: {layout}"))
    return out


def _needs_sriov_manage(snap: HostSnapshot) -> bool:
    return any(fn.vendor_id == NVIDIA and fn.driver == "nvidia" and fn.sriov_total_vfs for fn in _gpus(snap))


def _needs_nvidia_smi(snap: HostSnapshot) -> bool:
    return any(layout.types_by_number for layout in snap.layouts.values())


def _has_nvidia(snap: HostSnapshot) -> bool:
    return any(fn.vendor_id == NVIDIA and fn.driver == "nvidia" for fn in _gpus(snap))


def check_tools(f: HostFacts) -> list[Check]:
    out = []
    needs = {
        "sriov-manage": (_needs_sriov_manage(f.snap), "NVIDIA SR-IOV GPUs enable their VFs through it",
                         "install NVIDIA's vGPU host driver (it ships /usr/lib/nvidia/sriov-manage)"),
        "nvidia-smi": (_needs_nvidia_smi(f.snap), "it names the types a full layout C GPU supports, and drives MIG",
                       "install NVIDIA's driver utilities (nvidia-smi)"),
        "qemu": (True, "libvirt runs guests with it", "apt-get install qemu-system-x86"),
        "mdevctl": (False, "keeps mdevs across reboots for hosts that rely on udev autostart",
                    "apt-get install mdevctl (optional: `vgpuadm restore` rebuilds mdevs without it)"),
    }  # fmt: skip
    for tool, (needed, why, hint) in needs.items():
        path = f.tools.get(tool)
        if path:
            out.append(Check(tool, PASS, f"{tool}: {path}"))
        elif needed:
            out.append(Check(tool, FAIL, f"{tool} not found ({why})", hint))
        elif tool == "mdevctl" or (tool == "nvidia-smi" and _has_nvidia(f.snap)):
            out.append(Check(tool, WARN, f"{tool} not found ({why})", hint))
        else:
            out.append(Check(tool, PASS, f"{tool} not found (not needed on this host)"))
    return out


def check_libvirt(f: HostFacts) -> Check:
    if f.libvirt_version is None:
        return Check("libvirt", FAIL, f"libvirt at {f.libvirt_uri} is unreachable: {f.libvirt_error}",
                     f.libvirt_hint or "start libvirtd (systemctl start libvirtd) or pass --connect URI")  # fmt: skip
    have = f.libvirt_version
    has_mdev = bool(f.snap.mdev_parents)
    if has_mdev and have < LIBVIRT_MDEV:
        return Check("libvirt", FAIL, f"libvirt {_version(have)} at {f.libvirt_uri} predates <hostdev type='mdev'> "
                     f"({_version(LIBVIRT_MDEV)})", "upgrade libvirt")  # fmt: skip
    if f.uses_ramfb and have < LIBVIRT_RAMFB:
        return Check("libvirt", FAIL, f"libvirt {_version(have)} at {f.libvirt_uri} predates ramfb='on' "
                     f"({_version(LIBVIRT_RAMFB)}), which a domain asks for", "upgrade libvirt")  # fmt: skip
    return Check("libvirt", PASS, f"libvirt {_version(have)} at {f.libvirt_uri}")


def check_iommu_groups(f: HostFacts) -> list[Check]:
    """A GPU's group should hold only the GPU's own functions (its slot). Another endpoint in it goes to the guest
    with the GPU: fatal for passthrough, a warning for GPUs shared as vGPUs (their mdevs/VFs get groups of their
    own). Bridges in a group are the ACS check's business."""
    out = []
    for fn in _gpus(f.snap):
        if fn.iommu_group is None:
            continue
        others = [
            a for a in f.snap.iommu_groups.get(fn.iommu_group, ())
            if a.rpartition(".")[0] != fn.slot and not (a in f.snap.functions and f.snap.functions[a].is_bridge)
        ]  # fmt: skip
        if not others:
            continue
        layout = f.snap.layouts.get(fn.address)
        passthrough = layout is not None and modes.for_layout(layout).whole_gpu
        out.append(Check(
            f"iommu-group {fn.iommu_group}", FAIL if passthrough else WARN,
            f"{fn.address} shares IOMMU group {fn.iommu_group} with {', '.join(others)}: passthrough would give "
            "the guest those devices too",
            "move the GPU to a slot with its own group (or behind a switch with ACS); see `vgpuadm gpus`",
        ))  # fmt: skip
    return out or [Check("iommu-groups", PASS, "every GPU's IOMMU group holds only its own functions")]


def check_acs(f: HostFacts) -> Check:
    override = [a for a in (f.cmdline or "").split() if a.startswith("pcie_acs_override")]
    if override:
        return Check("acs", WARN, f"{override[0]} on the kernel command line: the IOMMU groups are split by a patch, "
                     "not by the hardware, so isolation between them is not real",
                     "drop pcie_acs_override and use a slot whose root port has ACS")  # fmt: skip
    bridged = sorted({
        f"{fn.address} (group {fn.iommu_group}: {a})"
        for fn in _gpus(f.snap) if fn.iommu_group is not None
        for a in f.snap.iommu_groups.get(fn.iommu_group, ())
        if a in f.snap.functions and f.snap.functions[a].is_bridge
    })  # fmt: skip
    if bridged:
        return Check("acs", WARN, "bridge in a GPU's IOMMU group (its root port lacks ACS): " + "; ".join(bridged),
                     "passthrough still works (vfio tolerates the bridge); for isolation use a slot with ACS")  # fmt: skip
    return Check("acs", PASS, "no ACS override; no bridge shares a GPU's IOMMU group")


def check_boot_vga(f: HostFacts) -> list[Check]:
    boot = [fn.address for fn in _gpus(f.snap) if fn.boot_vga]
    if not boot:
        return [Check("boot-vga", PASS, "no GPU drives the host console")]
    return [
        Check(
            f"boot-vga {a}",
            WARN,
            f"{a} drives the host console (boot_vga=1): passing it through takes the console",
            "pass through another GPU, or make another display primary in the firmware",
        )
        for a in boot
    ]


def check_journal(f: HostFacts) -> Check:
    if f.journal_error:
        return Check("journal", FAIL, f.journal_error, "inspect /var/lib/vgpuadm/journal.json and remove it by hand")
    if f.journal is not None:
        return Check("journal", FAIL, f"an interrupted change is pending: {f.journal}",
                     "vgpuadm recover (rolls it back; --finish completes it)")  # fmt: skip
    return Check("journal", PASS, "no interrupted change pending")


def check_leaks(f: HostFacts) -> list[Check]:
    if f.leaks is None:
        return [Check("leaks", WARN, "cannot tell which devices are leaked: libvirt is unreachable",
                      "fix what the libvirt check says, then rerun vgpuadm doctor")]  # fmt: skip
    if not f.leaks:
        return [Check("leaks", PASS, "every device is owned by a domain")]
    fix = "vgpuadm reconcile --fix (removes it), or give it to a VM"
    if f.journal is not None:  # the interrupted change may have made it: its rollback comes first
        fix = "vgpuadm recover first (the interrupted change may have made it); if it is still here, " + fix
    return [
        Check(
            f"leak {ident}",
            WARN,
            f"{kind} {ident} ({detail}) is owned by no domain",
            fix,
        )
        for kind, ident, detail in f.leaks
    ]


def check_missing(f: HostFacts) -> Check:
    """Recorded devices the host lacks (after a reboot, before `restore`): their domains cannot start."""
    if f.missing is None:
        return Check("devices", WARN, "cannot tell whether the domains' devices exist: libvirt is unreachable",
                     "start libvirtd, then rerun vgpuadm doctor")  # fmt: skip
    if not f.missing:
        return Check("devices", PASS, "every device the domains record exists")
    by_domain: dict[str, list[str]] = {}
    for domain, device in f.missing:
        by_domain.setdefault(domain, []).append(device)
    listed = "; ".join(f"{d}: {', '.join(devs)}" for d, devs in sorted(by_domain.items()))
    return Check("devices", FAIL, f"{len(f.missing)} recorded device(s) missing, so these domains cannot start: "
                                  f"{listed}", "vgpuadm restore (brings back every recorded device)")  # fmt: skip


def check_claims(f: HostFacts) -> list[Check]:
    """A device two domains claim (a copied VM): only one of them can start, and destroying either frees it."""
    if not f.claimed_twice:
        return [] if f.claimed_twice is None else [Check("claims", PASS, "no device is claimed by two domains")]
    return [
        Check(
            f"claims {ident}",
            FAIL,
            f"{ident} is claimed by {len(names)} domains ({', '.join(names)}); only one of them can start",
            "keep it on the VM it belongs to; on each copy run `vgpuadm destroy --vm COPY --forget` "
            "(drops the copy's claim; the device and the VM it belongs to stay as they are)",
        )
        for ident, names in f.claimed_twice
    ]


def check_unrecorded(f: HostFacts) -> list[Check]:
    """Devices a domain owns (its XML references them) that vgpuadm has not recorded: owned, not leaked, but
    `restore` cannot bring them back after a reboot until `adopt` records them. Nothing to say otherwise."""
    by_domain: dict[str, list[str]] = {}
    for domain, device in f.unrecorded:
        by_domain.setdefault(domain, []).append(device)
    return [
        Check(
            f"unrecorded {domain}",
            WARN,
            f"domain {domain} has {', '.join(devices)} that vgpuadm has not recorded: `vgpuadm restore` will not "
            "bring them back after a reboot",
            f"vgpuadm adopt --vm {domain} (records them; --dry-run shows what)",
        )
        for domain, devices in sorted(by_domain.items())
    ]


def check_drift(f: HostFacts) -> list[Check]:
    """What a GPU reset or a driver reload lost that the record needs besides the devices (check_missing names
    those): VFs, MIG mode and instances, host policies, vgpu_params. Nothing to say when nothing drifted."""
    if not f.drift:
        return []
    shown = "; ".join(f.drift[:3]) + (f" (and {len(f.drift) - 3} more)" if len(f.drift) > 3 else "")
    return [Check("drift", FAIL, f"{len(f.drift)} difference(s) from what the domains record: {shown}",
                  "vgpuadm restore --check lists them; vgpuadm restore (--gpu ADDR for one GPU) brings them back")]  # fmt: skip


def run_checks(f: HostFacts) -> list[Check]:
    """Every check, in the order they are printed."""
    return [
        check_iommu(f),
        check_vfio(f),
        *check_vendor_drivers(f),
        *check_tools(f),
        check_libvirt(f),
        *check_iommu_groups(f),
        check_acs(f),
        *check_boot_vga(f),
        check_journal(f),
        *check_leaks(f),
        check_missing(f),
        *check_drift(f),
        *check_claims(f),
        *check_unrecorded(f),
    ]


def summary(checks: list[Check]) -> dict[str, int]:
    return {s: sum(c.status == s for c in checks) for s in (PASS, WARN, FAIL)}


def to_json(root: str, checks: list[Check]) -> dict[str, Any]:
    """The document `vgpuadm doctor --json` prints (vgpuadm/schemas/doctor.schema.json)."""
    return {"root": root, "checks": [c.to_json() for c in checks], "summary": summary(checks),
            "ok": not any(c.status == FAIL for c in checks)}  # fmt: skip
