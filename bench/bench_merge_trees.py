"""Before/after of the fleet merge across source trees: bench_merge.py's reports (3 simulated 8×P4 hosts written
out --hosts times), then `api.merge_inventories` of all of them timed in a fresh process per tree, the trees
alternating run by run (A, B, A, B, …), each from `/` with PYTHONPATH on its tree. Prints per tree the median wall
and CPU seconds (CPU: the merge's process and the processes it forks to fold shares of the reports) and the wall and
CPU ratios of the last tree to the first.
Usage: .venv/bin/python bench/bench_merge_trees.py [--hosts 10000] [--runs 5] BEFORE_TREE AFTER_TREE
(smoke: --hosts 6 --runs 1 . .)
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

import orjson

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_merge import variants

# CPU: the merge's own and that of the processes it forked and waited for (RUSAGE_CHILDREN)
CHILD = (
    "import glob, resource, sys, time; from vgpuadm import api; paths = sorted(glob.glob(sys.argv[1] + '/*.json'));"
    " kids = lambda: (lambda r: r.ru_utime + r.ru_stime)(resource.getrusage(resource.RUSAGE_CHILDREN)); "
    "w, c, k = time.perf_counter(), time.process_time(), kids(); fleet = api.merge_inventories(paths); "
    "print(time.perf_counter() - w, time.process_time() - c, kids() - k, fleet['totals']['hosts'], api.__file__)"
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=10000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--tmpdir", default="/var/tmp")
    ap.add_argument("trees", nargs="+", metavar="TREE")
    a = ap.parse_args()
    trees = [os.path.abspath(t) for t in a.trees]
    with tempfile.TemporaryDirectory(prefix="vgpuadm-bench-merge-trees-", dir=a.tmpdir) as base:
        docs = variants(base)
        reports = os.path.join(base, "reports")
        os.makedirs(reports)
        for i in range(a.hosts):
            with open(os.path.join(reports, f"node{i:04d}.json"), "wb") as f:
                f.write(orjson.dumps(dict(docs[i % len(docs)], host=f"node{i:04d}.example"),
                                     option=orjson.OPT_INDENT_2))  # fmt: skip
        runs: list[list[tuple[float, float, float]]] = [[] for _ in trees]  # wall, own CPU, children's CPU
        for _ in range(a.runs):
            for k, tree in enumerate(trees):
                out = subprocess.run([sys.executable, "-c", CHILD, reports], env=dict(os.environ, PYTHONPATH=tree),
                                     capture_output=True, text=True, check=True, cwd="/").stdout.split()  # fmt: skip
                assert int(out[3]) == a.hosts and out[4].startswith(tree + "/"), out
                runs[k].append((float(out[0]), float(out[1]), float(out[2])))
    print(f"merge of {a.hosts} reports × 8 GPUs, {a.runs} runs per tree (load average {os.getloadavg()[0]:.1f})")
    cpu, wall = [], []
    for tree, r in zip(trees, runs, strict=True):
        cpu.append(statistics.median(c + k for _, c, k in r))
        wall.append(statistics.median(w for w, _, _ in r))
        print(f"  {tree}: median {wall[-1]:.3f} s wall (min {min(w for w, _, _ in r):.3f}), {cpu[-1]:.3f} s CPU "
              f"(the merge's process {statistics.median(c for _, c, _ in r):.3f} s, its children "
              f"{statistics.median(k for _, _, k in r):.3f} s)\n"
              f"    wall runs {', '.join(f'{w:.2f}' for w, _, _ in r)}; CPU runs {', '.join(f'{c + k:.2f}' for _, c, k in r)}")  # fmt: skip
    print(f"  CPU last / first tree: {cpu[-1] / cpu[0]:.2f}; wall last / first tree: {wall[-1] / wall[0]:.2f}")


if __name__ == "__main__":
    main()
