"""Boot restore on the real kernel: as many mdevs as the kernel's sample parents allow (in the kernel lane's guest:
mtty's 24 ports as mtty-1, mdpy's 4 devices, mbochs's 96 MiB as mbochs-small: 52 mdevs), rebuilt after being removed
by `vgpuadm restore --domain-xml-dir DIR` (domains read from saved XML with vgpuadm's metadata, as at boot before
libvirtd runs; bench_restore.py's setting) versus what mdevctl's udev rule runs, `mdevctl start-parent-mdevs PARENT`
once per parent, over the same devices defined in /etc/mdevctl.d. Here both sides make real devices.

Runs alternate (vgpuadm, mdevctl, …), every mdev removed before each run, after one warm-up run of each; each run
must leave exactly the defined devices (UUID, type, parent), else the bench fails. Prints one result line: medians of
wall and CPU (user+sys of the command and its children), the ratio vgpuadm / mdevctl (target ≤ 1.5×).

The bench runs in a private mount namespace (it starts itself again under `unshare -m`): /etc/mdevctl.d there is a
tmpfs, so nothing is written to the host's. Needs root, mdevctl, unshare, and no mdev on the host when it starts.
`--sim` runs it on a simulated kernel-samples host instead (`vgpuadm sim build`, its sys/ bound over /sys for
mdevctl): there mdevctl's writes land in plain files and make no device, so only vgpuadm's side is checked and the
ratio compares unequal work (a smoke run, not a measurement).

vgpuadm runs as an installed copy does (`installed`: this checkout's vgpuadm copied with its bytecode into the bench's
temporary directory, `python -S` with the copy and site-packages as its path), not from the checkout: in the lane's
guest the checkout is on 9p. `--before TREE`: also time TREE's vgpuadm (a checkout, compiled), the same way,
interleaved.

Usage: .venv/bin/python bench/bench_restore_kernel.py [--runs 5] [--warmup 1] [--result FILE] [--json FILE] [--sim]
[--before TREE] [--profile FILE] (`--profile`: one more restore under cProfile, where its time went, into FILE).
The kernel lane's guest test test_restore_vs_mdevctl.py runs it with --result and --json and, by default,
`--runs 1 --warmup 0`; run-lane.sh's VGPUADM_KERNEL_RESTORE_BENCH replaces those options. Smoke: --sim --runs 1
--warmup 0.
"""

from __future__ import annotations

import argparse
import json
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

INNER = "VGPUADM_BENCH_RESTORE_KERNEL_NS"  # set once the bench runs in its own mount namespace
ETC = "/etc/mdevctl.d"

Device = tuple[str, str, str]  # (uuid, type, parent)


def plan(root: str) -> list[Device]:
    """Per parent, as many devices as its roomiest type allows (`available_instances`, the parent's budget: the
    sample drivers' types share it), sorted."""
    bus = os.path.join(root, "sys/class/mdev_bus")
    out = []
    for parent in sorted(os.listdir(bus)):
        types = os.path.join(bus, parent, "mdev_supported_types")
        room = {}
        for t in sorted(os.listdir(types)):
            with open(os.path.join(types, t, "available_instances")) as f:
                room[t] = int(f.read())
        best = max(sorted(room), key=lambda t: room[t])
        out += [(str(uuid.uuid4()), best, parent) for _ in range(room[best])]
    return sorted(out)


def present(root: str) -> list[Device]:
    """The mdevs the kernel shows: (uuid, type, parent), sorted."""
    devices = os.path.join(root, "sys/bus/mdev/devices")
    out = []
    for u in os.listdir(devices):
        d = os.path.join(devices, u)
        out.append((u, os.path.basename(os.readlink(os.path.join(d, "mdev_type"))),
                    os.path.basename(os.path.dirname(os.path.realpath(d)))))  # fmt: skip
    return sorted(out)


def define(root: str, work: str, devices: list[Device]) -> str:
    """One saved domain XML per device (returns their directory) and the same devices as mdevctl definitions in
    /etc/mdevctl.d (a tmpfs in this namespace)."""
    host = api.discover(None if root == "/" else root).host_key
    domains = os.path.join(work, "domains")
    os.makedirs(domains)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755", "bench-mdevctl", ETC], check=True)
    saved_devices.write(host, devices, domains, ETC)
    return domains


def installed(env: dict[str, str], tree: str, copy: str) -> dict[str, str]:
    """The environment that runs `tree`'s vgpuadm as an installed one runs at boot: its vgpuadm and templates/ copied
    (with their bytecode) into `copy`, on the bench's file system, and `python -S` with that copy and this
    interpreter's site-packages as the whole path. In the lane's guest the checkout is reached over 9p, and the
    editable install's .pth puts its uncached root on sys.path: every top-level import would stat it on the host
    (a round trip under TCG), which an installed vgpuadm, and mdevctl, never pay."""
    for part in ("vgpuadm", "templates"):
        if os.path.isdir(os.path.join(tree, part)):
            shutil.copytree(os.path.join(tree, part), os.path.join(copy, part), symlinks=True)
    site = [p for p in sys.path if p.endswith("site-packages")]
    return dict(env, PYTHONPATH=os.pathsep.join([copy, *site]))


def timed(argvs: list[list[str]], env: dict[str, str], cwd: str) -> tuple[float, float]:
    """(wall, CPU) seconds of these commands run one after the other; CPU is user+sys of them and their children."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    for argv in argvs:
        # cwd: `python -m` puts the working directory first on sys.path (the bench's own, holding no vgpuadm)
        r = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd)
        if r.returncode != 0:
            sys.exit(f"{' '.join(argv[:6])}… failed: {(r.stderr or r.stdout).strip()[-500:]}")
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return elapsed, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def profile_summary(path: str) -> str:
    """Where one restore's time went (cProfile, cumulative seconds): the imports, the parts of the restore, and
    the 25 functions of vgpuadm with the most cumulative time."""
    import io
    import pstats

    st = pstats.Stats(path)
    parts = {
        "imports (importlib _find_and_load)": ("importlib._bootstrap", "_find_and_load"),
        "ops/restore.restore": ("ops/restore.py", "restore"),
        "Session.changing": ("ops/session.py", "changing"),
        "host snapshot (discover.snapshot)": ("host/discover.py", "snapshot"),
        "saved domains (read_domain_dir)": ("io/domainxml.py", "read_domain_dir"),
        "recover": ("executor/__init__.py", "recover"),
        "rebuild": ("ops/restore.py", "rebuild"),
        "execute_units": ("executor/__init__.py", "execute_units"),
        "sysfs writes": ("host/sysfs.py", "write"),
    }
    cum = {label: 0.0 for label in parts}
    for (file, _line, name), (_cc, _nc, _tt, ct, _callers) in st.stats.items():  # type: ignore[attr-defined]
        for label, (where, fn) in parts.items():
            if name == fn and where in file:
                cum[label] = max(cum[label], ct)
    out = io.StringIO()
    out.write(f"one vgpuadm restore under cProfile: {st.total_tt:.2f} s\n")  # type: ignore[attr-defined]
    out.writelines(f"  {label:40s} {seconds:7.2f} s\n" for label, seconds in cum.items())
    st.stream = out  # type: ignore[attr-defined]
    st.sort_stats("cumulative").print_stats("vgpuadm", 25)
    return out.getvalue()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1, help="untimed runs of each side first")
    ap.add_argument("--result", metavar="FILE", help="also write the result line here")
    ap.add_argument("--json", metavar="FILE", help="the devices defined and what each side made in its last run")
    ap.add_argument("--sim", action="store_true", help="on a simulated kernel-samples host (smoke only)")
    ap.add_argument("--tmpdir", default=tempfile.gettempdir())
    ap.add_argument("--before", metavar="TREE", help="also time this checkout's vgpuadm restore, interleaved")
    ap.add_argument(
        "--profile", metavar="FILE", help="then profile one more vgpuadm restore (cProfile): a summary here"
    )
    a = ap.parse_args()
    if os.geteuid() != 0 or not shutil.which("mdevctl") or not shutil.which("unshare"):
        sys.exit("needs root, mdevctl and unshare")
    if os.environ.get(INNER) != "1":  # again in a private mount namespace: the mounts below stay in it
        env = dict(os.environ, **{INNER: "1"})
        argv = ["unshare", "-m", "--propagation", "private", sys.executable, os.path.abspath(__file__), *sys.argv[1:]]
        sys.exit(subprocess.run(argv, env=env).returncode)
    py = sys.executable
    work = os.path.abspath(tempfile.mkdtemp(prefix="bench-restore-kernel-", dir=a.tmpdir))
    try:
        run(a, py, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run(a: argparse.Namespace, py: str, work: str) -> None:
    root = "/"
    env = dict(os.environ)
    if a.sim:
        root = os.path.join(work, "host")
        subprocess.run([py, "-m", "vgpuadm", "sim", "build", "kernel-samples", root], check=True, capture_output=True)
        subprocess.run(["mount", "--bind", os.path.join(root, "sys"), "/sys"], check=True)
        env = bytecode_env(os.path.join(work, "pycache"))
    fs = api.open_sysfs(None if root == "/" else root)
    if present(root):
        sys.exit(f"the host already has mdevs ({len(present(root))}): the bench removes every mdev between runs")
    devices = plan(root)
    domains = define(root, work, devices)
    parents = sorted({p for _, _, p in devices})
    vgpuadm = [py, "-S", "-m", "vgpuadm", *(["--root", root] if a.sim else []), "restore", "--domain-xml-dir", domains]
    sides = {"vgpuadm restore": [vgpuadm], "mdevctl start-parent-mdevs": [
        ["mdevctl", "start-parent-mdevs", p] for p in parents]}  # fmt: skip
    trees = {"vgpuadm restore": os.path.dirname(os.path.dirname(os.path.abspath(api.__file__)))}
    if a.before:
        sides["vgpuadm restore (before)"] = [vgpuadm]
        trees["vgpuadm restore (before)"] = a.before
    envs = dict.fromkeys(sides, env)
    for name, tree in trees.items():
        envs[name] = installed(env, tree, os.path.join(work, "before" if name.endswith("(before)") else "after"))
    times: dict[str, list[float]] = {k: [] for k in sides}
    cpus: dict[str, list[float]] = {k: [] for k in sides}
    made: dict[str, list[Device]] = {}

    def clear() -> None:
        if a.sim:
            subprocess.run([py, "-m", "vgpuadm", "sim", "reboot", root], check=True, capture_output=True)
        for u in fs.listdir("/sys/bus/mdev/devices"):
            fs.write(f"/sys/bus/mdev/devices/{u}/remove", "1")

    for n in range(a.warmup + a.runs):
        for name, argvs in sides.items():
            clear()
            wall, cpu = timed(argvs, envs[name], work)
            made[name] = present(root)
            if made[name] != devices and not (a.sim and name.startswith("mdevctl")):
                sys.exit(f"{name} made {len(made[name])} of the {len(devices)} defined mdevs: {made[name][:4]}…")
            if n >= a.warmup:
                times[name].append(wall)
                cpus[name].append(cpu)
    if a.profile:
        clear()
        profiled = [py, "-S", "-m", "cProfile", "-o", os.path.join(work, "restore.prof"), *vgpuadm[2:]]
        timed([profiled], envs["vgpuadm restore"], work)
        with open(a.profile, "w") as f:
            f.write(profile_summary(os.path.join(work, "restore.prof")))
    clear()
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"defined": devices, "made": made}, f)
    per_parent = ", ".join(f"{p} {sum(1 for d in devices if d[2] == p)}× {next(d[1] for d in devices if d[2] == p)}"
                           for p in parents)  # fmt: skip
    med = {k: statistics.median(v) for k, v in times.items()}
    cpu = {k: statistics.median(v) for k, v in cpus.items()}
    v, m = "vgpuadm restore", "mdevctl start-parent-mdevs"
    ratio, cpu_ratio = med[v] / med[m], cpu[v] / cpu[m]
    where = "a SIMULATED kernel (mdevctl makes nothing)" if a.sim else "the real kernel"
    line = (f"boot restore of {len(devices)} mdevs ({per_parent}) on {where}, median of {a.runs} interleaved runs: "
            f"vgpuadm restore {med[v]:.2f} s wall, {cpu[v]:.2f} s CPU; mdevctl start-parent-mdevs ×{len(parents)} "
            f"{med[m]:.2f} s wall, {cpu[m]:.2f} s CPU; ratio {ratio:.2f}× wall, {cpu_ratio:.2f}× CPU "
            f"(target ≤ 1.5×: {'met' if ratio <= 1.5 else 'NOT met'})")  # fmt: skip
    print(line)
    for name in sides:
        print(f"  {name:28s} wall runs {', '.join(f'{x:.2f}' for x in times[name])}; "
              f"CPU runs {', '.join(f'{x:.2f}' for x in cpus[name])}")  # fmt: skip
    if a.before:
        b = "vgpuadm restore (before)"
        line += (f"; before ({a.before}): {med[b]:.2f} s wall, {cpu[b]:.2f} s CPU, ratio {med[b] / med[m]:.2f}× wall, "
                 f"{cpu[b] / cpu[m]:.2f}× CPU; after / before {med[v] / med[b]:.2f} wall, {cpu[v] / cpu[b]:.2f} CPU")  # fmt: skip
        print(f"  before{line.rsplit('; before', 1)[1]}")
    if a.result:
        with open(a.result, "w") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    main()
