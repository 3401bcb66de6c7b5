"""`vgpuadm exporter`: per-VM GPU usage for Prometheus — served on /metrics, or written for node_exporter's textfile
collector — and the systemd unit that runs it.

One sample = the driver's usage (`nvidia-smi vgpu -q` and `--query-gpu`, parsed by host/nvidia_smi_vgpu.py), the
host snapshot and the one domain scan, joined by report/usage.py; when the driver reports a GPU with MIG on
(`mig.mode.current` in the `--query-gpu` read), the GPU instances too (host/mig.py's read, as the inventory's), in the
same bounded sample. A scrape never waits on the driver longer than
`timeout`: the sample is taken in a worker thread (one at a time); when it has not finished in time, or failed, the
scrape serves the last good sample with `vgpuadm_driver_up 0`, and `vgpuadm_exporter_sample_age_seconds` says how
old it is. A read still running when the next scrape comes is waited for, never started twice. A host without
nvidia-smi (no NVIDIA driver) has its devices listed, with no usage and `vgpuadm_driver_up 0`.

Domains come from libvirt (one connection per sample, closed after it), except on a simulated root's own embedded
driver, which a process may start only once and whose pid-file lock would keep every other vgpuadm out of the root
for as long as the exporter runs: there they are read from the files libvirt keeps (io/domainxml.py, as the hook).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from vgpuadm.errors import HostIOError, UsageError, VgpuadmError
from vgpuadm.host import mig as host_mig
from vgpuadm.host import nvidia_smi
from vgpuadm.host.nvidia_smi_vgpu import parse_gpu_usage, parse_vgpu_usage
from vgpuadm.host.root import write_report
from vgpuadm.io import unitfile
from vgpuadm.ops import unit
from vgpuadm.ops.session import Session
from vgpuadm.report.render_prometheus import _Families, text
from vgpuadm.report.usage import DeviceRow, MigRow, families, join, join_mig
from vgpuadm.usage import DriverUsage
from vgpuadm.virt.conn import embed_uri

DEFAULT_LISTEN = "127.0.0.1:9847"
DEFAULT_TIMEOUT = 5.0  # seconds a scrape waits for the driver
WHY = "read GPU usage"


def parse_listen(text: str) -> tuple[str, int]:
    """`ADDR:PORT` (`[v6]:PORT` for IPv6) → (address, port), checked once here."""
    import ipaddress

    host, colon, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        ipaddress.ip_address(host)
        ok = colon and port.isdecimal() and 0 < int(port) < 65536
    except ValueError:
        ok = False
    if not ok:
        raise UsageError(f'--listen "{text}" is not ADDR:PORT', f"e.g. --listen {DEFAULT_LISTEN} (an IP address)")
    return host, int(port)


def check_timeout(seconds: float) -> float:
    if not 0.1 <= seconds <= 120:
        raise UsageError(f"--timeout {seconds}", "give 0.1 to 120 seconds")
    return seconds


def read_driver(s: Session) -> DriverUsage | None:
    """The driver's usage now; None on a host without nvidia-smi (no NVIDIA driver to ask: the devices are listed,
    with no usage); HostIOError when it fails."""
    if nvidia_smi.locate(s.root) is None:
        return None
    out = []
    for args in (nvidia_smi.VGPU_QUERY, nvidia_smi.GPU_USAGE):
        result = nvidia_smi.read(s.root, args, WHY)
        if result.returncode != 0:
            raise HostIOError(f"nvidia-smi {' '.join(args)} failed: {result.message()}",
                              "check the driver with `nvidia-smi`")  # fmt: skip
        out.append(result.stdout)
    # a block without a VM is no guest's (the simulated driver lists a vGPU on a GPU instance that way)
    return DriverUsage(tuple(v for v in parse_vgpu_usage(out[0]) if v.vm_uuid), parse_gpu_usage(out[1]))


@dataclass(frozen=True)
class Sample:
    rows: list[DeviceRow]
    driver: DriverUsage
    taken: float  # time.time() when it finished
    duration: float  # seconds it took
    driver_read: bool = True  # False: no nvidia-smi on this host
    mig: tuple[MigRow, ...] = ()  # the GPU instances (none unless a GPU has MIG on)


def take_sample(root: str | None, connect: str | None = None) -> Sample:
    """One sample of the host (see the module's docstring)."""
    start = time.monotonic()
    with Session.read(root, connect) as s:
        driver = read_driver(s)
        domains = s.domains_on_disk() if s.uri == embed_uri(s.root.path) else s.domains()
        rows = join(s.snap, domains, driver or DriverUsage())
        on = driver is not None and any(g.mig_on for g in driver.gpus.values())
        mig = tuple(join_mig(host_mig.read(s.root), rows)) if on else ()
    return Sample(rows, driver or DriverUsage(), time.time(), time.monotonic() - start, driver is not None, mig)


class Exporter:
    """The bounded sampler behind every scrape (a prometheus_client collector)."""

    def __init__(self, root: str | None, connect: str | None = None, timeout: float = DEFAULT_TIMEOUT,
                 sample: Callable[[], Sample] | None = None) -> None:  # fmt: skip
        self.timeout = check_timeout(timeout)
        self._sample = sample or (lambda: take_sample(root, connect))
        self._lock = threading.Lock()  # one scrape at a time decides; the worker runs outside it
        self._worker: threading.Thread | None = None
        self._fresh: Sample | VgpuadmError | None = None
        self.last: Sample | None = None
        self.error: str | None = None  # why the last scrape had no fresh sample

    def _run(self) -> None:
        try:
            self._fresh = self._sample()
        except VgpuadmError as exc:
            self._fresh = exc

    def refresh(self) -> bool:
        """Take a sample, waiting at most `timeout` in all (for a scrape ahead of this one too); True when a fresh
        good one came."""
        deadline = time.monotonic() + self.timeout
        if not self._lock.acquire(timeout=self.timeout):
            self.error = f"the driver did not answer in {self.timeout:g} s"
            return False
        try:
            if self._worker is None:
                self._fresh = None
                self._worker = threading.Thread(target=self._run, name="vgpuadm-sample", daemon=True)
                self._worker.start()
            self._worker.join(max(deadline - time.monotonic(), 0.0))
            if self._worker.is_alive():
                self.error = f"the driver did not answer in {self.timeout:g} s"
                return False
            self._worker, fresh = None, self._fresh
            if isinstance(fresh, Sample):
                self.last, self.error = fresh, None if fresh.driver_read else "no nvidia-smi on this host"
                return fresh.driver_read
            self.error = fresh.message if isinstance(fresh, VgpuadmError) else "no sample"
            return False
        finally:
            self._lock.release()

    def families(self, up: bool) -> _Families:
        last = self.last
        m = families(last.rows, last.driver, mig=last.mig) if last is not None else _Families()
        m.add("vgpuadm_driver_up", "1 when the last scrape read the GPU driver in time; 0: the series are the last "
              "good sample's.", {}, int(up))  # fmt: skip
        if last is not None:
            m.add("vgpuadm_exporter_sample_age_seconds", "Age of the sample the series come from.", {},
                  round(max(time.time() - last.taken, 0.0), 3))  # fmt: skip
            m.add("vgpuadm_exporter_sample_duration_seconds", "How long taking that sample took.", {},
                  round(last.duration, 3))  # fmt: skip
            m.add("vgpuadm_exporter_sample_timestamp_seconds", "When that sample was taken (Unix time).", {},
                  round(last.taken, 3))  # fmt: skip
        return m

    def collect(self) -> Iterator[Any]:
        """prometheus_client's collector protocol: one bounded refresh per scrape."""
        yield from self.families(self.refresh()).collect()

    def exposition(self) -> str:
        return text(self.families(self.refresh()))


def serve(exporter: Exporter, listen: str, ready: Callable[[str, int], None] | None = None) -> None:
    """Serve /metrics on `listen` until the process is stopped."""
    from prometheus_client import CollectorRegistry, start_http_server

    host, port = parse_listen(listen)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(exporter)
    try:
        start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise HostIOError(f"cannot listen on {listen}: {exc.strerror}",
                          "pick a free port with --listen ADDR:PORT") from exc  # fmt: skip
    if ready is not None:
        ready(host, port)
    threading.Event().wait()


def write_loop(exporter: Exporter, path: str, interval: float | None) -> bool:
    """Write the exposition to `path` (atomically: a temporary file renamed over it) once, or every `interval`
    seconds until stopped. Returns whether the last write had a fresh sample."""
    while True:
        up = exporter.refresh()
        write_report(path, text(exporter.families(up)))
        if interval is None:
            return up
        time.sleep(interval)


# -- the systemd unit -------------------------------------------------------------------------------------------


def install(root: str | None, *, listen: str = DEFAULT_LISTEN, dry_run: bool = False,
            command: list[str] | None = None) -> unit.UnitResult:  # fmt: skip
    """Write vgpuadm-exporter.service, ExecStart running this vgpuadm's `exporter --listen LISTEN`."""
    parse_listen(listen)
    return unit.install(root, dry_run=dry_run, name=unitfile.EXPORTER_UNIT,
                        command=[*(command or unit.vgpuadm_command()), "exporter", "--listen", listen])  # fmt: skip


def uninstall(root: str | None, *, dry_run: bool = False) -> unit.UnitResult:
    return unit.uninstall(root, dry_run=dry_run, name=unitfile.EXPORTER_UNIT)
