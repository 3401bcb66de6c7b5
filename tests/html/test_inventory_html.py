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

from tests.unit.inventory_setup import p4_busy
from vgpuadm import api
from vgpuadm.report.merge import merge
from vgpuadm.report.render_html import fleet_html

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
        "Framebuffer per GPU (stranded = free on a GPU locked to a type or size)", "Instances per type"
    ]  # fmt: skip
    bars = charts[0].xpath(".//*[@class='bar']")
    # both P4s run a type, so their free framebuffer is locked to it
    assert [(b.get("data-label"), b.get("data-used"), b.get("data-free"), b.get("data-stranded"), b.findtext("text[2]"))
            for b in bars] == [("0000:01:00.0", "2048", "0", "6144", "2048 / 8192 (6144 stranded)"),
                               ("0000:02:00.0", "2048", "0", "6144", "2048 / 8192 (6144 stranded)")]  # fmt: skip
    q1 = charts[1].xpath(".//*[@class='bar'][@data-label='nvidia-63 GRID P4-1Q']")[0]
    assert (q1.get("data-used"), q1.get("data-free"), q1.get("data-stranded")) == ("2", "6", "6")
    cards = {c.findtext("*[@class='k']"): c.findtext("*[@class='v']") for c in dom.xpath("//*[@class='card']")}
    assert (cards["devices"], cards["unowned"], cards["missing"]) == ("3", "1", "1")
    device_cells = [[td.text_content() for td in tr.findall("td")] for tr in dom.xpath("//table[last()-1]//tbody/tr")]
    assert [row[-1] for row in device_cells if row[-1].startswith("*")] == ["*unowned* (leak)"]


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
        ("p4-a", "4096", "12288"),
        ("p4-b", "4096", "12288"),
    ]
