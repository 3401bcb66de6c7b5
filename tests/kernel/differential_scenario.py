"""The differential scenario: one list of raw sysfs writes, each with the outcome the kernel gives it, and
snapshots of everything a program can observe, normalised for IOMMU group numbering. The same scenario runs against
the real kernel inside the lane's guest (mtty, mdpy, mbochs sample drivers and QEMU's SR-IOV NVMe controller) and
against the simulated host of profile `kernel-samples`; tests/kernel/test_differential.py compares the two.

Paths and data may name `{pf}`, `{vf0}`, `{vf1}`: the SR-IOV PF (the only function with `sriov_totalvfs`) and its
VFs as its `virtfnN` links name them at the moment of the write; `{gpu}` and `{audio}`: the one display function
and function 1 of its slot.
"""

from __future__ import annotations

import errno as errno_mod
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from vgpuadm.errors import HostIOError
from vgpuadm.host.sysfs import Sysfs

PCI = "/sys/bus/pci/devices"
MDEV_BUS = "/sys/class/mdev_bus"
MDEV_DEVICES = "/sys/bus/mdev/devices"
GROUPS = "/sys/kernel/iommu_groups"
SAMPLE_PARENTS = ("mbochs", "mdpy", "mtty")
MBOCHS_MIB = 96  # the lane loads mbochs with count=96 (MiB): small/medium/large read 24/6/1

# Fixed UUIDs, so both runs name the same devices; upper case on purpose in U_UPPER (the kernel prints lower case).
U = [f"8a1e5b52-0000-4000-8000-{i:012x}" for i in range(16)]
U_UPPER = "8A1E5B52-0000-4000-8000-0000000000AA"


@dataclass(frozen=True)
class Write:
    """Write `data` to `path`; `expect` is the errno name the kernel answers with, or None for success."""

    path: str
    data: str
    expect: str | None = None


@dataclass(frozen=True)
class Observe:
    label: str


Step = Write | Observe


def _create(parent: str, type_id: str, uuid: str, expect: str | None = None) -> Write:
    return Write(f"{MDEV_BUS}/{parent}/mdev_supported_types/{type_id}/create", uuid, expect)


def _remove(uuid: str, data: str = "1", expect: str | None = None) -> Write:
    return Write(f"{MDEV_DEVICES}/{uuid}/remove", data, expect)


def mdev_steps() -> list[Step]:
    """Shared pools, the errno of every refusal, and a full revert."""
    return [
        Observe("mdev-initial"),
        _create("mtty", "mtty-2", U[0]),
        _create("mtty", "mtty-1", U[0], "EEXIST"),  # same UUID on the same parent
        _create("mdpy", "mdpy-vga", U[0], "EEXIST"),  # UUIDs are global across parents
        _create("mtty", "mtty-1", "not-a-uuid", "EINVAL"),
        _create("mtty", "mtty-1", U_UPPER),  # accepted; the device appears lower-case
        Observe("mtty-one-each"),
        _create("mdpy", "mdpy-hd", U[1]),
        _create("mdpy", "mdpy-vga", U[2]),
        _create("mdpy", "mdpy-xga", U[3]),
        _create("mdpy", "mdpy-vga", U[4]),
        _create("mdpy", "mdpy-vga", U[5], "EUSERS"),  # count=4 shared by the three types, core-managed on 6.1
        _create("mbochs", "mbochs-large", U[6]),
        _create("mbochs", "mbochs-medium", U[7]),
        _create("mbochs", "mbochs-large", U[8], "ENOSPC"),
        Observe("pools-used"),
        _remove(U[0], "0"),  # 0 is accepted and does nothing
        _remove(U[0], "x", "EINVAL"),
        _remove(U[7]),
        _create("mbochs", "mbochs-large", U[8], "ENOSPC"),  # 96-64 MiB left: still no room for another 64
        _remove(U[6]),
        _create("mbochs", "mbochs-large", U[8]),
        Observe("mbochs-reused"),
        *(_remove(u) for u in (U[0], U_UPPER.lower(), U[1], U[2], U[3], U[4], U[8])),
        Observe("mdev-reverted"),
        *(_create("mtty", "mtty-2", U[i]) for i in range(12)),
        _create("mtty", "mtty-1", U[12], "ENOSPC"),
        Observe("mtty-exhausted"),
        *(_remove(U[i]) for i in range(12)),
        Observe("mtty-reverted"),
    ]


def sriov_steps() -> list[Step]:
    """SR-IOV on the PF, then the vfio-pci bind/restore sequence on one VF (reference §5.2)."""
    return [
        Observe("sriov-initial"),
        Write(f"{PCI}/{{pf}}/sriov_drivers_autoprobe", "0"),
        Write(f"{PCI}/{{pf}}/sriov_numvfs", "3", "ERANGE"),
        Write(f"{PCI}/{{pf}}/sriov_numvfs", "2"),
        Observe("vfs-enabled"),
        Write(f"{PCI}/{{pf}}/sriov_numvfs", "1", "EBUSY"),
        Write(f"{PCI}/{{pf}}/sriov_numvfs", "2"),  # the same count again is accepted
        Write("/sys/bus/pci/drivers/vfio-pci/bind", "{vf0}", "ENODEV"),  # no driver_override yet
        Write(f"{PCI}/{{vf0}}/driver_override", "vfio-pci"),
        Write("/sys/bus/pci/drivers_probe", "{vf0}"),
        Observe("vf0-on-vfio"),
        Write("/sys/bus/pci/drivers/vfio-pci/bind", "{vf0}", "EBUSY"),
        Write("/sys/bus/pci/drivers/vfio-pci/unbind", "{vf1}", "ENODEV"),
        Write("/sys/bus/pci/drivers/vfio-pci/unbind", "{vf0}"),
        Write(f"{PCI}/{{vf0}}/driver_override", "\n"),
        Observe("vf0-restored"),
        Write(f"{PCI}/{{pf}}/sriov_numvfs", "0"),
        Write(f"{PCI}/{{pf}}/sriov_drivers_autoprobe", "1"),
        Observe("sriov-reverted"),
    ]


def passthrough_steps() -> list[Step]:
    """The whole IOMMU group of a display function (VGA + HD audio) to vfio-pci and back (reference §5.2, §5.3)."""
    return [
        Observe("group-initial"),
        Write(f"{PCI}/{{gpu}}/driver_override", "vfio-pci"),
        Write("/sys/bus/pci/drivers_probe", "{gpu}"),
        Observe("gpu-on-vfio-audio-on-host"),  # when does /dev/vfio/<group> appear?
        Write(f"{PCI}/{{audio}}/driver_override", "vfio-pci"),
        Write("/sys/bus/pci/drivers_probe", "{audio}"),  # still bound to snd_hda_intel: probing changes nothing
        Write("/sys/bus/pci/drivers/snd_hda_intel/unbind", "{audio}"),
        Write("/sys/bus/pci/drivers_probe", "{audio}"),
        Observe("group-on-vfio"),
        Write("/sys/bus/pci/drivers/vfio-pci/unbind", "{gpu}"),
        Write(f"{PCI}/{{gpu}}/driver_override", "\n"),
        Write("/sys/bus/pci/drivers/snd_hda_intel/bind", "{audio}", "ENODEV"),  # its override still says vfio-pci
        Write("/sys/bus/pci/drivers/vfio-pci/unbind", "{audio}"),
        Write(f"{PCI}/{{audio}}/driver_override", "\n"),
        Write("/sys/bus/pci/drivers/snd_hda_intel/bind", "{audio}"),
        Observe("group-reverted"),
    ]


def steps() -> list[Step]:
    return mdev_steps() + sriov_steps() + passthrough_steps()


def display_function(sysfs: Sysfs) -> str:
    """The one display-class PCI function (QEMU's VGA in the guest)."""
    found = [a for a in sysfs.listdir(PCI) if (sysfs.read_opt(f"{PCI}/{a}/class") or "").startswith("0x03")]
    if len(found) != 1:
        raise AssertionError(f"expected exactly one display function under {PCI}, found {found}")
    return found[0]


def sriov_pf(sysfs: Sysfs) -> str:
    """The one PCI function that can do SR-IOV (QEMU's NVMe controller in the guest)."""
    pfs = [a for a in sysfs.listdir(PCI) if sysfs.exists(f"{PCI}/{a}/sriov_totalvfs")]
    if len(pfs) != 1:
        raise AssertionError(f"expected exactly one SR-IOV PF under {PCI}, found {pfs}")
    return pfs[0]


def _names(sysfs: Sysfs) -> dict[str, str]:
    pf = sriov_pf(sysfs)
    names = {"pf": pf}
    for i in range(2):
        names[f"vf{i}"] = sysfs.link_name(f"{PCI}/{pf}/virtfn{i}") or f"<no virtfn{i}>"
    names["gpu"] = gpu = display_function(sysfs)
    names["audio"] = gpu.rsplit(".", 1)[0] + ".1"
    return names


def run(sysfs: Sysfs, scenario: list[Step] | None = None) -> list[dict[str, Any]]:
    """Run the scenario; one record per step: the write and the errno it got, or the observed state."""
    records: list[dict[str, Any]] = []
    for step in scenario if scenario is not None else steps():
        if isinstance(step, Observe):
            records.append({"observe": step.label, "state": observe(sysfs)})
            continue
        names = _names(sysfs)
        got: str | None = None
        try:
            sysfs.write(step.path.format(**names), step.data.format(**names))
        except HostIOError as exc:
            got = errno_mod.errorcode.get(exc.errno or 0, str(exc.errno))
        records.append({"write": step.path, "data": step.data, "expect": step.expect, "errno": got})
    return records


class _Groups:
    """Names IOMMU groups g1, g2… in order of first sight: the kernel and the simulator number them differently."""

    def __init__(self) -> None:
        self.seen: dict[str, str] = {}

    def name(self, number: str | None) -> str | None:
        if number is None:
            return None
        return self.seen.setdefault(number, f"g{len(self.seen) + 1}")


def _attr(sysfs: Sysfs, path: str) -> str | None:
    try:
        return sysfs.read_opt(path)
    except HostIOError as exc:  # write-only attributes (create, remove) read as EACCES/EPERM
        return f"<{errno_mod.errorcode.get(exc.errno or 0, exc.errno)}>"


def _group(sysfs: Sysfs, dev: str, groups: _Groups) -> dict[str, Any]:
    number = sysfs.link_name(f"{dev}/iommu_group")
    return {
        "iommu_group": groups.name(number),
        "group_members": sysfs.listdir(f"{GROUPS}/{number}/devices") if number else None,
        "dev_vfio": sysfs.exists(f"/dev/vfio/{number}") if number else None,
    }


def observe(sysfs: Sysfs) -> dict[str, Any]:
    """Everything vgpuadm could read about the sample parents, their mdevs, the display function's IOMMU group,
    the PF and its VFs."""
    groups = _Groups()
    state: dict[str, Any] = {"mdev_bus": [p for p in sysfs.listdir(MDEV_BUS) if p in SAMPLE_PARENTS]}
    for parent in SAMPLE_PARENTS:
        d = f"{MDEV_BUS}/{parent}"
        state[f"{parent}/path"] = sysfs.resolve(d)
        for t in sysfs.listdir(f"{d}/mdev_supported_types"):
            td = f"{d}/mdev_supported_types/{t}"
            state[f"{parent}/{t}"] = {
                "files": sysfs.listdir(td),
                **{a: _attr(sysfs, f"{td}/{a}") for a in ("name", "description", "available_instances", "device_api")},
                "devices": sysfs.listdir(f"{td}/devices"),
            }
    for uuid in sysfs.listdir(MDEV_DEVICES):
        d = f"{MDEV_DEVICES}/{uuid}"
        real = sysfs.resolve(d)
        state[f"mdev/{uuid}"] = {
            "parent_dir": os.path.dirname(real),
            "mdev_type": sysfs.link_name(f"{d}/mdev_type"),
            "has_remove": sysfs.exists(f"{d}/remove"),
            **_group(sysfs, d, groups),
        }
    gpu = display_function(sysfs)
    for fn in sysfs.listdir(f"{GROUPS}/{sysfs.link_name(f'{PCI}/{gpu}/iommu_group')}/devices"):
        state[f"group-of-gpu/{fn}"] = _pci(sysfs, fn, groups)
    pf = sriov_pf(sysfs)
    state["pf"] = {"address": pf, **_pci(sysfs, pf, groups)}
    for entry in sysfs.listdir(f"{PCI}/{pf}"):
        if entry.startswith("virtfn"):
            vf = sysfs.link_name(f"{PCI}/{pf}/{entry}")
            state[f"pf/{entry}"] = vf
            state[f"vf/{vf}"] = _pci(sysfs, vf or "", groups)
    return state


def _pci(sysfs: Sysfs, addr: str, groups: _Groups) -> dict[str, Any]:
    d = f"{PCI}/{addr}"
    out: dict[str, Any] = {
        a: _attr(sysfs, f"{d}/{a}")
        for a in ("vendor", "device", "class", "driver_override", "sriov_totalvfs", "sriov_numvfs",
                  "sriov_offset", "sriov_stride", "sriov_vf_device", "sriov_drivers_autoprobe")
    }  # fmt: skip
    out["driver"] = sysfs.link_name(f"{d}/driver")
    out["bound_in_driver_dir"] = bool(out["driver"]) and sysfs.exists(f"/sys/bus/pci/drivers/{out['driver']}/{addr}")
    out["physfn"] = sysfs.link_name(f"{d}/physfn")
    out.update(_group(sysfs, d, groups))
    return out


def differences(real: list[dict[str, Any]], sim: list[dict[str, Any]]) -> Iterator[str]:
    """Human-readable differences between two runs, step by step and key by key."""
    if len(real) != len(sim):
        yield f"step count differs: real {len(real)}, simulated {len(sim)}"
    for i, (r, s) in enumerate(zip(real, sim, strict=False)):
        if "write" in r:
            if r != s:
                yield f"step {i} write {r['data']!r} > {r['write']}: real {r['errno'] or 'ok'}, simulated {s.get('errno') or 'ok'}"
            continue
        rs, ss = r["state"], s.get("state", {})
        for key in sorted(set(rs) | set(ss)):
            if rs.get(key) != ss.get(key):
                yield f"step {i} observe {r['observe']} {key}: real {rs.get(key)!r}, simulated {ss.get(key)!r}"
