"""Which vgpuadm modules `vgpuadm create --type nvidia-63 --vm web01` runs code in on a simulated Tesla P4, in the
order it first enters each (issue #29: request → read → plan → execute → report, at most 20 modules).

Every vgpuadm module is imported first, so import-time code does not count; then the command runs in-process under
`sys.setprofile`, and each Python call is attributed to the module whose code it runs. Printed: the product modules
in first-visit order, their count, the simulated kernel's modules apart (they stand in for the kernel and are not
on a real host's path), and the number of calls that move from one module to another.
Usage: python bench/trace_create.py [--type nvidia-63]
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import subprocess
import sys
import tempfile
from typing import Any

DOMAIN = (
    "<domain type='qemu'><name>web01</name><memory unit='MiB'>256</memory>"
    "<os><type arch='x86_64' machine='q35'>hvm</type></os><devices><graphics type='vnc'/></devices></domain>"
)


def import_everything() -> None:
    import vgpuadm

    for info in pkgutil.walk_packages(vgpuadm.__path__, "vgpuadm."):
        if not info.name.endswith("__main__"):
            importlib.import_module(info.name)


def trace(argv: list[str]) -> tuple[int, list[str], int]:
    from vgpuadm.cli.app import run
    from vgpuadm.cli.console import Console

    seen: list[str] = []
    state: dict[str, Any] = {"last": None, "moves": 0}

    def profile(frame: Any, event: str, _arg: Any) -> None:
        if event != "call":
            return
        module = frame.f_globals.get("__name__", "")
        if not module.startswith("vgpuadm") or module == state["last"]:
            return
        state["moves"] += state["last"] is not None
        state["last"] = module
        if module not in seen:
            seen.append(module)

    with open(os.devnull, "w") as null:
        sys.setprofile(profile)
        try:
            code = run(argv, Console(null, null))
        finally:
            sys.setprofile(None)
    return code, seen, state["moves"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--type", default="nvidia-63")
    a = ap.parse_args()
    import_everything()
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "p4")
        subprocess.run([sys.executable, "-m", "vgpuadm", "sim", "build", "p4", root], check=True,
                       stdout=subprocess.DEVNULL)  # fmt: skip
        uri = f"qemu:///embed?root={root}/var/lib/vgpuadm/libvirt"
        xml = os.path.join(tmp, "web01.xml")
        with open(xml, "w") as f:
            f.write(DOMAIN)
        subprocess.run(["virsh", "-q", "-c", uri, "define", xml], check=True, stdout=subprocess.DEVNULL)
        code, seen, moves = trace(["--root", root, "create", "--type", a.type, "--vm", "web01"])
    if code != 0:
        sys.exit(f"create exited {code}")
    product = [m for m in seen if not m.startswith("vgpuadm.sim")]
    for m in product:
        print(f"  {m}")
    print(f"simulated kernel (not on a real host's path): {', '.join(m for m in seen if m.startswith('vgpuadm.sim'))}")
    print(f"calls moving from one module to another: {moves}")
    print(f"product modules: {len(product)}   target <= 20")


if __name__ == "__main__":
    main()
