"""The small PCI ID database a simulated host ships at <root>/usr/share/misc/pci.ids: the entries of pci.ids
(https://pci-ids.ucw.cz, same format) for the devices the profiles build, so model names ("Tesla P4") show
without the system's copy, and a board newer than it (H200) still has its name."""

from __future__ import annotations

import os

PCI_IDS_PATH = "usr/share/misc/pci.ids"

PCI_IDS = """\
# vgpuadm simulated host: a subset of pci.ids (https://pci-ids.ucw.cz), the devices its profiles build
1002  Advanced Micro Devices, Inc. [AMD/ATI]
\t740f  Aldebaran/MI200 [Instinct MI210]
\t74a1  Aqua Vanjaram [Instinct MI300X]
\t74b5  Aqua Vanjaram [Instinct MI300X VF]
10de  NVIDIA Corporation
\t10f0  GP104 High Definition Audio Controller
\t10f7  TU102 High Definition Audio Controller
\t1aef  GA102 High Definition Audio Controller
\t1bb3  GP104GL [Tesla P4]
\t1e04  TU102 [GeForce RTX 2080 Ti]
\t1eb8  TU104GL [Tesla T4]
\t20f1  GA100 [A100 PCIe 40GB]
\t2204  GA102 [GeForce RTX 3090]
\t2335  GH100 [H200 SXM 141GB]
1b36  Red Hat, Inc.
\t0010  QEMU NVM Express Controller
8086  Intel Corporation
\t2030  Sky Lake-E PCI Express Root Port A
\t293e  82801I (ICH9 Family) HD Audio Controller
\t3e92  CoffeeLake-S GT2 [UHD Graphics 630]
\t56c0  Data Center GPU Flex 170
\ta780  Raptor Lake-S GT1 [UHD Graphics 770]
"""


def install(root: str) -> None:
    path = os.path.join(root, PCI_IDS_PATH)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(PCI_IDS)
