"""The read commands on simulated hosts: exact rows for a P4 host, clean errors for bad input."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest


def test_p4_gpus_json(sim_host, cli):
    root = sim_host("p4")
    r = cli("--root", str(root), "gpus", "--json")
    assert r.code == 0, r.err
    rows = json.loads(r.out)
    assert [
        (g["address"], g["device_id"], g["driver"], g["layout"], g["iommu_group"], g["numa_node"]) for g in rows
    ] == [
        ("0000:01:00.0", "0x1bb3", "nvidia", "mdev-pf", 1, 0),
        ("0000:02:00.0", "0x1bb3", "nvidia", "mdev-pf", 2, 1),
    ]


def test_p4_types_table_ids(sim_host, cli):
    root = sim_host("p4")
    r = cli("--root", str(root), "types", "--gpu", "01:00.0", "--json")
    rows = json.loads(r.out)
    assert [t["type_id"] for t in rows] == [
        "nvidia-63", "nvidia-64", "nvidia-65", "nvidia-66", "nvidia-67", "nvidia-68", "nvidia-69", "nvidia-70",
        "nvidia-71", "nvidia-157", "nvidia-214", "nvidia-243", "nvidia-288", "nvidia-289",
    ]  # fmt: skip
    first = rows[0]
    assert (first["name"], first["profile"], first["available_instances"], first["max_instances"]) == (
        "GRID P4-1Q", "P4-1Q", 8, 8
    )  # fmt: skip


def test_missing_root_is_one_line_error(cli, tmp_path):
    r = cli("--root", str(tmp_path / "nope"), "gpus")
    assert r.code == 3
    assert r.err.splitlines() == [
        f"error: host root {tmp_path / 'nope'} does not exist",
        "hint: pass --root DIR or set VGPUADM_ROOT to a host root",
    ]


def test_fast_path_matches_typer_path(sim_host, cli, monkeypatch):
    """The typer-free fast path (cli/fast.py) and the typer app print the same JSON for every spelling."""
    from vgpuadm.cli import fast

    root = str(sim_host("a100-mdev-vf"))
    spellings = [
        ["--root", root, "types", "--json", "--gpu", "0000:41:00.0", "--available"],
        [f"--root={root}", "types", "--gpu=0000:41:00.0", "--available", "--json"],
        ["--root", root, "gpus", "--json"],
        ["--root", root, "devices", "--json"],
    ]
    fast_out = [cli(*argv) for argv in spellings]
    monkeypatch.setattr(fast, "try_run", lambda argv, console: None)
    typer_out = [cli(*argv) for argv in spellings]
    assert [(r.code, r.out, r.err) for r in fast_out] == [(r.code, r.out, r.err) for r in typer_out]
    assert len(json.loads(fast_out[0].out)) == 16 * 6  # the time-sliced types: MIG-backed ones need MIG on


def test_fast_path_declines_what_it_does_not_know():
    from vgpuadm.cli import fast
    from vgpuadm.cli.console import Console

    for argv in (
        ["types"],
        ["types", "--json", "--available=1"],
        ["types", "--json", "--gpu"],
        ["types", "--json", "--gpu="],
        ["gpus", "--json", "--gpu", "x"],
        ["--verbose", "gpus", "--json"],
    ):
        assert fast.try_run(argv, Console()) is None, argv


@pytest.mark.process
@pytest.mark.parametrize("profile", ["p4", "a100-mdev-vf"])
def test_fast_path_imports_stay_light(sim_host, profile):
    """`vgpuadm --root R types --json` in a fresh interpreter loads none of the heavy or write-side modules, and
    not dataclasses (with inspect, ast, dis), re, typing or json either, which the model's hand-written records
    avoid: the cold-start budget (bench/bench_cold_start.py) depends on it."""
    import subprocess
    import sys

    root = sim_host(profile)
    code = (
        "import sys, io\n"
        "from vgpuadm.cli.app import run\n"
        "from vgpuadm.cli.console import Console\n"
        f"assert run(['--root', {str(root)!r}, 'types', '--json'], Console(io.StringIO())) == 0\n"
        "print(' '.join(sorted(sys.modules)))\n"
    )
    loaded = set(
        subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.split()
    )
    heavy = {"typer", "rich", "click", "jinja2", "lxml", "jsonschema", "yaml", "libvirt", "filelock", "tenacity",
             "typing", "difflib", "vgpuadm.steps", "vgpuadm.sim.kernel", "vgpuadm.executor", "vgpuadm.virt"}  # fmt: skip
    assert loaded & heavy == set()
    assert loaded & {"dataclasses", "inspect", "ast", "re", "typing", "json"} == set()
    # Nor enum, functools, collections, contextlib or importlib: ~4 ms of a ~25 ms run (bench/README.md).
    assert loaded & {"enum", "functools", "collections", "collections.abc", "contextlib", "importlib"} == set()
    assert "vgpuadm.host.discover" in loaded


@pytest.mark.process
def test_the_installed_command_imports_no_re(sim_host):
    """The `vgpuadm` command pip installs is scripts/vgpuadm (pyproject.toml's shared script), not pip's entry-point
    script, which imports `re` (and with it enum, functools, collections) for every run; `types --json` run
    through it loads none of them, and its output is the module's."""
    import subprocess
    import sys
    import tomllib

    top = Path(__file__).resolve().parents[2]
    project = tomllib.loads((top / "pyproject.toml").read_text())
    assert "scripts" not in project["project"]
    assert project["tool"]["hatch"]["build"]["targets"]["wheel"]["shared-scripts"] == {"scripts/vgpuadm": "vgpuadm"}
    argv = ["--root", str(sim_host("p4")), "types", "--json"]
    env = dict(os.environ, PYTHONPATH=str(top))
    r = subprocess.run([sys.executable, "-X", "importtime", str(top / "scripts/vgpuadm"), *argv],
                       capture_output=True, text=True, env=env, cwd="/", check=True)  # fmt: skip
    loaded = {line.rsplit("|", 1)[-1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")}
    assert "vgpuadm.cli.app" in loaded
    assert loaded & {"re", "enum", "functools", "collections", "contextlib", "importlib", "typing"} == set()
    module = subprocess.run([sys.executable, "-m", "vgpuadm", *argv], capture_output=True, text=True, env=env,
                            cwd="/", check=True)  # fmt: skip
    assert (r.stdout, r.returncode) == (module.stdout, 0) and r.stdout.startswith("[")


def test_fast_read_path_leaves_the_garbage_collector_as_it_found_it(sim_host, cli):
    """The fast path pauses the cyclic collector for one command; a long-lived caller (Ansible, tests) keeps it."""
    import gc

    root = str(sim_host("p4"))
    assert gc.isenabled()
    assert cli("--root", root, "types", "--json").code == 0
    assert gc.isenabled()
    gc.disable()
    try:
        assert cli("--root", root, "gpus", "--json").code == 0
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_fast_read_path_freezes_nothing_for_a_long_lived_caller(sim_host, cli):
    """The fast path moves what a command left alive to the oldest generation (gc.freeze + unfreeze) as it turns
    the collector back on: nothing stays frozen, so a long-lived caller (Ansible, tests) still gets it collected."""
    import gc

    root = str(sim_host("p4"))
    assert gc.get_freeze_count() == 0
    assert cli("--root", root, "types", "--json").code == 0
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0


def test_version_prints_the_installed_version(cli):
    from importlib.metadata import version

    result = cli("--version")
    assert (result.code, result.out, result.err) == (0, f"vgpuadm {version('vgpuadm')}\n", "")


@pytest.mark.process
@pytest.mark.parametrize(
    ("argv", "teardown"),
    [
        (["types", "--json"], False),
        (["gpus", "--json"], False),
        (["types"], True),  # a table: through typer, the usual exit
        (["types", "--json", "--gpu", "0000:99:00.0"], True),  # an error: the usual exit
    ],
)
def test_a_json_read_ends_its_process_without_the_interpreters_teardown(sim_host, argv, teardown):
    """After a whole JSON read on the fast path the command's process ends as soon as its output is out: no
    teardown (freeing every row, a full collection), so an atexit handler never runs; any other run exits as
    usual. Output and exit code are the in-process run's."""
    import subprocess
    import sys

    from vgpuadm.cli.app import run

    top = Path(__file__).resolve().parents[2]
    args = ["--root", str(sim_host("p4")), *argv]
    code = ("import atexit, sys; atexit.register(lambda: sys.stderr.write('teardown\\n')); "
            f"sys.argv[1:] = {args!r}; from vgpuadm.cli.app import main; main()")  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(top), COLUMNS="200")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd="/", check=False)
    assert r.stderr.endswith("teardown\n") is teardown, r.stderr
    if "--json" in argv:
        import io

        from vgpuadm.cli.console import Console

        out, err = io.StringIO(), io.StringIO()
        assert r.returncode == run(args, Console(out=out, err=err))
        assert r.stdout == out.getvalue() and r.stdout.startswith(("[", "{"))


def test_types_reads_none_of_the_pci_details_it_never_shows(sim_host, cli):
    """`types` (JSON and table) leaves out the PCI attributes only gpus, inventory, doctor and placement show
    (snapshot(details=False)): a bad numa_node is no warning of `types`, still one of `gpus`; the type rows are
    those of a full snapshot, whose functions differ in those attributes only."""
    from dataclasses import replace

    from vgpuadm import api
    from vgpuadm.report.listing import type_rows

    root = sim_host("p4")
    (root / "sys/bus/pci/devices/0000:01:00.0/numa_node").write_text("bogus\n")
    warning = "warning: PCI function 0000:01:00.0: /sys/bus/pci/devices/0000:01:00.0/numa_node holds 'bogus'"
    for argv in (["types", "--json"], ["types"]):
        r = cli("--root", str(root), *argv)
        assert r.code == 0 and warning not in r.err, r.err
    r = cli("--root", str(root), "gpus", "--json")
    assert r.code == 0 and warning in r.err
    full = api.read_host(api.HostRoot(str(root)).sysfs())
    bare = api.read_host(api.HostRoot(str(root)).sysfs(), details=False)
    assert json.loads(cli("--root", str(root), "types", "--json").out) == type_rows(full)
    assert full.functions["0000:01:00.0"].subsystem_vendor_id == "0x10de"
    assert bare.functions == {
        a: replace(fn, subsystem_vendor_id=None, subsystem_device_id=None, driver_override=None, numa_node=None,
                   boot_vga=None)
        for a, fn in full.functions.items()
    }  # fmt: skip


@pytest.mark.parametrize("profile", ["p4", "h200-vendor-vfio"])
def test_discovery_reads_nvidia_files_only_where_the_function_has_an_nvidia_directory(sim_host, profile):
    """A function whose directory (scanned already) has no `nvidia` entry has no nvidia/creatable_vgpu_types:
    discovery no longer tries to open one per GPU function; a layout C host's VFs still list their types."""
    from vgpuadm import api
    from vgpuadm.host.sysfs import Sysfs

    tried: list[str] = []

    class Noting(Sysfs):
        def read_opt(self, host_path: str) -> str | None:
            tried.append(host_path)
            return super().read_opt(host_path)

    root = str(sim_host(profile))
    snap = api.read_host(Noting(root))
    has = {a for a in snap.functions if os.path.isdir(f"{root}/sys/bus/pci/devices/{a}/nvidia")}
    asked = {p.split("/")[5] for p in tried if p.endswith("/nvidia/creatable_vgpu_types")}
    assert asked == {a for a in has if snap.functions[a].is_display}
    assert bool(snap.vendor_vfs) is (profile == "h200-vendor-vfio") and set(snap.vendor_vfs) <= asked
