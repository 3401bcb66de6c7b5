"""`vgpuadm exporter` scraped by Debian's Prometheus: simulated hosts with VMs in libvirt's embedded driver, the
usage set in the simulated driver (`vgpuadm sim usage`), the exporter and Prometheus started as processes on
127.0.0.1 (free ports, a temporary storage directory, a 2 s scrape interval), and every value read back through
Prometheus's HTTP API (/api/v1/query) compared with what the simulated driver was told. `promtool check metrics`
judges the exposition. No mocks: real Prometheus, real libvirt, the real CLI, the simulated kernel and driver."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from embedded_host import _env, _helper, define, vgpuadm

from vgpuadm.sim.faults import clear_faults, inject_stall
from vgpuadm.sim.profiles import build

pytestmark = [
    pytest.mark.libvirt,
    pytest.mark.skipif(shutil.which("prometheus") is None, reason="Debian's prometheus is not installed"),
]

_UNDEFINE = """
import sys
from vgpuadm.virt.conn import VirtConn, embed_uri
with VirtConn(embed_uri(sys.argv[1])) as c:
    c.domain(sys.argv[2]).undefine()
"""
_RENAME = """
import sys
from vgpuadm.virt.conn import VirtConn, embed_uri
with VirtConn(embed_uri(sys.argv[1])) as c:
    c.domain(sys.argv[2]).rename(sys.argv[3], 0)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str, timeout: float = 10.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return str(r.read().decode())


class Running:
    """The exporter and a Prometheus scraping it."""

    def __init__(self, root: Path, tmp: Path, timeout: float = 1.5) -> None:
        self.port = _free_port()
        self.exporter = subprocess.Popen(
            [sys.executable, "-m", "vgpuadm", "--root", str(root), "exporter", "--listen", f"127.0.0.1:{self.port}",
             "--timeout", str(timeout)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
        )  # fmt: skip
        assert self.exporter.stdout is not None
        line = self.exporter.stdout.readline()
        assert line == f"serving http://127.0.0.1:{self.port}/metrics\n", (line, self.exporter.stderr)
        self.prom_port = _free_port()
        tmp.mkdir(parents=True, exist_ok=True)
        config = tmp / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 2s\n  scrape_timeout: 2s\n  evaluation_interval: 2s\n"
            f"scrape_configs:\n  - job_name: vgpuadm\n    static_configs:\n      - targets: ['127.0.0.1:{self.port}']\n"
        )
        self.prometheus = subprocess.Popen(
            ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{self.prom_port}", "--log.level=warn"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip

    def metrics(self) -> str:
        return _get(f"http://127.0.0.1:{self.port}/metrics")

    def query(self, promql: str) -> dict[tuple[tuple[str, str], ...], float]:
        """The instant vector `promql` gives now: label set (without job, instance and the name) → value."""
        url = f"http://127.0.0.1:{self.prom_port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        doc = json.loads(_get(url))
        assert doc["status"] == "success", doc
        return {tuple(sorted((k, v) for k, v in r["metric"].items() if k not in ("job", "instance", "__name__"))):
                float(r["value"][1]) for r in doc["data"]["result"]}  # fmt: skip

    def wait_for(self, promql: str, want: object, seconds: float = 30.0) -> object:
        """Poll Prometheus until `promql` answers `want` (its scrapes come every 2 s)."""
        deadline, got = time.monotonic() + seconds, None
        while time.monotonic() < deadline:
            try:
                got = self.query(promql)
            except OSError:  # Prometheus still starting
                got = None
            if got == want:
                return got
            time.sleep(0.3)
        raise AssertionError(f"{promql}: {got!r}, wanted {want!r}")

    def stop(self) -> None:
        for proc in (self.prometheus, self.exporter):
            proc.terminate()
        for proc in (self.prometheus, self.exporter):
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture
def running(tmp_path: Path) -> Iterator[list[Running]]:
    started: list[Running] = []
    yield started
    for r in started:
        r.stop()


def _labels(**kw: str) -> tuple[tuple[str, str], ...]:
    """A label set as Prometheus stores it: an empty label is no label."""
    return tuple(sorted((k, v) for k, v in kw.items() if v))


def _check_metrics(text: str) -> None:
    proc = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60,
                          check=False)  # fmt: skip
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", ""), proc


def _sim(root: Path, *args: str) -> None:
    r = vgpuadm(root, "sim", "usage", str(root), *args)
    assert (r.code, r.err) == (0, ""), r.err


def _create(root: Path, vm: str, *args: str) -> list[str]:
    """Create devices for `vm`; their ids."""
    r = vgpuadm(root, "create", "--vm", vm, *args, "--json")
    assert r.code == 0, r.err
    return [d["uuid"] or d["address"] for d in json.loads(r.out)["devices"]]


def test_prometheus_reads_back_each_vms_vgpu_usage_on_a_p4_host(tmp_path: Path, running: list[Running]) -> None:
    """Layout A: two VMs' mdevs, each's figures as the driver reports them, labelled with its domain; an mdev whose
    VM this libvirt does not know is a series with domain="" and counts as unowned; the GPU's own figures."""
    root = tmp_path / "p4"
    build("p4", str(root))
    uuids = define(root, "web01", "db02")
    (web,) = _create(root, "web01", "--type", "nvidia-63")
    db = _create(root, "db02", "--type", "nvidia-63", "--count", "2")
    stray = "aaaaaaaa-0000-4000-8000-000000000001"
    r = vgpuadm(root, "mdev", "create", "--type", "nvidia-63", "--gpu", "0000:02:00.0", "--uuid", stray)
    assert r.code == 0, r.err
    _sim(root, web, "--vm-uuid", uuids["web01"], "--vm-name", "web01", "--gpu", "31", "--memory", "12",
         "--encoder", "3", "--decoder", "4", "--fb-used", "700")  # fmt: skip
    _sim(root, db[0], "--vm-uuid", uuids["db02"], "--gpu", "55", "--fb-used", "1000", "--license",
         "Unlicensed (Restricted)")  # fmt: skip
    other_vm = "99999999-8888-4777-8666-555555555555"
    _sim(root, stray, "--vm-uuid", other_vm, "--gpu", "7", "--fb-used", "10")
    _sim(root, "0000:01:00.0", "--gpu", "45", "--memory", "20", "--fb-used", "2048")
    r = Running(root, tmp_path)
    running.append(r)
    _check_metrics(r.metrics())

    base = {"gpu": "0000:01:00.0", "type": "nvidia-63", "mode": "mdev", "mig_instance": ""}
    web_l = {**base, "domain": "web01", "domain_uuid": uuids["web01"], "device": web}
    db0_l = {**base, "domain": "db02", "domain_uuid": uuids["db02"], "device": db[0]}
    db1_l = {**base, "domain": "db02", "domain_uuid": uuids["db02"], "device": db[1]}
    stray_l = {"domain": "", "domain_uuid": other_vm, "device": stray, "gpu": "0000:02:00.0", "type": "nvidia-63",
               "mode": "", "mig_instance": ""}  # fmt: skip
    r.wait_for("vgpuadm_usage_device_running", {_labels(**web_l): 1, _labels(**db0_l): 1, _labels(**db1_l): 0,
                                          _labels(**stray_l): 1})  # fmt: skip
    util = r.query("vgpuadm_usage_device_utilization_ratio")
    assert util == {
        **{_labels(**web_l, engine=e): v for e, v in (("gpu", 0.31), ("memory", 0.12), ("encoder", 0.03),
                                                      ("decoder", 0.04))},
        **{_labels(**db0_l, engine=e): v for e, v in (("gpu", 0.55), ("memory", 0), ("encoder", 0), ("decoder", 0))},
        **{_labels(**stray_l, engine=e): v for e, v in (("gpu", 0.07), ("memory", 0), ("encoder", 0),
                                                        ("decoder", 0))},
    }  # fmt: skip
    mib = 1 << 20
    assert r.query("vgpuadm_usage_device_fb_used_bytes") == {_labels(**web_l): 700 * mib, _labels(**db0_l): 1000 * mib,
                                                        _labels(**stray_l): 10 * mib}  # fmt: skip
    assert r.query("vgpuadm_usage_device_fb_total_bytes") == {_labels(**x): 1024 * mib for x in (web_l, db0_l, stray_l)}
    assert r.query("vgpuadm_usage_device_licensed") == {_labels(**web_l): 1, _labels(**db0_l): 0, _labels(**stray_l): 1}
    assert r.query("vgpuadm_usage_unowned_devices") == {(): 1}
    r.wait_for("vgpuadm_driver_up", {(): 1})  # a sample slower than --timeout on a loaded machine serves 0 once
    assert r.query("vgpuadm_usage_gpu_utilization_ratio") == {
        _labels(gpu="0000:01:00.0", engine="gpu"): 0.45, _labels(gpu="0000:01:00.0", engine="memory"): 0.2,
        _labels(gpu="0000:02:00.0", engine="gpu"): 0, _labels(gpu="0000:02:00.0", engine="memory"): 0,
    }  # fmt: skip
    assert r.query("vgpuadm_usage_gpu_fb_used_bytes") == {_labels(gpu="0000:01:00.0"): 2048 * mib,
                                                     _labels(gpu="0000:02:00.0"): 0}  # fmt: skip
    assert r.query("vgpuadm_usage_gpu_active_vgpus") == {_labels(gpu="0000:01:00.0"): 2, _labels(gpu="0000:02:00.0"): 1}


def test_prometheus_reads_back_vendor_vfio_and_mig_backed_vgpus(tmp_path: Path, running: list[Running]) -> None:
    """Layout C: a time-sliced vGPU on a VF (joined by GPU, type and the owning VM's UUID) with its utilization;
    on a GPU with MIG on, a MIG-backed vGPU carries its GPU instance (mig_instance) and no utilization, which NVML
    does not support there, while its frame buffer is reported. Each GPU instance is a series of its own: the one
    the vGPU runs on names it and its domain, a free one (made with nvidia-smi) names none; the host without MIG
    has none."""
    sliced, mig = tmp_path / "h200", tmp_path / "h200-mig"
    build("h200-vendor-vfio", str(sliced))
    build("h200-vendor-vfio", str(mig))
    u1 = define(sliced, "train01")["train01"]
    u2 = define(mig, "infer01")["infer01"]
    (vf1,) = _create(sliced, "train01", "--type", "nvidia-1420")
    (vf2,) = _create(mig, "infer01", "--type", "nvidia-1414")
    _sim(sliced, vf1, "--vm-uuid", u1, "--gpu", "64", "--memory", "30", "--fb-used", "3000")
    _sim(mig, vf2, "--vm-uuid", u2, "--gpu", "64", "--fb-used", "9000")
    smi = subprocess.run([str(mig / "usr/bin/nvidia-smi"), "mig", "-i", "0", "-cgi", "19"], capture_output=True,
                         text=True, check=False)  # fmt: skip
    assert smi.returncode == 0, smi.stderr
    r1, r2 = Running(sliced, tmp_path / "a"), Running(mig, tmp_path / "b")
    running += [r1, r2]
    _check_metrics(r1.metrics())
    _check_metrics(r2.metrics())
    l1 = _labels(domain="train01", domain_uuid=u1, device=vf1, gpu="0000:18:00.0", type="nvidia-1420", mode="vf",
                 mig_instance="")  # fmt: skip
    r1.wait_for("vgpuadm_usage_device_running", {l1: 1})
    util = {tuple(sorted((*l1, ("engine", e)))): v for e, v in (("gpu", 0.64), ("memory", 0.3), ("encoder", 0),
                                                                 ("decoder", 0))}  # fmt: skip
    assert r1.query("vgpuadm_usage_device_utilization_ratio") == util
    assert r1.query("vgpuadm_usage_device_fb_used_bytes") == {l1: 3000 << 20}
    assert r1.query("vgpuadm_usage_device_fb_total_bytes") == {l1: 4096 << 20}
    l2 = _labels(domain="infer01", domain_uuid=u2, device=vf2, gpu="0000:18:00.0", type="nvidia-1414", mode="vf",
                 mig_instance="1")  # fmt: skip
    r2.wait_for("vgpuadm_usage_device_running", {l2: 1})
    assert r2.query("vgpuadm_usage_device_fb_used_bytes") == {l2: 9000 << 20}
    assert r2.query("vgpuadm_usage_device_utilization_ratio") == {}
    assert r2.query("vgpuadm_usage_gpu_utilization_ratio") == {}
    assert "no sample on a GPU with MIG on: NVML does not support utilization there" in r2.metrics()
    gi1 = {"gpu": "0000:18:00.0", "mig_instance": "1", "profile": "1g.18gb"}
    gi2 = {**gi1, "mig_instance": "2"}
    assert r2.query("vgpuadm_usage_mig_instance_info") == {
        _labels(**gi1, domain="infer01", domain_uuid=u2, device=vf2): 1,
        _labels(**gi2): 1,
    }
    assert r2.query("vgpuadm_usage_mig_instance_occupied") == {_labels(**gi1): 1, _labels(**gi2): 0}
    assert "NVML does not support utilization on MIG devices" in r2.metrics()
    _check_metrics(r2.metrics())
    r1.wait_for("vgpuadm_driver_up", {(): 1})
    assert r1.query("vgpuadm_usage_mig_instance_info") == {}


def test_a_hanging_driver_gives_a_bounded_scrape_with_the_last_sample_and_driver_down(
    tmp_path: Path, running: list[Running]
) -> None:
    """The simulated nvidia-smi stalls 10 s on every `vgpu -q` (fault injection): each scrape still answers within
    the exporter's 1 s bound (plus the rendering), serving the last good values with vgpuadm_driver_up 0; when the
    driver answers again, it is 1 again."""
    root = tmp_path / "p4"
    build("p4", str(root))
    uuid = define(root, "web01")["web01"]
    (web,) = _create(root, "web01", "--type", "nvidia-63")
    _sim(root, web, "--vm-uuid", uuid, "--gpu", "31")
    r = Running(root, tmp_path, timeout=1.0)
    running.append(r)
    r.wait_for("vgpuadm_usage_device_running", {_labels(domain="web01", domain_uuid=uuid, device=web, gpu="0000:01:00.0",
                                                  type="nvidia-63", mode="mdev", mig_instance=""): 1})  # fmt: skip
    inject_stall(str(root), "/usr/bin/nvidia-smi vgpu -q", 10.0, times=0)
    for _ in range(2):
        start = time.monotonic()
        text = r.metrics()
        took = time.monotonic() - start
        assert took < 2.5, took
        assert "vgpuadm_driver_up 0.0" in text
        assert f'device="{web}",domain="web01"' in text and 'engine="gpu",gpu="0000:01:00.0"' in text
    _check_metrics(text)
    r.wait_for("vgpuadm_driver_up", {(): 0})
    assert r.query("vgpuadm_exporter_sample_age_seconds")[()] >= 1
    clear_faults(str(root))
    r.wait_for("vgpuadm_driver_up", {(): 1}, seconds=40)  # once the stalled read has ended


def test_a_removed_domain_disappears_from_the_series(tmp_path: Path, running: list[Running]) -> None:
    """Undefining a domain (its device then owned by nobody) takes its series away: the next scrape names the
    device with domain="" and the leak count says so."""
    root = tmp_path / "p4"
    build("p4", str(root))
    uuids = define(root, "web01", "db02")
    (web,) = _create(root, "web01", "--type", "nvidia-63")
    (db,) = _create(root, "db02", "--type", "nvidia-63")
    r = Running(root, tmp_path)
    running.append(r)
    r.wait_for("count by (domain) (vgpuadm_usage_device_info)", {_labels(domain="web01"): 1, _labels(domain="db02"): 1})
    _helper(_UNDEFINE, str(root), "db02")
    r.wait_for("count by (domain) (vgpuadm_usage_device_info)", {_labels(domain="web01"): 1, _labels(domain=""): 1})
    assert r.query("vgpuadm_usage_device_info{domain=''}") == {
        _labels(domain="", domain_uuid="", device=db, gpu="0000:01:00.0", type="nvidia-63", mode="", mig_instance=""
                ): 1}  # fmt: skip
    assert r.query(f"vgpuadm_usage_device_info{{domain_uuid='{uuids['db02']}'}}") == {}
    assert r.query("vgpuadm_usage_unowned_devices") == {(): 1}
    assert os.path.isdir(root / "sys/bus/mdev/devices" / web)


def test_a_renamed_domain_s_series_carry_its_new_name_and_none_keeps_the_old(
    tmp_path: Path, running: list[Running]
) -> None:
    """`virsh domrename` (virDomainRename on the embedded driver, the domain shut off as libvirt requires): the
    next scrapes label the device's series with the new name (its UUID, and so its usage record, unchanged), and
    Prometheus holds no series with the old name (the exposition drops it; Prometheus marks it stale)."""
    root = tmp_path / "p4"
    build("p4", str(root))
    uuids = define(root, "web01", "db02")
    (web,) = _create(root, "web01", "--type", "nvidia-63")
    (db,) = _create(root, "db02", "--type", "nvidia-63")
    _sim(root, web, "--vm-uuid", uuids["web01"], "--gpu", "31", "--fb-used", "700")
    r = Running(root, tmp_path)
    running.append(r)
    r.wait_for("count by (domain) (vgpuadm_usage_device_info)", {_labels(domain="web01"): 1, _labels(domain="db02"): 1})
    # info, running, licensed, frame buffer used and total, utilization of 4 engines
    r.wait_for("count({domain='web01'})", {(): 9})
    _helper(_RENAME, str(root), "web01", "web01-renamed")
    r.wait_for("count by (domain) (vgpuadm_usage_device_info)",
               {_labels(domain="web01-renamed"): 1, _labels(domain="db02"): 1})  # fmt: skip
    base = {"gpu": "0000:01:00.0", "type": "nvidia-63", "mode": "mdev", "mig_instance": ""}
    web_l = {**base, "domain": "web01-renamed", "domain_uuid": uuids["web01"], "device": web}
    db_l = {**base, "domain": "db02", "domain_uuid": uuids["db02"], "device": db}
    assert r.query("vgpuadm_usage_device_running") == {_labels(**web_l): 1, _labels(**db_l): 0}
    assert r.query("vgpuadm_usage_device_utilization_ratio{engine='gpu'}") == {_labels(**web_l, engine="gpu"): 0.31}
    assert r.query("vgpuadm_usage_device_fb_used_bytes") == {_labels(**web_l): 700 << 20}
    assert r.query("count({domain='web01-renamed'})") == {(): 9}
    assert r.query("count({domain='web01'})") == {}
    assert 'domain="web01"' not in r.metrics()
    assert r.query("vgpuadm_usage_unowned_devices") == {(): 0}
