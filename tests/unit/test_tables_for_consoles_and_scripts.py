"""Tables for 80-column consoles and for scripts (#32 item 9): identifiers whole, a column left out for width named
under the table, `types` one row per GPU and type (`--per-vf` per VF; --json unchanged), `--plain`/`--no-headers`
for awk and grep, an empty table that says why, NUMA -1 as "-"."""

from __future__ import annotations

import json
import os
import re

import pytest

from tests.unit.inventory_setup import P4_UUIDS as U
from tests.unit.inventory_setup import create_mdev

BOX = re.compile("[\u2500-\u257f]")  # box drawing


def test_types_is_one_row_per_gpu_and_type_by_default_and_per_vf_on_request(cli, sim_host):
    root = sim_host("h200-vendor-vfio")
    per_vf = json.loads(cli("--root", str(root), "types", "--json").out)
    gpus = {r["parent"].rsplit(":", 1)[0] for r in per_vf}
    summary = cli("--root", str(root), "--plain", "types")
    lines = summary.out.splitlines()
    assert lines[0] == "GPU\tmodel\tlayout\ttype\tname\tfits now\tmax per GPU\tframebuffer MiB\ton VFs"
    kinds = {r["type_id"] for r in per_vf}
    assert len(lines) - 1 == len(kinds) * len(gpus) < len(per_vf)
    [h4c] = [line.split("\t") for line in lines[1:] if "\tnvidia-1420\t" in line][:1]
    vfs = sum(1 for r in per_vf if r["type_id"] == "nvidia-1420")
    assert h4c[5:] == [str(min(vfs, 32)), str(min(vfs, 32)), "4096", str(vfs)]  # the driver max, 32, bounded by VFs
    full = cli("--root", str(root), "--plain", "types", "--per-vf").out.splitlines()
    assert full[0] == "parent\tmodel\tlayout\ttype\tname\tavailable\tdriver max\tframebuffer MiB"
    assert len(full) - 1 == len(per_vf)
    assert json.loads(cli("--root", str(root), "types", "--json").out) == per_vf  # --json stays per parent


def test_plain_and_no_headers_are_tab_separated_without_box_drawing(cli, sim_host):
    root = sim_host("p4")
    before = cli("--root", str(root), "--plain", "gpus")
    after = cli("--root", str(root), "gpus", "--plain")
    assert before == after
    assert before.out.splitlines() == [
        "address\tvendor:device\tmodel\tdriver\tlayout\tIOMMU group\tNUMA\tVFs",
        "0000:01:00.0\t10de:1bb3\tTesla P4\tnvidia\tmdev-pf\t1\t0\t-",
        "0000:02:00.0\t10de:1bb3\tTesla P4\tnvidia\tmdev-pf\t2\t1\t-",
    ]
    bare = cli("--root", str(root), "gpus", "--plain", "--no-headers").out
    assert bare == "".join(line + "\n" for line in before.out.splitlines()[1:])
    boxed = cli("--root", str(root), "gpus", "--no-headers").out
    assert BOX.search(boxed) and "vendor:device" not in boxed and "0000:01:00.0" in boxed


@pytest.mark.libvirt
def test_narrow_console_keeps_identifiers_whole_and_names_what_it_left_out(cli, sim_host, monkeypatch):
    root = sim_host("p4")
    create_mdev(root, "0000:01:00.0", "nvidia-63", U[0])
    monkeypatch.setenv("COLUMNS", "80")
    r = cli("--root", str(root), "--connect", "test:///default", "devices")
    assert r.code == 0, r.err
    assert max(len(line) for line in r.out.splitlines()) <= 80, r.out
    assert U[0] in r.out and "nvidia-63" in r.out and "0000:01:00.0" in r.out
    assert r.out.splitlines()[-1] == "(left out for width: name, kind, IOMMU group, vgpu_params; --plain shows all)"
    monkeypatch.setenv("COLUMNS", "60")
    types = cli("--root", str(root), "types").out
    assert "nvidia-289" in types and "0000:01:00.0" in types  # a type id and an address, never folded
    assert types.splitlines()[-1] == "(left out for width: model, on VFs; --plain shows all)"
    monkeypatch.setenv("COLUMNS", "200")
    assert "left out" not in cli("--root", str(root), "types").out


@pytest.mark.process
def test_an_empty_table_says_why(cli, tmp_path):
    root = tmp_path / "empty"
    (root / "sys/bus/pci/devices").mkdir(parents=True)
    assert cli("--root", str(root), "gpus").out == "no GPU found: see `vgpuadm doctor`\n"
    assert cli("--root", str(root), "types").out == (
        "no GPU offers vGPU types: see `vgpuadm doctor` (and `vgpuadm gpus` for the GPUs found)\n"
    )
    assert cli("--root", str(root), "--connect", "test:///default", "devices").out == (
        "no vGPU devices: give a VM one with `vgpuadm create --type T --vm NAME`\n"
    )
    assert cli("--root", str(root), "gpus", "--plain").out == "address\tvendor:device\tmodel\tdriver\tlayout\t" \
        "IOMMU group\tNUMA\tVFs\n"  # fmt: skip
    assert cli("--root", str(root), "gpus", "--json").out == "[]\n"


def test_numa_minus_one_is_a_dash(cli, sim_host):
    root = sim_host("p4")
    node = root / "sys/bus/pci/devices/0000:01:00.0/numa_node"
    os.chmod(node, 0o644)
    node.write_text("-1\n")
    row = cli("--root", str(root), "--plain", "--no-headers", "gpus").out.splitlines()[0].split("\t")
    assert row[:1] + row[6:7] == ["0000:01:00.0", "-"]
    assert json.loads(cli("--root", str(root), "gpus", "--json").out)[0]["numa_node"] == -1
