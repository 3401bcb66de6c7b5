"""The simulated host's /usr/lib/nvidia/sriov-manage (`vgpuadm sim build` installs a shim that runs this module).

NVIDIA's script ships with the vGPU host driver; a PF bound to nvidia cannot take a write to sriov_numvfs (the
driver has no sriov_configure), so the script does the stub dance of reference §3.1 — unbind the PF from nvidia,
bind it to pci-pf-stub, write sriov_numvfs (= sriov_totalvfs for -e, 0 for -d), give it back to nvidia — and this
module does the same writes through the simulated kernel, so the kernel's rules and injected faults apply.

Usage: sriov-manage -e|-d BDF|ALL   (ALL: every SR-IOV PF bound to nvidia)
"""

from __future__ import annotations

import os
import sys

from vgpuadm.errors import VgpuadmError
from vgpuadm.sim.kernel import SimKernel
from vgpuadm.sim.tree import PCI_DEVICES

USAGE = "usage: sriov-manage -e|-d BDF|ALL"


def _read(root: str, host_path: str) -> str:
    with open(os.path.join(root, host_path.lstrip("/"))) as f:
        return f.read().strip()


def _driver(root: str, bdf: str) -> str | None:
    link = os.path.join(root, PCI_DEVICES.lstrip("/"), bdf, "driver")
    return os.path.basename(os.readlink(link)) if os.path.islink(link) else None


def nvidia_pfs(root: str) -> list[str]:
    """Every SR-IOV-capable function bound to nvidia (what `ALL` means)."""
    top = os.path.join(root, PCI_DEVICES.lstrip("/"))
    return sorted(b for b in os.listdir(top)
                  if os.path.exists(os.path.join(top, b, "sriov_totalvfs")) and _driver(root, b) == "nvidia")  # fmt: skip


def manage(root: str, enable: bool, pf: str) -> str:
    """Enable (all) or disable the VFs of `pf`; returns what the script prints."""
    dev = f"{PCI_DEVICES}/{pf}"
    if not os.path.exists(os.path.join(root, dev.lstrip("/"), "sriov_totalvfs")):
        raise VgpuadmError(f"{pf} is not an SR-IOV capable GPU")
    current = int(_read(root, f"{dev}/sriov_numvfs"))
    if enable and current:
        return f"GPU at {pf} already has VFs enabled."
    if not enable and not current:
        return f"GPU at {pf} has no VFs enabled."
    total = _read(root, f"{dev}/sriov_totalvfs")
    k = SimKernel(root)
    if _driver(root, pf) == "nvidia":
        k.write("/sys/bus/pci/drivers/nvidia/unbind", pf)
    k.write(f"{dev}/driver_override", "pci-pf-stub\n")
    k.write("/sys/bus/pci/drivers_probe", pf)
    k.write(f"{dev}/sriov_numvfs", f"{total if enable else 0}\n")
    k.write("/sys/bus/pci/drivers/pci-pf-stub/unbind", pf)
    k.write(f"{dev}/driver_override", "\n")
    k.write("/sys/bus/pci/drivers_probe", pf)
    return f"{'Enabling' if enable else 'Disabling'} VFs on {pf}"


def main(argv: list[str]) -> int:
    """`python -m vgpuadm.sim.sriov_manage ROOT -e|-d BDF|ALL`."""
    if len(argv) != 3 or argv[1] not in ("-e", "-d"):
        print(USAGE, file=sys.stderr)
        return 2
    root, flag, target = argv
    pfs = nvidia_pfs(root) if target == "ALL" else [target]
    try:
        for pf in pfs:
            print(manage(root, flag == "-e", pf))
    except (VgpuadmError, OSError) as exc:
        print(f"sriov-manage: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
