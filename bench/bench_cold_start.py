"""Cold start of `vgpuadm --root <p4 host> types --json` against a bare `python -c pass` (same venv python).

Target: median ratio ≤ 3. Also lists any heavy module that leaked onto the fast path (python -X importtime).
An installed package has its bytecode compiled, so the runs use a bytecode cache (PYTHONPYCACHEPREFIX in a temp
dir, PYTHONDONTWRITEBYTECODE removed); `--no-bytecode` measures the source-compiling case too.
Usage: python bench/bench_cold_start.py [--runs 20] [--no-bytecode]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

HEAVY = ("typer", "rich", "click", "jinja2", "lxml", "jsonschema", "yaml", "libvirt", "filelock", "tenacity")


def median_seconds(cmd: list[str], runs: int, env: dict[str, str]) -> tuple[float, float]:
    """Median wall and CPU (user+sys) seconds; CPU time is the steadier number on a shared machine."""
    walls, cpus = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
        walls.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(walls), statistics.median(cpus)


def imported_modules(cmd: list[str], env: dict[str, str]) -> list[str]:
    argv = [cmd[0], "-X", "importtime", *cmd[1:]]
    err = subprocess.run(argv, check=True, capture_output=True, text=True, env=env).stderr
    return [line.rsplit("|", 1)[-1].strip() for line in err.splitlines() if line.startswith("import time:")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--no-bytecode", action="store_true", help="also measure with PYTHONDONTWRITEBYTECODE=1")
    a = ap.parse_args()
    py = sys.executable
    script = os.path.join(os.path.dirname(py), "vgpuadm")
    with tempfile.TemporaryDirectory() as tmp:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = os.path.join(tmp, "pycache")
        root = os.path.join(tmp, "p4")
        subprocess.run([py, "-m", "vgpuadm", "sim", "build", "p4", root], check=True, stdout=subprocess.DEVNULL)
        cmd = [py, script, "--root", root, "types", "--json"]
        for _ in range(3):  # warm the page cache and the bytecode cache
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
        base = median_seconds([py, "-c", "pass"], a.runs, env)
        cold = median_seconds(cmd, a.runs, env)
        mods = imported_modules(cmd, env)
        print(f"python -c pass                  wall {base[0] * 1000:6.1f} ms  cpu {base[1] * 1000:6.1f} ms  (medians)")
        print(f"vgpuadm --root p4 types --json  wall {cold[0] * 1000:6.1f} ms  cpu {cold[1] * 1000:6.1f} ms  "
              f"({a.runs} runs, bytecode cached)")  # fmt: skip
        print(f"ratio wall {cold[0] / base[0]:.2f}x, cpu {cold[1] / base[1]:.2f}x (target <= 3.00x)")
        if a.no_bytecode:
            nobc = {**env, "PYTHONDONTWRITEBYTECODE": "1"}
            del nobc["PYTHONPYCACHEPREFIX"]
            src = median_seconds(cmd, a.runs, nobc)
            print(f"  sources compiled every run (PYTHONDONTWRITEBYTECODE=1): wall {src[0] / base[0]:.2f}x, "
                  f"cpu {src[1] / base[1]:.2f}x")  # fmt: skip
    heavy = sorted({m for m in mods if m.split(".")[0] in HEAVY})
    ours = sorted(m for m in mods if m.startswith("vgpuadm"))
    print(f"vgpuadm modules imported: {', '.join(ours)}")
    print(f"heavy modules on the fast path: {', '.join(heavy) or 'none'}")


if __name__ == "__main__":
    main()
