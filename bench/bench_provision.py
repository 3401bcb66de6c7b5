"""Provision N VMs (one nvidia-63 each) on a simulated 8×P4 host against the real libvirtd: vgpuadm through the CLI
(`vgpuadm apply -f` of an N-VM plan, its own process: start-up included; `--via api` times the python API's
create_many in this process instead) versus the shell loop an admin would write, `mdevctl start -u U -p P -t nvidia-63` + `virsh attach-device DOM hostdev.xml --config`, run
inside `unshare -m` with the simulated root's sys/ bind-mounted on /sys (mdevctl writes `create`, which on a
plain-file tree does nothing — fine for timing).

Runs alternate (vgpuadm, loop, vgpuadm, …) so both see the same load. Prints the median (and minimum) wall time
of each over --repeat runs and the ratio (target: vgpuadm ≤ 0.5× the loop), and the CPU time of the client
processes (vgpuadm's; the loop's sh, mdevctl and virsh: libvirtd's own work counts on neither side) — on a loaded
machine the wall times jump from run to run. Roots live in --tmpdir (default /var/tmp: the normal
disk, as libvirtd's own /etc/libvirt is). Only vgpuadm's side makes files there while it is timed: the simulated
kernel lays down each new mdev's sysfs entries (~12 directories, links and files per mdev, ~770 for 64), which
mdevctl's writes to a plain-file `create` never make. On an ext4 without a journal (this machine's /) each new
inode is found by a scan that skips every recently deleted one (`recently_deleted`, the kernel's profile): with the
roots of earlier runs just removed that scan, not vgpuadm, was 0.3–1.3 s of a run. A tmpfs (`--tmpdir /dev/shm`)
keeps the simulated tree in memory, as sysfs is. The first --warmup run of each side is not timed: it compiles
the trees' bytecode (an installed vgpuadm has it) and warms libvirtd and the loop's tools.
Needs root (unshare, libvirtd) and mdevctl.
Usage: .venv/bin/python bench/bench_provision.py [--vms 64] [--repeat 5] [--warmup 1] [--via cli|api] [--tmpdir D]
       (smoke: --vms 2 --repeat 1)
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable

import libvirt

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from timing import bytecode_env

from vgpuadm import api
from vgpuadm.sim.profiles import HostBuilder, add_p4
from vgpuadm.virt import xml

URI = "qemu:///system"
TYPE = "nvidia-63"  # GRID P4-1Q, 8 per P4
GPUS = 8


def build_host(root: str) -> list[str]:
    """A simulated host with GPUS Tesla P4s (8 × nvidia-63 each); returns their addresses."""
    h = HostBuilder(root, "bench-8xp4")
    addresses = []
    for i in range(GPUS):
        address = f"0000:{0x10 + i:02x}:00.0"
        add_p4(h, address, f"0000:00:{i + 1:02x}.0", "pci0000:00", 10 + i, i % 2)
        addresses.append(address)
    h.finish()
    return addresses


def ensure_libvirtd() -> None:
    libvirt.registerErrorHandler(lambda _c, _e: None, None)
    try:
        libvirt.open(URI).close()
        return
    except libvirt.libvirtError:
        pass
    for daemon in ("virtlogd", "libvirtd"):
        subprocess.run([daemon, "-d"], check=False, capture_output=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            libvirt.open(URI).close()
            return
        except libvirt.libvirtError:
            time.sleep(0.1)
    sys.exit("libvirtd did not answer on qemu:///system")


def define(conn: libvirt.virConnect, names: list[str]) -> None:
    for name in names:
        conn.defineXML(xml.domain_definition(name, vnc=False, memory_mib=64))


def undefine(conn: libvirt.virConnect, names: list[str]) -> None:
    for name in names:
        with contextlib.suppress(libvirt.libvirtError):
            conn.lookupByName(name).undefine()


Timing = tuple[float, float]  # (wall, CPU) seconds of one run


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_vgpuadm(names: list[str], tmpdir: str | None) -> Timing:
    root = tempfile.mkdtemp(prefix="bench-vgpuadm-", dir=tmpdir)
    try:
        build_host(root)
        start, cpu = time.perf_counter(), time.process_time()
        results = api.guest_create_many(root, [(name, 1) for name in names], TYPE, connect=URI)
        elapsed = time.perf_counter() - start, time.process_time() - cpu
        made = len(os.listdir(os.path.join(root, "sys/bus/mdev/devices")))
        assert made == len(names) and all(r.added for r in results), f"vgpuadm made {made} mdevs"
        return elapsed
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run_cli(names: list[str], tmpdir: str | None, tree: str | None = None) -> Timing:
    """`vgpuadm apply -f` of a plan naming `names`; `tree`: run that source tree's vgpuadm (PYTHONPATH)."""
    root = os.path.abspath(tempfile.mkdtemp(prefix="bench-vgpuadm-", dir=tmpdir))
    try:
        build_host(root)
        plan = os.path.join(root, "plan.yaml")
        with open(plan, "w") as f:
            f.write("version: 1\nvms:\n" + "".join(f"  {name}:\n    type: {TYPE}\n" for name in names))
        argv = [sys.executable, "-m", "vgpuadm", "--root", root, "--connect", URI, "apply", "-f", plan]
        start, cpu = time.perf_counter(), children_cpu()
        env = bytecode_env(os.path.join(tmpdir or "/var/tmp", f"bench-pycache-{os.getpid()}-{bool(tree)}"),
                           dict(os.environ, PYTHONPATH=tree) if tree else None)  # fmt: skip
        # cwd "/": `python -m` puts the working directory ahead of PYTHONPATH (see bench_restore.timed)
        r = subprocess.run(argv, capture_output=True, text=True, env=env, cwd="/")
        elapsed = time.perf_counter() - start, children_cpu() - cpu
        if r.returncode != 0:
            sys.exit(f"vgpuadm apply failed: {r.stderr.strip()}")
        made = len(os.listdir(os.path.join(root, "sys/bus/mdev/devices")))
        assert made == len(names), f"vgpuadm made {made} mdevs"
        return elapsed
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run_shell_loop(names: list[str], tmpdir: str | None) -> Timing:
    root = tempfile.mkdtemp(prefix="bench-mdevctl-", dir=tmpdir)
    try:
        gpus = build_host(root)
        lines = ["set -e", f"mount --bind {root}/sys /sys"]
        for i, name in enumerate(names):
            u = str(uuid.uuid4())
            path = os.path.join(root, f"hostdev-{i}.xml")
            with open(path, "w") as f:
                f.write(xml.mdev_hostdev(u))
            parent = gpus[i // 8]
            lines.append(f"mdevctl start -u {u} -p {parent} -t {TYPE}")
            lines.append(f"virsh -q -c {URI} attach-device {name} {path} --config >/dev/null")
        script = os.path.join(root, "loop.sh")
        with open(script, "w") as f:
            f.write("\n".join(lines) + "\n")
        start, cpu = time.perf_counter(), children_cpu()
        r = subprocess.run(["unshare", "-m", "sh", script], capture_output=True, text=True)
        elapsed = time.perf_counter() - start, children_cpu() - cpu
        if r.returncode != 0:
            sys.exit(f"shell loop failed: {r.stderr.strip()}")
        return elapsed
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vms", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--via", choices=("cli", "api"), default="cli")
    parser.add_argument("--before", metavar="TREE", help="also run this source tree's CLI (e.g. a worktree of main), "
                        "interleaved, for a before/after ratio in one run")  # fmt: skip
    parser.add_argument("--warmup", type=int, default=1, help="untimed runs of each side first (default: 1)")
    parser.add_argument("--tmpdir", default="/var/tmp", help="where the simulated roots live (default: /var/tmp)")
    args = parser.parse_args()
    if args.vms > GPUS * 8:
        sys.exit(f"at most {GPUS * 8} VMs fit on {GPUS} P4s")
    if os.geteuid() != 0 or not shutil.which("mdevctl"):
        sys.exit("needs root and mdevctl (scripts/install.sh)")
    ensure_libvirtd()
    conn = libvirt.open(URI)
    import vgpuadm.ops.guest  # noqa: F401  (import cost is start-up, not provisioning: the loop's tools are warm too)

    ours: list[Timing] = []
    loop: list[Timing] = []
    before: list[Timing] = []
    ours_fn = run_cli if args.via == "cli" else run_vgpuadm
    runs: list[tuple[str, list[Timing], Callable[[list[str]], Timing]]] = [
        ("vgpuadm", ours, lambda names: ours_fn(names, args.tmpdir)),
        ("mdevctl+virsh loop", loop, lambda names: run_shell_loop(names, args.tmpdir)),
    ]
    if args.before:
        runs.append(("vgpuadm before", before, lambda names: run_cli(names, args.tmpdir, args.before)))
    for rep in range(-args.warmup, args.repeat):
        names = [f"bench-{os.getpid()}-{rep}-{i:02d}" for i in range(args.vms)]
        took: list[Timing] = []
        for _name, times, run in runs:
            define(conn, names)
            try:
                took.append(run(names))
            finally:
                undefine(conn, names)
            if rep >= 0:
                times.append(took[-1])
        what = f"run {rep + 1}" if rep >= 0 else "warm-up (not counted)"
        shown = [f"{n} {wall:.2f} s ({cpu:.2f} s CPU)" for (n, _, _), (wall, cpu) in zip(runs, took, strict=True)]
        print(f"{what}: " + ", ".join(shown), flush=True)
    a, b = statistics.median(w for w, _ in ours), statistics.median(w for w, _ in loop)
    a_cpu, b_cpu = statistics.median(c for _, c in ours), statistics.median(c for _, c in loop)
    a_min, b_min = min(w for w, _ in ours), min(w for w, _ in loop)
    how = "`vgpuadm apply -f`, one process" if args.via == "cli" else "python API, in this process"
    print(f"provision {args.vms} VMs with one {TYPE} each (median of {args.repeat} after {args.warmup} warm-up; "
          f"simulated roots in {args.tmpdir}; "
          f"load average {os.getloadavg()[0]:.1f}):")  # fmt: skip
    print(f"  vgpuadm ({how}): {a:.2f} s ({a / args.vms * 1000:.1f} ms/VM; min {a_min:.2f} s), {a_cpu:.2f} s CPU")
    print(f"  mdevctl start + virsh attach-device loop: {b:.2f} s ({b / args.vms * 1000:.1f} ms/VM; min {b_min:.2f} s), "
          f"{b_cpu:.2f} s CPU")  # fmt: skip
    print(f"  ratio vgpuadm / loop: {a / b:.2f} (target <= 0.50: {'met' if a / b <= 0.5 else 'NOT met'}); "
          f"min {a_min / b_min:.2f}; CPU {a_cpu / b_cpu:.2f}")  # fmt: skip
    if before:
        c, c_cpu = statistics.median(w for w, _ in before), statistics.median(c for _, c in before)
        c_min = min(w for w, _ in before)
        print(f"  before ({args.before}): {c:.2f} s (min {c_min:.2f} s), {c_cpu:.2f} s CPU; ratio before / loop: "
              f"{c / b:.2f}; after / before: {a / c:.2f} wall, {a_min / c_min:.2f} min, {a_cpu / c_cpu:.2f} CPU")  # fmt: skip


if __name__ == "__main__":
    main()
