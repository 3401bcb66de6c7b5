"""`vgpuadm inventory`: who owns which vGPU on this host and how many more of each type fit where; and
`vgpuadm inventory merge`: the fleet report of many hosts' JSON inventories. Formats: table (terminal), json
(vgpuadm/schemas/inventory-v1 and fleet-v1), csv, prometheus (node_exporter textfile), html (one self-contained
file)."""

from typing import Any

from vgpuadm.cli.console import Console
from vgpuadm.errors import UsageError

FORMATS = ("table", "json", "csv", "prometheus", "html")
HOST_EPILOG = (
    "Example: vgpuadm inventory --format json -o /srv/reports/$(hostname).json · "
    "vgpuadm inventory --format prometheus -o /var/lib/node_exporter/textfile/vgpuadm.prom"
)
MERGE_EPILOG = "Example: vgpuadm inventory merge reports/*.json --format html -o fleet.html"
CSV_NOTE = "CSV has one row per device for a host, one row per host and type for a fleet."


def _check_format(fmt: str) -> str:
    if fmt not in FORMATS:
        raise UsageError(f'Unknown format "{fmt}"', f"choose one of: {', '.join(FORMATS)}")
    return fmt


def _json_alias(fmt: str, as_json: bool) -> str:
    """`--json` is `--format json` (every read command takes --json); refused beside another --format."""
    _check_format(fmt)
    if not as_json:
        return fmt
    if fmt not in ("table", "json"):
        raise UsageError(f"--json and --format {fmt} disagree", "give one of them")
    return "json"


def render(doc: dict[str, Any], fmt: str, fleet: bool) -> str | None:
    """The document in `fmt` as text; None for table (printed through the Console's tables)."""
    from vgpuadm.report import render_csv, render_html, render_json, render_prometheus

    if fmt == "json":
        return render_json.to_json(doc)
    if fmt == "csv":
        return render_csv.fleet_csv(doc) if fleet else render_csv.host_csv(doc)
    if fmt == "prometheus":
        return render_prometheus.fleet_metrics(doc) if fleet else render_prometheus.host_metrics(doc)
    if fmt == "html":
        return render_html.fleet_html(doc) if fleet else render_html.host_html(doc)
    return None


def emit(console: Console, doc: dict[str, Any], fmt: str, output: str | None, fleet: bool) -> None:
    from vgpuadm.report.render_table import fleet_tables, host_tables

    if output and fmt == "table":  # refused before the report's warnings are printed
        raise UsageError("--format table only prints to the terminal", "use --format json|csv|html with -o")
    for w in doc["warnings"]:
        console.warn(w)
    text = render(doc, fmt, fleet)
    if text is None:
        for t in fleet_tables(doc) if fleet else host_tables(doc):
            console.table(t.title, t.columns, t.rows)
        return
    if output:
        from vgpuadm import api

        api.write_report(output, text)
        console.line(f"wrote {output}")
    else:
        console.line(text.rstrip("\n"))


def build_app() -> Any:
    import typer

    from vgpuadm import api

    app = typer.Typer(
        help="vGPU inventory: owners, free capacity per type and GPU, leaks; per host or merged for a fleet.",
        no_args_is_help=False,
    )
    fmt_help = f"Output format: {', '.join(FORMATS)}. {CSV_NOTE}"

    @app.callback(invoke_without_command=True, epilog=HOST_EPILOG)
    def host_cmd(
        ctx: typer.Context,
        fmt: str = typer.Option("table", "--format", "-f", help=fmt_help, metavar="FORMAT"),
        output: str = typer.Option(None, "--output", "-o", help="Write to FILE (atomically) instead of stdout.",
                                   metavar="FILE"),
        domains_xml: str = typer.Option(None, "--domain-xml-dir", metavar="DIR",
                                        help="Read ownership from saved domain XML files (virsh dumpxml) in DIR "
                                        "instead of libvirt."),
        old_domains_xml: str = typer.Option(None, "--domains-xml", hidden=True, metavar="DIR"),  # the old name
        connect: str = typer.Option(None, "--connect", "-c", metavar="URI", help="libvirt URI to read domains from."),
        no_libvirt: bool = typer.Option(False, "--no-libvirt",
                                        help="Do not read domains: ownership is reported as unknown."),
        host: str = typer.Option(None, "--host", metavar="NAME", help="Host name to put in the report."),
        as_json: bool = typer.Option(False, "--json", help="The same as --format json."),
        usage: bool = typer.Option(False, "--usage", help="Add what the GPU driver reports each device uses now "
                                   "(JSON `now`, as `show --vm` gives it; the Cockpit page shows it)."),
    ) -> None:  # fmt: skip
        """Inventory of this host: GPUs and VFs (layout, driver, NUMA, IOMMU group), per type used/free/max and
        framebuffer, every device with its owning domain (or unowned), and how many more of each type fit where."""
        if ctx.invoked_subcommand is not None:
            return
        fmt = _json_alias(fmt, as_json)
        domains_xml = domains_xml or old_domains_xml
        connect = connect or ctx.obj.get("connect")  # `vgpuadm --connect URI inventory` works too
        doc = api.inventory(ctx.obj["root"], connect=connect, domains_xml=domains_xml, use_libvirt=not no_libvirt,
                            host=host, usage=usage)  # fmt: skip
        emit(ctx.obj["console"], doc, fmt, output, fleet=False)

    @app.command("merge", epilog=MERGE_EPILOG)
    def merge_cmd(
        ctx: typer.Context,
        files: list[str] = typer.Argument(..., help="Host inventories written with --format json.", metavar="FILE…"),
        fmt: str = typer.Option("table", "--format", "-f", help=fmt_help, metavar="FORMAT"),
        output: str = typer.Option(None, "--output", "-o", help="Write to FILE (atomically) instead of stdout.",
                                   metavar="FILE"),
        as_json: bool = typer.Option(False, "--json", help="The same as --format json."),
    ) -> None:  # fmt: skip
        """Fleet report: totals per type and host, free capacity, fragmentation (instances stranded on GPUs locked
        to another type or size) and leaks. Refuses other schema versions, broken JSON and duplicate hosts."""
        fmt = _json_alias(fmt, as_json)
        emit(ctx.obj["console"], api.merge_inventories(files), fmt, output, fleet=True)

    return app
