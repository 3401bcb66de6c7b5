"""`vgpuadm sim reboot DIR`: what a reboot does to a simulated host. Runtime state goes — mdevs, SR-IOV VFs (with
their vGPU types; profiles built with VFs enabled stand for a host after sriov-manage, so after a reboot they are
gone — except on the GPUs AMD's GIM drives: it enables vf_num of them again when it loads, sim/gim.py), driver
overrides, binds other than the native driver, /dev/vfio groups. Hardware and drivers stay; every function is bound
to its native driver again (mdev types reappear with full counts); sriov_drivers_autoprobe is 1.
MIG mode stays (a pending one takes effect); GPU and compute instances go. Heterogeneous vGPU mode goes; the vGPU
scheduler is the RmPVMRL registry key's from <root>/etc/modprobe.d (sim/hetero.py).
Injected faults are test instructions, not kernel state: they stay.
"""

from __future__ import annotations

from vgpuadm.sim import gim, hetero, mdevs, mig, pci, usage, vendor_vfio
from vgpuadm.sim.state import SimHost, load_model, require_simulated, root_lock
from vgpuadm.sim.tree import PCI_DEVICES


def reboot(root: str) -> None:
    require_simulated(root)
    with root_lock(root):
        host = SimHost(root, load_model(root))
        for m in host.mdevs().values():
            mdevs.drop(host, m.uuid, m.path)
        for pf, info in host.model["sriov"].items():
            pf_dir = f"{info['parent_dir']}/{pf}"
            if not host.exists(pf_dir):
                continue
            pci.disable_vfs(host, pf)
            host.set_attr(f"{pf_dir}/sriov_drivers_autoprobe", 1, 0o644)
        for bdf in host.listdir(PCI_DEVICES):
            pci.back_to_native(host, bdf)
        gim.probe_all(host)  # GIM loads at boot and enables its GPUs' VFs again (sriov_numvfs cannot)
        for node in host.listdir("/dev/vfio"):
            host.tree.unlink(f"/dev/vfio/{node}")
        usage.forget(host)  # no guest survives a reboot
        mig.reboot(host)  # a pending MIG mode takes effect; GPU and compute instances are gone
        hetero.reboot(host)  # heterogeneous mode off; the scheduler from the modprobe files' RmPVMRL
        for pf in host.model["vendor_vfio"]:
            vendor_vfio.recompute(host, pf)
        mdevs.recompute(host, host.parent_names())
