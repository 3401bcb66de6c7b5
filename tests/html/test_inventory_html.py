"""The HTML inventory rendered by a real browser: headless Chromium loads the file, its DOM is dumped and checked
(charts' bars carry the inventory's numbers, the leak is marked) and a screenshot must show the chart colours.
Skipped only where Chromium is not installed (scripts/install.sh installs it)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from lxml import html

from tests.unit.inventory_setup import h200_mig_busy, p4_busy, recorded, set_vf_type
from vgpuadm import api
from vgpuadm.model import Allocation
from vgpuadm.report.inventory import inventory
from vgpuadm.report.merge import merge
from vgpuadm.report.render_html import fleet_html, host_html, host_view
from vgpuadm.sim.profiles import build

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
USED_BLUE = (0x2F, 0x6F, 0xDF)  # .used in templates/report/inventory.html.j2
STRANDED_ORANGE = (0xF0, 0xB3, 0x5C)


def chromium(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [CHROMIUM or "chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={tmp / 'profile'}",
           *args]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True)


@pytest.fixture(scope="module")
def host_page(tmp_path_factory):
    from vgpuadm.cli.app import run
    from vgpuadm.cli.console import Console
    from vgpuadm.sim.profiles import build

    base = tmp_path_factory.mktemp("html")
    build("p4", str(base / "p4"))
    p4_busy(base / "p4", base / "domains")
    page = base / "p4-a.html"
    args = ["--root", str(base / "p4"), "inventory", "--domains-xml", str(base / "domains"), "--host", "p4-a",
            "--format", "html", "-o", str(page)]  # fmt: skip
    assert run(args, Console()) == 0
    return base, page


def test_page_is_self_contained(host_page):
    _, page = host_page
    text = page.read_text()
    tree = html.fromstring(text)
    assert not tree.xpath("//script | //link | //img | //iframe | //object | //@src")
    assert "url(" not in text and "@import" not in text
    assert [h for h in tree.xpath("//@href")] == []


def test_browser_dom_has_the_numbers(host_page):
    base, page = host_page
    dom = html.fromstring(chromium(base, "--dump-dom", page.as_uri()).stdout)
    assert dom.findtext(".//h1") == "vGPU inventory of p4-a"
    charts = dom.xpath("//section[@class='chart']")
    assert [c.findtext("h2") for c in charts] == [
        "Framebuffer per GPU (stranded = free that no type the GPU can still take can fill)", "Instances per type"
    ]  # fmt: skip
    bars = charts[0].xpath(".//*[@class='bar']")
    # both P4s run a type, but more of it fills their free framebuffer: nothing is stranded
    assert [(b.get("data-label"), b.get("data-used"), b.get("data-free"), b.get("data-stranded"), b.findtext("text[2]"))
            for b in bars] == [("0000:01:00.0", "2048", "5120", "0", "2048 / 8192 (1024 reserved)"),
                               ("0000:02:00.0", "2048", "6144", "0", "2048 / 8192")]  # fmt: skip
    q1 = charts[1].xpath(".//*[@class='bar'][@data-label='nvidia-63 GRID P4-1Q']")[0]
    assert (q1.get("data-used"), q1.get("data-free"), q1.get("data-stranded")) == ("2", "5", "6")
    cards = {c.findtext("*[@class='k']"): c.findtext("*[@class='v']") for c in dom.xpath("//*[@class='card']")}
    assert (cards["devices"], cards["unowned"], cards["missing"]) == ("3", "1", "1")
    device_cells = [[td.text_content() for td in tr.findall("td")] for tr in dom.xpath("//table[last()-1]//tbody/tr")]
    assert [row[-1] for row in device_cells if "unowned" in row[-1]] == ["unowned (leak)"]
    assert "*" not in "".join(row[-1] for row in device_cells)


def test_screenshot_shows_the_charts(host_page):
    from PIL import Image

    base, page = host_page
    shot = base / "p4-a.png"
    chromium(base, f"--screenshot={shot}", "--window-size=1280,1200", page.as_uri())
    with Image.open(shot) as img:
        assert img.size == (1280, 1200)
        colours = {c for _, c in img.convert("RGB").getcolors(maxcolors=1 << 20) or []}
    assert USED_BLUE in colours and STRANDED_ORANGE in colours
    assert len(colours) > 50  # text, table rules and bars; a blank page has one colour


def test_fleet_page_renders(host_page, tmp_path):
    base, _ = host_page
    doc = api.inventory(str(base / "p4"), domains_xml=str(base / "domains"), host="p4-a")
    other = json.loads(json.dumps(doc)) | {"host": "p4-b"}
    page = tmp_path / "fleet.html"
    page.write_text(fleet_html(merge([("a.json", doc), ("b.json", other)], generated_at="2026-11-29T12:00:00Z")))
    dom = html.fromstring(chromium(tmp_path, "--dump-dom", page.as_uri()).stdout)
    assert dom.findtext(".//h1") == "vGPU fleet report: 2 hosts"
    hosts = dom.xpath("//section[@class='chart'][1]//*[@class='bar']")
    assert [(b.get("data-label"), b.get("data-used"), b.get("data-stranded")) for b in hosts] == [
        ("p4-a", "4096", "0"),
        ("p4-b", "4096", "0"),
    ]


@pytest.fixture(scope="module")
def h200_page(tmp_path_factory):
    base = tmp_path_factory.mktemp("h200")
    build("h200-vendor-vfio", str(base / "h200"))
    for vf in ("0000:18:00.4", "0000:18:00.5", "0000:18:00.6"):
        set_vf_type(base / "h200", vf, 1424)  # three H200X-17C (time-sliced, max 8)
    doc = api.inventory(str(base / "h200"), host="h200", use_libvirt=False)
    page = base / "h200.html"
    page.write_text(host_html(doc))
    return base, page, doc


def test_h200_chart_labels_are_the_table_numbers(h200_page):
    """Issue 12 item 13: the charts take used/free/max/stranded from the rows the tables print."""
    base, page, _ = h200_page
    dom = html.fromstring(chromium(base, "--dump-dom", page.as_uri()).stdout)
    charts = dom.xpath("//section[@class='chart']")
    gpu = charts[0].xpath(".//*[@class='bar']")
    # five more 17C fill 87040 MiB; only the 5120 MiB left after them is stranded
    assert [(b.get("data-used"), b.get("data-free"), b.get("data-stranded"), b.findtext("text[2]")) for b in gpu] == [
        ("52224", "87040", "5120", "52224 / 144384 (5120 stranded)")
    ]
    table = dom.xpath("//h2[starts-with(., 'vGPU types')]/following-sibling::table[1]")[0]
    heads = [th.text_content() for th in table.xpath(".//th")]
    rows = {r[0]: dict(zip(heads, r, strict=True)) for r in
            ([td.text_content() for td in tr.findall("td")] for tr in table.xpath(".//tbody/tr"))}  # fmt: skip
    bars = charts[1].xpath(".//*[@class='bar']")
    # 1424 in use, and every other time-sliced type its size locks out whose instances the free framebuffer would
    # hold (stranded); H200X-141C would not fit in it, and the MIG-backed types (1413-1419) are unavailable while
    # MIG is off, not stranded (#30.11): no bar
    assert [b.get("data-label").split()[0] for b in bars] == [f"nvidia-{n}" for n in range(1420, 1428)]
    for b in bars:
        row = rows[b.get("data-label").split()[0]]
        stranded = int(b.get("data-stranded"))
        assert (b.get("data-used"), b.get("data-free")) == (row["used"], row["free"])
        assert b.findtext("text[2]") == f"{row['used']} / {row['host max']}" + (
            f" ({stranded} stranded)" if stranded else ""
        )
    assert rows["nvidia-1424"]["host max"] == "8" and rows["nvidia-1426"]["host max"] == "4"
    by_id = {b.get("data-label").split()[0]: b for b in bars}
    assert by_id["nvidia-1424"].findtext("text[2]") == "3 / 8"
    assert by_id["nvidia-1426"].findtext("text[2]") == "0 / 4 (2 stranded)"


def test_mig_instances_have_a_table_per_gpu(tmp_path):
    """Issue 13: the page shows each MIG GPU's instances and their states (used, free, by-hand), as the JSON does."""
    build("h200-vendor-vfio", str(tmp_path / "h200"))
    h200_mig_busy(tmp_path / "h200", tmp_path / "domains")
    doc = api.inventory(str(tmp_path / "h200"), domains_xml=str(tmp_path / "domains"), host="h200")
    page = tmp_path / "mig.html"
    page.write_text(host_html(doc))
    dom = html.fromstring(chromium(tmp_path, "--dump-dom", page.as_uri()).stdout)
    titles = [h.text_content() for h in dom.xpath("//h2[starts-with(., 'MIG GPU instances')]")]
    assert titles == ["MIG GPU instances on 0000:18:00.0: MIG Enabled, 4 of 8 slots free; 3 GPU instances: 1 running "
                      "a vGPU, 2 free, 1 of them made by hand"]  # fmt: skip
    table = dom.xpath("//h2[starts-with(., 'MIG GPU instances')]/following-sibling::table[1]")[0]
    assert [th.text_content() for th in table.xpath(".//th")] == [
        "instance", "profile", "placement", "state", "domain", "made for", "vGPUs"
    ]  # fmt: skip
    assert [[td.text_content() for td in tr.findall("td")] for tr in table.xpath(".//tbody/tr")] == [
        ["3", "2g.35gb", "0:2", "by-hand", "-", "-", "-"],
        ["2", "1g.18gb", "5:1", "free", "-", "idle01", "-"],
        ["1", "1g.18gb", "6:1", "used", "train01", "train01", "0000:18:00.4"],
    ]


def test_full_gpu_and_passthrough_gpus_are_charted(tmp_path):
    build("h200-vendor-vfio", str(tmp_path / "h200"))
    set_vf_type(tmp_path / "h200", "0000:18:00.4", 1428)  # H200X-141C: the whole GPU
    view = host_view(api.inventory(str(tmp_path / "h200"), host="h", use_libvirt=False))
    assert [(b["label"], b["used"], b["free"], b["stranded"], b["text"]) for b in view["charts"][0]["bars"]] == [
        ("0000:18:00.0", 144384, 0, 0, "144384 / 144384")
    ]
    build("passthrough", str(tmp_path / "pt"))
    gpu = Allocation("gamer", "pci", address="0000:65:00.0")
    doc = inventory(api.discover(str(tmp_path / "pt")), recorded([gpu]), host="pt", generated_at="2026-11-29T12:00:00Z")
    charts = host_view(doc)["charts"]
    assert charts[2]["title"] == "Whole GPUs (passthrough: free or passed through)"
    assert [(b["label"], b["used"], b["free"], b["text"]) for b in charts[2]["bars"]] == [
        ("0000:01:00.0", 0, 1, "0 / 1"), ("0000:65:00.0", 1, 0, "1 / 1")
    ]  # fmt: skip
