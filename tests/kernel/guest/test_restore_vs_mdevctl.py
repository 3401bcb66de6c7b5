"""Boot restore against mdevctl on the real kernel (issue #36): bench/bench_restore_kernel.py fills the sample parents
with as many mdevs as they allow and alternates `vgpuadm restore --domain-xml-dir` and `mdevctl start-parent-mdevs`
over the same definitions, every mdev removed before each run: one run a side by default (the lane's time; a TCG
guest runs Python ~80× slower than the host), the options of run-lane.sh's VGPUADM_KERNEL_RESTORE_BENCH otherwise.
Its timing line goes to <results>/restore-vs-mdevctl (run-lane.sh's parts.log prints it), its whole output to
<results>/restore-vs-mdevctl.log; no time is asserted here. What is asserted: both sides made exactly the defined
devices (UUID, type, parent) on every run (the bench exits 1 otherwise), and in its last run the same ones, as many
as the parents allow; nothing is left behind (no mdev, the guest's /etc/mdevctl.d as it was)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from vgpuadm.host.sysfs import Sysfs

REPO = Path(__file__).resolve().parents[3]
BUS = "/sys/class/mdev_bus"


def test_restore_and_mdevctl_make_the_same_devices(sysfs: Sysfs, results: Path, tmp_path: Path) -> None:
    etc_before = sorted(p.name for p in Path("/etc/mdevctl.d").iterdir())
    out = tmp_path / "made.json"
    options = os.environ.get("VGPUADM_KERNEL_RESTORE_BENCH") or "--runs 1 --warmup 0"  # run-lane.sh's knob
    argv = [sys.executable, str(REPO / "bench/bench_restore_kernel.py"), *options.split(),
            "--result", str(results / "restore-vs-mdevctl"), "--json", str(out)]  # fmt: skip
    r = subprocess.run(argv, capture_output=True, text=True, timeout=1800, check=False)
    (results / "restore-vs-mdevctl.log").write_text(r.stdout + r.stderr)
    assert r.returncode == 0, r.stderr[-3000:] + r.stdout[-3000:]
    got = json.loads(out.read_text())
    defined = [tuple(d) for d in got["defined"]]
    made = {side: [tuple(d) for d in devices] for side, devices in got["made"].items()}
    assert {"vgpuadm restore", "mdevctl start-parent-mdevs"} <= set(made)
    assert made == dict.fromkeys(made, defined)
    per_parent = {p: sum(1 for d in defined if d[2] == p) for p in ("mtty", "mdpy", "mbochs")}
    assert per_parent == {"mtty": 24, "mdpy": 4, "mbochs": 24}  # mtty's 24 ports, mdpy's 4 devices, 96 MiB / 4 MiB
    assert {(d[1], d[2]) for d in defined} == {("mtty-1", "mtty"), ("mdpy-hd", "mdpy"), ("mbochs-small", "mbochs")}
    assert len(defined) == 52
    assert sysfs.listdir("/sys/bus/mdev/devices") == []
    assert sorted(p.name for p in Path("/etc/mdevctl.d").iterdir()) == etc_before
    assert (results / "restore-vs-mdevctl").read_text().startswith("boot restore of 52 mdevs (")
