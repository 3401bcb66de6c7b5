"""Per-VM GPU usage: the driver's usage records (vgpuadm/usage.py) joined to the domains that own the devices, and
the Prometheus families the exporter serves (ops/exporter.py). Pure.

The join: every device a domain's vgpuadm metadata records asks its mode for its record (Mode.usage: an mdev by its
MDEV UUID, a layout C VF by its GPU, type and the owning VM's UUID, a passed-through GPU by the GPU's own figures),
so nothing here branches on a mode. A record no recorded device claims, and a device on the host that no domain
references, is a series with `domain=""`; `vgpuadm_usage_unowned_devices` counts them (leaks, or a VM another libvirt
runs). Every per-device series carries the same labels (LABELS), so that a dashboard can join them.

On a GPU with MIG on, every GPU instance is a series too (join_mig: its GPU, instance ID and profile, and the vGPU on
it with its domain, or "" when it is free), read only on a host where the driver reports a GPU in MIG mode."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from vgpuadm import modes
from vgpuadm.catalog.mig import MigGpu
from vgpuadm.model import HostSnapshot
from vgpuadm.plan.domains import Domains
from vgpuadm.report.render_prometheus import MIB, _Families
from vgpuadm.usage import DriverUsage, GpuUsage, VgpuUsage

LABELS = ("domain", "domain_uuid", "device", "gpu", "type", "mode", "mig_instance")
ENGINES = ("gpu", "memory", "encoder", "decoder")
MIG_NOTE = "no sample on a GPU with MIG on: NVML does not support utilization there"
DEVICE_UTIL_HELP = f"Utilization of the device by engine (0-1); {MIG_NOTE}."
GPU_UTIL_HELP = f"Utilization of the physical GPU by engine (0-1); {MIG_NOTE}."
MIG_LABELS = ("gpu", "mig_instance", "profile", "domain", "domain_uuid", "device")
MIG_COST = ("a host with a GPU in MIG mode pays 4 more nvidia-smi reads per sample (-q -x, mig -lgip, mig -lgipp, "
            "mig -lgi), 5 when it has GPU instances (vgpu -q again)")  # fmt: skip
MIG_INFO_HELP = ("One series per MIG GPU instance (mig_instance: its GPU instance ID, profile: its GPU-instance "
                 "profile) with the vGPU on it and the domain owning that (\"\": free, or none); no utilization per "
                 f"instance: NVML does not support utilization on MIG devices; {MIG_COST}.")  # fmt: skip
MIG_OCCUPIED_HELP = "1 when a vGPU sits on the MIG GPU instance, 0 when it is free."


@dataclass(frozen=True, slots=True)
class DeviceRow:
    """One device: its labels (LABELS, in order) and the driver's record of it (None: no guest runs on it now)."""

    labels: tuple[str, ...]
    record: VgpuUsage | GpuUsage | None

    @property
    def owned(self) -> bool:
        return bool(self.labels[0])


def join(snap: HostSnapshot, domains: Domains, driver: DriverUsage) -> list[DeviceRow]:
    """A row per device a domain records (host devices only: a paravirtual device has none), then one per driver
    record no such device claimed and per host device no domain references (`domain=""`)."""
    rows: list[DeviceRow] = []
    claimed: set[int] = set()
    for name in sorted(domains.by_name):
        d = domains.by_name[name]
        for a in d.allocations:
            mode = modes.of(a)
            if mode.key(a) is None:
                continue
            record = mode.usage(snap, a, driver)
            if isinstance(record, VgpuUsage):
                claimed.add(record.vgpu_id)
            gi = record.gpu_instance_id if isinstance(record, VgpuUsage) else None
            rows.append(DeviceRow((d.name, d.uuid.lower(), mode.device_id(a) or "",
                                   snap.physical_gpu(mode.host_device(a) or ""), a.type_id or "", a.mode,
                                   "" if gi is None else str(gi)), record))  # fmt: skip
    owned = domains.owned()
    shown: set[str] = set()
    for v in driver.vgpus:
        if v.vgpu_id in claimed:
            continue
        device = v.mdev_uuid or ""
        shown.add(device)
        rows.append(DeviceRow(("", v.vm_uuid or "", device, v.gpu, "" if v.type_num is None else f"nvidia-{v.type_num}",
                               "", "" if v.gpu_instance_id is None else str(v.gpu_instance_id)), v))  # fmt: skip
    for uuid, m in sorted(snap.mdevs.items()):
        if uuid not in owned and uuid not in shown:
            rows.append(DeviceRow(("", "", uuid, snap.physical_gpu(m.parent), m.type_id, "", ""), None))
    for address, vf in sorted(snap.vendor_vfs.items()):
        if vf.in_use and address not in owned:
            rows.append(DeviceRow(("", "", address, vf.physfn or "", f"nvidia-{vf.current_type}", "", ""), None))
    return rows


@dataclass(frozen=True, slots=True)
class MigRow:
    """One GPU instance: its labels (MIG_LABELS, in order) and whether a vGPU sits on it."""

    labels: tuple[str, ...]
    occupied: bool


def join_mig(gpus: Sequence[MigGpu], rows: list[DeviceRow]) -> list[MigRow]:
    """A row per GPU instance (host/mig.py's read: instances exist only with MIG on), by GPU and instance ID. The
    vGPU on it is its first user (one vGPU per GPU instance on MIG-backed vGPU), whose domain is the one of its
    device row (the running guest's when two domains reference it)."""
    by_device: dict[tuple[str, str], DeviceRow] = {}
    for r in rows:
        key = (r.labels[3], r.labels[2])
        if r.labels[2] and (key not in by_device or (by_device[key].record is None and r.record is not None)):
            by_device[key] = r
    out = []
    for g in sorted(gpus, key=lambda g: g.address):
        for i in sorted(g.instances, key=lambda i: i.instance_id):
            device = i.users[0] if i.users else ""
            row = by_device.get((g.address, device))
            domain, domain_uuid = (row.labels[0], row.labels[1]) if row is not None else ("", "")
            out.append(MigRow((g.address, str(i.instance_id), i.name, domain, domain_uuid, device), bool(i.users)))
    return out


def usage_now(record: VgpuUsage | GpuUsage) -> dict[str, int | bool | None]:
    """A device's figures as `show --vm` gives them (schemas/show.schema.json `now`)."""
    return {"gpu_percent": record.gpu_percent, "memory_percent": record.memory_percent,
            "fb_used_mib": record.fb_used_mib, "fb_total_mib": record.fb_total_mib,
            "licensed": record.licensed if isinstance(record, VgpuUsage) else None}  # fmt: skip


def _ratio(percent: int | None) -> float | None:
    return None if percent is None else percent / 100


def _bytes(mib: int | None) -> int | None:
    return None if mib is None else mib * MIB


def _record_figures(record: VgpuUsage | GpuUsage) -> Iterator[tuple[str, int | None]]:
    yield "gpu", record.gpu_percent
    yield "memory", record.memory_percent
    if isinstance(record, VgpuUsage):
        yield "encoder", record.encoder_percent
        yield "decoder", record.decoder_percent


def families(rows: list[DeviceRow], driver: DriverUsage, m: _Families | None = None,
             mig: Sequence[MigRow] = ()) -> _Families:  # fmt: skip
    """The usage families of one sample (added to `m` when given); `mig`: its GPU instances (join_mig)."""
    m = m or _Families()
    # declared first, so that their HELP says why a GPU with MIG on has no sample
    m.declare("vgpuadm_usage_device_utilization_ratio", DEVICE_UTIL_HELP, [*LABELS, "engine"])
    m.declare("vgpuadm_usage_gpu_utilization_ratio", GPU_UTIL_HELP, ["gpu", "engine"])
    for row in rows:
        labels = dict(zip(LABELS, row.labels, strict=True))
        m.add("vgpuadm_usage_device_info", "One series per GPU device (vGPU, VF, passed-through GPU) with the domain that "
              "owns it (domain=\"\": none does).", labels, 1)  # fmt: skip
        m.add("vgpuadm_usage_device_running", "1 when the driver reports the device in use by a running guest.", labels,
              int(row.record is not None))  # fmt: skip
        r = row.record
        if r is None:
            continue
        m.add("vgpuadm_usage_device_fb_used_bytes", "Frame buffer the device's guest uses (driver's FB Memory Usage).",
              labels, _bytes(r.fb_used_mib))  # fmt: skip
        m.add("vgpuadm_usage_device_fb_total_bytes", "Frame buffer of the device.", labels, _bytes(r.fb_total_mib))
        for engine, percent in _record_figures(r):
            m.add("vgpuadm_usage_device_utilization_ratio", DEVICE_UTIL_HELP,
                  {**labels, "engine": engine}, _ratio(percent))  # fmt: skip
        if isinstance(r, VgpuUsage):
            m.add("vgpuadm_usage_device_licensed", "1 when the vGPU's guest holds a license (driver's License Status).",
                  labels, None if r.licensed is None else int(r.licensed))  # fmt: skip
    for address in sorted(driver.gpus):
        g = driver.gpus[address]
        for engine, percent in _record_figures(g):
            m.add("vgpuadm_usage_gpu_utilization_ratio", GPU_UTIL_HELP,
                  {"gpu": address, "engine": engine}, _ratio(percent))  # fmt: skip
        m.add("vgpuadm_usage_gpu_fb_used_bytes", "Frame buffer used on the physical GPU.", {"gpu": address},
              _bytes(g.fb_used_mib))  # fmt: skip
        m.add(
            "vgpuadm_usage_gpu_fb_total_bytes",
            "Frame buffer of the physical GPU.",
            {"gpu": address},
            _bytes(g.fb_total_mib),
        )
        m.add("vgpuadm_usage_gpu_active_vgpus", "vGPUs the driver reports running on the GPU.", {"gpu": address},
              sum(1 for v in driver.vgpus if v.gpu == address))  # fmt: skip
    for mr in mig:
        labels = dict(zip(MIG_LABELS, mr.labels, strict=True))
        m.add("vgpuadm_usage_mig_instance_info", MIG_INFO_HELP, labels, 1)
    for mr in mig:
        m.add("vgpuadm_usage_mig_instance_occupied", MIG_OCCUPIED_HELP,
              dict(zip(MIG_LABELS[:3], mr.labels[:3], strict=True)), int(mr.occupied))  # fmt: skip
    m.add("vgpuadm_usage_unowned_devices", "Devices and running vGPUs no domain of this host owns (leaks, or a VM another "
          "libvirt runs): the series with domain=\"\".", {}, sum(1 for r in rows if not r.owned))  # fmt: skip
    return m
