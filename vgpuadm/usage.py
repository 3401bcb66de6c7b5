"""What the GPU driver reports a device uses now, as canonical values: one VgpuUsage per active vGPU (`nvidia-smi
vgpu -q`) and one GpuUsage per GPU (`nvidia-smi --query-gpu`), checked against their grammars once where they enter
(host/nvidia_smi_vgpu.py). Each mode says which of them is its device's (Mode.usage); report/usage.py joins them to
the domains. Pure."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class VgpuUsage:
    """One running vGPU as the driver reports it. `None`: the driver printed N/A (utilization on a GPU with MIG on,
    which NVML does not support) or nothing believable."""

    gpu: str  # the physical GPU's PCI address (0000:18:00.0)
    vgpu_id: int
    vm_uuid: str | None  # QEMU's -uuid: the libvirt domain's UUID (lower case); the join key
    vm_name: str | None  # QEMU's raw -name string (shown, never joined on)
    type_name: str | None  # GRID P4-1Q, NVIDIA H200X-1-18C
    type_num: int | None  # the driver's type number (63, 1414)
    mdev_uuid: str | None  # mdev layouts; None on a layout C VF
    gpu_instance_id: int | None  # the MIG GPU instance the vGPU runs on
    placement_id: int | None
    licensed: bool | None  # License Status starts with "Licensed"
    driver_version: str | None  # the guest's driver
    fb_total_mib: int | None
    fb_used_mib: int | None
    gpu_percent: int | None
    memory_percent: int | None
    encoder_percent: int | None
    decoder_percent: int | None


@dataclass(frozen=True, slots=True)
class GpuUsage:
    """One GPU's own figures (`None`: N/A, e.g. utilization with MIG on)."""

    gpu: str
    gpu_percent: int | None
    memory_percent: int | None
    fb_used_mib: int | None
    fb_total_mib: int | None
    mig_on: bool = False  # mig.mode.current is Enabled: the GPU's instances are read too (ops/exporter.py)


@dataclass(frozen=True, slots=True)
class DriverUsage:
    """One sample of the driver: every active vGPU and every GPU it reports."""

    vgpus: tuple[VgpuUsage, ...] = ()
    gpus: dict[str, GpuUsage] = field(default_factory=dict)
