"""The Cockpit page (cockpit/) in a real browser against a real Cockpit: Debian's cockpit-ws with
`--local-session=cockpit-bridge` on 127.0.0.1 (no login; stopped at the end of each test), the plugin installed as
the README says (a copy into a `cockpit/vgpuadm` data directory, here $XDG_DATA_HOME of the bridge), a simulated
host (VGPUADM_ROOT in the bridge's environment) and the real libvirtd the libvirt lane uses (LIBVIRT_DEFAULT_URI).
Driven with Playwright's Python API over Debian's Chromium. Nothing is mocked: every fact the page shows and every
change it makes goes through `vgpuadm … --json` spawned by the bridge.

Screenshots of every state land in .work/screenshots/ (CI keeps them as artefacts)."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import uuid as uuid_mod
from collections.abc import Callable, Iterator
from pathlib import Path

import libvirt
import pytest
from lxml import etree
from playwright.sync_api import Browser, sync_playwright
from playwright.sync_api import Page as BrowserPage

from vgpuadm.executor import CRASH_HOOK
from vgpuadm.host.root import HostRoot
from vgpuadm.model import device_uuid
from vgpuadm.virt import xml

pytestmark = pytest.mark.libvirt

REPO = Path(__file__).resolve().parents[2]
COCKPIT_WS = "/usr/lib/cockpit/cockpit-ws"
SHOTS = REPO / ".work" / "screenshots"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Page:
    """One cockpit-ws serving the plugin for one simulated host, and a browser page on it."""

    def __init__(self, browser: Browser, base: str, root: Path) -> None:
        self.browser, self.base, self.root = browser, base, root
        self.page: BrowserPage = None  # set by open()

    def open(self, width: int = 1280, scheme: str = "light") -> BrowserPage:
        ctx = self.browser.new_context(viewport={"width": width, "height": 900}, color_scheme=scheme)
        self.page = ctx.new_page()
        self.page.goto(f"{self.base}/cockpit/@localhost/vgpuadm/index.html")
        self.wait_loaded()
        return self.page

    def wait_loaded(self) -> None:
        self.page.wait_for_selector("body[data-loaded]", timeout=60_000)

    def rows(self, table: str, keep: Callable[[list[str]], bool] = lambda r: True) -> list[list[str]]:
        cells = self.page.eval_on_selector_all(
            f"#{table} tbody tr", "trs => trs.map(tr => Array.from(tr.cells).map(td => td.textContent))"
        )
        return [r for r in cells if keep(r)]

    def shot(self, name: str) -> None:
        SHOTS.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(SHOTS / f"cockpit-{name}.png"), full_page=True)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    chromium = shutil.which("chromium")
    assert chromium, "Debian's chromium is installed by scripts/install.sh"
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture
def vms(conn: libvirt.virConnect) -> Iterator[Callable[[str], str]]:
    """Define throwaway diskless domains on the real libvirtd; undefined in teardown."""
    made: list[str] = []

    def define(suffix: str) -> str:
        name = f"vgpuadm-ck-{uuid_mod.uuid4().hex[:8]}-{suffix}"
        conn.defineXML(xml.domain_definition(name, memory_mib=64))
        made.append(name)
        return name

    yield define
    for name in made:
        with contextlib.suppress(libvirt.libvirtError):
            conn.lookupByName(name).undefine()


@pytest.fixture
def cockpit(
    browser: Browser, sim_host: Callable[[str], Path], libvirtd: str, tmp_path: Path
) -> Iterator[Callable[[str], Page]]:
    """Start cockpit-ws for a fresh simulated host of `profile`, with the plugin installed the README's way."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(profile: str) -> Page:
        root = sim_host(profile)
        data = tmp_path / "xdg"
        # README: `sudo cp -rT cockpit /usr/share/cockpit/vgpuadm` — the same copy, into the bridge's data home.
        (data / "cockpit").mkdir(parents=True, exist_ok=True)  # /usr/share/cockpit exists wherever Cockpit does
        subprocess.run(["cp", "-rT", str(REPO / "cockpit"), str(data / "cockpit" / "vgpuadm")], check=True)
        bindir = tmp_path / "bin"
        bindir.mkdir(exist_ok=True)
        wrapper = bindir / "vgpuadm"  # the vgpuadm under test, whatever is installed on the machine
        wrapper.write_text(f'#!/bin/sh\nPYTHONPATH={REPO} exec {sys.executable} -m vgpuadm "$@"\n')
        wrapper.chmod(0o755)
        port = _free_port()
        env = {**os.environ, "XDG_DATA_HOME": str(data), "VGPUADM_ROOT": str(root), "LIBVIRT_DEFAULT_URI": libvirtd,
               "PATH": f"{bindir}:{os.environ['PATH']}"}  # fmt: skip
        proc = subprocess.Popen([COCKPIT_WS, "--no-tls", "--local-session=cockpit-bridge", "--address", "127.0.0.1",
                                 "--port", str(port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
        procs.append(proc)
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{base}/cockpit/@localhost/manifests.json", timeout=5) as r:
                    if b'"vgpuadm"' in r.read():
                        break
            except OSError:
                pass
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else "cockpit-ws exited"
            assert time.monotonic() < deadline, "cockpit-ws did not serve the plugin within 30 s"
            time.sleep(0.1)  # polling interval while cockpit-ws starts
        return Page(browser, base, root)

    yield start
    for proc in procs:
        proc.terminate()
        proc.wait(timeout=30)


def cli(root: Path, uri: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "vgpuadm", "--root", str(root), "-c", uri, *args], text=True,
                          capture_output=True, env={**os.environ, **(env or {})}, timeout=300)  # fmt: skip


def inactive_hostdevs(conn: libvirt.virConnect, name: str) -> list[str]:
    doc = etree.fromstring(conn.lookupByName(name).XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE).encode())
    return [h.find("source/address").get("uuid") for h in doc.findall("devices/hostdev[@type='mdev']")]


def mdevs(root: Path) -> list[str]:
    d = root / "sys/bus/mdev/devices"
    return sorted(os.listdir(d)) if d.is_dir() else []


def test_the_page_shows_the_host_allocates_a_vgpu_and_releases_it(cockpit, vms, conn, libvirtd) -> None:
    web = vms("web")
    ck = cockpit("p4")
    page = ck.open()
    ck.shot("p4-loaded")
    assert ck.rows("device-table") == [
        ["0000:01:00.0", "Tesla P4", "mdev-pf", "–", "–", "free", "–"],
        ["0000:02:00.0", "Tesla P4", "mdev-pf", "–", "–", "free", "–"],
    ]
    assert page.inner_text("#summary [data-key='GPUs'] dd") == "2"
    assert ck.rows("vm-table", lambda r: r[0] == web) == [[web, "shut off", "–", ""]]

    page.select_option("#vm", web)
    page.select_option("#type", "nvidia-63")
    page.click("#preview")
    page.wait_for_selector("#plan:not([hidden])")
    uuid = device_uuid(HostRoot(str(ck.root)).machine_id(), conn.lookupByName(web).UUIDString(), 0)
    assert page.eval_on_selector_all("#plan-steps li", "lis => lis.map(li => li.textContent)") == [
        f"step 1/2 create mdev {uuid} of type nvidia-63 on 0000:01:00.0",
        f"step 2/2 attach mdev {uuid} (nvidia-63) to domain {web}, and record 1 vgpuadm device(s) in its metadata",
    ]
    assert page.inner_text("#plan-xml") == (
        '<hostdev mode="subsystem" type="mdev" model="vfio-pci" display="off">\n  <source>\n'
        f'    <address uuid="{uuid}"/>\n  </source>\n</hostdev>\n'
    )
    assert mdevs(ck.root) == [], "a preview changes nothing"
    ck.shot("p4-preview")

    page.click("#apply")
    page.wait_for_selector("#result.alert-success")
    assert page.inner_text("#result").splitlines()[0] == f"give domain {web} 1 × nvidia-63: done"
    ck.wait_loaded()
    page.wait_for_selector(f"#vm-table tr[data-vm='{web}'] button.release")
    ck.shot("p4-allocated")
    assert mdevs(ck.root) == [uuid]
    assert inactive_hostdevs(conn, web) == [uuid]
    assert xml.parse_allocations(conn.lookupByName(web).XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE))[0].uuid == uuid
    assert ck.rows("device-table") == [
        ["0000:01:00.0", "Tesla P4", "mdev-pf", "nvidia-63", web, "1 in use", "–"],
        [f"  {uuid}", "GRID P4-1Q", "mdev", "nvidia-63", web, "owned", "–"],
        ["0000:02:00.0", "Tesla P4", "mdev-pf", "–", "–", "free", "–"],
    ]
    assert ck.rows("vm-table", lambda r: r[0] == web) == [[web, "shut off", f"nvidia-63 {uuid}", "Release"]]

    # The driver reports a guest on the vGPU (the simulated nvidia-smi, set as the exporter's tests set it): the
    # device's row says what it uses now, in `show --vm`'s words and from the same join.
    domain_uuid = conn.lookupByName(web).UUIDString()
    usage = cli(ck.root, libvirtd, "sim", "usage", str(ck.root), uuid, "--vm-uuid", domain_uuid, "--gpu", "31",
                "--fb-used", "716")  # fmt: skip
    assert usage.returncode == 0, usage.stderr
    shown = cli(ck.root, libvirtd, "show", "--vm", web)
    assert [line for line in shown.stdout.splitlines() if line.startswith("now ")] == [
        "now slot 0: 31 % GPU, 0.7 of 1 GiB"
    ]
    page.click("#refresh")
    page.wait_for_selector("#device-table tr.device td:last-child:text-is('31 % GPU, 0.7 of 1 GiB')")
    ck.shot("p4-usage")
    assert ck.rows("device-table") == [
        ["0000:01:00.0", "Tesla P4", "mdev-pf", "nvidia-63", web, "1 in use", "–"],
        [f"  {uuid}", "GRID P4-1Q", "mdev", "nvidia-63", web, "owned", "31 % GPU, 0.7 of 1 GiB"],
        ["0000:02:00.0", "Tesla P4", "mdev-pf", "–", "–", "free", "–"],
    ]
    assert cli(ck.root, libvirtd, "sim", "usage", str(ck.root), uuid, "--stop").returncode == 0
    page.click("#refresh")
    page.wait_for_selector("#device-table tr.device td:last-child:text-is('–')")
    assert ck.rows("device-table")[1] == [f"  {uuid}", "GRID P4-1Q", "mdev", "nvidia-63", web, "owned", "–"]

    page.click(f"#vm-table tr[data-vm='{web}'] button.release")
    page.wait_for_selector(f"#vm-table tr[data-vm='{web}'] button.release", state="detached")
    ck.shot("p4-released")
    assert mdevs(ck.root) == []
    assert inactive_hostdevs(conn, web) == []
    assert ck.rows("device-table")[0] == ["0000:01:00.0", "Tesla P4", "mdev-pf", "–", "–", "free", "–"]


def test_a_type_that_does_not_fit_shows_vgpuadms_error_and_hint_as_is(cockpit, vms, libvirtd) -> None:
    web = vms("big")
    ck = cockpit("p4")
    page = ck.open()
    page.select_option("#vm", web)
    page.select_option("#type", "nvidia-63")
    page.fill("#count", "17")  # two P4s hold 16 × P4-1Q
    page.click("#preview")
    page.wait_for_selector("#result.alert-danger")
    ck.shot("p4-error")
    expected = cli(ck.root, libvirtd, "create", "--type", "nvidia-63", "--vm", web, "--count", "17", "--policy",
                   "pack", "--dry-run", "--json")  # fmt: skip
    assert expected.returncode != 0
    lines = [line for line in expected.stderr.splitlines() if line.startswith(("error: ", "hint: "))]
    assert lines[0].startswith("error: ") and lines[1].startswith("hint: ")
    assert [line for line in page.inner_text("#result").splitlines() if line] == lines
    assert page.is_disabled("#apply")
    assert mdevs(ck.root) == []


def test_a_pending_journal_offers_reconcile(cockpit, vms, libvirtd) -> None:
    web = vms("crash")
    ck = cockpit("p4")
    crashed = cli(ck.root, libvirtd, "create", "--type", "nvidia-63", "--vm", web, env={CRASH_HOOK: "1"})
    assert crashed.returncode != 0
    assert len(mdevs(ck.root)) == 1, "the crash left the first step's mdev behind"
    page = ck.open()
    assert page.is_visible("#journal")
    # doctor exits 1 on its failed journal check; the page still shows its findings.
    warnings = page.eval_on_selector_all("#warnings li", "lis => lis.map(li => li.textContent)")
    assert "fail: an interrupted change is pending: " in "\n".join(warnings)
    assert any(
        w.startswith("warn: mdev ")
        and w.endswith(
            " is owned by no domain (vgpuadm recover first (the interrupted change may have made it); if "
            "it is still here, vgpuadm reconcile --fix (removes it), or give it to a VM)"
        )
        for w in warnings
    ), warnings
    ck.shot("p4-pending-journal")
    page.click("#reconcile")
    page.wait_for_selector("#result.alert-success")
    page.wait_for_selector("#journal[hidden]", state="attached")
    assert page.inner_text("#result").splitlines()[0].startswith("rolled back: create mdev ")
    assert mdevs(ck.root) == []
    assert not (ck.root / "var/lib/vgpuadm/journal.json").exists()


def test_light_and_dark_at_1280_and_800_pixels(cockpit) -> None:
    ck = cockpit("mixed")
    for scheme in ("light", "dark"):
        for width in (1280, 800):
            page = ck.open(width=width, scheme=scheme)
            ck.shot(f"mixed-{scheme}-{width}")
            dark = page.evaluate("document.documentElement.classList.contains('pf-v5-theme-dark')")
            assert dark == (scheme == "dark")
            background = page.evaluate("getComputedStyle(document.body).backgroundColor")
            assert background == ("rgb(27, 29, 33)" if dark else "rgb(240, 240, 240)")
            # The page itself never scrolls sideways (a wide table scrolls inside its card).
            assert page.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth")
            addresses = {r[0] for r in ck.rows("device-table") if not r[0].startswith(" ")}
            assert {"0000:01:00.0", "0000:03:00.0", "0000:18:00.0", "0000:41:00.0", "0000:65:00.0"} <= addresses
            page.context.close()
    # Cockpit's theme switch (localStorage "shell:style" and the storage event) flips an open page.
    page = ck.open(scheme="light")
    page.evaluate("localStorage.setItem('shell:style', 'dark'); window.dispatchEvent(new StorageEvent('storage', "
                  "{key: 'shell:style'}))")  # fmt: skip
    assert page.evaluate("document.documentElement.classList.contains('pf-v5-theme-dark')")
