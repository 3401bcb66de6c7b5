"""SimKernel: applies one attribute write under a simulated root with the kernel's effects and errno.

The tree is the state (what a reader sees is what the kernel would show); the marker holds the hardware model and
the injected faults. Every write holds the per-root lock (`<root>/.sim.lock`), so racing processes see whole
operations, and a refused write changes nothing. Handlers by file:
  mdev_supported_types/<t>/create, <mdev>/remove           sim/mdevs.py
  nvidia/current_vgpu_type, nvidia/vgpu_params             sim/vendor_vfio.py
  driver_override, drivers/<d>/{bind,unbind}, drivers_probe,
  sriov_numvfs, sriov_drivers_autoprobe                    sim/pci.py
Any other existing file is stored as written when it is readable and writable, a write-only trigger without a
simulated effect (rescan) is accepted, a read-only one gives EACCES, an absent one ENOENT. drivers/<d>/new_id and
remove_id are not simulated (EOPNOTSUPP).
"""

from __future__ import annotations

import errno as errno_mod
import os
import stat
import time
from typing import Any

from vgpuadm.sim import faults, hetero, mdevs, pci, vendor_vfio
from vgpuadm.sim.state import SimHost, fail, load_model, marker_path, root_lock
from vgpuadm.sim.tree import PCI_DRIVERS


class SimKernel:
    """The Writer for simulated roots (see host/sysfs.py): `write(host_path, data)` raises OSError(errno)."""

    def __init__(self, root: str) -> None:
        self.root = os.path.realpath(root)
        self._model: dict[str, Any] | None = None
        self._stamp: tuple[int, int, int] | None = None

    def _load(self) -> dict[str, Any]:
        st = os.stat(marker_path(self.root))
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        if self._model is None or stamp != self._stamp:
            self._model, self._stamp = load_model(self.root), stamp
        return self._model

    def write(self, host_path: str, data: str | bytes) -> None:
        buf = data.encode() if isinstance(data, str) else data
        with root_lock(self.root):
            host = SimHost(self.root, self._load())
            real = host.real(host_path)
            canonical = host.resolve(host_path) if os.path.lexists(real) else host_path
            code, stall = faults.check(self.root, host.model["faults"], (host_path, canonical))
            if code is not None:
                fail(code)
            if not os.path.lexists(real) or not os.path.exists(real):
                fail(errno_mod.ENOENT)
            dispatch(host, canonical, buf)
        if stall:
            time.sleep(stall)  # a slow driver: the write is done, the writer waits (outside the lock)


def dispatch(host: SimHost, path: str, data: bytes) -> None:
    """Route one write on a canonical host path to the handler that owns that file."""
    st = os.stat(host.real(path))
    if stat.S_ISDIR(st.st_mode):
        fail(errno_mod.EISDIR)
    if not st.st_mode & 0o222:
        fail(errno_mod.EACCES)  # kernfs refuses opening a read-only attribute for writing, even for root
    parent, name = os.path.split(path)
    if name == "create" and os.path.basename(os.path.dirname(parent)) == "mdev_supported_types":
        mdevs.create(host, path, data)
    elif name == "remove" and host.exists(f"{parent}/mdev_type"):
        mdevs.remove_store(host, path, data)
    elif os.path.basename(parent) == "nvidia" and name == "current_vgpu_type":
        vendor_vfio.set_current_type(host, path, data)
    elif os.path.basename(parent) == "nvidia" and name == "placement_id":
        hetero.set_placement(host, path, data)
    elif os.path.basename(parent) == "nvidia" and name == "vgpu_params":
        vendor_vfio.set_params(host, path, data)
    elif path == "/sys/bus/pci/drivers_probe":
        pci.drivers_probe(host, data)
    elif os.path.dirname(parent) == PCI_DRIVERS and name in ("bind", "unbind"):
        (pci.bind_store if name == "bind" else pci.unbind_store)(host, os.path.basename(parent), data)
    elif name == "driver_override":
        pci.set_override(host, path, data)
    elif name == "sriov_numvfs":
        pci.numvfs_store(host, path, data)
    elif name == "sriov_drivers_autoprobe":
        pci.autoprobe_store(host, path, data)
    elif os.path.dirname(parent) == PCI_DRIVERS and name in ("new_id", "remove_id"):
        fail(errno_mod.EOPNOTSUPP)  # dynamic ids are not simulated (the tool never uses them: reference §5.2)
    elif st.st_mode & 0o444:
        host.tree.raw(path, data, stat.S_IMODE(st.st_mode))
    # else: a write-only trigger with no effect in the simulation (rescan, reset): accepted, reads nothing
