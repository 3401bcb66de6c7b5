"""AMD's GIM (MxGPU host driver, github.com/amd/MxGPU-Virtualization) as its source has it: its pci_driver has no
sriov_configure (gim/gim_shim/gim_drv.c: name, probe, remove, shutdown, err_handler), so writing sriov_numvfs fails
with ENOENT (sim/pci.py); it enables a GPU's VFs itself when it probes the PF, with the count of its `vf_num` module
parameter (gim_config.c: module_param_array(vf_num, uint, …, 0444), "Nx: enable N VFs for GPUx", GPUs numbered in
probe order), which /sys/module/gim/parameters/vf_num shows as "N0,N1,…". A host whose GIM loads at boot (RHOSO's
MI300X architecture loads gim from modules-load.d) has its VFs back after a reboot; no host driver probes them
(amdgpu is blacklisted), so they come up unbound.
"""

from __future__ import annotations

from vgpuadm.sim.profiles import GIM_VF_NUM, add_sriov_vf
from vgpuadm.sim.state import SimHost

DRIVER = "gim"


def _gpus(host: SimHost) -> list[str]:
    """The PFs GIM drives, in probe (PCI address) order: GPU0, GPU1, …"""
    return sorted(pf for pf in host.model["sriov"] if host.model["drivers"].get(pf) == DRIVER)


def probe_all(host: SimHost) -> None:
    """What GIM's probe does at boot on every GPU it drives: enable vf_num[x] VFs of GPUx (capped at the PF's
    TotalVFs; a GPU with no entry keeps its VFs off [I: GIM's default, VF_NUMBER__DEFAULT, is not in the source])."""
    raw = host.read(GIM_VF_NUM)
    counts = [int(n) for n in raw.split(",") if n.strip().isdigit()] if raw else []
    for index, pf in enumerate(_gpus(host)):
        info = host.model["sriov"][pf]
        dev = f"{info['parent_dir']}/{pf}"
        if index >= len(counts) or host.driver_of(dev) != DRIVER or int(host.read(f"{dev}/sriov_numvfs") or 0):
            continue
        count = min(counts[index], int(host.read(f"{dev}/sriov_totalvfs") or 0))
        probe = host.read(f"{dev}/sriov_drivers_autoprobe") != "0"
        for n in range(count):
            add_sriov_vf(host.builder, pf, n, probe=probe)
        host.set_attr(f"{dev}/sriov_numvfs", count, 0o644)
