"""Hardware-shaped simulated hosts. `build(profile, root)` lays down the sysfs tree and writes the marker holding
the hardware model that the simulated kernel (sim/kernel.py) obeys.

Every number comes from shared/docs/vgpu-sysfs.md (the reference); each table says which section. Values the
reference marks as inference ([I]) are marked so here too.

Marker model (JSON, `vgpuadm-simulated-host.json` at the root):
  profile, format, next_iommu_group
  drivers:      {BDF: native driver the kernel probes for it (drivers_probe without override)}
  mdev_parents: {parent: {path, rule, physical_gpu, pool, types: {type_id: {max, fb_mib, cost, name, description}}}}
                rule = nvidia-one-type (pre-Ampere: one type per GPU) | nvidia-one-size (Ampere+: one framebuffer
                size per physical GPU) | pool (the kernel samples and GVT-g: types draw on one shared budget)
  pools:        {pool: {capacity, errno}} (mtty ports, mdpy count, mbochs MiB, GVT-g aperture)
  sriov:        {PF: {vfs: [BDF…], vf_device, vf_class, vf_driver, vf_layout, vf_types, iommu_base, parent_dir}}
  vendor_vfio:  {PF: {types: [[id, name, fb_mib, max]…]}} (layout C equal-size mode)
  sriov_configure_drivers: PF drivers that implement sriov_configure, so writing sriov_numvfs works while bound
                to them (reference §3.1: pci-pf-stub yes, nvidia no, hence sriov-manage's stub dance)
  faults:       [{path_glob, errno, after, times}] writes the simulated kernel fails on purpose (sim/faults.py)
  products:     {PF: the board's product name as nvidia-smi prints it ("NVIDIA H200")}

next_iommu_group is the floor for groups handed out at runtime (mdevs): like the kernel's ida, the lowest free
number at or above it is used, so a removed device's group number is reused.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from vgpuadm.catalog.boards import equal_size_max
from vgpuadm.errors import UsageError
from vgpuadm.model import describe_nvidia_name
from vgpuadm.sim import heteromodel as hetero
from vgpuadm.sim import migmodel, pciids
from vgpuadm.sim.tools import install_tool
from vgpuadm.sim.tree import MdevTypeSpec, PciSpec, TreeBuilder

Model = dict[str, Any]

# Tesla P4, driver 525.105.14 — reference §2.3 (observed `mdevctl types`): id, name, heads, frl, fb MiB, res, max.
P4_TYPES = [
    (63, "GRID P4-1Q", 4, 60, 1024, "5120x2880", 8),
    (64, "GRID P4-2Q", 4, 60, 2048, "7680x4320", 4),
    (65, "GRID P4-4Q", 4, 60, 4096, "7680x4320", 2),
    (66, "GRID P4-8Q", 4, 60, 8192, "7680x4320", 1),
    (67, "GRID P4-1A", 1, 60, 1024, "1280x1024", 8),
    (68, "GRID P4-2A", 1, 60, 2048, "1280x1024", 4),
    (69, "GRID P4-4A", 1, 60, 4096, "1280x1024", 2),
    (70, "GRID P4-8A", 1, 60, 8192, "1280x1024", 1),
    (71, "GRID P4-1B", 4, 45, 1024, "5120x2880", 8),
    (157, "GRID P4-2B", 4, 45, 2048, "5120x2880", 4),
    (214, "GRID P4-2B4", 4, 45, 2048, "5120x2880", 4),
    (243, "GRID P4-1B4", 4, 45, 1024, "5120x2880", 8),
    (288, "GRID P4-4C", 1, 60, 4096, "4096x2400", 2),
    (289, "GRID P4-8C", 1, 60, 8192, "4096x2400", 1),
]

# Tesla T4 — type ids from the reference §2.3 community table (510.47.03). Heads/frl/resolution follow the P4
# series pattern and max_instance = 16 GiB / framebuffer: [I].
T4_IDS = {
    222: "T4-1B", 223: "T4-2B", 224: "T4-2B4", 225: "T4-1A", 226: "T4-2A", 227: "T4-4A", 228: "T4-8A",
    229: "T4-16A", 230: "T4-1Q", 231: "T4-2Q", 232: "T4-4Q", 233: "T4-8Q", 234: "T4-16Q", 252: "T4-1B4",
    319: "T4-4C", 320: "T4-8C", 321: "T4-16C",
}  # fmt: skip


def _table_max(profile: str) -> int:
    """NVIDIA's equal-size maximum (reference §3.6), from the one table discovery also reads."""
    mx = equal_size_max(describe_nvidia_name(profile))
    if mx is None:
        raise ValueError(f"{profile} is not in vgpuadm/catalog/boards.py")
    return mx


# A100 PCIe 40GB, layout B era — ids 468–478 from the reference §2.3; the id→profile order is [I]. Maxima from
# §3.6 (equal-size mode).
A100_TYPES = [
    (num, p, _table_max(p))
    for num, p in [(468, "A100-4C"), (469, "A100-5C"), (470, "A100-8C"), (471, "A100-10C"), (472, "A100-20C"),
                   (473, "A100-40C"), (474, "A100-1-5C"), (475, "A100-2-10C"), (476, "A100-3-20C"),
                   (477, "A100-4-20C"), (478, "A100-7-40C")]
]  # fmt: skip

# H200 SXM5 141GB (H200X), layout C — 1414 H200X-1-18C and 1428 H200X-141C are real (reference §3.3); the other
# ids are [I]. Profiles and maxima from §3.6: the simulated driver refuses past the maximum discovery reports.
H200_TYPES = [
    (num, p, _table_max(p))
    for num, p in [(1413, "H200X-7-141C"), (1414, "H200X-1-18C"), (1415, "H200X-1-18CME"), (1416, "H200X-1-35C"),
                   (1417, "H200X-2-35C"), (1418, "H200X-3-71C"), (1419, "H200X-4-71C"), (1420, "H200X-4C"),
                   (1421, "H200X-7C"), (1422, "H200X-8C"), (1423, "H200X-14C"), (1424, "H200X-17C"),
                   (1425, "H200X-28C"), (1426, "H200X-35C"), (1427, "H200X-70C"), (1428, "H200X-141C")]
]  # fmt: skip

# MIG-backed type → GPU-instance profile id: reference §3.5 (H200X-1-18C ↔ MIG 1g.18gb) and the real H200's
# -lgip ids (sim/migmodel.py).
H200_MIG_PROFILE = {"H200X-1-18C": 19, "H200X-1-18CME": 20, "H200X-1-35C": 15, "H200X-2-35C": 14, "H200X-3-71C": 9,
                    "H200X-4-71C": 5, "H200X-7-141C": 0}  # fmt: skip
_H200_MIG_NAMES = {f"NVIDIA {p}" for p in H200_MIG_PROFILE}

# A100 PCIe 80GB (A100D), layout B: the type names and maxima of the reference §3.6 (A100D row: MIG 7-80C … 1-10CME,
# time-sliced 80C 1 … 4C 20, equal-size); the type ids 600–613 are [I] (no published A100D id list); GPU-instance
# profile ids from sim/migmodel.py.
A100D_TYPES = [
    (600, "A100D-4C", 20, None), (601, "A100D-8C", 10, None), (602, "A100D-10C", 8, None),
    (603, "A100D-16C", 5, None), (604, "A100D-20C", 4, None), (605, "A100D-40C", 2, None),
    (606, "A100D-80C", 1, None), (607, "A100D-1-10C", 7, 19), (608, "A100D-1-10CME", 1, 20),
    (609, "A100D-1-20C", 4, 15), (610, "A100D-2-20C", 3, 14), (611, "A100D-3-40C", 2, 9),
    (612, "A100D-4-40C", 1, 5), (613, "A100D-7-80C", 1, 0),
]  # fmt: skip

# RTX PRO 6000 Blackwell Server Edition 96GB, layout C, with time-sliced MIG-backed vGPU (NVIDIA's vGPU docs:
# several vGPUs share one MIG slice on boards that allow it). Names (board prefix DC), ids 2000–2012, maxima and the
# vGPUs per instance are [I]; the profiles (1g.24gb ×4, 2g.48gb ×2, 4g.96gb ×1) are sim/migmodel.py's.
# (id, name, max per GPU, GPU-instance profile or None, vGPUs per instance)
RTXPRO6000_TYPES = [
    (2000, "DC-4-96C", 1, 0, 1), (2001, "DC-2-48C", 2, 5, 1), (2002, "DC-1-24C", 4, 14, 1),
    (2003, "DC-2-24C", 4, 5, 2), (2004, "DC-1-12C", 8, 14, 2), (2005, "DC-1-8C", 12, 14, 3),
    (2006, "DC-96C", 1, None, 0), (2007, "DC-48C", 2, None, 0), (2008, "DC-24C", 4, None, 0),
    (2009, "DC-12C", 8, None, 0), (2010, "DC-8C", 12, None, 0), (2011, "DC-4C", 24, None, 0),
]  # fmt: skip

# Intel GVT-g V5 types — reference §4.1 (i915 gvt/vgpu.c): low_gm MiB, high_gm MiB, fence, resolution, weight.
GVT_TYPES = [
    ("i915-GVTg_V5_8", 64, 384, 4, "1024x768", 2),
    ("i915-GVTg_V5_4", 128, 512, 4, "1920x1200", 4),
    ("i915-GVTg_V5_2", 256, 1024, 4, "1920x1200", 8),
    ("i915-GVTg_V5_1", 512, 2048, 4, "1920x1200", 16),
]
# PF drivers with an sriov_configure callback (reference §3.1, §4.2; nvme: the lab's emulated SR-IOV device).
SRIOV_CONFIGURE_DRIVERS = ("pci-pf-stub", "nvme", "xe", "i915", "ixgbe", "igb", "mlx5_core")
# AMD's GIM is left out: it has no sriov_configure and enables the VFs itself when it probes a GPU, vf_num[x] of them
# on GPUx (sim/gim.py), so the MI300X profile starts with them on and its GIM's parameter file says how many.
GIM_VF_NUM = "/sys/module/gim/parameters/vf_num"  # module_param_array(vf_num, uint, …, 0444): "N0,N1,…"

# NVIDIA A2 (GA107GL, 10de:25b6), layout B — the real recording in shared/fixtures/public/harvester-a2
# (one VF's 15 mdev types): id, name, heads, frl, fb MiB, max resolution, max_instance.
A2_TYPES = [
    (742, "NVIDIA A2-1B", 4, 45, 1024, "5120x2880", 16), (743, "NVIDIA A2-2B", 4, 45, 2048, "5120x2880", 8),
    (744, "NVIDIA A2-1Q", 4, 60, 1024, "5120x2880", 16), (745, "NVIDIA A2-2Q", 4, 60, 2048, "7680x4320", 8),
    (746, "NVIDIA A2-4Q", 4, 60, 4096, "7680x4320", 4), (747, "NVIDIA A2-8Q", 4, 60, 8192, "7680x4320", 2),
    (748, "NVIDIA A2-16Q", 4, 60, 16384, "7680x4320", 1), (749, "NVIDIA A2-1A", 1, 60, 1024, "1280x1024", 16),
    (750, "NVIDIA A2-2A", 1, 60, 2048, "1280x1024", 8), (751, "NVIDIA A2-4A", 1, 60, 4096, "1280x1024", 4),
    (752, "NVIDIA A2-8A", 1, 60, 8192, "1280x1024", 2), (753, "NVIDIA A2-16A", 1, 60, 16384, "1280x1024", 1),
    (754, "NVIDIA A2-4C", 1, 60, 4096, "4096x2400", 4), (755, "NVIDIA A2-8C", 1, 60, 8192, "4096x2400", 2),
    (756, "NVIDIA A2-16C", 1, 60, 16384, "4096x2400", 1),
]  # fmt: skip

# Kernel sample drivers (reference §4.4, K4 and the lab lines): mdpy types share one core-managed count (EUSERS on
# ≥6.1); mbochs types draw MiB from one budget (ENOSPC).
MDPY_TYPES = [("mdpy-vga", 640, 480), ("mdpy-xga", 1024, 768), ("mdpy-hd", 1920, 1080)]
MBOCHS_TYPES = [("mbochs-small", 4), ("mbochs-medium", 16), ("mbochs-large", 64)]

# A small-aperture host: V5_4 reads 1 and V5_8 reads 2, as observed in intel/gvt-linux #122 (reference §4.1 [O]).
GVT_APERTURE = {"low_gm": 128, "high_gm": 896}


def _nv_description(heads: int, frl: int, fb: int, res: str, max_inst: int) -> str:
    return f"num_heads={heads}, frl_config={frl}, framebuffer={fb}M, max_resolution={res}, max_instance={max_inst}"


def _series_shape(profile: str) -> tuple[int, int, str]:
    """heads, frl, max resolution of a Q/B/A/C profile, following the P4 table's pattern [I]."""
    series = describe_nvidia_name(profile).series
    return {
        "Q": (4, 60, "7680x4320"),
        "B": (4, 45, "5120x2880"),
        "A": (1, 60, "1280x1024"),
        "C": (1, 60, "4096x2400"),
    }.get(series or "", (1, 60, "4096x2400"))


class HostBuilder:
    """Builds a profile: the tree through TreeBuilder and the matching hardware model for the marker."""

    def __init__(self, root: str, profile: str) -> None:
        self.tree = TreeBuilder(root)
        self.model: Model = {
            "format": 1,
            "profile": profile,
            "next_iommu_group": 100,
            "drivers": {},
            "mdev_parents": {},
            "pools": {},
            "sriov": {},
            "vendor_vfio": {},
            "sriov_configure_drivers": list(SRIOV_CONFIGURE_DRIVERS),
            "faults": [],
        }
        self.tree.bus()
        for drv in ("vfio-pci", "pci-stub", "pci-pf-stub"):
            self.tree.driver(drv)

    @classmethod
    def attach(cls, root: str, model: Model) -> HostBuilder:
        """A builder over an existing host (the simulated kernel adds VFs and driver attributes through it)."""
        h = cls.__new__(cls)
        h.tree = TreeBuilder(root)
        h.model = model
        return h

    def pci(self, spec: PciSpec) -> str:
        if spec.driver:
            self.model["drivers"][spec.address] = spec.driver
        return self.tree.pci(spec)

    def root_port(self, address: str, host_bridge: str, group: int | None = None) -> str:
        return self.pci(
            PciSpec(address, f"/sys/devices/{host_bridge}", "0x8086", "0x2030", "0x060400", "pcieport", group,
                    bridge=True)
        )  # fmt: skip

    def mdev_parent(
        self, dev: str, name: str, rule: str, types: dict[str, dict[str, Any]], pool: str | None = None,
        physical_gpu: str | None = None,
    ) -> None:  # fmt: skip
        specs = [MdevTypeSpec(tid, t.get("name"), t.get("description"), t["available"]) for tid, t in types.items()]
        self.tree.mdev_parent(dev, name, specs)
        self.model["mdev_parents"][name] = {
            "path": dev,
            "rule": rule,
            "pool": pool,
            "physical_gpu": physical_gpu or name,
            "types": {
                tid: {k: t.get(k) for k in ("name", "description", "max", "fb_mib", "cost")} for tid, t in types.items()
            },
        }

    def finish(self) -> Model:
        self.tree.marker(self.model)
        return self.model


def nvidia_pf_types(table: list[tuple[int, str, int, int, int, str, int]]) -> dict[str, dict[str, Any]]:
    return {
        f"nvidia-{num}": {
            "name": name,
            "description": _nv_description(heads, frl, fb, res, mx),
            "available": mx,
            "max": mx,
            "fb_mib": fb,
        }
        for num, name, heads, frl, fb, res, mx in table
    }


def t4_table() -> list[tuple[int, str, int, int, int, str, int]]:
    out = []
    for num, profile in T4_IDS.items():
        fb = describe_nvidia_name(profile).framebuffer_mib or 1024
        heads, frl, res = _series_shape(profile)
        out.append((num, f"GRID {profile}", heads, frl, fb, res, 16384 // fb))
    return out


def add_p4(h: HostBuilder, address: str, port: str, host_bridge: str, group: int, numa: int) -> None:
    parent = f"/sys/devices/{host_bridge}/{port}"
    dev = h.pci(PciSpec(address, parent, "0x10de", "0x1bb3", "0x030200", "nvidia", group, numa,
                        ("0x10de", "0x11d8")))  # fmt: skip
    h.mdev_parent(dev, address, "nvidia-one-type", nvidia_pf_types(P4_TYPES))


def add_t4(h: HostBuilder, address: str, port: str, host_bridge: str, group: int, numa: int) -> None:
    parent = f"/sys/devices/{host_bridge}/{port}"
    dev = h.pci(PciSpec(address, parent, "0x10de", "0x1eb8", "0x030200", "nvidia", group, numa,
                        ("0x10de", "0x12a2")))  # fmt: skip
    h.mdev_parent(dev, address, "nvidia-one-type", nvidia_pf_types(t4_table()))


def _sriov_pf(
    h: HostBuilder, address: str, parent: str, device: str, total: int, enabled: bool, vf_layout: str,
    vf_types: Any, group: int, numa: int, vf_device: str,
) -> tuple[str, list[str]]:  # fmt: skip
    """An NVIDIA SR-IOV PF at <bus>:00.0 whose VFs start at function 4 (offset 4, stride 1: the A10 example of
    reference §8.5). Returns the PF dir and the VF addresses."""
    bus = address.rsplit(":", 1)[0]
    vfs = []
    for i in range(total):
        fn = 4 + i
        vfs.append(f"{bus}:{fn // 8:02x}.{fn % 8}")
    pf = h.pci(PciSpec(address, parent, "0x10de", device, "0x030200", "nvidia", group, numa, ("0x10de", "0x1533"),
                       extra={"sriov_totalvfs": str(total), "sriov_numvfs": str(total if enabled else 0),
                              "sriov_offset": "4", "sriov_stride": "1", "sriov_vf_device": vf_device[2:],
                              "sriov_drivers_autoprobe": "1"}))  # fmt: skip
    h.model["sriov"][address] = {
        "vfs": vfs,
        "vf_device": vf_device,
        "vf_class": "0x030200",
        "vf_driver": "nvidia",
        "vf_layout": vf_layout,
        "vf_types": vf_types,
        "iommu_base": group * 10,
        "parent_dir": parent,
        "numa_node": numa,
    }
    return pf, vfs


def add_sriov_vf(h: HostBuilder, pf: str, index: int, probe: bool = True) -> None:
    """Lay down VF `index` of PF `pf` as the kernel does when sriov_numvfs is written (also used by sim/kernel).
    `probe` False (sriov_drivers_autoprobe 0) leaves the VF unbound, without the driver's attributes."""
    info = h.model["sriov"][pf]
    vf = info["vfs"][index]
    vendor = info.get("vf_vendor", "0x10de")
    h.model["drivers"].setdefault(vf, info["vf_driver"])
    dev = h.pci(PciSpec(vf, info["parent_dir"], vendor, info["vf_device"], info["vf_class"],
                        info["vf_driver"] if probe else None, info["iommu_base"] + index, info["numa_node"],
                        info.get("vf_subsystem", ("0x10de", "0x1533"))))  # fmt: skip
    h.tree.link(f"{dev}/physfn", f"{info['parent_dir']}/{pf}")
    h.tree.link(f"{info['parent_dir']}/{pf}/virtfn{index}", dev)
    if probe:
        add_vf_driver_attrs(h, pf, index)


def add_vf_driver_attrs(h: HostBuilder, pf: str, index: int) -> None:
    """What the NVIDIA driver adds to a VF it binds: mdev types (layout B) or the `nvidia/` group (layout C)."""
    info = h.model["sriov"][pf]
    vf = info["vfs"][index]
    dev = f"{info['parent_dir']}/{vf}"
    state = (h.model.get("mig") or {}).get(pf)
    if info["vf_layout"] == "mdev-vf":
        # MIG-backed types are listed only while a matching free GPU instance exists (none at build or probe time
        # on a GPU whose instances were just made is not modelled: sim/mdevs.recompute corrects it)
        types = {tid: {**t, "available": int(migmodel.offered(state, tid) and not migmodel.is_mig_type(state, tid))}
                 for tid, t in info["vf_types"].items()}  # fmt: skip
        h.mdev_parent(dev, vf, "nvidia-one-size", types, physical_gpu=pf)
    elif info["vf_layout"] == "vendor-vfio":
        h.tree.creatable(dev, [(num, name) for num, name, _fb, _mx in info["vf_types"] if migmodel.offered(state, num)])
        h.tree.attr(f"{dev}/nvidia/current_vgpu_type", 0)
        h.tree.attr(f"{dev}/nvidia/vgpu_params", "")
        if pf in (h.model.get("hetero") or {}):
            h.tree.attr(f"{dev}/nvidia/placement_id", hetero.NO_PLACEMENT, 0o644)


# A100 40GB MIG-backed type → GPU-instance profile id (migmodel.A100_PROFILES; A100-1-5C ↔ MIG 1g.5gb).
A100_MIG_PROFILE = {"A100-1-5C": 19, "A100-2-10C": 14, "A100-3-20C": 9, "A100-4-20C": 5, "A100-7-40C": 0}


def add_a100_mdev_vf(h: HostBuilder, address: str, host_bridge: str, group: int, numa: int, vfs: int) -> None:
    """A100 PCIe 40GB with `vfs` VFs, mdev types on each VF (layout B), MIG off: like the driver, its MIG-backed
    types (A100-1-5C …) are offered only with MIG on (sim/migmodel.offered), never created with it off; turning MIG
    on stays pending until a GPU reset, as on the published A100."""
    port = h.root_port(f"{address.rsplit(':', 2)[0]}:{int(address.split(':')[1], 16) - 1:02x}:01.0", host_bridge)
    need = {f"nvidia-{num}": {"profile": A100_MIG_PROFILE[p], "per_gi": 1} for num, p, _mx in A100_TYPES
            if p in A100_MIG_PROFILE}  # fmt: skip
    h.model.setdefault("mig", {})[address] = migmodel.gpu_state(migmodel.A100_PROFILES, need, reset_needed=True)
    h.model.setdefault("products", {})[address] = "NVIDIA A100-PCIE-40GB"  # [I: nvidia-smi's name for the board]
    vf_types = {}
    for num, profile, mx in A100_TYPES:
        fb = describe_nvidia_name(profile).framebuffer_mib or 0
        vf_types[f"nvidia-{num}"] = {
            "name": f"GRID {profile}",
            "description": _nv_description(1, 60, fb, "4096x2400", mx),
            "max": mx,
            "fb_mib": fb,
        }
    _sriov_pf(h, address, port, "0x20f1", vfs, True, "mdev-vf", vf_types, group, numa, "0x20f1")
    for i in range(vfs):
        add_sriov_vf(h, address, i)


def add_h200(h: HostBuilder, address: str, host_bridge: str, group: int, numa: int, vfs: int,
             enabled: bool = True) -> None:  # fmt: skip
    """H200 SXM5 on vendor-specific VFIO (layout C) with `vfs` VFs, MIG off, as the real H200's -q -x shows it.

    Every simulated H200 models its MIG state, so it offers its time-sliced types with MIG mode off and its MIG-backed
    H200X-<n>-<GB>C types (H200_MIG_PROFILE, one vGPU per GPU instance) only with MIG on (sim/migmodel.offered).
    Sources: NVIDIA's MIG-Backed vGPU page (docs.nvidia.com/ai-enterprise/release-8/latest/infra-software/vgpu/
    features/mig-backed-vgpu.html): "each vGPU runs on a dedicated GPU instance"; the vGPU user guide's definition "A
    time-sliced vGPU is a vGPU that resides on a physical GPU that is not partitioned into multiple GPU instances"
    (as quoted by burdweiser-blog.pages.dev/blog/2026-04-22-nvidia-gpus-vsphere-9-time-slicing-vs-mig/); GPU
    instances exist only in MIG mode (the MIG user guide). So the two kinds never run on one GPU at once. [The guide's
    own sentence on not mixing them was not found with the search tool.]"""
    port = h.root_port(f"{address.rsplit(':', 2)[0]}:{int(address.split(':')[1], 16) - 1:02x}:01.0", host_bridge)
    types = [[num, f"NVIDIA {p}", describe_nvidia_name(p).framebuffer_mib, mx] for num, p, mx in H200_TYPES]
    need = {str(num): {"profile": H200_MIG_PROFILE[p], "per_gi": 1} for num, p, _mx in H200_TYPES
            if p in H200_MIG_PROFILE}  # fmt: skip
    h.model.setdefault("mig", {})[address] = migmodel.gpu_state(
        migmodel.H200_PROFILES, need, reset_needed=False, mode_survives_reset=False
    )  # Hopper
    h.model.setdefault("products", {})[address] = "NVIDIA H200"  # the real H200's -q -x (tests/data/h200-…)
    _sriov_pf(h, address, port, "0x2335", vfs, enabled, "vendor-vfio", types, group, numa, "0x2335")
    h.model["vendor_vfio"][address] = {"types": types}
    h.model.setdefault("hetero", {})[address] = hetero.gpu_state([t for t in types if t[1] not in _H200_MIG_NAMES])
    if enabled:
        for i in range(vfs):
            add_sriov_vf(h, address, i)


def add_a100d_mig(h: HostBuilder, address: str, host_bridge: str, group: int, numa: int, vfs: int) -> None:
    """A100 PCIe 80GB with `vfs` VFs enabled, mdev types on each VF (layout B), MIG off; enabling MIG stays pending
    until a GPU reset (the published A100 output's "pending enable state")."""
    port = h.root_port(f"{address.rsplit(':', 2)[0]}:{int(address.split(':')[1], 16) - 1:02x}:01.0", host_bridge)
    vf_types, need = {}, {}
    for num, profile, mx, gi_profile in A100D_TYPES:
        fb = describe_nvidia_name(profile).framebuffer_mib or 0
        vf_types[f"nvidia-{num}"] = {"name": f"NVIDIA {profile}", "description": _nv_description(1, 60, fb, "4096x2400", mx),
                                     "max": mx, "fb_mib": fb}  # fmt: skip
        if gi_profile is not None:
            need[f"nvidia-{num}"] = {"profile": gi_profile, "per_gi": 1}
    h.model.setdefault("mig", {})[address] = migmodel.gpu_state(migmodel.A100D_PROFILES, need, reset_needed=True)
    h.model.setdefault("products", {})[address] = "NVIDIA A100 80GB PCIe"  # [I: nvidia-smi's name for the board]
    _sriov_pf(h, address, port, "0x20b5", vfs, True, "mdev-vf", vf_types, group, numa, "0x20b5")
    for i in range(vfs):
        add_sriov_vf(h, address, i)


def add_rtxpro6000(h: HostBuilder, address: str, host_bridge: str, group: int, numa: int, vfs: int) -> None:
    """RTX PRO 6000 Blackwell on vendor-specific VFIO (layout C) with `vfs` VFs, MIG off."""
    port = h.root_port(f"{address.rsplit(':', 2)[0]}:{int(address.split(':')[1], 16) - 1:02x}:01.0", host_bridge)
    types = [
        [num, f"NVIDIA {p}", describe_nvidia_name(p).framebuffer_mib, mx] for num, p, mx, _g, _n in RTXPRO6000_TYPES
    ]
    need = {str(num): {"profile": g, "per_gi": n} for num, _p, _mx, g, n in RTXPRO6000_TYPES if g is not None}
    h.model.setdefault("mig", {})[address] = migmodel.gpu_state(
        migmodel.RTXPRO6000_PROFILES, need, reset_needed=False, mode_survives_reset=False
    )  # Blackwell
    h.model.setdefault("products", {})[address] = "NVIDIA RTX PRO 6000 Blackwell Server Edition"  # [I: as above]
    _sriov_pf(h, address, port, "0x2bb5", vfs, True, "vendor-vfio", types, group, numa, "0x2bb5")
    h.model["vendor_vfio"][address] = {"types": types}
    h.model.setdefault("hetero", {})[address] = hetero.gpu_state(
        [t for t, r in zip(types, RTXPRO6000_TYPES, strict=True) if r[3] is None]
    )
    for i in range(vfs):
        add_sriov_vf(h, address, i)


def add_a2_mdev_vf(h: HostBuilder, address: str, host_bridge: str, group: int, numa: int, vfs: int) -> None:
    """NVIDIA A2 with `vfs` VFs enabled, mdev types on each VF (layout B), types from the real recording."""
    port = h.root_port(f"{address.rsplit(':', 2)[0]}:{int(address.split(':')[1], 16) - 1:02x}:01.0", host_bridge)
    vf_types = {
        tid: {k: t[k] for k in ("name", "description", "max", "fb_mib")} for tid, t in nvidia_pf_types(A2_TYPES).items()
    }
    _sriov_pf(h, address, port, "0x25b6", 16, True, "mdev-vf", vf_types, group, numa, "0x25b6")
    for i in range(vfs):
        add_sriov_vf(h, address, i)
    h.tree.attr(f"{port}/{address}/sriov_numvfs", vfs)


def add_mdpy(h: HostBuilder, count: int = 4) -> None:
    """The mdpy sample: three display types sharing one core-managed count (module parameter `count`, default 4);
    exhaustion is EUSERS on ≥6.1 (reference §1.3, §4.4)."""
    dev = "/sys/devices/virtual/mdpy/mdpy"
    h.tree.mkdir(dev)
    types = {
        tid: {"name": tid, "description": f"virtual display, {w}x{hh} framebuffer", "available": count, "max": None,
              "cost": 1}
        for tid, w, hh in MDPY_TYPES
    }  # fmt: skip
    h.model["pools"]["mdpy"] = {"capacity": count, "errno": "EUSERS"}
    h.mdev_parent(dev, "mdpy", "pool", types, pool="mdpy")


def add_mbochs(h: HostBuilder, mib: int = 512) -> None:
    """The mbochs sample: small/medium/large draw 4/16/64 MiB from one budget (module parameter `count` on 6.1);
    exhaustion is ENOSPC (reference §4.4 lab lines: 96 MiB reads 24/6/1)."""
    dev = "/sys/devices/virtual/mbochs/mbochs"
    h.tree.mkdir(dev)
    types = {
        tid: {"name": tid, "description": f"virtual display, {size} MB video memory", "available": mib // size,
              "max": None, "cost": size}
        for tid, size in MBOCHS_TYPES
    }  # fmt: skip
    h.model["pools"]["mbochs"] = {"capacity": mib, "errno": "ENOSPC"}
    h.mdev_parent(dev, "mbochs", "pool", types, pool="mbochs")


def add_gvt_g(h: HostBuilder) -> None:
    dev = h.pci(PciSpec("0000:00:02.0", "/sys/devices/pci0000:00", "0x8086", "0x3e92", "0x030000", "i915", 0, -1,
                        ("0x8086", "0x2212"), boot_vga=1))  # fmt: skip
    types = {}
    for tid, low, high, fence, res, weight in GVT_TYPES:
        avail = min(GVT_APERTURE["low_gm"] // low, GVT_APERTURE["high_gm"] // high)
        types[tid] = {
            "name": tid.removeprefix("i915-"),
            "description": f"low_gm_size: {low}MB\nhigh_gm_size: {high}MB\nfence: {fence}\n"
            f"resolution: {res}\nweight: {weight}",
            "available": avail,
            "max": None,
            "fb_mib": None,
            "cost": {"low_gm": low, "high_gm": high},
        }
    h.model["pools"]["gvt:0000:00:02.0"] = {"capacity": dict(GVT_APERTURE), "errno": "ENOSPC"}
    h.mdev_parent(dev, "0000:00:02.0", "pool", types, pool="gvt:0000:00:02.0")


def add_mtty(h: HostBuilder) -> None:
    """mtty: 24 ports shared by mtty-1 (1 port) and mtty-2 (2 ports); no description file (reference §4.4, lab)."""
    dev = "/sys/devices/virtual/mtty/mtty"
    h.tree.mkdir(dev)
    types = {
        "mtty-1": {"name": "Single port serial", "description": None, "available": 24, "max": None, "cost": 1},
        "mtty-2": {"name": "Dual port serial", "description": None, "available": 12, "max": None, "cost": 2},
    }
    h.model["pools"]["mtty"] = {"capacity": 24, "errno": "ENOSPC"}
    h.mdev_parent(dev, "mtty", "pool", types, pool="mtty")


def add_passthrough(h: HostBuilder) -> None:
    """Reference §8.6: an RTX 3090-class GPU + HD audio alone in group 13 (good ACS), and a second GPU whose group
    also holds its PCIe root port (poor ACS)."""
    parent = "/sys/devices/pci0000:64/0000:64:00.0"
    h.pci(PciSpec("0000:64:00.0", "/sys/devices/pci0000:64", "0x8086", "0x347a", "0x060400", "pcieport", 12,
                  bridge=True))  # fmt: skip
    h.pci(PciSpec("0000:65:00.0", parent, "0x10de", "0x2204", "0x030000", "nvidia", 13, 0, ("0x10de", "0x147d"),
                  boot_vga=0))  # fmt: skip
    h.pci(PciSpec("0000:65:00.1", parent, "0x10de", "0x1aef", "0x040300", "snd_hda_intel", 13, 0,
                  ("0x10de", "0x147d")))  # fmt: skip
    port = h.root_port("0000:00:01.0", "pci0000:00", group=1)
    h.pci(PciSpec("0000:01:00.0", port, "0x10de", "0x1e04", "0x030000", "nvidia", 1, 0, ("0x10de", "0x12fa"),
                  boot_vga=0))  # fmt: skip
    h.pci(PciSpec("0000:01:00.1", port, "0x10de", "0x10f7", "0x040300", "snd_hda_intel", 1, 0,
                  ("0x10de", "0x12fa")))  # fmt: skip


def _p4(h: HostBuilder) -> None:
    add_p4(h, "0000:01:00.0", "0000:00:01.0", "pci0000:00", 1, 0)
    add_p4(h, "0000:02:00.0", "0000:00:03.0", "pci0000:00", 2, 1)


def _t4(h: HostBuilder) -> None:
    add_t4(h, "0000:3b:00.0", "0000:3a:00.0", "pci0000:3a", 3, 0)


def _a100(h: HostBuilder) -> None:
    add_a100_mdev_vf(h, "0000:41:00.0", "pci0000:40", 4, 0, 16)


def _h200(h: HostBuilder) -> None:
    add_h200(h, "0000:18:00.0", "pci0000:17", 5, 0, 16)


def _mixed(h: HostBuilder) -> None:
    # 0000:01:00.0 belongs to the poor-ACS passthrough GPU here, so the P4 sits behind root port 00:03.0.
    add_p4(h, "0000:03:00.0", "0000:00:03.0", "pci0000:00", 2, 0)
    add_a100_mdev_vf(h, "0000:41:00.0", "pci0000:40", 4, 0, 8)
    add_h200(h, "0000:18:00.0", "pci0000:17", 5, 1, 8)
    add_passthrough(h)
    add_mtty(h)


def add_nvme_sriov(h: HostBuilder) -> None:
    """QEMU 7.2's NVMe controller with SR-IOV (`sriov_max_vfs=2`) as the kernel lane's guest shows it: behind root
    port 00:0a.0, bound to nvme (which has sriov_configure), VFs at offset 1 stride 1 in groups of their own
    (tests/kernel, recorded under Debian's 6.1 with intel-iommu)."""
    port = h.root_port("0000:00:0a.0", "pci0000:00", group=10)
    h.pci(PciSpec("0000:01:00.0", port, "0x1b36", "0x0010", "0x010802", "nvme", 12, -1, ("0x1af4", "0x1100"),
                  extra={"sriov_totalvfs": "2", "sriov_numvfs": "0", "sriov_offset": "1", "sriov_stride": "1",
                         "sriov_vf_device": "10", "sriov_drivers_autoprobe": "1"}))  # fmt: skip
    h.model["sriov"]["0000:01:00.0"] = {
        "vfs": ["0000:01:00.1", "0000:01:00.2"],
        "vf_vendor": "0x1b36",
        "vf_device": "0x0010",
        "vf_class": "0x010802",
        "vf_subsystem": ["0x1af4", "0x1100"],
        "vf_driver": None,  # nvme probes a VF, finds QEMU's secondary controller offline and lets go of it
        "vf_layout": "none",
        "vf_types": None,
        "iommu_base": 13,
        "parent_dir": port,
        "numa_node": -1,
    }


def add_vga_with_audio(h: HostBuilder) -> None:
    """The kernel lane's passthrough candidate: QEMU's VGA (boot VGA, its bochs driver blacklisted) and
    ich9-intel-hda as functions 0 and 1 of slot 00:10 on the root bus, one IOMMU group (no ACS)."""
    h.pci(PciSpec("0000:00:10.0", "/sys/devices/pci0000:00", "0x1234", "0x1111", "0x030000", None, 15, -1,
                  ("0x1af4", "0x1100"), boot_vga=1))  # fmt: skip
    h.pci(PciSpec("0000:00:10.1", "/sys/devices/pci0000:00", "0x8086", "0x293e", "0x040300", "snd_hda_intel", 15,
                  -1, ("0x1af4", "0x1100")))  # fmt: skip


def _vf_pool_pf(h: HostBuilder, pf: str, parent: str, vendor: str, device: str, class_code: str, driver: str,
                group: int, numa: int, total: int, enabled: int, vf_device: str, vf_driver: str | None,
                boot_vga: int | None = None, provisioning: dict[str, Any] | None = None,
                render: int | None = None) -> None:  # fmt: skip
    """An AMD/Intel SR-IOV PF with VFs at offset 1, stride 1 (so VF n is PF + 1 + n), each VF in its own IOMMU
    group; `enabled` VFs exist already. `provisioning`: Intel i915's prelim_iov tree (auto-provisioned fair share
    of `lmem_bytes` across the enabled VFs, written when sriov_numvfs changes: sim/pci.py)."""
    dom, bus, rest = pf.split(":")
    base = (int(bus, 16) << 8) | (int(rest.split(".")[0], 16) << 3) | int(rest.split(".")[1], 16)
    vfs = [f"{dom}:{(base + 1 + n) >> 8:02x}:{((base + 1 + n) >> 3) & 0x1F:02x}.{(base + 1 + n) & 7:x}"
           for n in range(total)]  # fmt: skip
    dev = h.pci(PciSpec(pf, parent, vendor, device, class_code, driver, group, numa, (vendor, "0x0000"), boot_vga,
                        extra={"sriov_totalvfs": str(total), "sriov_numvfs": "0", "sriov_offset": "1",
                               "sriov_stride": "1", "sriov_vf_device": vf_device[2:],
                               "sriov_drivers_autoprobe": "1"}))  # fmt: skip
    h.model["sriov"][pf] = {
        "vfs": vfs,
        "vf_vendor": vendor,
        "vf_device": vf_device,
        "vf_class": class_code,
        "vf_subsystem": [vendor, "0x0000"],
        "vf_driver": vf_driver,
        "vf_layout": "none",
        "vf_types": None,
        "iommu_base": group + 1,
        "parent_dir": parent,
        "numa_node": numa,
        "provisioning": provisioning,
    }
    if provisioning:
        iov = f"{dev}/drm/card{provisioning['card']}/prelim_iov"
        h.tree.attr(f"{iov}/pf/auto_provisioning", 1)
        for n in range(1, total + 1):
            for name in ("lmem_quota", "ggtt_quota", "contexts_quota", "doorbells_quota", "exec_quantum_ms",
                         "preempt_timeout_us"):  # fmt: skip
                h.tree.attr(f"{iov}/vf{n}/gt/{name}", 0)
    if render is not None:  # the PF's DRM driver registers /dev/dri/renderD<N>: /sys/class/drm/renderD<N>
        add_render_node(h, dev, render)
    for index in range(enabled):
        add_sriov_vf(h, pf, index, probe=vf_driver is not None)
    h.tree.attr(f"{dev}/sriov_numvfs", enabled)
    provision_vfs(h, pf, enabled)


def add_render_node(h: HostBuilder, dev: str, minor: int) -> None:
    """drm/renderD<minor> under the GPU's device dir, its `device` link back, and the /sys/class/drm link."""
    node = f"{dev}/drm/renderD{minor}"
    h.tree.attr(f"{node}/dev", f"226:{minor}", 0o444)
    h.tree.link(f"{node}/device", dev)
    h.tree.link(f"/sys/class/drm/renderD{minor}", node)


def provision_vfs(h: HostBuilder, pf: str, count: int) -> None:
    """Intel i915 auto-provisioning: each of `count` enabled VFs gets an even share of the PF's resources in
    prelim_iov/vfN/gt/*_quota; disabled VFs read 0 (intel-resource-drivers-for-kubernetes, pkg/sriov fairShare)."""
    info = h.model["sriov"][pf]
    prov = info.get("provisioning")
    if not prov:
        return
    iov = f"{info['parent_dir']}/{pf}/drm/card{prov['card']}/prelim_iov"
    for n in range(1, len(info["vfs"]) + 1):
        on = n <= count
        h.tree.attr(f"{iov}/vf{n}/gt/lmem_quota", prov["lmem_bytes"] // count if on else 0)
        h.tree.attr(f"{iov}/vf{n}/gt/ggtt_quota", prov["ggtt_bytes"] // count if on else 0)
        h.tree.attr(f"{iov}/vf{n}/gt/contexts_quota", prov["contexts"] // count if on else 0)
        h.tree.attr(f"{iov}/vf{n}/gt/doorbells_quota", prov["doorbells"] // count if on else 0)


def add_mi300x(h: HostBuilder) -> None:
    """AMD Instinct MI300X under GIM in CPX/NPS4 mode: 8 VFs per GPU (GIM 8.5-9.4 release tables: "1 or 8*"),
    PF 1002:74a1 and VF 1002:74b5 (RHOSO's MI300X validated architecture), class 0x1200 (processing accelerator,
    as lspci names Aqua Vanjaram). GIM binds the PF and enables its VFs at load; amdgpu is blacklisted on the
    host, so the VFs have no driver. 192 GB HBM3 shared evenly: 24 GB per VF (no per-VF sysfs: amd-smi reports it)."""
    port = h.root_port("0000:80:01.0", "pci0000:80", group=20)
    _vf_pool_pf(h, "0000:83:00.0", port, "0x1002", "0x74a1", "0x120000", "gim", 21, 1, 8, 8, "0x74b5", None)
    h.tree.attr(GIM_VF_NUM, "8", 0o444)  # loaded as `modprobe gim vf_num=8` (MxGPU-Virtualization#13)


def add_flex170(h: HostBuilder) -> None:
    """Intel Data Center GPU Flex 170 (ATS-M, 8086:56c0) on Intel's i915 backport: up to 31 VFs (xe SR-IOV
    platform list: "ATSM (up to 31 VFs)"), VFs off at boot; i915 probes VFs it sees (autoprobe 1), so the
    per-VF provisioning is in drm/card1/prelim_iov. Fair share of 16 000 MiB LMEM, 3.75 GiB GGTT, 1024 contexts and
    240 doorbells (intel-resource-drivers-for-kubernetes flex170_m1: the whole GPU as one VF). VF device id = PF's
    [I]."""
    port = h.root_port("0000:4c:01.0", "pci0000:4a", group=30)
    prov = {"card": 1, "lmem_bytes": 16777216000, "ggtt_bytes": 4026531840, "contexts": 1024, "doorbells": 240}
    _vf_pool_pf(h, "0000:4d:00.0", port, "0x8086", "0x56c0", "0x038000", "i915", 31, 0, 31, 0, "0x56c0", "i915",
                provisioning=prov, render=129)  # fmt: skip


def add_uhd770(h: HostBuilder) -> None:
    """Intel UHD Graphics 770 (Raptor Lake-S, 8086:a780) at 00:02.0 on xe with SR-IOV (strongtz/i915-sriov-dkms:
    `xe.max_vfs=7`, "up to 7 VFs on Intel UHD Graphics", VFs at 00:02.1-7); boot VGA; no local memory. VF device id
    = PF's [I]."""
    _vf_pool_pf(h, "0000:00:02.0", "/sys/devices/pci0000:00", "0x8086", "0xa780", "0x030000", "xe", 40, 0, 7, 0,
                "0xa780", "xe", boot_vga=1, render=128)  # fmt: skip


def _kernel_samples(h: HostBuilder) -> None:
    add_mtty(h)
    add_mdpy(h, 4)
    add_mbochs(h, 96)
    add_nvme_sriov(h)
    add_vga_with_audio(h)


PROFILES: dict[str, tuple[str, Callable[[HostBuilder], None]]] = {
    "p4": ("two Tesla P4 (layout A, GRID P4 types nvidia-63…289)", _p4),
    "t4": ("one Tesla T4 (layout A)", _t4),
    "a100-mdev-vf": ("A100 40GB with 16 VFs, mdev types on each VF (layout B)", _a100),
    "h200-vendor-vfio": (
        "H200 SXM5 with 16 VFs on NVIDIA vendor-specific VFIO (layout C), MIG off: MIG-backed H200X-<n>-<GB>C types "
        "once MIG is on",
        _h200,
    ),
    "h200-mig": ("the h200-vendor-vfio host under the name the MIG examples use (the same H200, MIG off)", _h200),
    "a100d-mig": (
        "A100 PCIe 80GB with 16 VFs, mdev types on each VF (layout B), MIG off (enabling needs a reset)",
        lambda h: add_a100d_mig(h, "0000:41:00.0", "pci0000:40", 4, 0, 16),
    ),
    "rtxpro6000-mig": (
        "RTX PRO 6000 Blackwell with 16 VFs (layout C), MIG off; time-sliced MIG-backed types",
        lambda h: add_rtxpro6000(h, "0000:81:00.0", "pci0000:80", 6, 1, 16),
    ),
    "gvt-g": ("Intel iGPU with GVT-g types sharing the aperture (layout A)", lambda h: add_gvt_g(h)),
    "mtty": ("the kernel's mtty sample driver (24 ports, no descriptions)", lambda h: add_mtty(h)),
    "passthrough": (
        "GPU + HD audio in one group; a second GPU whose group holds its root port (layout D)",
        lambda h: add_passthrough(h),
    ),
    "mixed": ("P4 + A100 layout B + H200 layout C + passthrough GPUs + mtty on one host", _mixed),
    "mi300x-vf-pool": ("AMD Instinct MI300X under GIM, 8 VFs enabled (layout vf-pool)", lambda h: add_mi300x(h)),
    "flex170-vf-pool": (
        "Intel Data Center GPU Flex 170 on i915, 31 VFs not enabled (layout vf-pool)",
        lambda h: add_flex170(h),
    ),
    "uhd770-vf-pool": ("Intel UHD 770 iGPU on xe, 7 VFs not enabled (layout vf-pool)", lambda h: add_uhd770(h)),
    "kernel-samples": (
        "the kernel lane's guest: mtty, mdpy, mbochs (96 MiB), QEMU's SR-IOV NVMe (2 VFs), VGA + HD audio",
        _kernel_samples,
    ),
}


def build(profile: str, root: str) -> Model:
    """Build `profile` under `root` (which must be empty or absent)."""
    if profile not in PROFILES:
        raise UsageError(f'Unknown simulated profile "{profile}"', f"choose one of: {', '.join(PROFILES)}")
    if not root.strip():
        raise UsageError("the directory for the simulated host is empty", "give a new or empty directory, e.g. /tmp/h")
    if os.path.isdir(root) and os.listdir(root):
        raise UsageError(f"{root} is not empty", "give a new or empty directory for the simulated host")
    os.makedirs(root, exist_ok=True)
    h = HostBuilder(root, profile)
    PROFILES[profile][1](h)
    model = h.finish()
    pciids.install(root)
    install_tools(root, model)
    return model


NVIDIA_SMI_PATH = "usr/bin/nvidia-smi"  # sim/nvidia_smi.py answers it (installed here: it imports this module)


_MODEL_MAPS = ("drivers", "mdev_parents", "sriov", "pools", "vendor_vfio", "mig", "hetero", "ecc")  # str → entry


def check_model(model: Any, where: str) -> Model:
    """A simulated host's hardware model (the marker file, or one an imported snapshot carries) checked for the
    shape the simulator reads, once, where it enters: UsageError naming `where` instead of a KeyError later."""
    hint = "rebuild the host with `vgpuadm sim build`, or import the snapshot again"
    problem = None
    if not isinstance(model, dict) or model.get("format") != 1:
        problem = "not a version 1 simulated host model"
    elif not all(isinstance(model.get(k, {}), dict) and all(isinstance(n, str) for n in model.get(k, {}))
                 for k in _MODEL_MAPS):  # fmt: skip
        problem = f"one of {', '.join(_MODEL_MAPS)} is not a mapping by name"
    elif not all(isinstance(model.get(k), dict) for k in ("drivers", "mdev_parents", "sriov")):
        problem = "drivers, mdev_parents or sriov is missing"
    elif not all(isinstance(p, dict) and isinstance(p.get("path"), str) and isinstance(p.get("types"), dict)
                 and all(isinstance(t, dict) for t in p["types"].values()) for p in model["mdev_parents"].values()):  # fmt: skip
        problem = "an mdev parent has no path or types"
    elif not all(isinstance(e, dict) for k in ("sriov", "vendor_vfio", "pools", "mig", "hetero")
                 for e in model.get(k, {}).values()):  # fmt: skip
        problem = "an entry of sriov, vendor_vfio, pools, mig or hetero is not a mapping"
    elif not isinstance(model.get("faults", []), list) or not isinstance(model.get("next_iommu_group", 0), int):
        problem = "faults or next_iommu_group has the wrong type"
    elif not isinstance(model.get("driver_version", ""), str) or not all(
        v in ("Enabled", "Disabled") for v in model.get("ecc", {}).values()
    ):
        problem = "driver_version is no text, or an ecc entry is neither Enabled nor Disabled"
    if problem is not None:
        raise UsageError(f"{where}: {problem}", hint)
    return model


def install_tools(root: str, model: Model) -> None:
    """The driver package's tools a host of this model has (also for a simulated host imported from a snapshot)."""
    check_model(model, f"the simulated host model of {root}")
    if any(model["drivers"].get(pf) == "nvidia" for pf in model["sriov"]):
        install_sriov_manage(root)
    if model["vendor_vfio"] or model.get("mig"):  # the NVIDIA driver package brings nvidia-smi
        install_tool(root, NVIDIA_SMI_PATH, "vgpuadm.sim.nvidia_smi",
                     "nvidia-smi on a simulated host (installed by `vgpuadm sim build`): vgpu -s, -q -x, -mig, mig …")  # fmt: skip


SRIOV_MANAGE_PATH = "usr/lib/nvidia/sriov-manage"  # under the root, where the vGPU host driver package puts it


def install_sriov_manage(root: str) -> str:
    """Install the simulated NVIDIA sriov-manage (vgpuadm/sim/sriov_manage.py) at <root>/usr/lib/nvidia/, as the
    driver package does on a host whose PFs are bound to nvidia with SR-IOV."""
    return install_tool(root, SRIOV_MANAGE_PATH, "vgpuadm.sim.sriov_manage",
                        "NVIDIA's sriov-manage on a simulated host (installed by `vgpuadm sim build`): reference "
                        "§3.1's sequence through the simulated kernel. Usage: sriov-manage -e|-d BDF|ALL")  # fmt: skip
