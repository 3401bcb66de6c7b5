"""Simulated PCI core: driver_override, drivers/<d>/bind|unbind, drivers_probe, sriov_numvfs and
sriov_drivers_autoprobe, with the kernel's errno (reference §5.1, §5.2, §5.4, §3.1; K7 bus.c, iov.c).

Matching (pci_bus_match): an override naming another driver blocks every driver; an override naming `d` matches
`d`; otherwise only the native driver of the marker's `drivers` table matches (vfio-pci and pci-stub have empty id
tables, so they match only through the override). Binding the native driver of an mdev parent or NVIDIA VF lays
down what that driver registers (mdev types, the `nvidia/` group); unbinding it takes them away with their mdevs.

`/dev/vfio/<group>` exists while at least one member of the group is bound to vfio-pci, viable or not: the kernel
creates the group node with the group's first vfio device and checks viability (§5.3) only when the group is
opened (observed on 6.1 by the kernel lane, tests/kernel/differential_scenario.py).
"""

from __future__ import annotations

import errno as errno_mod
import os

from vgpuadm.sim import mdevs, vendor_vfio
from vgpuadm.sim.profiles import add_sriov_vf, add_vf_driver_attrs, provision_vfs
from vgpuadm.sim.state import SimHost, fail, kstrtobool, kstrtoul
from vgpuadm.sim.tree import IOMMU_GROUPS, MDEV_BUS, PCI_DEVICES, PCI_DRIVERS


def _bdf(data: bytes) -> str:
    # bus_find_device_by_name compares with sysfs_streq: one trailing newline is ignored.
    text = data.decode("ascii", errors="replace")
    return text[:-1] if text.endswith("\n") else text


def set_override(host: SimHost, path: str, data: bytes) -> None:
    """driver_override: the text up to the first newline; empty (or just "\\n") clears it, read back "(null)"."""
    if len(data) >= 4095:  # driver_set_override: len >= PAGE_SIZE - 1
        fail(errno_mod.EINVAL)
    name = data.decode("ascii", errors="replace").split("\n", 1)[0]
    host.set_attr(path, name or "(null)", 0o644)


def _matches(host: SimHost, bdf: str, dev: str, driver: str) -> bool:
    override = host.override_of(dev)
    if override is not None:
        return override == driver
    return host.native_driver(bdf) == driver


def bind_store(host: SimHost, driver: str, data: bytes) -> None:
    bdf = _bdf(data)
    dev = host.pci_dir(bdf)
    if dev is None or not _matches(host, bdf, dev, driver):
        fail(errno_mod.ENODEV)
    if host.driver_of(dev) is not None:
        fail(errno_mod.EBUSY)
    attach(host, bdf, dev, driver)


def unbind_store(host: SimHost, driver: str, data: bytes) -> None:
    bdf = _bdf(data)
    dev = host.pci_dir(bdf)
    if dev is None or host.driver_of(dev) != driver:
        fail(errno_mod.ENODEV)
    detach(host, bdf, dev)


def drivers_probe(host: SimHost, data: bytes) -> None:
    """Bind to the override when set, else to the native driver; a bound device or no match is a quiet success."""
    bdf = _bdf(data)
    dev = host.pci_dir(bdf)
    if dev is None:
        fail(errno_mod.ENODEV)
    if host.driver_of(dev) is not None:
        return
    driver = host.override_of(dev) or host.native_driver(bdf)
    if driver and host.exists(f"{PCI_DRIVERS}/{driver}") and _matches(host, bdf, dev, driver):
        attach(host, bdf, dev, driver)


def attach(host: SimHost, bdf: str, dev: str, driver: str) -> None:
    host.tree.bind(dev, bdf, driver)
    if driver == host.native_driver(bdf):
        _register(host, bdf)
    update_vfio_node(host, dev)


def detach(host: SimHost, bdf: str, dev: str) -> None:
    driver = host.driver_of(dev)
    if driver is not None and driver == host.native_driver(bdf):
        _unregister(host, bdf, dev)
    if driver is not None:
        host.tree.unbind(dev, bdf, driver)
    update_vfio_node(host, dev)


def back_to_native(host: SimHost, bdf: str) -> bool:
    """What a boot or a device reset leaves of a function's binding: no driver_override, and its native driver (or
    none) bound again. Whether it was bound to another driver."""
    dev = host.pci_dir(bdf)
    if dev is None:
        return False
    host.set_attr(f"{dev}/driver_override", "(null)", 0o644)
    native = host.native_driver(bdf)
    if host.driver_of(dev) == native:
        return False
    detach(host, bdf, dev)
    if native is not None:
        attach(host, bdf, dev, native)
    return True


def _register(host: SimHost, bdf: str) -> None:
    vf = host.sriov_pf_of(bdf)
    if vf is not None:
        pf, index = vf
        add_vf_driver_attrs(host.builder, pf, index)
        if host.model["sriov"][pf]["vf_layout"] == "vendor-vfio":
            vendor_vfio.recompute(host, pf)
        else:
            mdevs.recompute(host, mdevs.domain(host, bdf))
    elif bdf in host.model["mdev_parents"]:
        mdevs.register_parent(host, bdf)
        mdevs.recompute(host, mdevs.domain(host, bdf))


def _unregister(host: SimHost, bdf: str, dev: str) -> None:
    if host.exists(f"{dev}/mdev_supported_types"):
        others = mdevs.domain(host, bdf)
        mdevs.unregister_parent(host, bdf, dev)
        mdevs.recompute(host, others)
    if host.exists(f"{dev}/nvidia"):
        host.tree.rmtree(f"{dev}/nvidia")
        vf = host.sriov_pf_of(bdf)
        if vf is not None:
            vendor_vfio.recompute(host, vf[0])


def update_vfio_node(host: SimHost, dev: str) -> None:
    group = host.group_of(dev)
    if group is None:
        return
    drivers = []
    for member in host.listdir(f"{IOMMU_GROUPS}/{group}/devices"):
        mdir = host.pci_dir(member)
        if mdir is None:
            return  # an mdev's own group: created and removed with the mdev
        if not host.is_bridge(mdir):
            drivers.append(host.driver_of(mdir))
    host.tree.vfio_node(group, present="vfio-pci" in drivers)


def autoprobe_store(host: SimHost, path: str, data: bytes) -> None:
    host.set_attr(path, int(kstrtobool(data)), 0o644)


def numvfs_store(host: SimHost, path: str, data: bytes) -> None:
    """iov.c sriov_numvfs_store: parse (kstrtou16), ERANGE above total, same count is a no-op, ENOENT without a
    driver that has sriov_configure, 0 disables, EBUSY when changing a non-zero count to another non-zero."""
    count = kstrtoul(data, 0, 16)
    dev = os.path.dirname(path)
    bdf = os.path.basename(dev)
    total = int(host.read(f"{dev}/sriov_totalvfs") or 0)
    if count > total:
        fail(errno_mod.ERANGE)
    current = int(host.read(path) or 0)
    if count == current:
        return
    driver = host.driver_of(dev)
    if driver is None or driver not in host.model["sriov_configure_drivers"]:
        fail(errno_mod.ENOENT)
    if bdf not in host.model["sriov"]:
        fail(errno_mod.EIO)  # no hardware model for this PF's VFs: the driver's sriov_configure fails
    if count == 0:
        disable_vfs(host, bdf)
        return
    if current != 0:
        fail(errno_mod.EBUSY)
    probe = host.read(f"{dev}/sriov_drivers_autoprobe") != "0"
    for index in range(count):
        add_sriov_vf(host.builder, bdf, index, probe=probe)
    host.set_attr(path, count, 0o644)
    provision_vfs(host.builder, bdf, count)
    if probe and host.model["sriov"][bdf]["vf_layout"] == "vendor-vfio":
        vendor_vfio.recompute(host, bdf)


def disable_vfs(host: SimHost, pf: str) -> None:
    """Remove every VF of `pf` (their mdevs, groups, links) and read sriov_numvfs 0; the kernel does not refuse."""
    info = host.model["sriov"][pf]
    pf_dir = f"{info['parent_dir']}/{pf}"
    for index, vf in enumerate(info["vfs"]):
        dev = f"{info['parent_dir']}/{vf}"
        if not host.exists(dev):
            continue
        driver = host.driver_of(dev)
        if host.exists(f"{dev}/mdev_supported_types"):
            mdevs.unregister_parent(host, vf, dev)
        if driver is not None:
            host.tree.unbind(dev, vf, driver)
        group = host.group_of(dev)
        if group is not None:
            host.tree.vfio_node(group, present=False)
            host.tree.unlink(f"{IOMMU_GROUPS}/{group}/devices/{vf}")
            host.tree.rmdir(f"{IOMMU_GROUPS}/{group}/devices")
            host.tree.rmdir(f"{IOMMU_GROUPS}/{group}")
        host.tree.unlink(f"{MDEV_BUS}/{vf}")
        host.tree.unlink(f"{PCI_DEVICES}/{vf}")
        host.tree.unlink(f"{pf_dir}/virtfn{index}")
        host.tree.rmtree(dev)
    host.set_attr(f"{pf_dir}/sriov_numvfs", 0, 0o644)
    provision_vfs(host.builder, pf, 0)
