"""Generate a synthetic layout-B host for benchmarks: N PFs × M VFs × T mdev types per VF.

Usage: python bench/synth_host.py DIR [--pfs 8] [--vfs 16] [--types 20]
"""

from __future__ import annotations

import argparse

from vgpuadm.sim.tree import MdevTypeSpec, PciSpec, TreeBuilder


def build(root: str, pfs: int = 8, vfs: int = 16, types: int = 20) -> None:
    tree = TreeBuilder(root)
    tree.bus()
    sizes = [1024, 2048, 3072, 4096, 6144, 8192, 12288, 24576]
    for p in range(pfs):
        bus = 0x41 + p * 2
        host_bridge = f"/sys/devices/pci0000:{bus - 1:02x}"
        pf_addr = f"0000:{bus:02x}:00.0"
        extra = {"sriov_totalvfs": str(vfs), "sriov_numvfs": str(vfs), "sriov_offset": "4", "sriov_stride": "1"}
        pf = tree.pci(PciSpec(pf_addr, host_bridge, "0x10de", "0x2236", "0x030200", "nvidia", 10 + p, p % 2,
                              ("0x10de", "0x1482"), extra=extra))  # fmt: skip
        for v in range(vfs):
            fn = 4 + v
            addr = f"0000:{bus:02x}:{fn // 8:02x}.{fn % 8}"
            dev = tree.pci(PciSpec(addr, host_bridge, "0x10de", "0x2236", "0x030200", "nvidia", 100 + p * vfs + v,
                                   p % 2, ("0x10de", "0x1482")))  # fmt: skip
            tree.link(f"{dev}/physfn", pf)
            tree.link(f"{pf}/virtfn{v}", dev)
            specs = []
            for t in range(types):
                fb = sizes[t % len(sizes)]
                series = "QABC"[t // len(sizes) % 4]
                name = f"NVIDIA A10-{fb // 1024}{series}"
                desc = (f"num_heads={4 if series == 'Q' else 1}, frl_config=60, framebuffer={fb}M, "
                        f"max_resolution=7680x4320, max_instance={24576 // fb}")  # fmt: skip
                specs.append(MdevTypeSpec(f"nvidia-{588 + t}", name, desc, 1))
            tree.mdev_parent(dev, addr, specs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root")
    ap.add_argument("--pfs", type=int, default=8)
    ap.add_argument("--vfs", type=int, default=16)
    ap.add_argument("--types", type=int, default=20)
    a = ap.parse_args()
    build(a.root, a.pfs, a.vfs, a.types)


if __name__ == "__main__":
    main()
