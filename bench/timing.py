"""Interleaved timing of commands: run A, B, C, A, B, C … so that every command sees the same machine load, and
report per command the median and the minimum of wall-clock and CPU (user+sys of the child) seconds."""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import time
from dataclasses import dataclass


@dataclass
class Stats:
    wall_median: float
    wall_min: float
    cpu_median: float
    cpu_min: float

    def line(self, name: str, runs: int) -> str:
        return (f"{name:34s} wall median {self.wall_median * 1000:7.1f} ms (min {self.wall_min * 1000:6.1f})   "
                f"cpu median {self.cpu_median * 1000:7.1f} ms (min {self.cpu_min * 1000:6.1f})   {runs} runs")  # fmt: skip


def compare(
    commands: dict[str, list[str]], runs: int, env: dict[str, str], envs: dict[str, dict[str, str]] | None = None
) -> dict[str, Stats]:
    """Interleaved runs of every command; `envs` gives some commands their own environment (a before tree)."""
    envs = envs or {}
    walls: dict[str, list[float]] = {k: [] for k in commands}
    cpus: dict[str, list[float]] = {k: [] for k in commands}
    for _ in range(runs):
        for name, argv in commands.items():
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env=envs.get(name, env))
            walls[name].append(time.perf_counter() - start)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpus[name].append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return {
        k: Stats(statistics.median(walls[k]), min(walls[k]), statistics.median(cpus[k]), min(cpus[k])) for k in commands
    }


def ratios(a: Stats, b: Stats) -> str:
    return (f"wall {a.wall_median / b.wall_median:.2f}x (min {a.wall_min / b.wall_min:.2f}x), "
            f"cpu {a.cpu_median / b.cpu_median:.2f}x (min {a.cpu_min / b.cpu_min:.2f}x)")  # fmt: skip


def bytecode_env(cache_dir: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for timed runs: an installed package has compiled bytecode, so cache it (in `cache_dir`,
    outside the tree) even when the caller's environment says PYTHONDONTWRITEBYTECODE."""
    env = {k: v for k, v in (base if base is not None else os.environ).items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = cache_dir
    return env


# What pip writes for a [project.scripts] entry point (vgpuadm's command before scripts/vgpuadm).
_PIP_SCRIPT = """import re
import sys
from vgpuadm.cli.app import main
if __name__ == '__main__':
    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])
    sys.exit(main())
"""


def installed_command(tree: str, tmp: str) -> str:
    """The script `pip install TREE` makes the `vgpuadm` command: the tree's scripts/vgpuadm when it ships one, else
    pip's entry-point script (written to `tmp`), so that a --before tree runs as it was installed."""
    own = os.path.join(tree, "scripts", "vgpuadm")
    if os.path.isfile(own):
        return own
    os.makedirs(os.path.join(tmp, "entry-point"), exist_ok=True)
    path = os.path.join(tmp, "entry-point", "vgpuadm")
    with open(path, "w") as f:
        f.write(_PIP_SCRIPT)
    return path
