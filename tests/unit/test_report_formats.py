"""`vgpuadm inventory` output formats on a busy P4 host: exact CSV, Prometheus text that promtool and the official
parser accept with the right values, JSON valid against the published schema, tables, -o files and bad input."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.unit.inventory_setup import P4_UUIDS as U
from tests.unit.inventory_setup import h200_mig_busy, mig_on, p4_busy, recorded
from vgpuadm import api
from vgpuadm.report.render_table import mig_gpu_tables
from vgpuadm.schemas import validate


@pytest.fixture
def busy(sim_host, tmp_path):
    """(root args for the CLI) of a P4 host with web01, db02, a leak and a missing device."""
    root = sim_host("p4")
    p4_busy(root, tmp_path / "domains")
    return ["--root", str(root), "inventory", "--domains-xml", str(tmp_path / "domains"), "--host", "p4-a"]


def test_json_is_valid_and_complete(busy, cli):
    r = cli(*busy, "--format", "json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    validate("inventory-v1", doc)
    assert (doc["schema"], doc["host"], doc["simulated"]) == ("vgpuadm-inventory/1", "p4-a", True)
    assert [d["domain"] for d in doc["devices"]] == ["web01", None, "db02"]


def test_csv_one_row_per_device(busy, cli):
    r = cli(*busy, "--format", "csv")
    assert r.code == 0, r.err
    assert r.out.splitlines() == [
        "host,device,kind,type_id,name,framebuffer_mib,parent,physical_gpu,layout,iommu_group,numa_node,domain,owned",
        f"p4-a,{U[0]},mdev,nvidia-63,GRID P4-1Q,1024,0000:01:00.0,0000:01:00.0,mdev-pf,100,0,web01,yes",
        f"p4-a,{U[1]},mdev,nvidia-63,GRID P4-1Q,1024,0000:01:00.0,0000:01:00.0,mdev-pf,101,0,,no",
        f"p4-a,{U[2]},mdev,nvidia-64,GRID P4-2Q,2048,0000:02:00.0,0000:02:00.0,mdev-pf,102,1,db02,yes",
    ]


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        assert family.type == "gauge"
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_prometheus_textfile_values(busy, cli):
    r = cli(*busy, "--format", "prometheus")
    assert r.code == 0, r.err
    samples = _samples(r.out)
    h = ("host", "p4-a")
    assert (
        samples[("vgpuadm_type_free_instances", (h, ("name", "GRID P4-1Q"), ("type", "nvidia-63")))] == 5
    )  # 1 reserved for `gone`
    assert samples[("vgpuadm_type_stranded_instances", (h, ("name", "GRID P4-1Q"), ("type", "nvidia-63")))] == 6
    assert samples[("vgpuadm_gpu_type_free_instances", (("gpu", "0000:02:00.0"), h, ("type", "nvidia-63")))] == 0
    assert samples[("vgpuadm_gpu_framebuffer_used_bytes", (("gpu", "0000:01:00.0"), h))] == 2048 * 1024 * 1024
    assert samples[("vgpuadm_unowned_devices", (h,))] == 1
    assert samples[("vgpuadm_missing_devices", (h,))] == 1
    assert samples[("vgpuadm_device_info", (("device", U[1]), ("domain", ""), ("gpu", "0000:01:00.0"), h,
                                            ("kind", "mdev"), ("owned", "false"), ("type", "nvidia-63")))] == 1  # fmt: skip
    assert not [line for line in r.out.splitlines() if "_total" in line]


@pytest.mark.process
def test_prometheus_mig_instances_by_state(sim_host, cli, tmp_path):
    """Issue 13: GPU-instance occupancy per GPU and profile, by the JSON's states (used, free, by-hand), zero
    included; MIG mode and the free slots per GPU."""
    root = sim_host("h200-vendor-vfio")
    h200_mig_busy(root, tmp_path / "domains")
    args = ["--root", str(root), "inventory", "--domains-xml", str(tmp_path / "domains"), "--host", "h200"]
    r = cli(*args, "--format", "prometheus")
    assert r.code == 0, r.err
    samples = {k: v for k, v in _samples(r.out).items() if k[0].startswith("vgpuadm_gpu_mig_")}
    g, h = ("gpu", "0000:18:00.0"), ("host", "h200")
    assert samples == {
        ("vgpuadm_gpu_mig_enabled", (g, h)): 1,
        ("vgpuadm_gpu_mig_free_slots", (g, h)): 4,
        **{("vgpuadm_gpu_mig_instances", (g, h, ("profile", p), ("state", st))): n
           for p, st, n in [("2g.35gb", "used", 0), ("2g.35gb", "free", 0), ("2g.35gb", "by-hand", 1),
                            ("1g.18gb", "used", 1), ("1g.18gb", "free", 1), ("1g.18gb", "by-hand", 0)]},
    }  # fmt: skip
    states = [i["state"] for i in json.loads(cli(*args, "--format", "json").out)["gpus"][0]["mig"]["instances"]]
    assert sorted(states) == sorted(k[1][3][1] for k, v in samples.items() for _ in range(int(v)) if len(k[1]) == 4)


@pytest.mark.process
def test_mig_table_titles_count_slots_and_instances_apart(sim_host, tmp_path):
    """#30.11: a MIG GPU with no instance was titled "8 of 8 slots free, 0 used, 0 free" (slots and instances mixed
    in one list); the title says the free slots, then the GPU instances and their states."""
    root = sim_host("h200-vendor-vfio")
    mig_on(root)
    [idle] = mig_gpu_tables(api.inventory(str(root), domains_xml=str(tmp_path), host="h200"))
    assert idle.title == "MIG GPU instances on 0000:18:00.0: MIG Enabled, 8 of 8 slots free; no GPU instances"
    h200_mig_busy(root, tmp_path / "domains")
    [busy] = mig_gpu_tables(api.inventory(str(root), domains_xml=str(tmp_path / "domains"), host="h200"))
    assert busy.title == (
        "MIG GPU instances on 0000:18:00.0: MIG Enabled, 4 of 8 slots free; 3 GPU instances: 1 running a vGPU, 2 "
        "free, 1 of them made by hand"
    )


@pytest.mark.process
@pytest.mark.skipif(not shutil.which("promtool"), reason="promtool (Debian package prometheus) is not installed")
def test_promtool_accepts_the_textfile(busy, cli):
    r = cli(*busy, "--format", "prometheus")
    check = subprocess.run(["promtool", "check", "metrics"], input=r.out, capture_output=True, text=True, check=False)
    assert (check.returncode, check.stdout + check.stderr) == (0, "")


def test_table_marks_leaks(busy, cli):
    r = cli(*busy)
    assert r.code == 0, r.err
    assert "unowned (leak)" in r.out and "*unowned*" not in r.out
    assert "0000:01:00.0: 5, 0000:02:00.0: 0" in r.out  # nvidia-63: where more fit
    assert "Allocations whose device is missing" in r.out and U[5] in r.out


def test_gpu_tables_name_each_gpus_model(busy, cli):
    """The terminal and HTML GPU tables have the model (pci.ids, as `vgpuadm gpus` shows it), and the JSON has it
    for them (and Cockpit); the old reports without it still validate and render."""
    r = cli(*busy, "--plain")
    lines = r.out.splitlines()
    assert lines[0].startswith("gpu\tmodel\tlayout\t")
    assert [line.split("\t")[:2] for line in lines[1:3]] == [["0000:01:00.0", "Tesla P4"], ["0000:02:00.0", "Tesla P4"]]
    doc = json.loads(cli(*busy, "--format", "json").out)
    assert [g["model"] for g in doc["gpus"]] == ["Tesla P4", "Tesla P4"]
    html = cli(*busy, "--format", "html").out
    assert "<th>model</th>" in html and "<td>Tesla P4</td>" in html
    for g in doc["gpus"]:
        del g["model"]
    validate("inventory-v1", doc)


def test_output_file_is_written_whole(busy, cli, tmp_path):
    target = tmp_path / "out" / "vgpuadm.prom"
    target.parent.mkdir()
    r = cli(*busy, "--format", "prometheus", "-o", str(target))
    assert (r.code, r.out) == (0, f"wrote {target}\n")
    assert target.read_text().startswith("# HELP vgpuadm_inventory_generated_timestamp_seconds ")
    assert [p.name for p in target.parent.iterdir()] == ["vgpuadm.prom"]
    assert target.stat().st_mode & 0o777 == 0o644


@pytest.mark.parametrize("fmt", ["prometheus", "json"])
def test_output_file_is_0644_whatever_the_umask(busy, cli, tmp_path, fmt):
    """The Prometheus textfile was written by prometheus_client (open(…, "wb")): 0666 under umask 0, writable by
    every user of the host; every report file goes through the one writer now, 0644 exactly."""
    target = tmp_path / "out" / f"vgpuadm.{fmt}"
    target.parent.mkdir()
    old = os.umask(0)
    try:
        r = cli(*busy, "--format", fmt, "-o", str(target))
    finally:
        os.umask(old)
    assert (r.code, r.out) == (0, f"wrote {target}\n")
    assert (target.stat().st_mode & 0o777, [p.name for p in target.parent.iterdir()]) == (0o644, [target.name])


def test_bad_format_and_table_to_file_are_usage_errors(busy, cli, tmp_path):
    r = cli(*busy, "--format", "yaml")
    assert (r.code, r.err.splitlines()) == (2, ['error: Unknown format "yaml"',
                                                "hint: choose one of: table, json, csv, prometheus, html"])  # fmt: skip
    r = cli(*busy, "-o", str(tmp_path / "x.txt"))
    assert (r.code, r.err.splitlines()[0]) == (2, "error: --format table only prints to the terminal")
    r = cli(*busy, "--format", "json", "-o", str(tmp_path / "no" / "dir.json"))
    # the report was made (its warning, a leak no saved domain owns, comes first); writing it failed
    assert r.code == 7 and r.err.splitlines()[1].startswith(f"error: cannot write {tmp_path / 'no' / 'dir.json'}: ")


def test_without_libvirt_ownership_is_unknown(sim_host, cli):
    root = sim_host("p4")
    p4_busy(root)
    r = cli("--root", str(root), "inventory", "--no-libvirt", "--format", "csv")
    assert [line.rsplit(",", 2)[1:] for line in r.out.splitlines()[1:]] == [["", "unknown"]] * 3


def test_inventory_help_has_an_example(cli, capsys):
    """typer prints --help itself, on the process's stdout (captured by pytest), not through the Console."""
    for args in (["inventory", "--help"], ["inventory", "merge", "--help"]):
        r = cli(*args)
        assert r.code == 0
        assert "Example: vgpuadm inventory" in capsys.readouterr().out


def test_hostile_names_are_escaped(sim_host):
    """A domain name with markup, quotes and a backslash stays text in HTML and a valid Prometheus label."""
    from vgpuadm.model import Allocation
    from vgpuadm.report.inventory import inventory
    from vgpuadm.report.render_html import host_html
    from vgpuadm.report.render_prometheus import host_metrics

    root = sim_host("p4")
    p4_busy(root)
    name = '<script>alert("x")</script>\\'
    doc = inventory(api.discover(str(root)), recorded([Allocation(name, "mdev", uuid=U[0])]), host="p4-a",
                    generated_at="2026-11-29T12:00:00Z")  # fmt: skip
    page = host_html(doc)
    assert "<script>" not in page and "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;\\" in page
    info = [s for f in text_string_to_metric_families(host_metrics(doc)) if f.name == "vgpuadm_device_info"
            for s in f.samples]  # fmt: skip
    assert [s.labels["domain"] for s in info] == [name, "", ""]


@pytest.mark.parametrize("name", ['=HYPERLINK("http://x")', "+1+1", "-2+3", "@SUM(A1)", "\tx", "\rx"])
def test_csv_cells_that_a_spreadsheet_would_run_get_a_leading_quote(sim_host, name):
    """Host data (a domain name, a host name) starting with = + - @ tab or CR is a formula to a spreadsheet: the
    cell gets a leading ' (text), numbers stay numbers."""
    from vgpuadm.model import Allocation
    from vgpuadm.report.inventory import inventory
    from vgpuadm.report.render_csv import host_csv

    root = sim_host("p4")
    p4_busy(root)
    doc = inventory(api.discover(str(root)), recorded([Allocation(name, "mdev", uuid=U[0])]), host=name,
                    generated_at="2026-11-29T12:00:00Z")  # fmt: skip
    rows = list(csv.reader(io.StringIO(host_csv(doc), newline="")))
    shown = "'" + name.replace("\r", "\\r")
    assert {r[0] for r in rows[1:]} == {shown}
    assert [r[11] for r in rows[1:] if r[1] == U[0]] == [shown]
    assert all(r[5].isdigit() or r[5] == "" for r in rows[1:])
