"""Cold start of `vgpuadm --root <p4 host> types --json` against a bare `python -c pass` (same venv python), and of
`vgpuadm --root <p4 host> hook run web01 prepare begin -` as libvirt's qemu hook runs it at every domain start (a
domain without on-demand devices on stdin, the common case; through `sh -c`, for the stdin), and of a whole start
and stop of such a domain through the hook script `hook install` writes (qemu.d/vgpuadm run for prepare/begin,
start/begin, started/begin, stopped/end and release/end, as libvirt runs it).

Target: median ratio ≤ 3 for `types --json`; the start+stop cycle's hook calls together ≤ 1.0 (issue #36); the
ratio of `hook run` itself is reported. Runs are interleaved (timing.py) so both see the same load. An installed package has
compiled bytecode, so the runs use a bytecode cache (PYTHONPYCACHEPREFIX in a temp dir, PYTHONDONTWRITEBYTECODE
removed); `--no-bytecode` adds the case where sources are compiled on every run. Also lists any heavy module that
leaked onto the fast path (python -X importtime).
`--before TREE` also times `types --json` from TREE (PYTHONPATH), interleaved, for a before/after in the same run;
each tree then runs through the command script its own install makes (timing.installed_command).
Usage: python bench/bench_cold_start.py [--runs 20] [--no-bytecode] [--before TREE]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from timing import compare, installed_command, ratios

HEAVY = (
    "typer",
    "rich",
    "click",
    "jinja2",
    "lxml",
    "jsonschema",
    "yaml",
    "ruamel",
    "prometheus_client",
    "orjson",
    "libvirt",
    "filelock",
    "tenacity",
    "typing",
)


HOOK = "vgpuadm --root p4 hook run web01 prepare begin -"
BEFORE = "  same, before tree"
CYCLE = "hook script, start+stop (5 calls)"
PHASES = '"prepare begin" "start begin" "started begin" "stopped end" "release end"'


def imported_modules(cmd: list[str], env: dict[str, str]) -> list[str]:
    argv = [cmd[0], "-X", "importtime", *cmd[1:]]
    err = subprocess.run(argv, check=True, capture_output=True, text=True, env=env).stderr
    return [line.rsplit("|", 1)[-1].strip() for line in err.splitlines() if line.startswith("import time:")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--no-bytecode", action="store_true", help="also measure with PYTHONDONTWRITEBYTECODE=1")
    ap.add_argument("--before", metavar="TREE", help="also time `types --json` from this source tree, interleaved")
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
        domain = os.path.join(tmp, "web01.xml")
        with open(domain, "w") as f:
            f.write("<domain type='kvm'><name>web01</name><devices/></domain>")
        hook = ["sh", "-c", 'exec "$@" < "$0"', domain, py, script, "--root", root, "hook", "run", "web01", "prepare",
                "begin", "-"]  # fmt: skip
        subprocess.run([py, script, "--root", root, "hook", "install"], check=True, stdout=subprocess.DEVNULL, env=env)
        installed = os.path.join(root, "etc/libvirt/hooks/qemu.d/vgpuadm")
        cycle = ["sh", "-c", f'for p in {PHASES}; do "$0" web01 $p - < "$1" || exit 1; done', installed, domain]
        commands = {"python -c pass": [py, "-c", "pass"], "vgpuadm --root p4 types --json": cmd, HOOK: hook,
                    CYCLE: cycle}  # fmt: skip
        if a.no_bytecode:
            commands["  same, sources compiled each run"] = [
                "env", "-u", "PYTHONPYCACHEPREFIX", "PYTHONDONTWRITEBYTECODE=1", *cmd
            ]  # fmt: skip
        envs = {}
        if a.before:
            # Each tree as `pip install` makes its command (timing.installed_command): the entry-point script pip
            # writes imports `re`, the script a tree ships may not.
            here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
            commands["vgpuadm --root p4 types --json"] = [py, installed_command(here, tmp), *cmd[2:]]
            commands[BEFORE] = [py, installed_command(os.path.abspath(a.before), tmp), *cmd[2:]]
            envs["vgpuadm --root p4 types --json"] = {**env, "PYTHONPATH": here}  # both sides pay the same path
            envs[BEFORE] = {**env, "PYTHONPATH": os.path.abspath(a.before)}
            envs[BEFORE]["PYTHONPYCACHEPREFIX"] += "-before"
        compare(commands, 1, env, envs)  # every command once: the before tree compiles its bytecode
        stats = compare(commands, a.runs, env, envs)
        mods = imported_modules(cmd, env)
    for name, s in stats.items():
        print(s.line(name, a.runs))
    base = stats["python -c pass"]
    print(
        f"ratio (bytecode cached): {ratios(stats['vgpuadm --root p4 types --json'], base)}   target <= 2.00x (issue #36)"
    )
    print(f"ratio of the hook: {ratios(stats[HOOK], base)}")
    print(f"ratio of a start+stop cycle's hook calls: {ratios(stats[CYCLE], base)}   target <= 1.00x")
    if a.before:
        print(f"ratio of before's types --json: {ratios(stats[BEFORE], base)}")
        print(f"ratio after/before: {ratios(stats['vgpuadm --root p4 types --json'], stats[BEFORE])}")
    if a.no_bytecode:
        print(f"ratio (sources compiled): {ratios(stats['  same, sources compiled each run'], base)}")
    heavy = sorted({m for m in mods if m.split(".")[0] in HEAVY})
    print(f"vgpuadm modules imported: {', '.join(sorted(m for m in mods if m.startswith('vgpuadm')))}")
    print(f"heavy modules on the fast path: {', '.join(heavy) or 'none'}")


if __name__ == "__main__":
    main()
