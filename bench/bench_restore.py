"""Boot-time restore: 64 mdevs (nvidia-63, 8 per GPU) on a simulated 8×P4 host after `vgpuadm sim reboot`, rebuilt
by `vgpuadm --root R restore --domain-xml-dir DIR` (domains read from saved XML, as at boot before libvirtd runs)
versus what mdevctl's udev rule runs: `mdevctl start-parent-mdevs PARENT` once per parent, over the same devices
defined in an /etc/mdevctl.d bind-mounted from the root, with the root's sys/ on /sys (`unshare -m`, root only).

mdevctl's writes to `create` land in plain files (the tree is not a kernel), so its side does no kernel work at all,
while vgpuadm's writes go through the simulated kernel, which makes the devices: the comparison favours mdevctl.
Runs alternate (vgpuadm, mdevctl, …) after a fresh `sim reboot` each; medians of wall time, ratio target ≤ 1.0.
Usage: .venv/bin/python bench/bench_restore.py [--runs 5] [--gpus 8] [--per-gpu 8]   (smoke: --runs 1 --gpus 1
--per-gpu 1). Roots in --tmpdir (default /var/tmp, the normal disk).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import saved_devices
from timing import bytecode_env

from vgpuadm import api
from vgpuadm.sim.profiles import HostBuilder, add_p4

TYPE = "nvidia-63"


def build(root: str, gpus: int, per_gpu: int) -> tuple[str, str, list[str]]:
    """The host, one saved domain XML per device (in DIR) and the same devices as mdevctl definitions (in ETC)."""
    h = HostBuilder(root, "bench-restore")
    parents = []
    for i in range(gpus):
        address = f"0000:{0x10 + i:02x}:00.0"
        add_p4(h, address, f"0000:00:{i + 1:02x}.0", "pci0000:00", 10 + i, i % 2)
        parents.append(address)
    h.finish()
    host = api.discover(root).host_key
    domains, etc = os.path.join(root, "domains"), os.path.join(root, "mdevctl.d")
    os.makedirs(domains)
    saved_devices.write(host, [(str(uuid.uuid4()), TYPE, p) for p in parents for _ in range(per_gpu)], domains, etc)
    return domains, etc, parents


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one run; CPU is the user+sys time of the command and its children."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    # cwd "/": `python -m` puts the working directory first on sys.path, ahead of PYTHONPATH, so run from a
    # worktree, `--before TREE` would time that worktree's code twice.
    r = subprocess.run(argv, capture_output=True, text=True, env=env, cwd="/")
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        sys.exit(f"{' '.join(argv[:4])}… failed: {r.stderr.strip()[-500:]}")
    return elapsed, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--per-gpu", type=int, default=8)
    ap.add_argument("--tmpdir", default="/var/tmp")
    ap.add_argument("--before", metavar="TREE", help="also run this source tree's vgpuadm, interleaved")
    a = ap.parse_args()
    if os.geteuid() != 0 or not shutil.which("mdevctl") or not shutil.which("unshare"):
        sys.exit("needs root, mdevctl and unshare")
    py = sys.executable
    root = os.path.abspath(tempfile.mkdtemp(prefix="bench-restore-", dir=a.tmpdir))
    try:
        domains, etc, parents = build(root, a.gpus, a.per_gpu)
        loop = "; ".join(f"mdevctl start-parent-mdevs {p}" for p in parents)
        commands = {
            "vgpuadm restore": [py, "-m", "vgpuadm", "--root", root, "restore", "--domain-xml-dir", domains],
            "mdevctl start-parent-mdevs": [
                "unshare", "-m", "sh", "-ec",
                f"mount --bind {root}/sys /sys; mount --bind {etc} /etc/mdevctl.d; {loop}",
            ],
        }  # fmt: skip
        env = bytecode_env(os.path.join(root, "pycache"))
        envs = {k: env for k in commands}
        if a.before:
            commands["vgpuadm restore (before)"] = commands["vgpuadm restore"]
            envs["vgpuadm restore (before)"] = bytecode_env(os.path.join(root, "pycache-before"),
                                                            dict(env, PYTHONPATH=a.before))  # fmt: skip
        times: dict[str, list[float]] = {k: [] for k in commands}
        cpus: dict[str, list[float]] = {k: [] for k in commands}
        for name, argv in commands.items():  # warm the bytecode and page caches
            subprocess.run([py, "-m", "vgpuadm", "sim", "reboot", root], check=True, capture_output=True)
            timed(argv, envs[name])
        for _ in range(a.runs):
            for name, argv in commands.items():
                subprocess.run([py, "-m", "vgpuadm", "sim", "reboot", root], check=True, capture_output=True)
                env = envs[name]
                wall, cpu = timed(argv, envs[name])
                times[name].append(wall)
                cpus[name].append(cpu)
                if name.startswith("vgpuadm"):
                    made = len(os.listdir(os.path.join(root, "sys/bus/mdev/devices")))
                    assert made == a.gpus * a.per_gpu, f"{name} made {made} mdevs"
    finally:
        shutil.rmtree(root, ignore_errors=True)
    n = a.gpus * a.per_gpu
    print(f"restore {n} mdevs on {a.gpus} P4 after sim reboot ({a.runs} runs, load average {os.getloadavg()[0]:.1f})")
    med = {k: statistics.median(v) for k, v in times.items()}
    cpu = {k: statistics.median(v) for k, v in cpus.items()}
    for name, t in times.items():
        print(f"  {name:32s} median {med[name]:.3f} s wall, {cpu[name]:.3f} s CPU   "
              f"wall runs {', '.join(f'{x:.2f}' for x in t)}")  # fmt: skip
    ratio = med["vgpuadm restore"] / med["mdevctl start-parent-mdevs"]
    cpu_ratio = cpu["vgpuadm restore"] / cpu["mdevctl start-parent-mdevs"]
    print(f"  ratio vgpuadm / mdevctl: {ratio:.2f} wall, {cpu_ratio:.2f} CPU   target <= 1.00 "
          f"({'met' if ratio <= 1 else 'NOT met'})")  # fmt: skip
    if a.before:
        print(
            f"  after / before: {med['vgpuadm restore'] / med['vgpuadm restore (before)']:.2f} wall, "
            f"{cpu['vgpuadm restore'] / cpu['vgpuadm restore (before)']:.2f} CPU"
        )


if __name__ == "__main__":
    main()
