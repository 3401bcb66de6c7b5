"""Cost of one simulated-kernel write on 16-VF hosts (target: a few ms), wall-clock and CPU medians per operation.

Operations, each measured as a do/undo pair on a fresh host so every sample does the same work:
  P4 create+remove (14 types), A100 layout B create+remove on a VF of an idle GPU (the worst case: 16 VFs ×
  11 types flip) and on a GPU already running that size (the usual case),
  H200 layout C current_vgpu_type set+clear (16 creatable lists rewritten), passthrough override+unbind+probe.
The host root lives on tmpfs (/dev/shm) when available, as a real /sys is in memory; `--dir` overrides.
Usage: python bench/bench_sim_kernel.py [--runs 30] [--dir /tmp]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable

from vgpuadm.sim.kernel import SimKernel
from vgpuadm.sim.profiles import build

U, U2, U3 = (f"00000000-0000-4000-8000-00000000000{n}" for n in (1, 2, 3))


def measure(fn: Callable[[], None], runs: int) -> tuple[float, float]:
    wall, cpu = [], []
    for _ in range(runs):
        w, c = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - w)
        cpu.append(time.process_time() - c)
    return statistics.median(wall), statistics.median(cpu)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--dir", default="/dev/shm" if os.path.isdir("/dev/shm") else None)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=a.dir) as tmp:
        names = ("p4", "a100-mdev-vf", "h200-vendor-vfio", "passthrough", "a100-mdev-vf")
        roots = [os.path.join(tmp, f"{i}-{p}") for i, p in enumerate(names)]
        for profile, root in zip(names, roots, strict=True):
            build(profile, root)
        p4, a100, h200, pt, a100_used = (SimKernel(r) for r in roots)
        p4_dev = "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0"
        vf = "/sys/bus/pci/devices/0000:41:00.4"
        h200_vf = "/sys/bus/pci/devices/0000:18:00.4/nvidia/current_vgpu_type"
        gpu = "/sys/bus/pci/devices/0000:65:00.0"

        vf5 = "/sys/bus/pci/devices/0000:41:00.5"
        a100_used.write("/sys/bus/pci/devices/0000:41:01.3/mdev_supported_types/nvidia-468/create", U3)

        def passthrough() -> None:
            pt.write(f"{gpu}/driver_override", "vfio-pci\n")
            pt.write("/sys/bus/pci/drivers/nvidia/unbind", "0000:65:00.0")
            pt.write("/sys/bus/pci/drivers_probe", "0000:65:00.0")
            pt.write("/sys/bus/pci/drivers/vfio-pci/unbind", "0000:65:00.0")
            pt.write(f"{gpu}/driver_override", "\n")
            pt.write("/sys/bus/pci/drivers_probe", "0000:65:00.0")

        cases: list[tuple[str, int, Callable[[], None]]] = [
            ("p4 mdev create+remove", 2, lambda: (
                p4.write(f"{p4_dev}/mdev_supported_types/nvidia-63/create", U),
                p4.write(f"{p4_dev}/{U}/remove", "1"))),
            ("a100 16-VF mdev create+remove", 2, lambda: (
                a100.write(f"{vf}/mdev_supported_types/nvidia-468/create", U),
                a100.write(f"/sys/bus/mdev/devices/{U}/remove", "1"))),
            ("a100 2nd mdev on a used GPU", 2, lambda: (
                a100_used.write(f"{vf5}/mdev_supported_types/nvidia-468/create", U2),
                a100_used.write(f"/sys/bus/mdev/devices/{U2}/remove", "1"))),
            ("h200 16-VF type set+clear", 2, lambda: (h200.write(h200_vf, "1420"), h200.write(h200_vf, "0"))),
            ("passthrough bind+restore", 6, passthrough),
        ]  # fmt: skip
        print(f"root on {a.dir or tempfile.gettempdir()}, {a.runs} runs; per-write medians")
        for name, writes, fn in cases:
            wall, cpu = measure(fn, a.runs)
            print(f"{name:32s} wall {wall / writes * 1000:6.2f} ms/write   cpu {cpu / writes * 1000:6.2f} ms/write")


if __name__ == "__main__":
    main()
