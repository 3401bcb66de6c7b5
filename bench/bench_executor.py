"""What the executor's safety costs: creating N mdevs on a simulated P4 host through `api.apply` (lock, journal,
effect check, undo stack) against the same N raw create writes through Sysfs.

Prints the medians and the ratio executor/raw, plus the time to discover+plan the request and to roll back a plan
whose last step fails. The journal costs two fsyncs per plan (the plan file and its directory, before the first
step) and one directory fsync at the end; each later step only appends a flushed progress line. Target: ratio ≤ 3;
fsync latency on a loaded machine swings it (measured 1.38 with load average 5–9; 3.2 before the per-step fsyncs
were dropped).
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
