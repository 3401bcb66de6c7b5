"""How discovery's cost grows with the host: synthetic layout-B hosts of 16, 64, 256 and 1,024 VFs (16 VFs per PF,
--types mdev types per VF), timed in this process doing what `vgpuadm types --json` does minus printing (snapshot
with types + the type rows, the cyclic collector paused as cli/fast.py pauses it), against the floor for the same
data: one os.open+os.read+os.close of every attribute file that very discovery opened (recorded with an audit hook
on `open`), in a plain loop.

Target: cost per VF flat (linear growth) and the 1,024-VF host within 1.5× of the open+read floor. Interleaved
(discovery, floor, discovery, …), median of --runs. Usage: .venv/bin/python bench/bench_scaling.py [--runs 5]
[--sizes 16,64,256,1024] [--types 20] [--before TREE]   (smoke: --runs 1 --sizes 16 --types 2). Trees in --tmpdir
(/var/tmp). `--before TREE`: on each host, a child process per run and tree (PYTHONPATH=TREE, then this tree),
alternating, each timing one discovery against the floor; prints both trees' medians and after/before. With
`--slash` each child reads the host as `/` (unshare -m, the tree bind-mounted on /sys: no confinement checks).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from synth_host import build

from vgpuadm.host.discover import snapshot
from vgpuadm.host.root import HostRoot
from vgpuadm.report.listing import type_rows

_recording: list[str] | None = None
# The directory discovery opened last by absolute path, and the one its relative opens (dir_fd) are under: on a
# confined root (--root) read_tree opens each type's directory relative to the parent's (O_NOFOLLOW), then the
# attributes relative to that; unconfined, the attributes as "type/name" relative to the parent's.
_base = [""]
_cwd = [""]


def _audit(event: str, args: tuple[object, ...]) -> None:
    if _recording is None or event != "open" or not isinstance(args[0], str):
        return
    path, flags = args[0], args[2]
    if isinstance(flags, int) and flags & os.O_DIRECTORY:
        if path.startswith("/"):
            _base[0] = _cwd[0] = path
        else:
            _cwd[0] = os.path.join(_base[0], path)
        return
    _recording.append(path if path.startswith("/") else os.path.join(_cwd[0], path))


def discover(root: str) -> int:
    # As cli/fast.py runs `types --json`: with the cyclic collector paused (it would only walk the records and rows,
    # none of which is freed before the command ends: 10-15 % of this at 1,024 VFs).
    collecting = gc.isenabled()
    gc.disable()
    try:
        return len(type_rows(snapshot(HostRoot(root).sysfs(), types=True), None, False, None))
    finally:
        if collecting:
            gc.enable()


def opened_files(root: str) -> list[str]:
    """The regular files one discovery opens (directories it opens for scandir are left out)."""
    global _recording
    _recording = []
    try:
        discover(root)
    finally:
        seen, _recording = _recording, None
    return [p for p in seen if os.path.isfile(p)]


def floor(paths: list[str]) -> int:
    """os.open + os.read + os.close of each path: the fewest syscalls that read an attribute."""
    n = 0
    open_, read, close = os.open, os.read, os.close
    for p in paths:
        fd = open_(p, os.O_RDONLY)
        n += len(read(fd, 4096))
        close(fd)
    return n


def interleaved(root: str, runs: int) -> tuple[int, list[str], list[float], list[float], list[float], list[float]]:
    """Discovery and the floor on an existing host, `runs` times interleaved (after one warming discovery): the
    type count, the files discovery opened, and the seconds of each run of each, wall-clock then CPU (this
    process's: under load the wall-clock times stretch with the other processes)."""
    types = discover(root)  # warm the dentry and page caches
    paths = opened_files(root)
    ours: list[float] = []
    base: list[float] = []
    ours_cpu: list[float] = []
    base_cpu: list[float] = []
    for _ in range(runs):
        start, cpu = time.perf_counter(), time.process_time()
        discover(root)
        ours.append(time.perf_counter() - start)
        ours_cpu.append(time.process_time() - cpu)
        start, cpu = time.perf_counter(), time.process_time()
        floor(paths)
        base.append(time.perf_counter() - start)
        base_cpu.append(time.process_time() - cpu)
    return types, paths, ours, base, ours_cpu, base_cpu


def measure(root: str, runs: int) -> None:
    """--measure: `interleaved` on an existing host, as JSON."""
    types, paths, ours, base, ours_cpu, base_cpu = interleaved(root, runs)
    print(json.dumps({"types": types, "files": len(paths), "ours": ours, "floor": base, "ours_cpu": ours_cpu,
                      "floor_cpu": base_cpu}))  # fmt: skip


def compare_trees(a: argparse.Namespace) -> None:
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    trees = {"before": os.path.abspath(a.before), "after": here}
    where = "on / (unshare -m, the tree bind-mounted on /sys)" if a.slash else "on a --root tree"
    print(f"discovery vs the open+read floor {where}, before/after (a child per run and tree, alternating; load "
          f"average {os.getloadavg()[0]:.1f} at start)")  # fmt: skip
    for n in (int(s) for s in a.sizes.split(",")):
        tmp = tempfile.mkdtemp(prefix=f"bench-scaling-{n}-", dir=a.tmpdir)
        got: dict[str, list[tuple[float, float]]] = {k: [] for k in trees}
        got_cpu: dict[str, list[tuple[float, float]]] = {k: [] for k in trees}
        try:
            root = os.path.join(tmp, "host")
            build(root, max(1, n // 16), min(n, 16), a.types)
            for _ in range(a.runs):
                for name, tree in trees.items():
                    child = [sys.executable, os.path.abspath(__file__), "--measure", root, "--runs", "1"]
                    if a.slash:  # the host's tree as / sees it: bind-mounted on /sys in a mount namespace
                        child = ["unshare", "-m", "sh", "-c", 'mount --bind "$0/sys" /sys && exec "$@"', root,
                                 *child[:3], "/", *child[4:]]  # fmt: skip
                    out = subprocess.run(child, env=dict(os.environ, PYTHONPATH=tree), capture_output=True, text=True,
                                         check=True, cwd="/").stdout  # fmt: skip
                    r = json.loads(out)
                    got[name].append((r["ours"][0], r["floor"][0]))
                    got_cpu[name].append((r["ours_cpu"][0], r["floor_cpu"][0]))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        med = {k: (statistics.median(o for o, _ in v), statistics.median(o / f for o, f in v)) for k, v in got.items()}
        cpu = {k: statistics.median(o for o, _ in v) for k, v in got_cpu.items()}
        for k in trees:
            print(f"{n:>6} VFs {k:>6}: discovery median {med[k][0] * 1000:8.1f} ms, ratio to the floor median "
                  f"{med[k][1]:.2f}  (runs: {', '.join(f'{o / f:.2f}' for o, f in got[k])}); CPU {cpu[k] * 1000:.1f} "
                  f"ms, ratio {statistics.median(o / f for o, f in got_cpu[k]):.2f}")  # fmt: skip
        print(f"{n:>6} VFs after/before discovery: {med['after'][0] / med['before'][0]:.2f}, CPU "
              f"{cpu['after'] / cpu['before']:.2f}")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--sizes", default="16,64,256,1024")
    ap.add_argument("--types", type=int, default=20)
    ap.add_argument("--tmpdir", default="/var/tmp")
    ap.add_argument("--before", metavar="TREE", help="also time this source tree, a child process per run")
    ap.add_argument("--slash", action="store_true", help="with --before: each host on / (needs root and unshare)")
    ap.add_argument("--measure", metavar="ROOT", help=argparse.SUPPRESS)  # a child of --before
    a = ap.parse_args()
    sys.addaudithook(_audit)
    if a.measure:
        measure(a.measure, a.runs)
        return
    if a.before:
        compare_trees(a)
        return
    sizes = [int(s) for s in a.sizes.split(",")]
    rows = []
    for n in sizes:
        tmp = tempfile.mkdtemp(prefix=f"bench-scaling-{n}-", dir=a.tmpdir)
        try:
            root = os.path.join(tmp, "host")
            build(root, max(1, n // 16), min(n, 16), a.types)
            types, paths, ours, base, _, _ = interleaved(root, a.runs)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        rows.append((n, types, len(paths), statistics.median(ours), statistics.median(base)))
    print(f"discovery vs one open+read per attribute ({a.runs} runs each, interleaved; load average "
          f"{os.getloadavg()[0]:.1f})")  # fmt: skip
    print(f"{'VFs':>6} {'types':>7} {'files':>7} {'discovery ms':>13} {'floor ms':>9} {'ratio':>6} {'µs/VF':>8}")
    for n, types, files, ours_s, base_s in rows:
        print(f"{n:>6} {types:>7} {files:>7} {ours_s * 1000:>13.1f} {base_s * 1000:>9.1f} {ours_s / base_s:>6.2f} "
              f"{ours_s / n * 1e6:>8.0f}")  # fmt: skip
    if len(rows) > 1:
        growth = (rows[-1][3] / rows[-1][0]) / (rows[0][3] / rows[0][0])
        print(f"cost per VF, largest / smallest host: {growth:.2f} (1.0 = linear)")
    print(f"largest host: {rows[-1][3] / rows[-1][4]:.2f}× the open+read floor (target <= 1.50)")


if __name__ == "__main__":
    main()
