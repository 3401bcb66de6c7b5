"""Benchmark: `vgpuadm inventory merge` of 10,000 host reports with 8 GPUs each must take ≤ 3 s.

The reports are real inventories: three simulated hosts with eight Tesla P4 each (idle; half the GPUs busy with
nvidia-63 / nvidia-64 / nvidia-65; all busy, with a leak) are inventoried once, then written out 1,000 times under
distinct host names. Timed: api.merge_inventories(paths) — read every file, check it, merge — the whole command
minus printing (CPU: with the processes it forks to fold shares of the reports). Prints the median of several runs
and its ratio to the 3 s budget.

Run: .venv/bin/python bench/bench_merge.py [--hosts 10000] [--runs 5]   (smoke: --hosts 10 --runs 1)
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time

import orjson

from vgpuadm import api
from vgpuadm.model import Allocation
from vgpuadm.report.merge import load_report, merge
from vgpuadm.sim.profiles import HostBuilder, add_p4

BUDGET_S = 3.0
GPUS = [f"0000:{bus:02x}:00.0" for bus in range(1, 9)]


def eight_p4(root: str) -> None:
    h = HostBuilder(root, "bench-8xp4")
    for i, gpu in enumerate(GPUS):
        add_p4(h, gpu, f"0000:00:{i + 1:02x}.0", "pci0000:00", i + 1, i % 2)
    h.finish()


def create(root: str, gpu: str, type_id: str, n: int, serial: list[int]) -> list[str]:
    sysfs = api.open_sysfs(root)
    uuids = []
    for _ in range(n):
        serial[0] += 1
        uuid = f"bbbbbbbb-0000-4000-8000-{serial[0]:012d}"
        sysfs.write(f"/sys/class/mdev_bus/{gpu}/mdev_supported_types/{type_id}/create", uuid)
        uuids.append(uuid)
    return uuids


def variants(base: str) -> list[dict]:
    docs = []
    serial = [0]
    for name, load in (
        ("idle", {}),
        ("half", {GPUS[0]: ("nvidia-63", 3), GPUS[1]: ("nvidia-64", 2), GPUS[2]: ("nvidia-65", 1),
                  GPUS[3]: ("nvidia-63", 8)}),
        ("full", {gpu: ("nvidia-63", 2) for gpu in GPUS}),
    ):  # fmt: skip
        root = os.path.join(base, name)
        eight_p4(root)
        allocations = []
        for gpu, (type_id, n) in load.items():
            for k, uuid in enumerate(create(root, gpu, type_id, n, serial)):
                if not (name == "full" and k == 1):  # one leak per GPU on the full host
                    allocations.append(Allocation(f"vm-{uuid[-6:]}", "mdev", type_id, gpu, uuid))
        domains = os.path.join(base, f"{name}-domains")
        os.makedirs(domains)
        from vgpuadm.virt.xml import metadata_xml

        for a in allocations:
            with open(os.path.join(domains, f"{a.domain}.xml"), "w") as f:
                f.write(f"<domain type='kvm'><name>{a.domain}</name><metadata>{metadata_xml([a])}</metadata></domain>")
        docs.append(api.inventory(root, domains_xml=domains, host=name))
    return docs


def _children_cpu() -> float:
    """CPU seconds of this process's children that ended and were waited for (the merge's forked folds)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=10000)
    parser.add_argument("--tmpdir", default="/var/tmp")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--before", action="store_true", help="also time the previous load-all merge, interleaved")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="vgpuadm-bench-merge-", dir=args.tmpdir) as base:
        docs = variants(base)
        reports = os.path.join(base, "reports")
        os.makedirs(reports)
        paths = []
        for i in range(args.hosts):
            doc = dict(docs[i % len(docs)], host=f"node{i:04d}.example")
            path = os.path.join(reports, f"node{i:04d}.json")
            with open(path, "wb") as f:
                f.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
            paths.append(path)
        size = sum(os.path.getsize(p) for p in paths)
        times: list[float] = []
        cpu: list[float] = []
        before: list[float] = []
        before_cpu: list[float] = []
        fleet: dict = {}
        for _ in range(args.runs):
            start, start_cpu = time.perf_counter(), time.process_time() + _children_cpu()
            fleet = api.merge_inventories(paths)
            times.append(time.perf_counter() - start)
            cpu.append(time.process_time() + _children_cpu() - start_cpu)  # with the children it forked
            if args.before:  # the previous way, interleaved: every report loaded first, the GC on
                start, start_cpu = time.perf_counter(), time.process_time()
                merge([(p, load_report(p)) for p in paths], generated_at="")
                before.append(time.perf_counter() - start)
                before_cpu.append(time.process_time() - start_cpu)
    median = statistics.median(times)
    assert fleet["totals"]["hosts"] == args.hosts and fleet["totals"]["gpus"] == 8 * args.hosts
    print(f"merge of {args.hosts} host reports × 8 GPUs ({size / 1e6:.1f} MB of JSON), {args.runs} runs")
    print(f"  runs: {', '.join(f'{t:.3f}' for t in times)} s")
    print(f"  median: {median:.3f} s wall, {statistics.median(cpu):.3f} s CPU  (budget {BUDGET_S:.1f} s, "
          f"ratio {median / BUDGET_S:.2f}; load average {os.getloadavg()[0]:.1f})")  # fmt: skip
    print(f"  fleet: {fleet['totals']['devices']} devices, {fleet['totals']['unowned']} leaks, "
          f"locked share of free framebuffer {fleet['fragmentation']['locked_share']:.2%}")  # fmt: skip
    if before:
        b = statistics.median(before)
        print(f"  before (load all, then merge): median {b:.3f} s wall, {statistics.median(before_cpu):.3f} s CPU; "
              f"after / before {median / b:.2f}")  # fmt: skip
    return 0 if median <= BUDGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
