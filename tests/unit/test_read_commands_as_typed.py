"""The read commands as an operator types them (in-process): owners when libvirt is unreachable, filters, widths,
pipes and --json everywhere."""

from __future__ import annotations

import json

import pytest

from tests.unit.inventory_setup import P4_UUIDS as U
from tests.unit.inventory_setup import create_mdev
from vgpuadm.io.planfile import load_plan

NO_LIBVIRT = "qemu+unix:///system?socket=/nonexistent/vgpuadm-w7.sock"


@pytest.mark.libvirt
def test_devices_owner_is_unknown_when_libvirt_cannot_be_reached(cli, sim_host):
    root = sim_host("p4")
    create_mdev(root, "0000:01:00.0", "nvidia-63", U[0])
    r = cli("--root", str(root), "--connect", NO_LIBVIRT, "devices")
    assert r.code == 0, r.err
    [line] = [x for x in r.out.splitlines() if U[0] in x]
    assert "unknown" in line and "owner" in r.out
    assert r.err.startswith("warning: owners unknown: cannot connect to qemu+unix")
    doc = json.loads(cli("--root", str(root), "--connect", NO_LIBVIRT, "devices", "--json", "--owners").out)
    assert [(d["id"], d["owner"], d["owned"]) for d in doc] == [(U[0], None, None)]
    refused = cli("--root", str(root), "--connect", NO_LIBVIRT, "devices", "--vm", "web01")
    assert refused.code == 8 and refused.err.startswith("error: cannot tell which devices web01 owns: ")


def test_types_filters_by_type_and_parent(cli, sim_host):
    root = sim_host("p4")
    rows = json.loads(cli("--root", str(root), "types", "--type", "GRID P4-1Q", "--json").out)
    assert {(r["type_id"], r["parent"]) for r in rows} == {("nvidia-63", "0000:01:00.0"), ("nvidia-63", "0000:02:00.0")}
    one = json.loads(cli("--root", str(root), "types", "--parent", "01:00.0", "--type", "p4-1q", "--json").out)
    assert one == [r for r in rows if r["parent"] == "0000:01:00.0"]


@pytest.mark.libvirt
def test_devices_fit_80_columns_with_ids_whole(cli, sim_host, monkeypatch):
    root = sim_host("p4")
    create_mdev(root, "0000:01:00.0", "nvidia-63", U[0])
    create_mdev(root, "0000:02:00.0", "nvidia-63", U[1])
    monkeypatch.setenv("COLUMNS", "80")
    r = cli("--root", str(root), "--connect", "test:///default", "devices")  # libvirt's test driver: no owners
    assert r.code == 0, r.err
    assert max(len(line) for line in r.out.splitlines()) <= 80, r.out
    for uuid, parent in ((U[0], "0000:01:00.0"), (U[1], "0000:02:00.0")):
        [line] = [x for x in r.out.splitlines() if uuid in x]
        assert parent in line and "unowned" in line and "*" not in line and "nvidia-63" in line


def _piped_then_closed(root, *args: str) -> tuple[int, bytes]:
    """`vgpuadm ARGS | head -0`: the reader is gone before the first write."""
    import os
    import subprocess
    import sys

    from tests.conftest import REPO

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "vgpuadm", "--root", str(root), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read()
    return proc.wait(timeout=60), err


@pytest.mark.process
def test_a_closed_pipe_is_exit_0_without_a_word(sim_host):
    root = sim_host("p4")
    create_mdev(root, "0000:01:00.0", "nvidia-63", U[0])
    for args in (("inventory", "--no-libvirt"), ("types",), ("devices", "--json")):
        assert _piped_then_closed(root, *args) == (0, b""), args


def test_json_on_every_read_command(cli, sim_host):
    root = sim_host("p4")
    create_mdev(root, "0000:01:00.0", "nvidia-63", U[0])
    r = cli("--root", str(root), "inventory", "--json", "--no-libvirt", "--host", "p4-w7")
    assert r.code == 0, r.err
    same = json.loads(cli("--root", str(root), "inventory", "--format", "json", "--no-libvirt", "--host", "p4-w7").out)
    doc = json.loads(r.out)
    assert doc["schema"] == "vgpuadm-inventory/1"
    assert {**doc, "generated_at": None} == {**same, "generated_at": None}
    refused = cli("--root", str(root), "inventory", "--json", "--format", "csv", "--no-libvirt")
    assert (refused.code, refused.err) == (2, "error: --json and --format csv disagree\nhint: give one of them\n")
    profiles = cli("sim", "list", "--json")
    assert profiles.code == 0, profiles.err
    assert {"profile": "p4"}.items() <= json.loads(profiles.out)[0].items()


@pytest.mark.process
def test_short_pci_addresses_are_accepted_everywhere(cli, sim_host, tmp_path):
    p4 = str(sim_host("p4"))
    made = cli("--root", p4, "mdev", "create", "--gpu", "01:00.0", "--type", "nvidia-63", "--json")
    assert made.code == 0, made.err
    assert cli("--root", p4, "mdev", "create", "--gpu", "0000:01:00.0", "--type", "nvidia-63", "--dry-run").code == 0
    h200 = str(sim_host("h200-vendor-vfio"))
    r = cli("--root", h200, "vf", "set-type", "--vf", "18:00.4", "--type", "nvidia-1428")
    assert r.code == 0, r.err
    r = cli("--root", h200, "vf", "clear", "18:00.4")
    assert r.code == 0, r.err
    pt = str(sim_host("passthrough"))
    r = cli("--root", pt, "vfio", "bind", "65:00.0", "--dry-run")
    assert r.code == 0 and "0000:65:00.1" in r.out, r.err
    a100 = str(sim_host("a100-mdev-vf"))
    assert cli("--root", a100, "sriov", "disable", "41:00.0", "--dry-run").code == 0
    bad = cli("--root", p4, "mdev", "create", "--gpu", "01:00", "--type", "nvidia-63")
    assert (bad.code, bad.err.splitlines()[0]) == (2, "error: '01:00' is not a PCI address")
    plan = tmp_path / "plan.yaml"
    plan.write_text("version: 1\nvms:\n  web01:\n    type: nvidia-63\n    gpu: 01:00.0\n")
    assert load_plan(str(plan)).vms["web01"].gpu == "0000:01:00.0"
