"""The kernel lane's time per part (run-lane.sh writes it to <results>/parts.log and prints it).

Inputs: <results>/marks, "<mark> <guest uptime s>" lines from guest-entry.sh and the guest conftest (entry, setup,
libvirtd-started, pytest-start, libvirtd-answers, collected, tests-end, pytest-end, done); <results>/test-parts,
"<test file> <s>" (setup + call + teardown of its tests); <results>/restore-vs-mdevctl, the result line of
bench/bench_restore_kernel.py (test_restore_vs_mdevctl.py runs it), printed after the table; and from run-lane.sh the seconds before the boot
(building the sample drivers, compiling the checkout), of the guest (QEMU started to QEMU gone) and of the
host-side differential. Every second of the lane is in one row; libvirtd's start runs beside collection and the
first tests, so it is shown apart.

Usage: lane_parts.py RESULTS BEFORE_S GUEST_S DIFFERENTIAL_S
"""

from __future__ import annotations

import sys
from pathlib import Path


def _read(path: Path) -> dict[str, float]:
    out: dict[str, float] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            name, _, value = line.rpartition(" ")
            if name:
                out.setdefault(name, float(value))
    return out


def table(results: Path, before: float, guest: float, differential: float) -> str:
    marks = _read(results / "marks")
    tests = _read(results / "test-parts")
    rows: list[tuple[str, float]] = [("before the boot: sample drivers, bytecode (host)", before)]

    def span(label: str, a: str, b: str) -> None:
        if a in marks and b in marks:
            rows.append((label, marks[b] - marks[a]))

    if "entry" in marks:
        rows.append(
            ("boot to the entry script, and power-off after it", marks["entry"] + guest - marks.get("done", guest))
        )
    span("setup: vfio, mdev and the sample modules", "entry", "setup")
    if "cached-mounts" in marks:
        span("the cached 9p mounts (/usr, venv, code)", "setup", "cached-mounts")
        span("libvirt directories, virtlogd and libvirtd -d", "cached-mounts", "pytest-start")
    else:
        span("libvirt directories, virtlogd and libvirtd -d", "setup", "pytest-start")
    span("pytest: start and collection", "pytest-start", "collected")
    in_tests = 0.0
    for part, seconds in sorted(tests.items(), key=lambda kv: -kv[1]):
        rows.append((f"  test_{part}.py", seconds))
        in_tests += seconds
    if "collected" in marks and "tests-end" in marks:
        rows.append(
            ("pytest: between the tests (hooks, reporting)", marks["tests-end"] - marks["collected"] - in_tests)
        )
    span("pytest: end of session", "tests-end", "pytest-end")
    span("guest exit", "pytest-end", "done")
    rows.append(("differential: the simulated side and the comparison (host)", differential))
    lines = [f"lane time per part (guest {guest:.0f} s, lane {before + guest + differential:.0f} s):"]
    lines += [f"  {label:<62} {seconds:7.1f} s" for label, seconds in rows]
    if "libvirtd-started" in marks and "libvirtd-answers" in marks:
        waited = marks["libvirtd-answers"] - marks["libvirtd-started"]
        lines.append(f"  (beside the above: libvirtd answered {waited:.1f} s after it was started)")
    bench = results / "restore-vs-mdevctl"
    if bench.exists():
        lines.append(bench.read_text().strip())
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    folder, before_s, guest_s, diff_s = sys.argv[1:5]
    sys.stdout.write(table(Path(folder), float(before_s), float(guest_s), float(diff_s)))
