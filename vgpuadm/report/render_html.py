"""One self-contained HTML page for an inventory or a fleet report: inline CSS, inline SVG bar charts (use per GPU
or host, and per type), and the same tables the terminal shows. No script, no font, no image, no network fetch,
so it can be mailed or opened from a file share. Rendered by templates/report/inventory.html.j2 (autoescaped)."""

from __future__ import annotations

from typing import Any

from vgpuadm.report.render_table import Table, fleet_tables, host_tables
from vgpuadm.virt.templating import environment

BAR_WIDTH = 420  # px of a full bar; labels and numbers sit left and right of it
MAX_BARS = 60  # a fleet of 1,000 hosts charts its 60 fullest hosts; the table still lists every host


def _chart(
    title: str, unit: str, items: list[tuple[str, int, int, int]], note: str = "", stranded_is_capacity: bool = False
) -> dict[str, Any]:
    """A horizontal stacked bar chart: (label, used, free, stranded) per bar, scaled to the largest total.
    The number beside a bar is used / capacity; stranded counts in the capacity when it is real memory (free
    framebuffer on a locked GPU), not when it is instances a lock forbids."""
    if len(items) > MAX_BARS:
        items = sorted(items, key=lambda i: -i[1])[:MAX_BARS]
        note = note or f"the {MAX_BARS} with the most in use"
    scale = max((u + f + s for _, u, f, s in items), default=0) or 1
    bars = []
    for label, used, free, stranded in items:
        total = used + free + (stranded if stranded_is_capacity else 0)
        bars.append({
            "label": label, "used": used, "free": free, "stranded": stranded,
            "text": f"{used} / {total}" + (f" ({stranded} stranded)" if stranded else ""),
            "w_used": round(BAR_WIDTH * used / scale, 1), "w_free": round(BAR_WIDTH * free / scale, 1),
            "w_stranded": round(BAR_WIDTH * stranded / scale, 1),
        })  # fmt: skip
    return {"title": title, "unit": unit, "bars": bars, "note": note, "height": 26 * len(bars) + 8,
            "bar_width": BAR_WIDTH}  # fmt: skip


def host_view(doc: dict[str, Any]) -> dict[str, Any]:
    s = doc["summary"]
    gpu_items = [
        (
            g["address"],
            g["framebuffer_used_mib"] or 0,
            0 if g["locked_to"] else g["framebuffer_free_mib"] or 0,
            (g["framebuffer_free_mib"] or 0) if g["locked_to"] else 0,
        )
        for g in doc["gpus"]
        if g["framebuffer_total_mib"]
    ]
    type_items = [
        (f"{t['type_id']} {t['name']}", t["used"], t["free"], t["stranded"])
        for t in doc["types"]
        if t["used"] or t["free"] or t["stranded"]
    ]
    cards = [
        ("GPUs", s["gpus"]),
        ("devices", s["devices"]),
        ("unowned", _unknown(s["unowned"])),
        ("missing", s["missing"]),
        ("framebuffer used MiB", f"{s['framebuffer_used_mib']} / {s['framebuffer_total_mib']}"),
    ]
    return {
        "title": f"vGPU inventory of {doc['host']}",
        "subtitle": f"{doc['schema']} · taken {doc['generated_at']} · ownership from {doc['ownership_source']}",
        "cards": cards,
        "charts": [
            _chart(
                "Framebuffer per GPU (stranded = free on a GPU locked to a type or size)",
                "MiB",
                gpu_items,
                stranded_is_capacity=True,
            ),
            _chart("Instances per type", "instances", type_items),
        ],
        "tables": host_tables(doc),
        "warnings": doc["warnings"],
    }


def fleet_view(doc: dict[str, Any]) -> dict[str, Any]:
    t, f = doc["totals"], doc["fragmentation"]
    host_items = [
        (
            h["host"],
            h["framebuffer_used_mib"],
            h["framebuffer_free_mib"] - h["framebuffer_locked_free_mib"],
            h["framebuffer_locked_free_mib"],
        )
        for h in doc["hosts"]
    ]
    type_items = [
        (f"{x['type_id']} {x['name']}", x["used"], x["free"], x["stranded"])
        for x in doc["types"]
        if x["used"] or x["free"] or x["stranded"]
    ]
    cards = [
        ("hosts", t["hosts"]),
        ("GPUs", t["gpus"]),
        ("devices", t["devices"]),
        ("leaks", t["unowned"]),
        ("missing", t["missing"]),
        ("free framebuffer on locked GPUs", f"{round(100 * f['locked_share'])} %"),
    ]
    return {
        "title": f"vGPU fleet report: {t['hosts']} hosts",
        "subtitle": f"{doc['schema']} · merged {doc['generated_at']}",
        "cards": cards,
        "charts": [
            _chart(
                "Framebuffer per host (stranded = free on GPUs locked to a type or size)",
                "MiB",
                host_items,
                stranded_is_capacity=True,
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
