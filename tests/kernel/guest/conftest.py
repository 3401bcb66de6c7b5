"""Fixtures for the suite that runs INSIDE the lane's guest (a real 6.1 kernel with mtty, mdpy, mbochs, QEMU's
SR-IOV NVMe controller behind an emulated IOMMU, vfio-pci and libvirtd), as root, on the real root `/`.

Outside that guest every test here is skipped: tests/kernel/run-lane.sh sets VGPUADM_KERNEL_GUEST=1 in the guest.
(VGPUADM_KERNEL_GUEST=1 VGPUADM_ROOT=<a `vgpuadm sim build kernel-samples` root> runs the sysfs and CLI tests on the
simulator instead, a quick check while editing them.)
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import differential_scenario as scenario
import libvirt
import pytest
from guest_virsh import URI, virsh
from tenacity import Retrying, stop_after_delay, wait_fixed

from vgpuadm import api
from vgpuadm.host.sysfs import Sysfs
from vgpuadm.virt.xml import domain_definition

IN_GUEST = os.environ.get("VGPUADM_KERNEL_GUEST") == "1"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).is_relative_to(here):
            item.add_marker(pytest.mark.kernel)
            if not IN_GUEST:
                item.add_marker(pytest.mark.skip(reason="runs only inside the kernel lane's guest (run-lane.sh)"))


_PART_SECONDS: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Where the guest's time goes: setup, call and teardown seconds per test file."""
    part = Path(report.nodeid.split("::")[0]).stem.removeprefix("test_")
    _PART_SECONDS[part] = _PART_SECONDS.get(part, 0.0) + report.duration
    if IN_GUEST and report.failed:  # at once: pytest's own summary is lost when the lane's timeout kills the guest
        with open(Path(os.environ["VGPUADM_KERNEL_RESULTS"]) / "failures.log", "a") as f:
            f.write(f"=== {report.nodeid} ({report.when})\n{report.longreprtext}\n")


def _mark(name: str) -> None:
    """A line of guest-entry.sh's <results>/marks: the mark and the guest's uptime."""
    with open(Path(os.environ["VGPUADM_KERNEL_RESULTS"]) / "marks", "a") as f:
        f.write(f"{name} {Path('/proc/uptime').read_text().split()[0]}\n")


def pytest_collection_finish(session: pytest.Session) -> None:
    if IN_GUEST:
        _mark("collected")


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The seconds per test file (setup, call and teardown), for run-lane.sh's parts.log."""
    if IN_GUEST and _PART_SECONDS:
        _mark("tests-end")
        lines = [f"{part} {s:.1f}\n" for part, s in _PART_SECONDS.items()]
        (Path(os.environ["VGPUADM_KERNEL_RESULTS"]) / "test-parts").write_text("".join(lines))


@pytest.fixture(scope="session")
def results() -> Path:
    """The folder the host reads back after the guest exits (run-lane.sh's --rwdir)."""
    path = Path(os.environ["VGPUADM_KERNEL_RESULTS"])
    assert path.is_dir(), f"{path} (VGPUADM_KERNEL_RESULTS) is not a directory"
    return path


@pytest.fixture
def mark(results: Path, request: pytest.FixtureRequest) -> Callable[[str], None]:
    """Append a progress line (guest uptime, test, what) to <results>/progress.log: the host can read it even when
    the lane's timeout kills the guest in the middle of a step."""

    def write(what: str) -> None:
        uptime = Path("/proc/uptime").read_text().split()[0]
        with open(results / "progress.log", "a") as f:
            f.write(f"{uptime:>9}s {request.node.name}: {what}\n")

    return write


@pytest.fixture
def sysfs() -> Iterator[Sysfs]:
    """The real host's sysfs. After the test: every mdev removed and SR-IOV switched off again, so each test
    starts from the state the lane booted with."""
    fs = api.open_sysfs(None)  # `/` in the guest; $VGPUADM_ROOT to try the suite on a simulated kernel-samples host
    yield fs
    restore(fs)


def restore(fs: Sysfs) -> None:
    for uuid in fs.listdir("/sys/bus/mdev/devices"):
        fs.write(f"/sys/bus/mdev/devices/{uuid}/remove", "1")
    for addr in fs.listdir("/sys/bus/pci/devices"):
        d = f"/sys/bus/pci/devices/{addr}"
        if fs.exists(f"{d}/sriov_numvfs") and fs.read(f"{d}/sriov_numvfs").strip() != "0":
            fs.write(f"{d}/sriov_numvfs", "0")
        if fs.exists(f"{d}/sriov_drivers_autoprobe"):
            fs.write(f"{d}/sriov_drivers_autoprobe", "1")


@pytest.fixture
def enabled_vfs(cli, sysfs: Sysfs) -> tuple[str, list[str]]:
    """Two VFs on the SR-IOV PF through `vgpuadm sriov enable`, meant for vfio-pci: autoprobe off first, or nvme
    grabs each VF (and, on QEMU's offline secondary controllers, fails and lets go a moment later)."""
    pf = scenario.sriov_pf(sysfs)
    sysfs.write(f"/sys/bus/pci/devices/{pf}/sriov_drivers_autoprobe", "0")
    result = cli("sriov", "enable", pf, "--num", "2", "--json")
    assert result.code == 0, result.err
    assert json.loads(result.out)["steps"] == [f"step 1/1 set sriov_numvfs of {pf} to 2 (was 0)"]
    return pf, [sysfs.link_name(f"/sys/bus/pci/devices/{pf}/virtfn{i}") or "" for i in range(2)]


@pytest.fixture(scope="session")
def libvirtd(results: Path) -> None:
    """guest-entry.sh started libvirtd in the background at boot; under TCG it needs ~35 s before it answers on a
    quiet host, several minutes on a slow one (the lane's timing.log records it)."""
    started = (results / "libvirtd.rc").read_text().strip()
    assert started == "0", f"libvirtd did not start: {(results / 'libvirtd.log').read_text().strip()}"
    for attempt in Retrying(stop=stop_after_delay(900), wait=wait_fixed(2), reraise=True):
        with attempt:
            virsh("version")


def _alive(conn: libvirt.virConnect | None) -> libvirt.virConnect:
    """`conn`, or a new connection when there is none or libvirtd closed it (test_hook.py restarts libvirtd)."""
    with contextlib.suppress(libvirt.libvirtError):
        if conn is not None and conn.isAlive():
            return conn
    libvirt.registerErrorHandler(lambda _ctx, _err: None, None)
    return libvirt.open(URI)


QEMU_NS = "http://libvirt.org/schemas/domain/qemu/1.0"


class Domains:
    """Small diskless q35 guests without graphics, defined through one libvirt connection (a `virsh` per domain is
    a process start under TCG), stopped and undefined by `close`."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.conn: libvirt.virConnect | None = None

    def __call__(self, name: str, *, spare_ports: int = 0, native_hotplug: bool = False) -> str:
        """`spare_ports`: PCIe root ports in the definition. libvirt fills them with its own devices first (a q35
        guest's USB controller and balloon take two), adds one spare port only when none is given, and a device
        added to the definition takes a spare: hot-plug then fails with "No more available PCI slots".
        `native_hotplug`: the root ports' own PCIe hot-plug instead of QEMU's ACPI one (q35's default since QEMU
        6.1). A slot no guest ever powered on (a paused guest's, hot-plugged) then gives its device back at once
        on unplug, as QEMU does for a powered-off slot; a device the domain started with still waits for the guest."""
        return self.all([name], spare_ports=spare_ports, native_hotplug=native_hotplug)[0]

    def all(self, names: list[str], *, spare_ports: int = 0, native_hotplug: bool = False) -> list[str]:
        """Define these, four at a time: libvirtd takes ~1.5 s per definition under TCG, mostly waiting (the
        16-way race defines 16; libvirt connections are thread-safe)."""
        conn = self.conn = _alive(self.conn)
        ports = "<controller type='pci' index='0' model='pcie-root'/>" if spare_ports else ""
        ports += "<controller type='pci' model='pcie-root-port'/>" * spare_ports

        def define(name: str) -> None:
            text = domain_definition(name, vnc=False).replace("<devices>", f"<devices>{ports}", 1)
            if native_hotplug:
                text = text.replace("<domain ", f"<domain xmlns:qemu='{QEMU_NS}' ", 1).replace("</domain>", (
                    "<qemu:commandline><qemu:arg value='-global'/>"
                    "<qemu:arg value='ICH9-LPC.acpi-pci-hotplug-with-bridge-support=off'/></qemu:commandline>"
                    "</domain>"))  # fmt: skip
            conn.defineXML(text)

        with ThreadPoolExecutor(4) as pool:
            list(pool.map(define, names))
        self.names += names
        return names

    def close(self) -> None:
        if not self.names:
            return
        conn = self.conn = _alive(self.conn)

        def remove(name: str) -> None:
            with contextlib.suppress(libvirt.libvirtError):
                dom = conn.lookupByName(name)
                if dom.isActive():
                    dom.destroy()
                dom.undefine()

        with ThreadPoolExecutor(4) as pool:
            list(pool.map(remove, self.names))
        conn.close()


@pytest.fixture
def domain(sysfs: Sysfs, libvirtd: None) -> Iterator[Domains]:
    """The test's domains (Domains), gone after it. The devices vgpuadm gave them go with the `sysfs` fixture's
    restore, which runs after this teardown (this fixture depends on it): QEMU is gone by then, so removing an mdev
    it held does not wait."""
    domains = Domains()
    yield domains
    domains.close()
