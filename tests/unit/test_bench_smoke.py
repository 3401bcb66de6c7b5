"""Every benchmark in bench/ still runs, at the smallest sizes: each is started the way its docstring says
(`.venv/bin/python bench/<x>.py`) and must finish and print its result line. No timing is asserted (the figures
are the benchmarks' business, see bench/); bench_merge exits 1 over its budget, which is not this test's concern.
bench_provision needs libvirtd (the session fixture starts it) and, like discovery and the restore benches, root and
mdevctl (bench_restore_kernel runs here with --sim: the real sample parents are the kernel lane's guest's)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.libvirt

REPO = Path(__file__).resolve().parents[2]

CASES = {
    "bench_cold_start.py": (["--runs", "1"], "ratio (bytecode cached):"),
    "bench_discovery.py": (["--runs", "1", "--pfs", "1", "--vfs", "1", "--types", "2"], "ratio vgpuadm/mdevctl:"),
    "bench_scaling.py": (["--runs", "1", "--sizes", "16", "--types", "2"], "largest host:"),
    "bench_merge.py": (["--hosts", "6", "--runs", "1", "--before"], "after / before"),
    "bench_merge_trees.py": (["--hosts", "6", "--runs", "1", ".", "."], "CPU last / first tree:"),
    "bench_restore.py": (["--runs", "1", "--gpus", "1", "--per-gpu", "1"], "ratio vgpuadm / mdevctl:"),
    # the real kernel's bench (the lane's guest runs it), on a simulated kernel-samples host
    "bench_restore_kernel.py": (["--sim", "--runs", "1", "--warmup", "0"], "boot restore of 52 mdevs ("),
    "bench_provision.py": (["--vms", "2", "--repeat", "1"], "ratio vgpuadm / loop:"),
    "bench_executor.py": (["--runs", "1", "--count", "1"], ""),
    "bench_exporter.py": (["--vms", "2", "--runs", "1"], "scrape median"),
    "trace_create.py": ([], "product modules:"),
}


@pytest.mark.parametrize("script", sorted(CASES))
def test_bench_runs_at_smoke_size(script: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    if script == "bench_provision.py":
        request.getfixturevalue("libvirtd")
    args, expected = CASES[script]
    env = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(tmp_path)}
    r = subprocess.run([sys.executable, str(REPO / "bench" / script), *args], capture_output=True, text=True,
                       env=env, timeout=600, cwd=REPO)  # fmt: skip
    assert r.returncode in ((0, 1) if script == "bench_merge.py" else (0,)), r.stderr[-2000:]
    assert expected in r.stdout, r.stdout[-2000:]
