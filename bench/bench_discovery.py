"""Discovery speed on a synthetic layout-B host (8 PF × 16 VF × 20 types) against `mdevctl types --dumpjson`.

Both run the same way: `unshare -m sh -c 'mount --bind ROOT/sys /sys && CMD'` (needs root), so each pays the same
namespace and mount cost. Prints the wall-clock and CPU (user+sys) medians of each and the ratio vgpuadm/mdevctl
(target ≤ 1.0). CPU time is the steadier number on a shared machine.
Usage: python bench/bench_discovery.py [--runs 10] [--pfs 8 --vfs 16 --types 20]
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from synth_host import build


def measure(shell_cmd: str, root: str, runs: int, env: dict[str, str]) -> tuple[float, float]:
    """Median wall and CPU seconds of `shell_cmd` run with ROOT/sys bind-mounted on /sys."""
    walls, cpus = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(["unshare", "-m", "sh", "-c", f"mount --bind {root}/sys /sys && {shell_cmd}"],
                       check=True, stdout=subprocess.DEVNULL, env=env)  # fmt: skip
        walls.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--pfs", type=int, default=8)
    ap.add_argument("--vfs", type=int, default=16)
    ap.add_argument("--types", type=int, default=20)
    a = ap.parse_args()
    if os.geteuid() != 0 or not shutil.which("mdevctl") or not shutil.which("unshare"):
        sys.exit("needs root, mdevctl and unshare")
    vgpuadm = os.path.join(os.path.dirname(sys.executable), "vgpuadm")
    with tempfile.TemporaryDirectory() as tmp:
        # An installed package has compiled bytecode: cache it outside the tree for these runs.
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = os.path.join(tmp, "pycache")
        tmp = os.path.join(tmp, "host")
        build(tmp, a.pfs, a.vfs, a.types)
        # The root carries no simulation marker: vgpuadm reads it exactly as it reads a real /sys.
        for cmd in ("mdevctl types --dumpjson", f"{vgpuadm} types --json"):
            measure(cmd, tmp, 2, env)  # warm the dentry and page caches
        results = {
            "python -c pass": measure(f"{sys.executable} -c pass", tmp, a.runs, env),
            "mdevctl types --dumpjson": measure("mdevctl types --dumpjson", tmp, a.runs, env),
            "vgpuadm types --json": measure(f"{vgpuadm} types --json", tmp, a.runs, env),
        }
    n = a.pfs * a.vfs
    print(f"synthetic host: {a.pfs} PFs × {a.vfs} VFs = {n} mdev parents × {a.types} types = {n * a.types} types")
    for name, (wall, cpu) in results.items():
        print(f"{name:28s} wall median {wall * 1000:7.1f} ms   cpu median {cpu * 1000:7.1f} ms   ({a.runs} runs)")
    (mw, mc), (vw, vc) = results["mdevctl types --dumpjson"], results["vgpuadm types --json"]
    print(f"ratio vgpuadm/mdevctl: wall {vw / mw:.2f}x, cpu {vc / mc:.2f}x (target <= 1.00x)")


if __name__ == "__main__":
    main()
