"""What one `vgpuadm exporter` scrape costs on a host with 64 running vGPUs: a simulated 8×P4 host, 64 VMs in its
embedded libvirt each owning one nvidia-63 (made by one `vgpuadm apply -f`), each vGPU running in the simulated
driver with its VM's UUID and figures (`vgpuadm sim usage`). Times, in this process, median of --runs: the whole
scrape (Exporter.exposition: the driver's two nvidia-smi runs, the host snapshot, the domains, the join, the
exposition text), and apart, each timed on its own, the driver read (the two nvidia-smi runs: `vgpu -q` and
`--query-gpu`) and the rest. The simulated nvidia-smi is a Python process (~0.1-0.4 s to start): its share stands for what the real
driver costs per scrape, which it does not measure. Prints the exposition's series count as a check.
Usage: .venv/bin/python bench/bench_exporter.py [--vms 64] [--runs 5]   (smoke: --vms 2 --runs 1)
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

from vgpuadm.ops.exporter import Exporter, read_driver
from vgpuadm.ops.session import Session
from vgpuadm.report.render_prometheus import text
from vgpuadm.report.usage import families, join
from vgpuadm.sim.profiles import HostBuilder, add_p4, install_tools
from vgpuadm.sim.usage import set_vgpu_usage
from vgpuadm.usage import DriverUsage

GPUS = 8
PER_GPU = 8  # nvidia-63 (GRID P4-1Q) per Tesla P4

_DEFINE = """
import json, sys
from vgpuadm.virt.conn import VirtConn, embed_uri
from vgpuadm.virt.xml import domain_definition
with VirtConn(embed_uri(sys.argv[1])) as c:
    print(json.dumps({n: c.uuid(c.define(domain_definition(n, memory_mib=64, vnc=True))) for n in sys.argv[2:]}))
"""


def build_host(root: str, vms: int) -> dict[str, str]:
    """The host, its VMs (name → domain UUID) each with one running nvidia-63."""
    import json

    h = HostBuilder(root, "bench-8xp4")
    for i in range((vms + PER_GPU - 1) // PER_GPU):
        add_p4(h, f"0000:{0x10 + i:02x}:00.0", f"0000:00:{i + 1:02x}.0", "pci0000:00", 10 + i, i % 2)
    install_tools(root, h.finish())
    names = [f"vm{i:03d}" for i in range(vms)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", _DEFINE, root, *names], capture_output=True, text=True, check=True,
                         env=env).stdout  # fmt: skip
    uuids: dict[str, str] = json.loads(out)
    plan = os.path.join(root, "plan.yaml")
    with open(plan, "w") as f:
        f.write("version: 1\nvms:\n" + "".join(f"  {n}: {{type: nvidia-63}}\n" for n in names))
    subprocess.run([sys.executable, "-m", "vgpuadm", "--root", root, "apply", "-f", plan], check=True, env=env,
                   stdout=subprocess.DEVNULL)  # fmt: skip
    with Session.read(root) as s:
        owned = [(a.domain, a.uuid) for a in s.domains_on_disk().allocations]
    for i, (name, uuid) in enumerate(sorted(owned)):
        set_vgpu_usage(root, f"/sys/bus/mdev/devices/{uuid}", {"vm_uuid": uuids[name], "vm_name": name,
                                                                "fb_used_mib": 100 + i, "gpu": i % 101})  # fmt: skip
    return uuids


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--vms", type=int, default=64)
    p.add_argument("--runs", type=int, default=5)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-exporter-", dir=os.environ.get("TMPDIR")) as tmp:
        root = os.path.join(tmp, "host")
        build_host(root, args.vms)
        exporter = Exporter(root, timeout=120)
        scrape, driver, rest = [], [], []
        body = ""
        for _ in range(args.runs):
            start = time.perf_counter()
            body = exporter.exposition()
            scrape.append(time.perf_counter() - start)
            with Session.read(root) as s:
                start = time.perf_counter()
                usage = read_driver(s) or DriverUsage()
                driver.append(time.perf_counter() - start)
            start = time.perf_counter()
            with Session.read(root) as s:  # the rest, timed on its own: snapshot, domains, join, exposition
                text(families(join(s.snap, s.domains_on_disk(), usage), usage))
            rest.append(time.perf_counter() - start)
        assert exporter.error is None, exporter.error
        running = sum(1 for line in body.splitlines() if line.startswith("vgpuadm_usage_device_running{")
                      and line.endswith(" 1.0"))  # fmt: skip
        med = {k: statistics.median(v) * 1000 for k, v in (("scrape", scrape), ("driver", driver), ("rest", rest))}
        print(f"host: {args.vms} VMs, {running} vGPUs running, {len(body.splitlines())} exposition lines")
        print(f"scrape median {med['scrape']:.0f} ms over {args.runs} runs (min {min(scrape) * 1000:.0f} ms); "
              f"apart: driver read (2 nvidia-smi runs) median {med['driver']:.0f} ms, the rest (snapshot, domains, "
              f"join, exposition) median {med['rest']:.0f} ms")  # fmt: skip


if __name__ == "__main__":
    main()
