"""A simulated `nvidia-smi` for simulated NVIDIA hosts: answers `vgpu -s -v` (every vGPU type each GPU supports,
whether or not one can be created now) from the simulated host's hardware model, in the real tool's layout:

    GPU 00000000:18:00.0
        vGPU Type ID                          : 0x58c
            Name                              : NVIDIA H200X-4C
            ...

`vgpuadm sim build` installs it as <root>/usr/bin/nvidia-smi (a wrapper running `python -m vgpuadm.sim.nvidia_smi
ROOT ARGS…`), as the real driver package installs nvidia-smi. Other invocations say what the real one says to an
unknown combination and exit 2."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence

from vgpuadm.host.sysfs import SIM_MARKER
from vgpuadm.sim.tools import install_tool

WRAPPER = "/usr/bin/nvidia-smi"


def supported_types(model: dict[str, object]) -> str:
    out = []
    vendor = model.get("vendor_vfio") or {}
    assert isinstance(vendor, dict)
    for pf, info in sorted(vendor.items()):
        domain, rest = pf.split(":", 1)
        out.append(f"GPU {int(domain, 16):08X}:{rest.upper()}")
        for num, name, fb_mib, mx in info["types"]:
            out += [
                f"    vGPU Type ID                          : {num:#x}",
                f"        Name                              : {name}",
                "        Class                             : Compute",
                "        GPU Instance Profile ID           : N/A",
                f"        Max Instances                     : {mx if mx is not None else 'N/A'}",
                "        Max Instances Per VM              : 1",
                f"        FB Memory                         : {fb_mib} MiB",
            ]
    return "\n".join(out) + "\n"


def main(argv: Sequence[str]) -> int:
    root, args = argv[0], list(argv[1:])
    if args in (["vgpu", "-s", "-v"], ["vgpu", "-v", "-s"]):
        with open(os.path.join(root, SIM_MARKER)) as f:
            sys.stdout.write(supported_types(json.load(f)))
        return 0
    sys.stderr.write("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n")
    return 2


def install(root: str) -> None:
    """Put the wrapper at <root>/usr/bin/nvidia-smi."""
    install_tool(root, WRAPPER, "vgpuadm.sim.nvidia_smi",
                 "nvidia-smi on a simulated host (installed by `vgpuadm sim build`): answers `vgpu -s -v`.")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
