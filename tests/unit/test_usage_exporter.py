"""Per-VM GPU usage, the pure parts: `nvidia-smi vgpu -q` and `--query-gpu` read into checked values (each value
against its grammar, a bounded count), each mode's join of its device to the driver's record, and the exporter's
bounded scrape (a sample that does not finish in time leaves the last good one served with vgpuadm_driver_up 0).
The scrape test's sample is a function the test controls (a thread waits on it): no driver to hang here; the
Prometheus tests (tests/libvirt/test_exporter_prometheus.py) hang the simulated one."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.unit.inventory_setup import mig_on, nvidia_smi, set_vf_type
from vgpuadm import api
from vgpuadm.errors import HostIOError, UsageError
from vgpuadm.host import mig as host_mig
from vgpuadm.host.nvidia_smi_vgpu import MAX_VGPUS, parse_gpu_usage, parse_vgpu_usage
from vgpuadm.model import Allocation
from vgpuadm.ops.exporter import Exporter, Sample, parse_listen, read_driver, take_sample
from vgpuadm.ops.session import Session
from vgpuadm.plan.domains import Domain, Domains
from vgpuadm.report.render_prometheus import text
from vgpuadm.report.usage import DeviceRow, MigRow, families, join, join_mig
from vgpuadm.sim.faults import inject_fault
from vgpuadm.sim.kernel import SimKernel
from vgpuadm.sim.usage import set_vgpu_usage
from vgpuadm.usage import DriverUsage, GpuUsage, VgpuUsage

# `nvidia-smi vgpu -q` in the layout of NVIDIA's vGPU user guide ("Getting Details About vGPUs"): a P4 running two
# vGPUs and an H200 with MIG on running one MIG-backed vGPU on a VF.
VGPU_Q = """
GPU 00000000:01:00.0
    Active vGPUs                      : 2
    vGPU ID                           : 3251634213
        VM UUID                       : 6C3E8A6E-0000-4000-8000-000000000001
        VM Name                       : guest=web01,debug-threads=on
        vGPU Name                     : GRID P4-1Q
        vGPU Type                     : 63
        vGPU UUID                     : d471c7f2-0a53-11ec-afd3-38b06df18e37
        MDEV UUID                     : aaaaaaaa-0000-4000-8000-000000000001
        Guest Driver Version          : 550.54.14
        License Status                : Licensed (Expiry: 2027-1-1 0:0:0 GMT)
        GPU Instance ID               : N/A
        Placement ID                  : N/A
        PCI
            Bus Id                    : 00000000:00:00.0
        FB Memory Usage
            Total                     : 1024 MiB
            Used                      : 700 MiB
            Free                      : 324 MiB
        Utilization
            Gpu                       : 31 %
            Memory                    : 12 %
            Encoder                   : 3 %
            Decoder                   : 4 %
        Encoder Stats
            Active Sessions           : 0
            Average FPS               : 0
        FBC Stats
            Active Sessions           : 0
    vGPU ID                           : 3251634214
        VM UUID                       : not-a-uuid
        VM Name                       : bad\x1bname
        vGPU Name                     : GRID P4-1Q
        vGPU Type                     : 63
        MDEV UUID                     : aaaaaaaa-0000-4000-8000-000000000002
        Guest Driver Version          : Not Available
        License Status                : Unlicensed (Restricted)
        FB Memory Usage
            Total                     : 1 GiB
            Used                      : 12
        Utilization
            Gpu                       : 140 %
            Memory                    : -1 %
            Encoder                   : 0 %
            Decoder                   : 0 %
GPU 00000000:18:00.0
    Active vGPUs                      : 1
    vGPU ID                           : 3251634215
        VM UUID                       : 6c3e8a6e-0000-4000-8000-000000000002
        VM Name                       : N/A
        vGPU Name                     : NVIDIA H200X-1-18C
        vGPU Type                     : 1414
        MDEV UUID                     : N/A
        License Status                : Licensed
        GPU Instance ID               : 3
        Placement ID                  : 0
        FB Memory Usage
            Total                     : 18432 MiB
            Used                      : 9000 MiB
        Utilization
            Gpu                       : N/A
            Memory                    : N/A
            Encoder                   : N/A
            Decoder                   : N/A
"""

WEB = VgpuUsage("0000:01:00.0", 3251634213, "6c3e8a6e-0000-4000-8000-000000000001", "guest=web01,debug-threads=on",
                "GRID P4-1Q", 63, "aaaaaaaa-0000-4000-8000-000000000001", None, None, True, "550.54.14", 1024, 700,
                31, 12, 3, 4)  # fmt: skip
MIG = VgpuUsage("0000:18:00.0", 3251634215, "6c3e8a6e-0000-4000-8000-000000000002", None, "NVIDIA H200X-1-18C",
                1414, None, 3, 0, True, None, 18432, 9000, None, None, None, None)  # fmt: skip


def test_vgpu_q_blocks_become_checked_usage_records() -> None:
    """Each value is believed only in its grammar: a UUID, a name without control characters, `N MiB`, `N %` up
    to 100; anything else (and N/A) is None. Sections (FB Memory Usage, Utilization) keep their keys apart."""
    bad = VgpuUsage("0000:01:00.0", 3251634214, None, None, "GRID P4-1Q", 63, "aaaaaaaa-0000-4000-8000-000000000002",
                    None, None, False, None, None, None, None, None, 0, 0)  # fmt: skip
    assert parse_vgpu_usage(VGPU_Q) == (WEB, bad, MIG)


def test_vgpu_q_believes_at_most_max_vgpus_blocks() -> None:
    block = "    vGPU ID                           : {}\n        MDEV UUID                     : N/A\n"
    many = "GPU 00000000:01:00.0\n" + "".join(block.format(i) for i in range(MAX_VGPUS + 5))
    assert len(parse_vgpu_usage(many)) == MAX_VGPUS
    assert parse_vgpu_usage("No supported devices in vGPU mode\n") == ()
    assert parse_vgpu_usage("GPU 00000000:01:00.0\n    vGPU ID : 99999999999\n") == ()  # not a 32-bit id


def test_query_gpu_figures_with_units_and_na() -> None:
    csv = ("pci.bus_id, utilization.gpu [%], utilization.memory [%], memory.used [MiB], memory.total [MiB]\n"
           "00000000:01:00.0, 45 %, 20 %, 2048 MiB, 8192 MiB\n00000000:18:00.0, [N/A], [N/A], 9000 MiB, 143771 MiB\n"
           "garbage, 1 %, 1 %, 1 MiB, 1 MiB\n")  # fmt: skip
    assert parse_gpu_usage(csv) == {
        "0000:01:00.0": GpuUsage("0000:01:00.0", 45, 20, 2048, 8192),
        "0000:18:00.0": GpuUsage("0000:18:00.0", None, None, 9000, 143771),
    }


def _domains(*entries: tuple[str, str, list[Allocation]]) -> Domains:
    return Domains("", {n: Domain(n, u, "", True, "", tuple(a), (), None, None) for n, u, a in entries})


def test_each_mode_joins_its_device_to_the_drivers_record(sim_host: Callable[[str], Path]) -> None:
    """mdev by its MDEV UUID; a layout C VF by its GPU, type and the owning VM's UUID (its record names no VF); a
    passed-through GPU by the GPU's own figures. A record no device claims and a device no domain references are
    rows with domain=""."""
    p4 = sim_host("p4")
    kernel = SimKernel(str(p4))
    for n in (1, 2, 3):
        kernel.write("/sys/bus/pci/devices/0000:01:00.0/mdev_supported_types/nvidia-63/create",
                     f"aaaaaaaa-0000-4000-8000-00000000000{n}".encode())  # fmt: skip
    snap = api.discover(str(p4))
    web = Allocation("web01", "mdev", "nvidia-63", "0000:01:00.0", uuid="aaaaaaaa-0000-4000-8000-000000000001")
    idle = Allocation("db02", "mdev", "nvidia-63", "0000:01:00.0", uuid="aaaaaaaa-0000-4000-8000-000000000002")
    gpu = Allocation("big01", "pci", None, None, address="0000:02:00.0")
    stray = VgpuUsage("0000:01:00.0", 7, "99999999-8888-4777-8666-555555555555", None, None, 63,
                      "bbbbbbbb-0000-4000-8000-000000000001", None, None, None, None, None, None, 5, None, None, None)  # fmt: skip
    whole = GpuUsage("0000:02:00.0", 80, 40, 6000, 8192)
    driver = DriverUsage((WEB, stray), {"0000:02:00.0": whole})
    doms = _domains(("web01", "6C3E8A6E-0000-4000-8000-000000000001", [web]),
                    ("db02", "6c3e8a6e-0000-4000-8000-000000000003", [idle]),
                    ("big01", "6c3e8a6e-0000-4000-8000-000000000004", [gpu]))  # fmt: skip
    assert join(snap, doms, driver) == [
        DeviceRow(("big01", "6c3e8a6e-0000-4000-8000-000000000004", "0000:02:00.0", "0000:02:00.0", "", "pci", ""),
                  whole),
        DeviceRow(("db02", "6c3e8a6e-0000-4000-8000-000000000003", idle.uuid, "0000:01:00.0", "nvidia-63", "mdev", ""),
                  None),
        DeviceRow(("web01", "6c3e8a6e-0000-4000-8000-000000000001", web.uuid, "0000:01:00.0", "nvidia-63", "mdev", ""),
                  WEB),
        DeviceRow(("", "99999999-8888-4777-8666-555555555555", "bbbbbbbb-0000-4000-8000-000000000001", "0000:01:00.0",
                   "nvidia-63", "", ""), stray),
        DeviceRow(("", "", "aaaaaaaa-0000-4000-8000-000000000003", "0000:01:00.0", "nvidia-63", "", ""), None),
    ]  # fmt: skip


def test_a_copied_domain_does_not_take_the_usage_of_the_vm_running_the_mdev(sim_host: Callable[[str], Path]) -> None:
    """Two domains reference one mdev (a VM copied with `virsh dumpxml | virsh define`): the driver's record is the
    one whose VM UUID it names; the copy's row is not running."""
    root = sim_host("p4")
    SimKernel(str(root)).write("/sys/bus/pci/devices/0000:01:00.0/mdev_supported_types/nvidia-63/create",
                               b"aaaaaaaa-0000-4000-8000-000000000001")  # fmt: skip
    snap = api.discover(str(root))
    uuid = "aaaaaaaa-0000-4000-8000-000000000001"
    copy = Allocation("web01-copy", "mdev", "nvidia-63", "0000:01:00.0", uuid=uuid,
                      domain_uuid="6c3e8a6e-0000-4000-8000-0000000000cc")  # fmt: skip
    web = Allocation("web01", "mdev", "nvidia-63", "0000:01:00.0", uuid=uuid,
                     domain_uuid="6c3e8a6e-0000-4000-8000-000000000001")  # fmt: skip
    rows = join(snap, _domains(("web01", "6c3e8a6e-0000-4000-8000-000000000001", [web]),
                               ("web01-copy", "6c3e8a6e-0000-4000-8000-0000000000cc", [copy])),
                DriverUsage((WEB,)))  # fmt: skip
    assert [(r.labels[0], r.record) for r in rows] == [("web01", WEB), ("web01-copy", None)]


@pytest.mark.process  # discovering a layout C host runs its (simulated) nvidia-smi
def test_a_vf_is_joined_by_its_gpu_type_and_owning_vm(sim_host: Callable[[str], Path]) -> None:
    """A layout C vGPU's record names no VF: the VF's is the record of its type, on its GPU, of the VM that owns
    the VF; another VM's vGPU of the same type is not it."""
    h200 = sim_host("h200-vendor-vfio")
    kernel = SimKernel(str(h200))
    for vf in ("0000:18:00.4", "0000:18:00.5"):
        kernel.write(f"/sys/bus/pci/devices/{vf}/nvidia/current_vgpu_type", b"1420")
    snap = api.discover(str(h200))
    mine = VgpuUsage("0000:18:00.0", 1, "6c3e8a6e-0000-4000-8000-000000000005", None, None, 1420, None, None, None,
                     True, None, 4096, 100, 10, 0, 0, 0)  # fmt: skip
    theirs = VgpuUsage("0000:18:00.0", 2, "6c3e8a6e-0000-4000-8000-000000000006", None, None, 1420, None, None, None,
                       True, None, 4096, 200, 20, 0, 0, 0)  # fmt: skip
    a = Allocation("train01", "vf", "nvidia-1420", "0000:18:00.4", address="0000:18:00.4",
                   domain_uuid="6c3e8a6e-0000-4000-8000-000000000006")  # fmt: skip
    rows = join(snap, _domains(("train01", "6c3e8a6e-0000-4000-8000-000000000006", [a])),
                DriverUsage((mine, theirs)))  # fmt: skip
    assert [(r.labels[:3], r.record) for r in rows] == [
        (("train01", "6c3e8a6e-0000-4000-8000-000000000006", "0000:18:00.4"), theirs),
        (("", "6c3e8a6e-0000-4000-8000-000000000005", ""), mine),
        (("", "", "0000:18:00.5"), None),
    ]  # fmt: skip


def _h200_mig(root: Path) -> None:
    """MIG on, two 1g.18gb GPU instances (ids 1 and 2), an H200X-1-18C on VF 0000:18:00.4 (the driver binds it to
    instance 1) run by VM ...0002; instance 2 is free."""
    mig_on(root)
    nvidia_smi(root, "mig", "-i", "0", "-cgi", "19:6,19:5")
    set_vf_type(root, "0000:18:00.4", 1414)
    set_vgpu_usage(str(root), "0000:18:00.4", {"vm_uuid": "6c3e8a6e-0000-4000-8000-000000000002", "fb_used_mib": 9000})


@pytest.mark.process  # the simulated layout C host's nvidia-smi runs as a process
def test_each_mig_gpu_instance_is_a_series_with_the_vgpu_on_it_or_free(sim_host: Callable[[str], Path]) -> None:
    """The driver says the GPU is in MIG mode (`mig.mode.current` of --query-gpu); its GPU instances (host/mig.py's
    read) are one series each: the one backing infer01's vGPU names it, the free one has domain, device "" and
    occupied 0. Nothing else of the exposition changes."""
    root = sim_host("h200-mig")
    _h200_mig(root)
    u = "6c3e8a6e-0000-4000-8000-000000000002"
    a = Allocation("infer01", "vf", "nvidia-1414", "0000:18:00.4", address="0000:18:00.4", domain_uuid=u)
    with Session.read(str(root)) as s:
        driver = read_driver(s)
        assert driver is not None and [g.mig_on for g in driver.gpus.values()] == [True]
        rows = join(s.snap, _domains(("infer01", u, [a])), driver)
        mig = join_mig(host_mig.read(s.root), rows)
    assert mig == [MigRow(("0000:18:00.0", "1", "1g.18gb", "infer01", u, "0000:18:00.4"), True),
                   MigRow(("0000:18:00.0", "2", "1g.18gb", "", "", ""), False)]  # fmt: skip
    body = text(families(rows, driver, mig=mig))
    assert [x for x in body.splitlines() if "mig_instance_" in x] == [
        "# HELP vgpuadm_usage_mig_instance_info One series per MIG GPU instance (mig_instance: its GPU instance ID, "
        'profile: its GPU-instance profile) with the vGPU on it and the domain owning that ("": free, or none); no '
        "utilization per instance: NVML does not support utilization on MIG devices; a host with a GPU in MIG mode "
        "pays 4 more nvidia-smi reads per sample (-q -x, mig -lgip, mig -lgipp, mig -lgi), 5 when it has GPU "
        "instances (vgpu -q again).",
        "# TYPE vgpuadm_usage_mig_instance_info gauge",
        f'vgpuadm_usage_mig_instance_info{{device="0000:18:00.4",domain="infer01",domain_uuid="{u}",'
        'gpu="0000:18:00.0",mig_instance="1",profile="1g.18gb"} 1.0',
        'vgpuadm_usage_mig_instance_info{device="",domain="",domain_uuid="",gpu="0000:18:00.0",mig_instance="2",'
        'profile="1g.18gb"} 1.0',
        "# HELP vgpuadm_usage_mig_instance_occupied 1 when a vGPU sits on the MIG GPU instance, 0 when it is free.",
        "# TYPE vgpuadm_usage_mig_instance_occupied gauge",
        'vgpuadm_usage_mig_instance_occupied{gpu="0000:18:00.0",mig_instance="1",profile="1g.18gb"} 1.0',
        'vgpuadm_usage_mig_instance_occupied{gpu="0000:18:00.0",mig_instance="2",profile="1g.18gb"} 0.0',
    ]  # fmt: skip
    assert [x for x in body.splitlines() if "mig_instance_" not in x] == text(families(rows, driver)).splitlines()


@pytest.mark.process  # the simulated layout C host's nvidia-smi runs as a process
def test_the_mig_read_is_made_only_with_mig_on_and_inside_the_bounded_sample(sim_host: Callable[[str], Path]) -> None:
    """`nvidia-smi -q -x` (the MIG read's first) fails on both hosts: the H200 with MIG off never asks it (its sample
    is good, with no GPU instance); with MIG on the sample fails as a whole (the scrape then serves the last good
    one with vgpuadm_driver_up 0), never a sample whose free instances are silently missing."""
    off, on = sim_host("h200-vendor-vfio"), sim_host("h200-mig")
    _h200_mig(on)
    for root in (off, on):
        inject_fault(str(root), "/usr/bin/nvidia-smi -q -x", "EIO", times=0)
    sample = take_sample(str(off))
    assert (sample.driver_read, sample.mig, [g.mig_on for g in sample.driver.gpus.values()]) == (True, (), [False])
    with pytest.raises(HostIOError) as e:
        take_sample(str(on))
    assert e.value.message == "nvidia-smi -q -x failed: Failed to initialize NVML: Unknown Error"


def _sample(rows: list[DeviceRow]) -> Sample:
    return Sample(rows, DriverUsage(), time.time(), 0.01)


ROW = DeviceRow(("web01", "6c3e8a6e-0000-4000-8000-000000000001", "aaaaaaaa-0000-4000-8000-000000000001",
                 "0000:01:00.0", "nvidia-63", "mdev", ""), WEB)  # fmt: skip


def test_a_sample_that_does_not_finish_in_time_leaves_the_last_one_served_with_driver_down() -> None:
    gate = threading.Event()
    calls: list[int] = []

    def sample() -> Sample:
        calls.append(1)
        if len(calls) == 2:
            gate.wait(30)  # the driver hangs
        if len(calls) == 3:
            raise HostIOError("nvidia-smi vgpu -q failed: Failed to initialize NVML: Unknown Error", "check it")
        return _sample([ROW])

    e = Exporter(None, timeout=0.2, sample=sample)
    first = e.exposition()
    assert "vgpuadm_driver_up 1.0" in first and 'vgpuadm_usage_device_running{device="aaaaaaaa-' in first
    for _ in range(2):  # the hanging read is waited for again, never started twice
        start = time.monotonic()
        body = e.exposition()
        assert time.monotonic() - start < 1.0
        assert "vgpuadm_driver_up 0.0" in body
        assert body.replace("vgpuadm_driver_up 0.0", "") .split("vgpuadm_exporter_sample_age")[0] == \
            first.replace("vgpuadm_driver_up 1.0", "").split("vgpuadm_exporter_sample_age")[0]  # fmt: skip
    assert (len(calls), e.error) == (2, "the driver did not answer in 0.2 s")
    gate.set()
    assert "vgpuadm_driver_up 1.0" in e.exposition()  # the hung read finished: its sample is good
    assert "vgpuadm_driver_up 0.0" in e.exposition()  # the next one fails: the last good one stays
    assert e.error == "nvidia-smi vgpu -q failed: Failed to initialize NVML: Unknown Error"
    assert "vgpuadm_driver_up 1.0" in e.exposition()


def test_the_families_have_stable_names_and_labels() -> None:
    body = text(families([ROW, DeviceRow(("", "", "aaaaaaaa-0000-4000-8000-000000000003", "0000:01:00.0",
                                           "nvidia-63", "", ""), None)], DriverUsage((WEB,), {})))  # fmt: skip
    labels = ('device="aaaaaaaa-0000-4000-8000-000000000001",domain="web01",'
              'domain_uuid="6c3e8a6e-0000-4000-8000-000000000001",gpu="0000:01:00.0",mig_instance="",mode="mdev",'
              'type="nvidia-63"')  # fmt: skip
    samples = [x for x in body.splitlines() if not x.startswith("#")]
    unowned = ('device="aaaaaaaa-0000-4000-8000-000000000003",domain="",domain_uuid="",gpu="0000:01:00.0",'
               'mig_instance="",mode="",type="nvidia-63"')  # fmt: skip
    engine = labels.replace('gpu="0000:01:00.0"', 'engine="{}",gpu="0000:01:00.0"')
    assert samples == [
        *(f"vgpuadm_usage_device_utilization_ratio{{{engine.format(e)}}} {v}"
          for e, v in (("gpu", 0.31), ("memory", 0.12), ("encoder", 0.03), ("decoder", 0.04))),
        f"vgpuadm_usage_device_info{{{labels}}} 1.0", f"vgpuadm_usage_device_info{{{unowned}}} 1.0",
        f"vgpuadm_usage_device_running{{{labels}}} 1.0", f"vgpuadm_usage_device_running{{{unowned}}} 0.0",
        f"vgpuadm_usage_device_fb_used_bytes{{{labels}}} 7.340032e+08",
        f"vgpuadm_usage_device_fb_total_bytes{{{labels}}} 1.073741824e+09",
        f"vgpuadm_usage_device_licensed{{{labels}}} 1.0",
        "vgpuadm_usage_unowned_devices 1.0",
    ]  # fmt: skip
    assert [x for x in body.splitlines() if x.startswith("# TYPE")] == [
        f"# TYPE {n} gauge" for n in ("vgpuadm_usage_device_utilization_ratio", "vgpuadm_usage_gpu_utilization_ratio",
                                      "vgpuadm_usage_device_info", "vgpuadm_usage_device_running", "vgpuadm_usage_device_fb_used_bytes",
                                      "vgpuadm_usage_device_fb_total_bytes", "vgpuadm_usage_device_licensed",
                                      "vgpuadm_usage_unowned_devices")
    ]  # fmt: skip


@pytest.mark.parametrize(("text_", "want"), [("127.0.0.1:9847", ("127.0.0.1", 9847)), ("[::1]:9100", ("::1", 9100)),
                                             ("0.0.0.0:1", ("0.0.0.0", 1))])  # fmt: skip
def test_listen_takes_an_ip_address_and_port(text_: str, want: tuple[str, int]) -> None:
    assert parse_listen(text_) == want


@pytest.mark.parametrize("bad", ["localhost:9847", "127.0.0.1", "127.0.0.1:0", "127.0.0.1:65536", ":9847", "1.2.3.4:x"])
def test_listen_refuses_anything_else_in_one_line(bad: str) -> None:
    with pytest.raises(UsageError) as e:
        parse_listen(bad)
    assert (e.value.message, e.value.hint) == (f'--listen "{bad}" is not ADDR:PORT',
                                               "e.g. --listen 127.0.0.1:9847 (an IP address)")  # fmt: skip


def test_textfile_is_written_whole_and_says_the_driver_was_not_read(sim_host: Callable[[str], Path], cli) -> None:  # type: ignore[no-untyped-def]
    """`--textfile PATH` writes the exposition for node_exporter's textfile collector (a temporary file renamed over
    PATH: no reader sees half of it). A host without nvidia-smi lists its devices with no usage and driver_up 0."""
    root = sim_host("p4")
    SimKernel(str(root)).write("/sys/bus/pci/devices/0000:01:00.0/mdev_supported_types/nvidia-63/create",
                               b"aaaaaaaa-0000-4000-8000-000000000009")  # fmt: skip
    path = root.parent / "usage.prom"
    r = cli("--root", str(root), "exporter", "--textfile", str(path))
    assert (r.code, r.out, r.err) == (0, f"wrote {path} (driver not read: no nvidia-smi on this host)\n", "")
    body = path.read_text()
    assert [x for x in body.splitlines() if x.startswith(("vgpuadm_usage_device_info", "vgpuadm_driver_up"))] == [
        'vgpuadm_usage_device_info{device="aaaaaaaa-0000-4000-8000-000000000009",domain="",domain_uuid="",'
        'gpu="0000:01:00.0",mig_instance="",mode="",type="nvidia-63"} 1.0',
        "vgpuadm_driver_up 0.0",
    ]
    assert [p.name for p in root.parent.iterdir() if p.name.startswith("usage.prom")] == ["usage.prom"]
    r = cli("--root", str(root), "exporter", "--interval", "5")
    assert (r.code, r.err) == (2, "error: --interval 5.0\nhint: --interval goes with --textfile: 1 to 86400 seconds\n")
    r = cli("--root", str(root), "exporter", "--once", "--textfile", str(root.parent / "other.prom"))
    assert (r.code, r.out, r.err) == (
        2,
        "",
        "error: --once and --textfile disagree\n"
        "hint: give one: --once prints the metrics, --textfile PATH writes them\n",
    )
    assert not (root.parent / "other.prom").exists()
