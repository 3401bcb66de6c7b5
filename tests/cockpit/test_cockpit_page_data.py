"""The Cockpit page's script (cockpit/vgpuadm.js) on host data that names JavaScript's own object keys: a GPU
address `__proto__` (or `constructor`) in the inventory must show as a row like any other, not stop the page.

Run in Node (Debian's nodejs) with a minimal stand-in for the DOM and for `cockpit.spawn` (no browser or Cockpit
can run in the unit lane; tests/cockpit/test_cockpit_page.py drives the real page in Chromium). The inventory the
stand-in returns is the real `vgpuadm inventory --json` of a simulated host, its addresses renamed."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
NODE = shutil.which("node") or shutil.which("nodejs")

HARNESS = r"""
const fs = require("fs");
const vm = require("vm");
const [script, invFile] = process.argv.slice(2);
class El {
    constructor(tag) {
        this.tag = tag; this.children = []; this.dataset = {}; this.hidden = false; this.value = "";
        this.textContent = ""; this.className = ""; this.disabled = false;
        this.classList = { toggle() {}, add() {}, remove() {} };
        this.tBodies = [this];
    }
    appendChild(c) { this.children.push(c); return c; }
    replaceChildren(...c) { this.children = c; }
    addEventListener() {}
    setAttribute() {}
}
class Option extends El { constructor(text, value) { super("option"); this.textContent = text; this.value = value; } }
const els = {};
const inv = fs.readFileSync(invFile, "utf8");
const answers = { inventory: inv, vms: "[]", doctor: '{"checks": []}', mig: "[]" };
const document = {
    getElementById: (id) => (els[id] = els[id] || new El(id)),
    createElement: (t) => new El(t), documentElement: new El("html"), body: new El("body"),
};
const window = {
    matchMedia: () => ({ matches: false, addEventListener() {} }),
    localStorage: { getItem: () => null }, addEventListener() {},
};
const cockpit = {
    spawn: (args) => Promise.resolve(answers[args[1]]),
    transport: { wait: (f) => f() },
};
const errors = [];
process.on("unhandledRejection", (e) => errors.push(String(e)));
vm.runInNewContext(fs.readFileSync(script, "utf8"), { document, window, cockpit, Option, Node: El, console });
setTimeout(() => {
    const rows = els["device-table"].children.map((tr) => tr.children.map((td) => td.textContent));
    console.log(JSON.stringify({ loaded: document.body.dataset.loaded || null, errors, rows }));
}, 100);
"""


@pytest.mark.skipif(NODE is None, reason="needs Node.js (Debian's nodejs)")
@pytest.mark.parametrize("key", ["__proto__", "constructor"])
def test_a_gpu_address_named_like_an_object_key_shows_as_a_row(cli, sim_host, tmp_path: Path, key: str) -> None:
    root = sim_host("p4")
    assert cli("--root", str(root), "mdev", "create", "--type", "nvidia-63").code == 0
    r = cli("--root", str(root), "inventory", "--no-libvirt", "--json")
    assert r.code == 0, r.err
    inv = r.out.replace("0000:01:00.0", key)
    (tmp_path / "inv.json").write_text(inv)
    (tmp_path / "harness.js").write_text(HARNESS)
    proc = subprocess.run([NODE, str(tmp_path / "harness.js"), str(REPO / "cockpit/vgpuadm.js"),
                           str(tmp_path / "inv.json")], capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert (out["loaded"], out["errors"]) == ("yes", [])
    [device] = json.loads(inv)["devices"]
    assert [row[0] for row in out["rows"]] == [key, "  " + device["id"], "0000:02:00.0"]
