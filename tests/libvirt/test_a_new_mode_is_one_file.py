"""A new mode is one file plus one line (issue #29): a test-only mode, installed the way another distribution
installs one, goes through the whole lifecycle with no product file naming it.

The file: tests/data/added_mode/vgpuadm_serial_port.py, mode "serial" — a made-up device kind, a serial card of the
kernel's mtty sample driver given to a guest as a device of its own (its own name in the domain's metadata, its own
sentences, never a display, no vendor driver to wait for after a reboot). What it makes and frees on the host is an
mdev of mtty's types, which the simulated kernel already models (vgpuadm/sim: the independent oracle, which knows
nothing of the mode); the mode claims those types (Mode.claims) over the mdev layout's own mode.
The line: `serial = vgpuadm_serial_port:MODE` in the `vgpuadm.modes` entry-point group (modes/__init__.py's
docstring), written here into the entry_points.txt of a dist-info next to a copy of the file, in a directory that
every vgpuadm process of the test has on its path (PYTHONPATH: the test's stand-in for site-packages).

On a simulated mtty host with domains in libvirt's embedded QEMU driver, every command a real process (as in
embedded_host.py): `create`, `show`, `devices`, `inventory --json`, `mdevctl export`, `apply -f` twice (the second:
nothing to do), `sim reboot` + `restore`, `destroy`, and `create --on-demand` made and freed by `vgpuadm hook run`
fed the XML libvirt keeps, as libvirt's qemu hook calls it. Without the line, the same metadata is a clean error."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from embedded_host import REPO, Result, define, domain_xml, hostdev_keys, mdevs, vgpuadm

from vgpuadm.host.root import HostRoot
from vgpuadm.model import device_uuid
from vgpuadm.schemas import validate
from vgpuadm.sim.treestate import tree_state

pytestmark = pytest.mark.libvirt

MODE_FILE = REPO / "tests/data/added_mode/vgpuadm_serial_port.py"
THE_LINE = "serial = vgpuadm_serial_port:MODE"

PLAN = """\
vms:
  ser1: {type: mtty-1}
  ser2: {type: mtty-2, count: 2}
"""


def install(site: Path, line: str = THE_LINE) -> dict[str, str]:
    """Install the mode as a distribution is installed: its one file, and a dist-info whose entry_points.txt holds
    the one line. Returns the environment of a process that has `site` on its path."""
    site.mkdir()
    shutil.copy(MODE_FILE, site)
    info = site / "vgpuadm_serial_port-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vgpuadm-serial-port\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[vgpuadm.modes]\n{line}\n")
    return {"PYTHONPATH": f"{REPO}{os.pathsep}{site}"}


def hook(root: Path, env: dict[str, str], name: str, op: str, sub: str) -> Result:
    """`vgpuadm hook run` as libvirt's qemu hook runs it: the domain's XML on stdin, a bare environment."""
    proc = subprocess.run([sys.executable, "-m", "vgpuadm", "--root", str(root), "hook", "run", name, op, sub, "-"],
                          input=domain_xml(root, name), capture_output=True, text=True, timeout=300, check=False,
                          env={"PATH": "/usr/bin:/bin", **env}, cwd="/")  # fmt: skip
    return Result(proc.returncode, proc.stdout, proc.stderr)


def ok(result: Result) -> list[str]:
    assert (result.code, result.err) == (0, ""), result
    return result.out.splitlines()


def test_a_test_only_mode_goes_through_the_whole_lifecycle(sim_host, tmp_path: Path) -> None:
    root = sim_host("mtty")
    duuid = define(root, "ser1", "ser2", "ser3", vnc=False)
    machine = HostRoot(str(root)).machine_id()
    u1 = device_uuid(machine, duuid["ser1"], 0)
    u2 = [device_uuid(machine, duuid["ser2"], slot) for slot in (0, 1)]
    u3 = device_uuid(machine, duuid["ser3"], 0)
    env = install(tmp_path / "site")

    def run(*args: str) -> list[str]:
        return ok(vgpuadm(root, *args, env=env))

    def recorded(name: str) -> list[tuple[str, str, str | None, bool]]:
        """(mode, id, parent, on demand) of each device the domain's metadata records, as `show` reads them (this
        process does not load the mode: registering it here would outlive the test)."""
        devices = json.loads(vgpuadm(root, "show", "--vm", name, "--json", env=env).out)["devices"]
        return [(d["mode"], d["id"], d["parent"], d["on_demand"]) for d in devices]

    # create: the type is mtty's, the device is the added mode's
    assert run("create", "--type", "mtty-1", "--vm", "ser1") == [f"attached serial mtty-1 {u1} on mtty (to ser1)"]
    assert hostdev_keys(root, "ser1") == [u1]
    assert mdevs(root) == [u1]

    # show, devices, inventory: the owner and the mode, read back from the metadata
    show = json.loads(vgpuadm(root, "show", "--vm", "ser1", "--json", env=env).out)
    validate("show", show)  # the published documents take an added mode's name
    [shown] = show["devices"]
    assert shown == {"slot": 0, "mode": "serial", "id": u1, "type_id": "mtty-1", "name": "Single port serial",
                     "parent": "mtty", "physical_gpu": "mtty", "model": None, "params": None,
                     "options": {"display": "off"}, "on_demand": False, "present": True}  # fmt: skip
    [row] = [line for line in run("devices") if u1 in line]
    assert row.split("│")[1:5] == [f" {u1} ", " mtty   ", " mtty-1 ", " ser1  "]
    inventory = json.loads(vgpuadm(root, "inventory", "--json", env=env).out)
    validate("inventory-v1", inventory)
    [device] = inventory["devices"]
    assert (device["id"], device["type_id"], device["domain"], device["owned"], device["held"]) == (
        u1, "mtty-1", "ser1", True, "stopped")  # fmt: skip
    assert inventory["summary"]["owned"] == 1 and inventory["summary"]["missing"] == 0
    # mdevctl export: the added mode's device is an mdev, defined for mdevctl like the mdev mode's
    assert run("mdevctl", "export", "--dry-run") == [
        f"would write {root}/etc/mdevctl.d/mtty/{u1} (mtty-1, start=auto)",
        "nothing was changed (--dry-run)",
    ]

    # apply -f: the mode's own words in the plan; the second run has nothing to do
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN)
    assert run("apply", "-f", str(plan)) == [
        f"[1/3] create mdev {u2[0]} of type mtty-2 on mtty",
        f"[2/3] create mdev {u2[1]} of type mtty-2 on mtty",
        f"[3/3] attach serial port {u2[0]} (mtty-2), serial port {u2[1]} (mtty-2) to domain ser2, and record 2 "
        "vgpuadm device(s) in its metadata",
        "applied 3 step(s): apply plan.yaml: +2 −0 ~0",
    ]
    assert recorded("ser2") == [("serial", u, "mtty", False) for u in u2]
    assert run("apply", "-f", str(plan)) == ["nothing to do: the host matches the plan"]
    assert mdevs(root) == sorted([u1, *u2])

    # sim reboot drops every mdev; restore makes them again from the metadata, in the mode's phase
    assert run("sim", "reboot", str(root)) == [f"rebooted simulated host {root}: runtime state dropped, "
                                               "native drivers bound"]  # fmt: skip
    assert mdevs(root) == []
    inventory = json.loads(vgpuadm(root, "inventory", "--json", env=env).out)
    validate("inventory-v1", inventory)
    assert sorted((m["domain"], m["mode"], m["uuid"]) for m in inventory["missing"]) == [
        ("ser1", "serial", u1), *sorted(("ser2", "serial", u) for u in u2)]  # fmt: skip
    restored = run("restore")
    made = [(u1, "mtty-1"), (u2[0], "mtty-2"), (u2[1], "mtty-2")]
    assert sorted(restored[:3]) == sorted(f"vgpu: create mdev {u} of type {t} on mtty" for u, t in made)
    assert restored[3:] == ["restored: 3 step(s) for 3 recorded device(s)"]
    assert mdevs(root) == sorted([u1, *u2])

    # destroy: detached, removed, the record gone
    planned = json.loads(vgpuadm(root, "destroy", "--vm", "ser2", "--all", "--dry-run", "--json", env=env).out)
    validate("guest", planned)
    assert planned["steps"][0] == (f"step 1/3 detach serial port {u2[0]} (mtty-2), serial port {u2[1]} (mtty-2) "
                                   "from domain ser2, and remove its vgpuadm metadata")  # fmt: skip
    assert [(d["mode"], d["uuid"]) for d in planned["removed"]] == [("serial", u) for u in u2]
    assert run("destroy", "--vm", "ser2", "--all") == [f"removed serial mtty-2 {u} on mtty (from ser2)" for u in u2]
    assert (recorded("ser2"), hostdev_keys(root, "ser2"), mdevs(root)) == ([], [], [u1])

    # on demand: recorded, made by the hook when the domain starts, freed when it stops
    assert run("create", "--type", "mtty-2", "--vm", "ser3", "--on-demand") == [
        f"attached serial mtty-2 {u3} (to ser3, made when it starts)"
    ]
    assert recorded("ser3") == [("serial", u3, None, True)]
    inventory = json.loads(vgpuadm(root, "inventory", "--json", env=env).out)
    validate("inventory-v1", inventory)
    assert [(r["domain"], r["mode"], r["uuid"], r["exists"]) for r in inventory["on_demand"]["requests"]] == [
        ("ser3", "serial", u3, False)]  # fmt: skip
    assert mdevs(root) == [u1]
    started = hook(root, env, "ser3", "prepare", "begin")
    assert (started.code, started.err) == (
        0, f"vgpuadm: domain ser3: step 1/1 create mdev {u3} of type mtty-2 on mtty\n")  # fmt: skip
    assert mdevs(root) == sorted([u1, u3])
    stopped = hook(root, env, "ser3", "release", "end")
    assert (stopped.code, stopped.err) == (0, f"vgpuadm: domain ser3: step 1/1 remove mdev {u3} from mtty\n")
    assert mdevs(root) == [u1]

    # without the line, what the mode recorded is metadata vgpuadm cannot read: one clean error
    bare = vgpuadm(root, "show", "--vm", "ser1")
    assert (bare.code, bare.out) == (5, "")
    assert bare.err.splitlines() == [
        "error: domain ser1: vgpuadm metadata device #0 is malformed (slot='0', mode='serial')",
        "hint: inspect it with `virsh metadata DOMAIN https://vgpuadm.dev/xmlns/vgpuadm/1`",
    ]


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("serial = no_such_module:MODE", "No module named 'no_such_module'"),
        ("ports = vgpuadm_serial_port:MODE", "it names a mode called 'serial'"),
    ],
)
def test_a_mode_that_cannot_be_added_is_one_clean_error(sim_host, tmp_path: Path, line: str, why: str) -> None:
    """A broken line (its module missing, or naming a mode of another name than its own) stops a command that looks
    a mode up by type with one error naming the entry point, before anything is changed (the entry points are read
    on first need: restore and the hook, which look modes up by name, never pay for them)."""
    root = sim_host("mtty")
    before = tree_state(str(root))
    result = vgpuadm(root, "mdev", "create", "--type", "mtty-1", env=install(tmp_path / "site", line))
    assert tree_state(str(root)) == before
    name, value = (w.strip() for w in line.split("="))
    assert (result.code, result.out) == (2, "")
    assert result.err.splitlines() == [
        f"error: The mode {name} = {value} (vgpuadm.modes entry point) cannot be added: {why}",
        "hint: fix or uninstall the distribution that declares it (pip show -f NAME lists its files)",
    ]


def test_no_product_file_names_the_added_mode() -> None:
    """The mode's name, its module and its class appear nowhere in the product outside the simulator (which has its
    own serial words: mtty's type names). mtty's types do: the simulator models them, and catalog/capacity.py counts
    their shared ports for any mode that makes them."""
    hits = []
    for path in sorted((REPO / "vgpuadm").rglob("*.py")):
        if "sim" in path.relative_to(REPO / "vgpuadm").parts:
            continue
        text = path.read_text()
        hits += [f"{path.name}: {word}" for word in ('"serial"', "'serial'", "vgpuadm_serial_port", "SerialPort")
                 if word in text]  # fmt: skip
    assert hits == []
