"""Shared fixtures: simulated hosts built fresh per test, and the CLI run in-process; the test lanes.

Lanes (markers, chosen with `pytest -m LANE`): `unit` (pure: no process, no libvirt; tests/unit and tests/golden
unless marked otherwise; a guard fails a unit test that starts a process or opens libvirt), `process` (runs
vgpuadm or another program as a process, no libvirt), `libvirt` (a libvirt driver: the embedded one or libvirtd),
`ansible` (ansible-core), `browser` (Chromium), `fuzz`, `kernel` (inside the nested real-kernel guest only).
A directory gives its lane; a module in tests/unit or tests/golden that needs more says so in `pytestmark`."""

from __future__ import annotations

import contextlib
import io
import uuid as uuid_mod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from vgpuadm.cli.app import run
from vgpuadm.cli.console import Console
from vgpuadm.host.root import FileLock
from vgpuadm.sim.profiles import build
from vgpuadm.virt import xml

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data"


@dataclass
class Result:
    code: int
    out: str
    err: str


@pytest.fixture
def sim_host(tmp_path: Path) -> Callable[[str], Path]:
    """Build a simulated host of a profile; returns its root."""

    def make(profile: str) -> Path:
        root = tmp_path / f"host-{profile}"
        build(profile, str(root))
        return root

    return make


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch) -> Callable[..., Result]:
    """Run `vgpuadm ARGS…` in-process; returns exit code, stdout and stderr. Tables are as wide as on a pipe
    (160 columns) whatever $COLUMNS the runner has; a test sets COLUMNS itself to see a narrow terminal."""
    monkeypatch.delenv("COLUMNS", raising=False)

    def invoke(*args: str) -> Result:
        out, err = io.StringIO(), io.StringIO()
        code = run(list(args), Console(out, err))
        return Result(code, out.getvalue(), err.getvalue())

    return invoke


SYSTEM_URI = "qemu:///system"


def _libvirtd_answers(uri: str) -> bool:
    import libvirt

    libvirt.registerErrorHandler(lambda _ctx, _err: None, None)
    try:
        libvirt.open(uri).close()
    except libvirt.libvirtError:
        return False
    return True


@pytest.fixture(scope="session")
def libvirtd(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A libvirtd answering on qemu:///system; returns that URI. Starts `virtlogd -d` and `libvirtd -d` (as root)
    when no daemon answers, then polls until it does (30 s at most). Safe under pytest-xdist: workers serialise
    the start on a file lock. The daemon is left running for later sessions."""
    import os
    import shutil
    import subprocess
    import time

    if _libvirtd_answers(SYSTEM_URI):
        return SYSTEM_URI
    if os.geteuid() != 0 or not shutil.which("libvirtd"):
        pytest.fail(
            "no libvirtd answers on qemu:///system and this user cannot start one (run scripts/install.sh as root)"
        )
    lock = tmp_path_factory.getbasetemp().parent / "vgpuadm-libvirtd.lock"
    with FileLock(str(lock)):
        if not _libvirtd_answers(SYSTEM_URI):
            for daemon in ("virtlogd", "libvirtd"):
                subprocess.run([daemon, "-d"], check=False, capture_output=True, timeout=30)
            deadline = time.monotonic() + 30
            while not _libvirtd_answers(SYSTEM_URI):
                if time.monotonic() > deadline:
                    pytest.fail("started libvirtd but qemu:///system did not answer within 30 s")
                time.sleep(0.1)  # polling interval, not a wait for a guessed duration
    return SYSTEM_URI


_TARGET_START = """set -e
mount --make-rprivate /
for d in /run/libvirt /var/lib/libvirt /var/cache/libvirt /var/log/libvirt; do mount -t tmpfs -o mode=0755 tmpfs "$d"; done
mount --bind "$1/etc" /etc/libvirt
virtlogd -d -p "$1/virtlogd.pid"
libvirtd -d -p "$1/libvirtd.pid"
"""


@pytest.fixture(scope="session")
def target_libvirtd(libvirtd: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A second real libvirtd on this machine, as another host: its own mount namespace (`unshare -m`) with empty
    /run/libvirt, /var/lib/libvirt, /var/cache/libvirt and /var/log/libvirt, the machine's *.conf files but none of
    its domains, networks or hooks, its own host UUID, its socket in a directory both daemons see and no cgroup
    controllers (its QEMU's scopes would share names with the first daemon's). Returns its URI
    (qemu+unix:///system?socket=…); libvirt migrates between the two as between two hosts. Stopped at the end."""
    import os
    import shutil
    import signal
    import subprocess
    import time

    import libvirt

    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.fail("a second libvirtd needs root and unshare (util-linux)")
    top = tmp_path_factory.mktemp("target-libvirtd")
    etc = top / "etc"
    etc.mkdir()
    for conf in Path("/etc/libvirt").glob("*.conf"):
        shutil.copy(conf, etc / conf.name)
    with open(etc / "libvirtd.conf", "a") as f:
        f.write(f'\nunix_sock_dir = "{top}"\nhost_uuid = "{uuid_mod.uuid4()}"\n')
    with open(etc / "qemu.conf", "a") as f:
        f.write("\ncgroup_controllers = [ ]\n")
    uri = f"qemu+unix:///system?socket={top}/libvirt-sock"
    subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", _TARGET_START, "sh", str(top)],
                   check=True, capture_output=True, timeout=60)  # fmt: skip
    deadline = time.monotonic() + 30
    while not _libvirtd_answers(uri):
        if time.monotonic() > deadline:
            pytest.fail(f"the second libvirtd did not answer on {uri} within 30 s")
        time.sleep(0.1)  # polling interval, not a wait for a guessed duration
    yield uri
    c = libvirt.open(uri)
    for dom in c.listAllDomains():
        if dom.isActive():
            dom.destroy()
        if dom.isPersistent():
            dom.undefine()
    c.close()
    for daemon in ("libvirtd", "virtlogd"):
        with contextlib.suppress(OSError, ValueError):
            os.kill(int((top / f"{daemon}.pid").read_text()), signal.SIGTERM)


@pytest.fixture
def conn(libvirtd: str) -> Iterator[Any]:
    """An open connection to that libvirtd (a libvirt.virConnect), closed after the test."""
    import libvirt

    c = libvirt.open(libvirtd)
    yield c
    c.close()


@pytest.fixture
def daemon_domain(conn: Any) -> Iterator[Any]:
    """Define throwaway diskless domains on that libvirtd: `define(suffix="web01", machine="q35", vnc=False)`
    returns a unique name. Destroyed (when running) and undefined in teardown."""
    import libvirt

    made: list[str] = []

    def define(suffix: str = "web01", machine: str = "q35", vnc: bool = False) -> str:
        name = f"vgpuadm-test-{uuid_mod.uuid4().hex[:10]}-{suffix}"
        conn.defineXML(xml.domain_definition(name, machine=machine, vnc=vnc, memory_mib=64))
        made.append(name)
        return name

    yield define
    for name in made:
        try:
            dom = conn.lookupByName(name)
        except libvirt.libvirtError:
            continue
        if dom.isActive():
            dom.destroy()
        dom.undefine()


_DIRECTORY_LANES = {"libvirt": "libvirt", "campaign": "libvirt", "ansible": "ansible", "cockpit": "browser",
                    "html": "browser", "fuzz": "fuzz", "kernel": "kernel"}  # fmt: skip
_NOT_PURE = ("libvirt", "process", "ansible", "browser", "fuzz", "kernel")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Each test joins its directory's lane; in tests/unit and tests/golden a test not marked otherwise is `unit`."""
    here = Path(__file__).parent
    for item in items:
        part = item.path.relative_to(here).parts[0] if item.path.is_relative_to(here) else ""
        lane = _DIRECTORY_LANES.get(part)
        if lane:
            item.add_marker(lane)
        elif not any(item.get_closest_marker(m) for m in _NOT_PURE):
            item.add_marker("unit")


@pytest.fixture(autouse=True)
def _pure_unit_guard(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A `unit` test that starts a process or opens libvirt fails at that point, naming the lane it belongs to."""
    if request.node.get_closest_marker("unit") is None:
        return

    def refuse(what: str, lane: str) -> Callable[..., Any]:
        def call(*_a: Any, **_k: Any) -> Any:
            raise AssertionError(f"a pure unit test {what}: mark its module `pytestmark = pytest.mark.{lane}`")

        return call

    import subprocess

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse("started a process", "process"))
    try:
        import libvirt
    except ImportError:
        return
    for name in ("open", "openAuth", "openReadOnly"):
        monkeypatch.setattr(libvirt, name, refuse("opened libvirt", "libvirt"))


_CAMPAIGN_LINES: list[str] = []
_FUZZ_COUNTS: list[list[object]] = []  # [target, inputs, clean errors, successes, violations] per fuzz test


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Collect the campaign's count lines (tests/campaign) and the fuzz lane's counts (tests/fuzz) from the
    reports, which pytest-xdist relays from its workers (a worker's own stdout never reaches the terminal)."""
    if report.when == "call":
        _CAMPAIGN_LINES.extend(str(v) for k, v in report.user_properties if k == "campaign")
    elif report.when == "teardown":  # the fuzz lane's `tally` fixture records its counts as it is torn down
        _FUZZ_COUNTS.extend(list(v) for k, v in report.user_properties if k == "fuzz")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for line in _CAMPAIGN_LINES:
        terminalreporter.write_line(line)
    for target, *counts in _FUZZ_COUNTS:
        terminalreporter.write_line(f"fuzz {target}: {_fuzz_line(counts)}")
    if _FUZZ_COUNTS:
        total = [sum(int(c[i]) for c in _FUZZ_COUNTS) for i in range(1, 5)]  # type: ignore[call-overload]
        terminalreporter.write_line(f"fuzz total: {_fuzz_line(total)}")


def _fuzz_line(counts: list) -> str:
    inputs, errors, successes, violations = counts
    return f"{inputs} inputs, {errors} clean errors, {successes} successes, violations={violations}"
