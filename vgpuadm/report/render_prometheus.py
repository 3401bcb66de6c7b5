"""Prometheus text exposition for node_exporter's textfile collector (write it to
<collector dir>/vgpuadm.prom). Every metric is a gauge (a snapshot, nothing here only goes up, so no `_total`),
prefixed `vgpuadm_`, with base units in the name (`_bytes`, `_seconds`) and one HELP and TYPE line per family.
`host` is a label so that a fleet file and host files use the same series."""

from __future__ import annotations

from datetime import datetime
from typing import Any

MIB = 1024 * 1024


class _Families:
    def __init__(self) -> None:
        self._order: list[str] = []
        self._help: dict[str, str] = {}
        self._samples: dict[str, list[str]] = {}

    def add(self, name: str, help_text: str, labels: dict[str, Any], value: float | int | None) -> None:
        if value is None:
            return
        if name not in self._help:
            self._order.append(name)
            self._help[name] = help_text
            self._samples[name] = []
        pairs = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
        self._samples[name].append(f"{name}{{{pairs}}} {_number(value)}" if pairs else f"{name} {_number(value)}")

    def text(self) -> str:
        lines: list[str] = []
        for name in self._order:
            lines.append(f"# HELP {name} {self._help[name]}")
            lines.append(f"# TYPE {name} gauge")
            lines.extend(self._samples[name])
        return "\n".join(lines) + "\n"


def _escape(value: Any) -> str:
    text = "" if value is None else str(value)
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float | int) -> str:
    return str(int(value)) if isinstance(value, bool) or float(value).is_integer() else repr(float(value))


def _bytes(mib: int | None) -> int | None:
    return None if mib is None else mib * MIB


def _unix(iso: str) -> float | None:
    try:
        return datetime.fromisoformat(iso).timestamp()
    except ValueError:
        return None


def host_metrics(doc: dict[str, Any]) -> str:
    m = _Families()
    h = {"host": doc["host"]}
    m.add(
        "vgpuadm_inventory_generated_timestamp_seconds",
        "When the inventory was taken (Unix time).",
        h,
        _unix(doc["generated_at"]),
    )
    for g in doc["gpus"]:
        m.add(
            "vgpuadm_gpu_info",
            "A physical GPU (or non-PCI mdev parent) and how it is shared; value is 1.",
            {
                **h,
                "gpu": g["address"],
                "layout": g["layout"],
                "driver": g["driver"],
                "numa_node": g["numa_node"],
                "iommu_group": g["iommu_group"],
                "vendor_id": g["vendor_id"],
                "device_id": g["device_id"],
            },
            1,
        )
    for g in doc["gpus"]:
        m.add(
            "vgpuadm_gpu_devices",
            "vGPUs and passed-through functions on the GPU.",
            {**h, "gpu": g["address"]},
            g["devices"],
        )
    for g in doc["gpus"]:
        m.add(
            "vgpuadm_gpu_framebuffer_bytes",
            "Framebuffer the GPU's vGPU types can hand out.",
            {**h, "gpu": g["address"]},
            _bytes(g["framebuffer_total_mib"]),
        )
    for g in doc["gpus"]:
        m.add(
            "vgpuadm_gpu_framebuffer_used_bytes",
            "Framebuffer held by existing vGPUs.",
            {**h, "gpu": g["address"]},
            _bytes(g["framebuffer_used_mib"]),
        )
    for t in doc["types"]:
        for g in t["gpus"]:
            m.add(
                "vgpuadm_gpu_type_free_instances",
                "How many more vGPUs of the type fit on the GPU now.",
                {**h, "gpu": g["gpu"], "type": t["type_id"]},
                g["free"],
            )
    _type_families(m, doc["types"], h)
    for d in doc["devices"]:
        m.add(
            "vgpuadm_device_info",
            "An existing vGPU or passed-through function and its owner; value is 1.",
            {
                **h,
                "device": d["id"],
                "kind": d["kind"],
                "type": d["type_id"],
                "gpu": d["physical_gpu"],
                "domain": d["domain"],
                "owned": "unknown" if d["owned"] is None else str(d["owned"]).lower(),
            },
            1,
        )
    s = doc["summary"]
    m.add("vgpuadm_unowned_devices", "Devices no domain owns (leaks).", h, s["unowned"])
    m.add("vgpuadm_missing_devices", "Devices domains own that do not exist (run vgpuadm restore).", h, s["missing"])
    m.add(
        "vgpuadm_framebuffer_locked_free_bytes",
        "Free framebuffer on GPUs locked to one type or size.",
        h,
        _bytes(s["framebuffer_locked_free_mib"]),
    )
    return m.text()


def _type_families(m: _Families, types: list[dict[str, Any]], base: dict[str, Any]) -> None:
    for key, name, help_text in (
        ("used", "vgpuadm_type_used_instances", "Existing vGPUs of the type."),
        ("free", "vgpuadm_type_free_instances", "How many more vGPUs of the type fit now."),
        ("stranded", "vgpuadm_type_stranded_instances", "Instances of the type blocked by GPUs locked to another."),
        ("max", "vgpuadm_type_max_instances", "Most vGPUs of the type the GPUs could hold if empty."),
    ):
        for t in types:
            m.add(name, help_text, {**base, "type": t["type_id"], "name": t["name"]}, t[key])


def fleet_metrics(doc: dict[str, Any]) -> str:
    m = _Families()
    m.add("vgpuadm_fleet_hosts", "Hosts in the fleet report.", {}, doc["totals"]["hosts"])
    for h in doc["hosts"]:
        m.add(
            "vgpuadm_host_devices", "vGPUs and passed-through functions on the host.", {"host": h["host"]}, h["devices"]
        )
    for h in doc["hosts"]:
        m.add("vgpuadm_unowned_devices", "Devices no domain owns (leaks).", {"host": h["host"]}, h["unowned"])
    for h in doc["hosts"]:
        m.add(
            "vgpuadm_missing_devices",
            "Devices domains own that do not exist (run vgpuadm restore).",
            {"host": h["host"]},
            h["missing"],
        )
    for h in doc["hosts"]:
        m.add(
            "vgpuadm_host_framebuffer_free_bytes",
            "Free vGPU framebuffer on the host.",
            {"host": h["host"]},
            _bytes(h["framebuffer_free_mib"]),
        )
    for h in doc["hosts"]:
        m.add(
            "vgpuadm_framebuffer_locked_free_bytes",
            "Free framebuffer on GPUs locked to one type or size.",
            {"host": h["host"]},
            _bytes(h["framebuffer_locked_free_mib"]),
        )
    _type_families(m, doc["types"], {})
    f = doc["fragmentation"]
    m.add(
        "vgpuadm_fleet_locked_free_ratio",
        "Share of free framebuffer that sits on GPUs locked to a type or size.",
        {},
        f["locked_share"],
    )
    return m.text()
