"""On-demand requests through libvirt's embedded driver on a simulated P4 host: `on_demand: true` in a plan file and
`create --on-demand` record the request and the hostdev in the persistent XML and make nothing; `apply --check`
warns when the requests of the domains that autostart could not all run at boot; `inventory` tells them apart from devices held by running VMs
and devices reserved by stopped ones; `restore` leaves them to the hook; and the hook, fed the XML libvirt keeps,
makes and frees exactly those devices."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from embedded_host import REPO, allocations, attr, autostart, define, domain_xml, hostdev_keys, mdevs, vgpuadm

from vgpuadm.host.root import HostRoot
from vgpuadm.model import device_uuid
from vgpuadm.sim.treestate import tree_state

pytestmark = pytest.mark.libvirt

PLAN = """\
vms:
  desk1: {type: P4-8Q, on_demand: true}
  desk2: {type: P4-8Q, on_demand: true}
  desk3: {type: P4-8Q, on_demand: true}
"""


def hook(root: Path, name: str, op: str, sub: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "vgpuadm", "--root", str(root), "hook", "run", name, op, sub, "-"],
                          input=domain_xml(root, name), capture_output=True, text=True, timeout=300, check=False,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}, cwd="/")  # fmt: skip


def test_plan_file_on_demand_requests_make_nothing_warn_and_start_through_the_hook(sim_host, tmp_path: Path) -> None:
    root = sim_host("p4")
    uuids = define(root, "desk1", "desk2", "desk3", "db02", vnc=False)
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN)
    clean = tree_state(root)
    machine = HostRoot(str(root)).machine_id()
    u = {n: device_uuid(machine, uuids[n], 0) for n in ("desk1", "desk2", "desk3")}

    check = vgpuadm(root, "apply", "-f", str(plan), "--check")
    assert check.code == 0, check.err
    lines = ["+ desk1: nvidia-66 ×1 on demand", "+ desk2: nvidia-66 ×1 on demand", "+ desk3: nvidia-66 ×1 on demand",
             "would run 3 step(s); nothing was changed (--check)"]  # fmt: skip
    assert check.out.splitlines() == lines  # started by hand, three requests for two GPUs are what on-demand is for
    autostart(root, "desk2", "desk3")
    assert vgpuadm(root, "apply", "-f", str(plan), "--check").out.splitlines() == lines  # two fit at boot
    autostart(root, "desk1")
    check = vgpuadm(root, "apply", "-f", str(plan), "--check")
    assert check.code == 0, check.err
    warning = ("warning: domain desk3: its on-demand request (1 × nvidia-66) would not fit when every domain that "
               "autostarts starts at boot: No room for 1 × nvidia-66")  # fmt: skip
    assert check.out.splitlines()[:3] == ["+ desk1: nvidia-66 ×1 on demand", "+ desk2: nvidia-66 ×1 on demand",
                                          "+ desk3: nvidia-66 ×1 on demand"]  # fmt: skip
    assert check.out.splitlines()[3].startswith(warning)
    assert check.out.splitlines()[4] == "would run 3 step(s); nothing was changed (--check)"

    applied = vgpuadm(root, "apply", "-f", str(plan), "--json")
    assert applied.code == 0, applied.err
    doc = json.loads(applied.out)
    assert doc["changed"] and len(doc["warnings"]) == 1 and doc["warnings"][0].startswith(warning[9:])
    assert tree_state(root) == clean  # nothing is made while the domains are off
    for name in ("desk1", "desk2", "desk3"):
        assert hostdev_keys(root, name) == [u[name]]
        [a] = allocations(root, name)
        assert (a.mode, a.type_id, a.parent, a.uuid, a.on_demand, a.extra["policy"]) == (
            "mdev", "nvidia-66", None, u[name], True, "pack")  # fmt: skip
    assert vgpuadm(root, "apply", "-f", str(plan)).out.splitlines()[-1] == "nothing to do: the host matches the plan"

    # db02 holds a device the ordinary way (reserved while it is off); restore makes that one, never the requests
    assert vgpuadm(root, "create", "--type", "nvidia-63", "--vm", "db02").code == 0
    reserved = mdevs(root)
    assert vgpuadm(root, "sim", "reboot", str(root)).code == 0
    restored = vgpuadm(root, "restore")
    assert restored.code == 0, restored.err
    assert mdevs(root) == reserved

    inv = json.loads(vgpuadm(root, "inventory", "--format", "json").out)
    assert [(d["domain"], d["held"]) for d in inv["devices"]] == [("db02", "stopped")]
    assert inv["missing"] == []
    assert (inv["summary"]["held_running"], inv["summary"]["reserved_stopped"], inv["summary"]["on_demand_requests"]) \
        == (0, 1, 3)  # fmt: skip
    assert [(r["domain"], r["uuid"], r["exists"], r["running"]) for r in inv["on_demand"]["requests"]] == [
        ("desk1", u["desk1"], False, False),
        ("desk2", u["desk2"], False, False),
        ("desk3", u["desk3"], False, False),
    ]
    # db02's nvidia-63 locks one P4 to its type (one type per GPU before Ampere): one whole-GPU type is free
    assert inv["on_demand"]["needed"] == [{"type_id": "nvidia-66", "devices": 3, "host_max": 2, "free": 1}]
    table = vgpuadm(root, "inventory").out
    assert "db02 (stopped: reserved)" in table and "On-demand requests" in table

    # the hook, given the XML libvirt keeps: desk1 starts on the free P4, desk2 does not fit while db02 holds the other
    started = hook(root, "desk1", "prepare", "begin")
    assert started.returncode == 0, started.stderr
    assert u["desk1"] in mdevs(root)
    refused = hook(root, "desk2", "prepare", "begin")
    assert refused.returncode == 4 and len(refused.stderr.splitlines()) == 1
    assert refused.stderr.startswith("vgpuadm: domain desk2: No room for 1 × nvidia-66")
    assert hook(root, "desk1", "release", "end").returncode == 0
    assert mdevs(root) == reserved


def readme_block(heading: str) -> list[str]:
    text = (REPO / "README.md").read_text()
    section = text[text.index(heading) :]
    block = section[section.index("```sh\n") + 6 : section.index("```\n", section.index("```sh\n") + 6)]
    return [line.split("  #", 1)[0].strip() for line in block.splitlines() if line.strip()]


def test_the_readme_on_demand_example_runs_as_written(sim_host) -> None:
    """Every line of the README's on-demand example, on a simulated P4 host with its embedded libvirt (`--root`
    added), with the exact output checked (tests/libvirt/test_readme_examples.py runs the block as written too);
    `systemctl reload libvirtd` is the one line not run: no daemon reads a simulated root's hooks."""
    root = sim_host("p4")
    define(root, "web02", vnc=False)
    lines = readme_block("## On-demand vGPUs")
    assert lines == [
        "vgpuadm hook install",
        "systemctl reload libvirtd",
        "vgpuadm create --type P4-8Q --vm web02 --on-demand",
        "vgpuadm inventory",
        "vgpuadm hook status",
    ]
    outputs = [vgpuadm(root, *line.split()[1:]) for line in lines if line.startswith("vgpuadm ")]
    assert [r.code for r in outputs] == [0, 0, 0, 0], [r.err for r in outputs]
    install, create, inventory, status = (r.out for r in outputs)
    assert install.splitlines()[0] == f"wrote {root}/etc/libvirt/hooks/qemu.d/vgpuadm"
    assert create.splitlines()[0].endswith("(to web02, made when it starts)")
    assert "On-demand requests" in inventory and mdevs(root) == []
    assert status.startswith(f"{root}/etc/libvirt/hooks/qemu.d/vgpuadm: installed, runs ")


def test_passthrough_on_demand_binds_only_while_the_domain_runs(sim_host) -> None:
    root = sim_host("passthrough")
    define(root, "db02", vnc=False)
    clean = tree_state(root)
    r = vgpuadm(root, "passthrough", "--gpu", "65:00.0", "--vm", "db02", "--on-demand")
    assert r.code == 0, r.err
    assert r.out.splitlines()[:2] == [
        "attached pci 0000:65:00.0 (to db02, made when it starts)",
        "attached pci 0000:65:00.1 on 0000:65:00.0 (to db02, made when it starts)",
    ]
    assert tree_state(root) == clean
    assert hostdev_keys(root, "db02") == ["0000:65:00.0", "0000:65:00.1"]
    assert domain_xml(root, "db02").count("<hostdev mode='subsystem' type='pci' managed='no'>") == 2
    assert {(a.address, a.extra["managed"], a.on_demand) for a in allocations(root, "db02")} == {
        ("0000:65:00.0", "no", True), ("0000:65:00.1", "no", True)}  # fmt: skip
    started = hook(root, "db02", "prepare", "begin")
    assert started.returncode == 0, started.stderr
    assert [attr(root, f"/sys/bus/pci/devices/0000:65:00.{f}/driver_override") for f in (0, 1)] == ["vfio-pci\n"] * 2
    stopped = hook(root, "db02", "release", "end")
    assert stopped.returncode == 0, stopped.stderr
    assert tree_state(root) == clean


def test_on_demand_request_that_cannot_start_now_is_accepted_with_a_warning(sim_host) -> None:
    """#30.10: both P4s locked to nvidia-63 by held devices; an on-demand nvidia-64 fits the idle host, so it is
    recorded (rc 0), but `create` says it cannot start now and why, and inventory's capacity table shows 0."""
    root = sim_host("p4")
    define(root, "a", "b", "c", vnc=False)
    assert vgpuadm(root, "create", "--type", "nvidia-63", "--vm", "a", "--gpu", "0000:01:00.0").code == 0
    assert vgpuadm(root, "create", "--type", "nvidia-63", "--vm", "b", "--gpu", "0000:02:00.0").code == 0
    r = vgpuadm(root, "create", "--type", "nvidia-64", "--vm", "c", "--on-demand")
    assert r.code == 0, r.err
    assert r.err == (
        "warning: recorded 1 × nvidia-64 on demand for domain c, but it cannot start now (fits now: 0): No room for "
        "1 × nvidia-64: 0000:01:00.0: GPU runs nvidia-63 (GRID P4-1Q); one vGPU type per GPU; 0000:02:00.0: GPU "
        "runs nvidia-63 (GRID P4-1Q); one vGPU type per GPU\n"
    )
    [a] = allocations(root, "c")
    assert (a.type_id, a.on_demand) == ("nvidia-64", True)
    table = vgpuadm(root, "--plain", "inventory").out.splitlines()
    at = table.index("type\tdevices\tfits now\thost max")
    assert table[at + 1] == "nvidia-64\t1\t0\t8"
    fits = vgpuadm(root, "create", "--type", "nvidia-63", "--vm", "a", "--on-demand", "--json")
    assert fits.code == 0, fits.err
    assert (json.loads(fits.out)["warnings"], fits.err) == ([], "")  # one that fits now says nothing
