"""Table views of an inventory (one host) or a fleet report: (title, columns, rows) triples that the CLI prints
through its Console and the HTML page lays out. Pure; no printing here."""

from __future__ import annotations

from typing import Any, NamedTuple

from vgpuadm.report.cells import NOT_RECORDED, OWNER_UNKNOWN, UNOWNED, numa_cell


class Table(NamedTuple):
    title: str
    columns: list[str]
    rows: list[list[Any]]


def _mib(value: int | None) -> str | None:
    return None if value is None else str(value)


def _used_of(used: int | None, total: int | None) -> str | None:
    if total is None:
        return None if used is None else str(used)
    return f"{used}/{total}"


def _count(n: int, noun: str) -> str:
    """`1 host`, `3 hosts`."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


MIG_TITLE = "MIG GPU instances (used / free / made by hand)"  # all GPUs in one table (the terminal's)


def mig_gpu_tables(doc: dict[str, Any]) -> list[Table]:
    """One table per MIG-capable GPU (the HTML page's MIG sections): its mode and slots in the title, then each GPU
    instance with its state (used, free, by-hand), the domain using it and the one vgpuadm made it for."""
    return [
        Table(
            f"MIG GPU instances on {g['address']}: MIG {m['mode']}, {m['slots_free']} of {m['slots']} slots free; "
            + _instances(m),
            ["instance", "profile", "placement", "state", "domain", "made for", "vGPUs"],
            [_mig_row(i) for i in m["instances"]],
        )
        for g in doc["gpus"]
        if (m := g.get("mig"))
    ]


def _instances(m: dict[str, Any]) -> str:
    """The GPU instances of one GPU in words: slots count placement slices, instances are what holds them (a title
    reading "8 of 8 slots free, 0 used, 0 free" mixed the two)."""
    n = m["used"] + m["free"]
    if not n:
        return "no GPU instances"
    made = f", {m['by_hand']} of them made by hand" if m["by_hand"] else ""
    return f"{n} GPU instance{'s' if n > 1 else ''}: {m['used']} running a vGPU, {m['free']} free{made}"


def _mig_row(i: dict[str, Any]) -> list[Any]:
    vgpus = ", ".join(i["vgpus"]) or None
    return [i["instance_id"], i["name"], f"{i['start']}:{i['size']}", i["state"], i["owner"], i["made_for"], vgpus]


def host_tables(doc: dict[str, Any]) -> list[Table]:
    """GPUs, functions, types with capacity, devices with owners, and allocations whose device is missing."""
    tables = [
        Table(
            f"GPUs on {doc['host']}",
            [
                "gpu",
                "model",
                "layout",
                "driver",
                "NUMA",
                "IOMMU group",
                "VFs",
                "devices",
                "locked to",
                "framebuffer MiB",
            ],
            [
                [
                    g["address"],
                    g.get("model"),  # reports written before the column have none
                    g["layout"],
                    g["driver"],
                    numa_cell(g["numa_node"]),
                    g["iommu_group"],
                    _used_of(g["vfs_enabled"], g["vfs_total"]),
                    g["devices"],
                    ", ".join(g["locked_to"]) or None,
                    _used_of(g["framebuffer_used_mib"], g["framebuffer_total_mib"]),
                ]
                for g in doc["gpus"]
            ],
        ),
        Table(
            "GPU functions",
            ["function", "kind", "physical gpu", "layout", "driver", "NUMA", "IOMMU group", "devices"],
            [
                [
                    f["address"],
                    f["kind"],
                    f["physical_gpu"],
                    f["layout"],
                    f["driver"],
                    numa_cell(f["numa_node"]),
                    f["iommu_group"],
                    ", ".join(f["devices"]) or None,
                ]
                for f in doc["functions"]
            ],
        ),
        _types_table(doc["types"]),
        Table(
            "Devices",
            ["device", "kind", "type", "name", "gpu", "IOMMU group", "domain"],
            [
                [d["id"], d["kind"], d["type_id"], d["name"], d["physical_gpu"], d["iommu_group"], _owner(d)]
                for d in doc["devices"]
            ],
        ),
    ]
    mixed = [g for g in doc["gpus"] if g.get("mixed_size")]
    if mixed:
        tables.insert(1, Table(
            "Mixed-size GPUs (heterogeneous mode): free framebuffer",
            ["gpu", "free", "largest vGPU that fits"],
            [[g["address"], g["mixed_size"]["summary"], g["mixed_size"]["largest_type"]] for g in mixed],
        ))  # fmt: skip
    if doc["missing"]:
        tables.append(
            Table(
                "Allocations whose device is missing (run `vgpuadm restore`)",
                ["domain", "mode", "type", "parent", "uuid / address"],
                [
                    [m["domain"], m["mode"], m["type_id"], m["parent"], m["uuid"] or m["address"]]
                    for m in doc["missing"]
                ],
            )
        )
    mig = [(g["address"], g["mig"]) for g in doc["gpus"] if g.get("mig")]
    if mig:
        tables.append(
            Table(
                MIG_TITLE,
                ["gpu", "MIG", "slots free", "instance", "profile", "placement", "state", "domain", "made for"],
                [
                    [
                        gpu,
                        m["mode"],
                        f"{m['slots_free']}/{m['slots']}",
                        i["instance_id"],
                        i["name"],
                        f"{i['start']}:{i['size']}",
                        i["state"],
                        i["owner"],
                        i["made_for"],
                    ]
                    for gpu, m in mig
                    for i in m["instances"]
                ]
                or [
                    [gpu, m["mode"], f"{m['slots_free']}/{m['slots']}", None, None, None, None, None, None]
                    for gpu, m in mig
                ],
            )
        )
    demand = doc.get("on_demand") or {}
    if demand.get("requests"):
        tables.append(
            Table(
                "On-demand requests (made when the domain starts, freed when it stops)",
                ["domain", "mode", "type", "uuid / VF / function", "now"],
                [
                    [
                        r["domain"],
                        r["mode"],
                        r["type_id"],
                        r["uuid"] or r["address"],
                        "made (running)" if r["exists"] else "not made",
                    ]
                    for r in demand["requests"]
                ],
            )
        )
        tables.append(
            Table(
                "Capacity the on-demand requests need if all their domains run",
                ["type", "devices", "fits now", "host max"],
                [[n["type_id"], n["devices"], n["free"], n["host_max"]] for n in demand["needed"]],
            )
        )
    return tables


def _types_table(types: list[dict[str, Any]]) -> Table:
    """Per type: used, free and the host's maximum (the sum of its GPUs' maxima: the driver's bounded by their
    VFs); a `reserved` column only while domains' recorded devices await `vgpuadm restore` (neither used nor free)."""
    reserved = any(t.get("reserved") for t in types)
    return Table(
        "vGPU types: used / free / host max, and where more fit",
        ["type", "name", "used", *(["reserved"] if reserved else []), "free", "host max", "FB used MiB", "FB free MiB",
         "room per GPU"],
        [
            [t["type_id"], t["name"], t["used"], *([t.get("reserved", 0)] if reserved else []), t["free"], t["max"],
             _mib(t["framebuffer_used_mib"]), _mib(t["framebuffer_free_mib"]), _where(t["gpus"])]
            for t in types
        ],
    )  # fmt: skip


def _where(gpus: list[dict[str, Any]]) -> str:
    return ", ".join(f"{g['gpu']}: {g['free']}" for g in gpus)


def _owner(device: dict[str, Any]) -> str:
    if device["owned"] is None:
        return OWNER_UNKNOWN
    if not device["owned"]:
        return f"{UNOWNED} (leak)"
    held = {"running": "running", "stopped": "stopped: reserved"}.get(device.get("held") or "")
    moving = f"{device['moving']}: vgpuadm migrate" if device.get("moving") else None
    notes = [n for n in (held, NOT_RECORDED if device.get("recorded") is False else None, moving) if n]
    return f"{device['domain']} ({'; '.join(notes)})" if notes else str(device["domain"])


def fleet_tables(doc: dict[str, Any]) -> list[Table]:
    """Hosts, types across the fleet with free and stranded instances, and every leak."""
    tables = [
        Table(
            f"Fleet: {_count(len(doc['hosts']), 'host')}",
            ["host", "GPUs", "devices", "unowned", "missing", "FB used MiB", "FB free MiB", "FB locked free MiB"],
            [
                [
                    h["host"],
                    h["gpus"],
                    h["devices"],
                    h["unowned"],
                    h["missing"],
                    h["framebuffer_used_mib"],
                    h["framebuffer_free_mib"],
                    h["framebuffer_locked_free_mib"],
                ]
                for h in doc["hosts"]
            ],
        ),
        Table(
            "vGPU types across the fleet",
            ["type", "name", "used", "free", "stranded", "max", "hosts with room", "FB free MiB"],
            [
                [
                    t["type_id"],
                    t["name"],
                    t["used"],
                    t["free"],
                    t["stranded"],
                    t["max"],
                    t["hosts_with_room"],
                    _mib(t["framebuffer_free_mib"]),
                ]
                for t in doc["types"]
            ],
        ),
    ]
    if doc["leaks"]:
        tables.append(
            Table(
                "Leaks: devices no domain owns",
                ["host", "device", "kind", "type", "gpu"],
                [[x["host"], x["id"], x["kind"], x["type_id"], x["physical_gpu"]] for x in doc["leaks"]],
            )
        )
    return tables
