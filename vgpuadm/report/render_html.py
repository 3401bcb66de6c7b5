"""One self-contained HTML page for an inventory or a fleet report: inline CSS, inline SVG bar charts (use per GPU
or host, and per type), and the same tables the terminal shows. No script, no font, no image, no network fetch,
so it can be mailed or opened from a file share. Rendered by templates/report/inventory.html.j2 (autoescaped).
MIG GPU instances get a table per GPU (the terminal prints them in one)."""

from __future__ import annotations

from typing import Any

from vgpuadm.report.render_table import MIG_TITLE, Table, fleet_tables, host_tables, mig_gpu_tables
from vgpuadm.virt.xml import environment

BAR_WIDTH = 420  # px of a full bar; labels and numbers sit left and right of it
MAX_BARS = 60  # a fleet of 1,000 hosts charts its 60 fullest hosts; the table still lists every host


# label, used, free, stranded, capacity the label names, reserved (for devices awaiting `vgpuadm restore`)
Item = tuple[str, int, int, int, "int | str | None", int]


def _chart(title: str, unit: str, items: list[Item], note: str = "") -> dict[str, Any]:
    """A horizontal stacked bar chart: (label, used, free, stranded, capacity, reserved) per bar, scaled to the
    largest bar. Every number comes from the inventory's rows, so the label beside a bar — used / capacity — says
    what the table says (a type's max, a GPU's framebuffer total); reserved sits between used and free."""
    if len(items) > MAX_BARS:
        items = sorted(items, key=lambda i: -i[1])[:MAX_BARS]
        note = note or f"the {MAX_BARS} with the most in use"
    scale = max((u + f + s + r for _, u, f, s, _, r in items), default=0) or 1
    bars = []
    for label, used, free, stranded, capacity, reserved in items:
        extra = [f"{reserved} reserved"] if reserved else []
        extra += [f"{stranded} stranded"] if stranded else []
        bars.append({
            "label": label, "used": used, "free": free, "stranded": stranded, "reserved": reserved,
            "text": f"{used} / {'-' if capacity is None else capacity}" + (f" ({', '.join(extra)})" if extra else ""),
            "w_used": round(BAR_WIDTH * used / scale, 1), "w_free": round(BAR_WIDTH * free / scale, 1),
            "w_stranded": round(BAR_WIDTH * stranded / scale, 1), "w_reserved": round(BAR_WIDTH * reserved / scale, 1),
        })  # fmt: skip
    return {"title": title, "unit": unit, "bars": bars, "note": note, "height": 26 * len(bars) + 8,
            "bar_width": BAR_WIDTH, "reserved": any(b["reserved"] for b in bars)}  # fmt: skip


def _framebuffer_items(rows: list[dict[str, Any]], key: str) -> list[Item]:
    """GPU or host rows: used, free that a type can still fill, stranded (free that none can), of the total."""
    items: list[Item] = []
    for r in rows:
        if r["framebuffer_total_mib"] is None or (
            r.get("whole_gpu_free") is not None and not r["framebuffer_total_mib"]
        ):
            continue
        stranded = r.get("framebuffer_stranded_mib") or 0
        free = (r["framebuffer_free_mib"] or 0) - stranded
        items.append((r[key], r["framebuffer_used_mib"] or 0, free, stranded, r["framebuffer_total_mib"],
                      r.get("framebuffer_reserved_mib") or 0))  # fmt: skip
    return items


def _type_items(rows: list[dict[str, Any]]) -> list[Item]:
    return [
        (f"{t['type_id']} {t['name']}", t["used"], t["free"], t["stranded"], t["max"], t.get("reserved") or 0)
        for t in rows
        if t["used"] or t["free"] or t["stranded"] or t.get("reserved")
    ]


def host_view(doc: dict[str, Any]) -> dict[str, Any]:
    s = doc["summary"]
    whole = [g for g in doc["gpus"] if g.get("whole_gpu_free") is not None]
    whole_items: list[Item] = [(g["address"], 1 - g["whole_gpu_free"], g["whole_gpu_free"], 0, 1, 0) for g in whole]
    cards = [
        ("GPUs", s["gpus"]),
        ("devices", s["devices"]),
        ("unowned", _unknown(s["unowned"])),
        ("missing", s["missing"]),
        ("framebuffer used MiB", f"{s['framebuffer_used_mib']} / {s['framebuffer_total_mib']}"),
    ]
    charts = [
        _chart(
            "Framebuffer per GPU (stranded = free that no type the GPU can still take can fill)",
            "MiB",
            _framebuffer_items(doc["gpus"], "address"),
        ),
        _chart("Instances per type", "instances", _type_items(doc["types"])),
    ]
    if whole_items:
        charts.append(_chart("Whole GPUs (passthrough: free or passed through)", "GPUs", whole_items))
    return {
        "title": f"vGPU inventory of {doc['host']}",
        "subtitle": f"{doc['schema']} · taken {doc['generated_at']} · ownership from {doc['ownership_source']}",
        "cards": cards,
        "charts": charts,
        "tables": [m for t in host_tables(doc) for m in (mig_gpu_tables(doc) if t.title == MIG_TITLE else [t])],
        "warnings": doc["warnings"],
    }


def fleet_view(doc: dict[str, Any]) -> dict[str, Any]:
    t, f = doc["totals"], doc["fragmentation"]
    host_items = _framebuffer_items(doc["hosts"], "host")
    type_items = _type_items(doc["types"])
    cards = [
        ("hosts", t["hosts"]),
        ("GPUs", t["gpus"]),
        ("devices", t["devices"]),
        ("leaks", t["unowned"]),
        ("missing", t["missing"]),
        (
            "of the free framebuffer, the share on GPUs locked to one type or size",
            f"{round(100 * f['locked_share'])} %",
        ),
    ]
    return {
        "title": f"vGPU fleet report: {t['hosts']} host{'' if t['hosts'] == 1 else 's'}",
        "subtitle": f"{doc['schema']} · merged {doc['generated_at']}",
        "cards": cards,
        "charts": [
            _chart(
                "Framebuffer per host (stranded = free that no type its GPUs can still take can fill)",
                "MiB",
                host_items,
            ),
            _chart("Instances per type across the fleet", "instances", type_items),
        ],
        "tables": fleet_tables(doc),
        "warnings": doc["warnings"],
    }


def _unknown(value: Any) -> Any:
    return "unknown" if value is None else value


def to_html(view: dict[str, Any]) -> str:
    tables: list[Table] = view["tables"]
    return str(environment().get_template("report/inventory.html.j2").render(**{**view, "tables": tables}))


def host_html(doc: dict[str, Any]) -> str:
    return to_html(host_view(doc))


def fleet_html(doc: dict[str, Any]) -> str:
    return to_html(fleet_view(doc))
