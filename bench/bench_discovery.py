"""Discovery speed on a synthetic layout-B host (8 PF × 16 VF × 20 types) against `mdevctl types --dumpjson`.

Both run the same way: `unshare -m sh -c 'mount --bind ROOT/sys /sys && CMD'` (needs root), so each pays the same
namespace and mount cost, and both read the same /sys. Runs are interleaved (timing.py); prints wall-clock and CPU
(user+sys) medians and minima and the ratio vgpuadm/mdevctl (target ≤ 1.0).
`--before TREE` also times TREE's vgpuadm (PYTHONPATH), interleaved, for a before/after in the same run; both sides
then run with PYTHONPATH set (this tree for after), so they pay the same environment, each through the command
script its own install makes (timing.installed_command).
Usage: python bench/bench_discovery.py [--runs 10] [--pfs 8 --vfs 16 --types 20] [--before TREE]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from synth_host import build
from timing import compare, installed_command, ratios


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--pfs", type=int, default=8)
    ap.add_argument("--vfs", type=int, default=16)
    ap.add_argument("--types", type=int, default=20)
    ap.add_argument("--before", metavar="TREE", help="also time this source tree's vgpuadm, interleaved")
    a = ap.parse_args()
    if os.geteuid() != 0 or not shutil.which("mdevctl") or not shutil.which("unshare"):
        sys.exit("needs root, mdevctl and unshare")
    vgpuadm = os.path.join(os.path.dirname(sys.executable), "vgpuadm")
    with tempfile.TemporaryDirectory() as tmp:
        # An installed package has compiled bytecode: cache it outside the tree for these runs.
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = os.path.join(tmp, "pycache")
        root = os.path.join(tmp, "host")
        # No simulation marker: vgpuadm reads this tree exactly as it reads a real /sys.
        build(root, a.pfs, a.vfs, a.types)

        def in_ns(cmd: str) -> list[str]:
            return ["unshare", "-m", "sh", "-c", f"mount --bind {root}/sys /sys && {cmd}"]

        commands = {
            "python -c pass": in_ns(f"{sys.executable} -c pass"),
            "mdevctl types --dumpjson": in_ns("mdevctl types --dumpjson"),
            "vgpuadm types --json": in_ns(f"{vgpuadm} types --json"),
        }
        if a.before:
            here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
            before = os.path.abspath(a.before)
            # Each tree through the command script its own install makes (the entry point pip writes imports re).
            ours, theirs = installed_command(here, tmp), installed_command(before, tmp)
            commands["vgpuadm types --json"] = in_ns(f"PYTHONPATH={here} {sys.executable} {ours} types --json")
            commands["vgpuadm types --json (before)"] = in_ns(
                f"PYTHONPATH={before} {sys.executable} {theirs} types --json"
            )
        compare(commands, 2, env)  # warm the dentry, page and bytecode caches
        stats = compare(commands, a.runs, env)
    n = a.pfs * a.vfs
    print(f"synthetic host: {a.pfs} PFs × {a.vfs} VFs = {n} mdev parents × {a.types} types = {n * a.types} types")
    for name, s in stats.items():
        print(s.line(name, a.runs))
    mdevctl, ours = stats["mdevctl types --dumpjson"], stats["vgpuadm types --json"]
    print(f"ratio vgpuadm/mdevctl: {ratios(ours, mdevctl)}   target <= 1.00x")
    if a.before:
        print(f"ratio before/mdevctl: {ratios(stats['vgpuadm types --json (before)'], mdevctl)}")
        print(f"ratio after/before: {ratios(ours, stats['vgpuadm types --json (before)'])}")


if __name__ == "__main__":
    main()
