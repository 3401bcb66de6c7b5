"""What the executor's safety costs: creating N mdevs on a simulated P4 host through `api.apply` (lock, atomic
fsync'd journal before each step, effect check, undo stack) against the same N raw create writes through Sysfs.

Prints the medians and the ratio executor/raw, plus the time to discover+plan the request and to roll back a plan
whose last step fails. The journal adds one fsync per step (plus a directory fsync for the first), about what
one simulated write costs, so the expected ratio is 2–3, dominated by fsync latency. Target: ratio ≤ 3 on an idle
machine; on a loaded one fsync latency swings it (measured 1.7–4.4 with load average 6–15).
Usage: python bench/bench_executor.py [--runs 7] [--count 8]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time
import uuid

from vgpuadm import api
from vgpuadm.errors import VgpuadmError
from vgpuadm.sim.faults import inject_fault
from vgpuadm.sim.profiles import build

GPU = "0000:01:00.0"
TYPE = "nvidia-63"


def _host() -> str:
    root = tempfile.mkdtemp(prefix="bench-exec-") + "/h"
    build("p4", root)
    return root


def raw(count: int) -> float:
    root = _host()
    sysfs = api.open_sysfs(root)
    start = time.perf_counter()
    for _ in range(count):
        sysfs.write(f"/sys/class/mdev_bus/{GPU}/mdev_supported_types/{TYPE}/create", f"{uuid.uuid4()}\n")
    return time.perf_counter() - start


def executor(count: int) -> tuple[float, float]:
    root = _host()
    start = time.perf_counter()
    plan, _ = api.plan_create(api.discover(root), TYPE, count, gpu=GPU)
    planned = time.perf_counter()
    api.apply(plan, root)
    return planned - start, time.perf_counter() - planned


def rollback(count: int) -> float:
    root = _host()
    plan, _ = api.plan_create(api.discover(root), TYPE, count, gpu=GPU)
    inject_fault(root, f"/sys/class/mdev_bus/{GPU}/mdev_supported_types/{TYPE}/create", "EIO", after=count - 1)
    start = time.perf_counter()
    with contextlib.suppress(VgpuadmError):
        api.apply(plan, root)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--count", type=int, default=8)
    args = ap.parse_args()
    raws = [raw(args.count) for _ in range(args.runs)]
    execs = [executor(args.count) for _ in range(args.runs)]
    rolls = [rollback(args.count) for _ in range(args.runs)]
    r = statistics.median(raws)
    p = statistics.median(e[0] for e in execs)
    e = statistics.median(e[1] for e in execs)
    b = statistics.median(rolls)
    print(f"{args.count} creates, median of {args.runs} runs")
    print(f"  raw sysfs writes      {r * 1000:8.1f} ms  ({r / args.count * 1000:.2f} ms/step)")
    print(f"  discover + plan       {p * 1000:8.1f} ms")
    print(f"  executor apply        {e * 1000:8.1f} ms  ({e / args.count * 1000:.2f} ms/step)")
    print(f"  fail last + rollback  {b * 1000:8.1f} ms")
    print(f"  ratio executor/raw    {e / r:8.2f}")


if __name__ == "__main__":
    main()
