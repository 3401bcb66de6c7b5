"""Prometheus text exposition for node_exporter's textfile collector (write it to
<collector dir>/vgpuadm.prom). Every metric is a gauge (a snapshot, nothing here only goes up, so no `_total`),
prefixed `vgpuadm_`, with base units in the name (`_bytes`, `_seconds`) and one HELP and TYPE line per family.
`host` is a label so that a fleet file and host files use the same series."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

MIB = 1024 * 1024
NOT_RECORDED_HELP = "Devices a domain owns that vgpuadm has not recorded (vgpuadm adopt)."


class _Families:
    """The document's gauge families, in the order they are first added, as a prometheus_client collector: the
    library writes the exposition text (escaping, number format, HELP/TYPE lines) and the atomic textfile."""

    def __init__(self) -> None:
        from prometheus_client.core import GaugeMetricFamily  # lazily: ~200 ms of imports only this format needs

        self._gauge = GaugeMetricFamily
        self._families: dict[str, Any] = {}

    def add(self, name: str, help_text: str, labels: dict[str, Any], value: float | int | None) -> None:
        if value is None:
            return
        family = self.declare(name, help_text, list(labels))
        family.add_metric(["" if v is None else str(v) for v in labels.values()], value)

    def declare(self, name: str, help_text: str, labels: list[str]) -> Any:
        """The family `name`, added (HELP and TYPE, no sample yet) when it is new: a family whose HELP explains why
        it may have no samples is shown even then."""
        family = self._families.get(name)
        if family is None:
            family = self._families[name] = self._gauge(name, help_text, labels=labels)
        return family

    def collect(self) -> Iterator[Any]:
        yield from self._families.values()

    def registry(self) -> Any:
        from prometheus_client import CollectorRegistry

        registry = CollectorRegistry(auto_describe=False)
        registry.register(self)
        return registry


def text(families: _Families) -> str:
    """The exposition text (stdout)."""
    from prometheus_client import generate_latest

    return generate_latest(families.registry()).decode("utf-8")


def _bytes(mib: int | None) -> int | None:
    return None if mib is None else mib * MIB


def _unix(iso: str) -> float | None:
    try:
        return datetime.fromisoformat(iso).timestamp()
    except ValueError:
        return None


def host_metrics(doc: dict[str, Any]) -> str:
    return text(host_families(doc))


def host_families(doc: dict[str, Any]) -> _Families:
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
    _mig_families(m, doc["gpus"], h)
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
    m.add("vgpuadm_not_recorded_devices", NOT_RECORDED_HELP, h, s.get("not_recorded"))
    m.add("vgpuadm_missing_devices", "Devices domains own that do not exist (run vgpuadm restore).", h, s["missing"])
    m.add(
        "vgpuadm_framebuffer_locked_free_bytes",
        "Free framebuffer on GPUs locked to one type or size.",
        h,
        _bytes(s["framebuffer_locked_free_mib"]),
    )
    return m


def _type_families(m: _Families, types: list[dict[str, Any]], base: dict[str, Any]) -> None:
    for key, name, help_text in (
        ("used", "vgpuadm_type_used_instances", "Existing vGPUs of the type."),
        ("free", "vgpuadm_type_free_instances", "How many more vGPUs of the type fit now."),
        ("stranded", "vgpuadm_type_stranded_instances", "Instances of the type blocked by GPUs locked to another."),
        (
            "reserved",
            "vgpuadm_type_reserved_instances",
            "Instances of the type held for devices domains record that await vgpuadm restore (neither used nor free).",
        ),
        ("max", "vgpuadm_type_max_instances", "Most vGPUs of the type the GPUs could hold if empty."),
    ):
        for t in types:
            m.add(name, help_text, {**base, "type": t["type_id"], "name": t["name"]}, t.get(key, 0))


MIG_STATES = ("used", "free", "by-hand")  # an instance's `state` in the inventory JSON (report/mig.instance_rows)


def _mig_families(m: _Families, gpus: list[dict[str, Any]], h: dict[str, Any]) -> None:
    """GPU-instance occupancy of the MIG-capable GPUs (the rows' `mig`): the mode, the slots still free and, per
    profile that has an instance, how many are in each state (zero too, so a series does not vanish when its last
    instance changes state)."""
    mig = [(g["address"], g["mig"]) for g in gpus if g.get("mig")]
    for gpu, o in mig:
        m.add("vgpuadm_gpu_mig_enabled", "Whether the GPU's MIG mode is on now (1) or off (0).", {**h, "gpu": gpu},
              int(o["mode"] == "Enabled"))  # fmt: skip
    for gpu, o in mig:
        m.add("vgpuadm_gpu_mig_free_slots", "GPU-instance slots no instance holds.", {**h, "gpu": gpu}, o["slots_free"])
    for gpu, o in mig:
        for profile in dict.fromkeys(i["name"] for i in o["instances"]):
            for state in MIG_STATES:
                m.add(
                    "vgpuadm_gpu_mig_instances",
                    "MIG GPU instances of the profile on the GPU by state: used (a vGPU runs on it), free (none "
                    "does), by-hand (none does and no domain's metadata says vgpuadm made it).",
                    {**h, "gpu": gpu, "profile": profile, "state": state},
                    sum(1 for i in o["instances"] if i["name"] == profile and i["state"] == state),
                )


def fleet_metrics(doc: dict[str, Any]) -> str:
    return text(fleet_families(doc))


def fleet_families(doc: dict[str, Any]) -> _Families:
    m = _Families()
    m.add("vgpuadm_fleet_hosts", "Hosts in the fleet report.", {}, doc["totals"]["hosts"])
    for h in doc["hosts"]:
        m.add(
            "vgpuadm_host_devices", "vGPUs and passed-through functions on the host.", {"host": h["host"]}, h["devices"]
        )
    for h in doc["hosts"]:
        m.add("vgpuadm_unowned_devices", "Devices no domain owns (leaks).", {"host": h["host"]}, h["unowned"])
    for h in doc["hosts"]:
        m.add("vgpuadm_not_recorded_devices", NOT_RECORDED_HELP, {"host": h["host"]}, h.get("not_recorded"))
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
    return m
