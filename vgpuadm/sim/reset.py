"""`vgpuadm sim reset DIR GPU` and `vgpuadm sim reload-driver DIR [DRIVER]`: what a GPU reset (`nvidia-smi -r`, a
recovered Xid) or a reload of the vendor driver (or of an mdev sample driver such as mtty) does to a simulated host.
The driver sets the GPU up again from nothing, so its runtime state goes, as at a reboot (sim/reboot.py) but for
that GPU alone:

- the mdevs on the GPU and on its VFs (layouts A and B);
- its SR-IOV VFs, with their vGPU types, `vgpu_params` and placement IDs (layout C) and their binds: sriov_numvfs
  reads 0 and sriov-manage must enable them again [I: the reference (§7) says VFs vanish at a driver reload; that a
  reset through the driver takes them too is inferred from the driver re-probing the GPU];
- the GPU's GPU and compute instances; MIG mode too on Hopper and newer (sim/migmodel.py `mode_survives_reset`);
- heterogeneous mode; the scheduler is the registry key's again (sim/hetero.py);
- driver overrides and vfio-pci binds of the GPU's own functions (the PF and the functions in its slot, e.g. its
  HD audio): they are bound to their native driver again (the brief of issue 35; [I] for a GPU no vendor driver
  holds, which `nvidia-smi -r` would not reach);
- the usage a guest reported on any of them.

`keep_vfs`: a reset through the PCI core instead (`echo 1 > /sys/bus/pci/devices/<PF>/reset`, reference §5): the
kernel saves and restores the PF's SR-IOV state around it, so the VFs stay (and no device goes or comes: no uevent)
but what the driver held on them goes — their vGPU types, parameters, placements [I: the kernel's
pci_restore_iov_state; what the vendor driver keeps is inferred].

Nothing of another GPU is written (its files hash the same), except the marker's model at the root. The simulated
kernel is the independent oracle: this module knows the driver's behaviour, never the product's rules.
"""

from __future__ import annotations

import re

from vgpuadm.errors import UsageError
from vgpuadm.model import pci_address
from vgpuadm.sim import gim, hetero, mdevs, mig, pci, usage, vendor_vfio
from vgpuadm.sim.state import SimHost, load_model, require_simulated, root_lock
from vgpuadm.sim.tree import PCI_DEVICES

VENDOR_DRIVER = "nvidia"
_VERSION = re.compile(r"[0-9]{1,4}(?:\.[0-9]{1,4}){1,3}")  # 580.159.04


def _require_gpu(host: SimHost, root: str, address: str) -> None:
    known = gpus(host)
    if address not in known:
        raise UsageError(
            f"{address} is no GPU of the simulated host {root}",
            f"its GPUs: {', '.join(known)}" if known else "this simulated host has no GPU",
        )


def set_ecc(root: str, gpu: str, enabled: bool) -> str:
    """`nvidia-smi -i GPU -e 0|1` and the reset that applies it: the GPU's ECC mode is `enabled` from then on
    [I: the simulator applies it at once, as after that reset]. Its canonical address; UsageError for an address that
    is no GPU of the host."""
    require_simulated(root)
    address = pci_address(gpu)
    with root_lock(root):
        host = SimHost(root, load_model(root))
        _require_gpu(host, root, address)
        host.model.setdefault("ecc", {})[address] = "Enabled" if enabled else "Disabled"
        mig.save(host)
    return address


def gpus(host: SimHost) -> list[str]:
    """The GPUs of the simulated host a reset can name: the PFs (no VF) that are mdev parents, SR-IOV PFs, MIG GPUs,
    or whose class is a display controller (0x03…)."""
    model = host.model
    named = set(model["sriov"]) | set(model.get("mig") or {}) | set(model.get("vendor_vfio") or {})
    named |= {n for n, p in model["mdev_parents"].items() if p.get("physical_gpu") == n or n in model["drivers"]}
    out = set()
    for bdf in host.listdir(PCI_DEVICES):
        dev = host.pci_dir(bdf)
        if dev is None or host.sriov_pf_of(bdf) is not None:
            continue
        if bdf in named or (host.read(f"{dev}/class") or "").startswith("0x03"):
            out.add(bdf)
    return sorted(out)


def _functions(host: SimHost, pf: str) -> list[str]:
    """The PF and the other functions in its slot (its HD audio…), VFs not included."""
    slot = pf.rsplit(".", 1)[0]
    return [b for b in host.listdir(PCI_DEVICES) if b.rsplit(".", 1)[0] == slot and host.sriov_pf_of(b) is None]


def _forget(host: SimHost, pf: str, keep_vfs: bool = False) -> list[str]:
    """Caller holds the lock: the GPU `pf` loses its runtime state (the module's list). What was lost, in words."""
    lost: list[str] = []
    info = host.model["sriov"].get(pf)
    vfs = [vf for vf in (info["vfs"] if info else []) if host.pci_dir(vf) is not None]
    own = {pf, *vfs}
    gone = [m for m in host.mdevs().values() if m.parent in own]
    for m in gone:
        mdevs.drop(host, m.uuid, m.path)
    if gone:
        lost.append(f"{len(gone)} mdev(s)")
    typed = [vf for vf in vfs if int(host.read(f"{host.pci_dir(vf)}/nvidia/current_vgpu_type") or 0)]
    usage.forget(host, [d for vf in vfs if (d := host.pci_dir(vf)) is not None])
    if keep_vfs:
        for vf in typed:
            vendor_vfio.set_current_type(host, f"{host.pci_dir(vf)}/nvidia/current_vgpu_type", b"0")
        if typed:
            lost.append(f"{len(typed)} VF vGPU type(s)")
    elif info is not None and vfs:
        pci.disable_vfs(host, pf)
        lost.append(f"{len(vfs)} VF(s)" + (f" ({len(typed)} with a vGPU type)" if typed else ""))
    if info is not None and not keep_vfs:
        host.set_attr(f"{info['parent_dir']}/{pf}/sriov_drivers_autoprobe", 1, 0o644)
    rebound = sum(pci.back_to_native(host, bdf) for bdf in _functions(host, pf))
    if rebound:
        lost.append(f"{rebound} bind(s) to another driver")
    lost += mig.gpu_reset(host, pf)
    lost += hetero.gpu_reset(host, [pf])
    gim.probe_all(host)  # GIM sets the GPU up again with its VFs (sim/gim.py)
    if pf in host.model["vendor_vfio"]:
        vendor_vfio.recompute(host, pf)
    mdevs.recompute(host, mdevs.domain(host, pf))
    return lost


def reset(root: str, gpu: str, keep_vfs: bool = False) -> tuple[str, list[str]]:
    """Reset the simulated GPU `gpu` (a PCI address; short forms are canonicalised): (its address, what it lost).
    UsageError for an address that is no GPU of the host, naming its GPUs. `keep_vfs`: see the module."""
    require_simulated(root)
    address = pci_address(gpu)
    with root_lock(root):
        host = SimHost(root, load_model(root))
        _require_gpu(host, root, address)
        return address, _forget(host, address, keep_vfs)


def reload_driver(root: str, driver: str = VENDOR_DRIVER, version: str | None = None) -> dict[str, list[str]]:
    """Unload and load `driver` again: every GPU it drives loses its runtime state as at a reset; for a virtual mdev
    parent's driver (mtty, mdpy, mbochs: the parent's name) the parent's mdevs go. GPU or parent → what it lost.
    `version`: the vendor driver loaded is that release (an upgrade); nvidia-smi reports it from then on.
    UsageError when no device of the host uses `driver`, or for a version that is no driver release."""
    require_simulated(root)
    if version is not None and (driver != VENDOR_DRIVER or not _VERSION.fullmatch(version)):
        raise UsageError(
            f"{version!r} is no {VENDOR_DRIVER} driver release" if driver == VENDOR_DRIVER
            else f"--version is for the {VENDOR_DRIVER} driver, not {driver}",
            "a release reads like 580.159.04",
        )  # fmt: skip
    with root_lock(root):
        host = SimHost(root, load_model(root))
        if version is not None:
            host.model["driver_version"] = version
            mig.save(host)
        pfs = [pf for pf in gpus(host) if host.native_driver(pf) == driver]
        virtual = [n for n in host.model["mdev_parents"] if n == driver and n not in host.model["drivers"]]
        if not pfs and not virtual:
            drivers = sorted({host.native_driver(pf) or "" for pf in gpus(host)} - {""} | {
                n for n in host.model["mdev_parents"] if n not in host.model["drivers"]})  # fmt: skip
            raise UsageError(
                f"no device of the simulated host {root} uses the driver {driver!r}",
                f"its drivers: {', '.join(drivers)}" if drivers else "this simulated host has no GPU driver",
            )
        out = {pf: _forget(host, pf) for pf in pfs}
        for name in virtual:
            gone = [m for m in host.mdevs().values() if m.parent == name]
            for m in gone:
                mdevs.drop(host, m.uuid, m.path)
            mdevs.recompute(host, mdevs.domain(host, name))
            out[name] = [f"{len(gone)} mdev(s)"] if gone else []
        return out
