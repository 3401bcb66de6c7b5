"""`vgpuadm inventory merge`: exact fleet totals from real host inventories (a busy P4 host and an idle A100
host), fragmentation, leaks, every output format, and one-line errors naming the file for bad input."""

from __future__ import annotations

import errno
import itertools
import json
import os
import pickle
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.unit.inventory_setup import P4_UUIDS as U
from tests.unit.inventory_setup import p4_busy
from vgpuadm import api
from vgpuadm.errors import UsageError
from vgpuadm.ops import fleet
from vgpuadm.schemas import validate


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    """Two host inventories as `vgpuadm inventory --format json -o` writes them."""
    from vgpuadm.sim.profiles import build

    base = tmp_path_factory.mktemp("fleet")
    build("p4", str(base / "p4"))
    p4_busy(base / "p4", base / "domains")
    build("a100-mdev-vf", str(base / "a100"))
    a = api.inventory(str(base / "p4"), domains_xml=str(base / "domains"), host="p4-a")
    (base / "no-domains").mkdir()
    b = api.inventory(str(base / "a100"), domains_xml=str(base / "no-domains"), host="a100-b")
    paths = []
    for doc in (a, b):
        path = base / f"{doc['host']}.json"
        path.write_text(json.dumps(doc))
        paths.append(str(path))
    return paths


def _merge(cli, *args):
    r = cli("inventory", "merge", *args)
    assert r.code == 0, r.err
    return r


def test_fleet_totals_fragmentation_and_leaks(reports, cli):
    doc = json.loads(_merge(cli, *reports, "--format", "json").out)
    validate("fleet-v1", doc)
    assert [h["host"] for h in doc["hosts"]] == ["p4-a", "a100-b"]
    assert doc["totals"] == {"hosts": 2, "gpus": 3, "devices": 3, "unowned": 1, "missing": 1,
                             "framebuffer_total_mib": 16384 + 40960, "framebuffer_used_mib": 4096,
                             "framebuffer_free_mib": 11264 + 40960}  # 1024 reserved for `gone`  # fmt: skip
    assert doc["fragmentation"] == {"gpus_locked": 2, "gpus_empty": 1, "framebuffer_free_mib": 52224,
                                    "framebuffer_locked_free_mib": 11264, "locked_share": 0.2157}  # fmt: skip
    q1 = next(t for t in doc["types"] if t["type_id"] == "nvidia-63")
    assert (q1["used"], q1["free"], q1["stranded"], q1["max"], q1["hosts_with_room"]) == (2, 5, 6, 16, 1)
    c4 = next(t for t in doc["types"] if t["type_id"] == "nvidia-468")
    assert (c4["used"], c4["free"], c4["max"], c4["hosts"]) == (
        0, 10, 10, [{"host": "a100-b", "used": 0, "free": 10, "stranded": 0}])  # fmt: skip
    assert doc["leaks"] == [{"host": "p4-a", "id": U[1], "kind": "mdev", "type_id": "nvidia-63",
                             "physical_gpu": "0000:01:00.0", "parent": "0000:01:00.0"}]  # fmt: skip
    assert [(m["host"], m["domain"], m["uuid"]) for m in doc["missing"]] == [("p4-a", "gone", U[5])]


def test_fleet_csv_one_row_per_host_and_type(reports, cli):
    lines = _merge(cli, *reports, "--format", "csv").out.splitlines()
    assert lines[0] == "host,type_id,name,framebuffer_mib,used,free,stranded"
    assert "p4-a,nvidia-63,GRID P4-1Q,1024,2,5,6" in lines
    assert "a100-b,nvidia-473,GRID A100-40C,40960,0,1,0" in lines
    assert len(lines) == 1 + 14 + 11


def test_fleet_table_lists_hosts_and_leaks(reports, cli):
    out = _merge(cli, *reports).out
    assert "Fleet: 2 hosts" in out and "Leaks: devices no domain owns" in out and U[1] in out


@pytest.mark.process
@pytest.mark.skipif(not shutil.which("promtool"), reason="promtool (Debian package prometheus) is not installed")
def test_fleet_prometheus_passes_promtool(reports, cli):
    text = _merge(cli, *reports, "--format", "prometheus").out
    check = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, check=False)
    assert (check.returncode, check.stdout + check.stderr) == (0, "")
    assert 'vgpuadm_unowned_devices{host="p4-a"} 1.0' in text.splitlines()  # prometheus_client writes floats
    assert "vgpuadm_fleet_locked_free_ratio 0.2157" in text.splitlines()


def test_other_schema_version_is_refused(reports, cli, tmp_path):
    doc = json.loads(Path(reports[0]).read_text())
    doc["schema"] = "vgpuadm-inventory/2"
    bad = tmp_path / "future.json"
    bad.write_text(json.dumps(doc))
    r = cli("inventory", "merge", reports[1], str(bad))
    assert (r.code, r.out) == (2, "")
    assert r.err.splitlines()[0] == (f"error: {bad} has schema 'vgpuadm-inventory/2', expected 'vgpuadm-inventory/1'")


def test_truncated_json_is_refused(reports, cli, tmp_path):
    bad = tmp_path / "cut.json"
    bad.write_text(Path(reports[0]).read_text()[:500])
    r = cli("inventory", "merge", reports[1], str(bad))
    assert r.code == 2
    assert r.err.splitlines()[0].startswith(f"error: {bad} is not valid JSON at line 1 column ")
    assert r.err.splitlines()[0].endswith(" (truncated?)")


def test_duplicate_host_is_refused(reports, cli, tmp_path):
    copy = tmp_path / "again.json"
    shutil.copy(reports[0], copy)
    r = cli("inventory", "merge", reports[0], reports[1], str(copy))
    assert r.code == 2
    assert r.err.splitlines()[0] == f"error: host 'p4-a' appears in both {reports[0]} and {copy}"


def test_not_an_inventory_and_missing_file(reports, cli, tmp_path):
    fleet = tmp_path / "fleet.json"
    fleet.write_text(_merge(cli, *reports, "--format", "json").out)
    r = cli("inventory", "merge", str(fleet))
    assert r.err.splitlines()[0] == f"error: {fleet} has schema 'vgpuadm-fleet/1', expected 'vgpuadm-inventory/1'"
    r = cli("inventory", "merge", str(tmp_path / "nope.json"))
    assert (r.code, r.err.splitlines()[0]) == (
        2,
        f"error: cannot read {tmp_path / 'nope.json'}: No such file or directory",
    )
    (tmp_path / "list.json").write_text("[]")
    r = cli("inventory", "merge", str(tmp_path / "list.json"))
    assert r.err.splitlines()[0] == f'error: {tmp_path / "list.json"} is not a vgpuadm inventory (no "schema" field)'


def test_a_fleet_of_one_host_says_host(reports, cli):
    """`Fleet: 1 host`, `vGPU fleet report: 1 host` — never "1 hosts"."""
    assert _merge(cli, reports[0]).out.splitlines()[0].rstrip() == "Fleet: 1 host"
    html = _merge(cli, reports[0], "--format", "html").out
    assert "vGPU fleet report: 1 host<" in html and "1 hosts" not in html


@pytest.mark.parametrize(
    ("key", "value", "where"),
    [("used", True, "types[1].used"), ("name", 3, "types[1].name"), ("max", "8", "types[1].max"),
     ("reserved", None, "types[1].reserved"), ("free", None, "types[1].free")],
)  # fmt: skip
def test_a_wrong_types_row_value_in_the_merge_is_the_checks_message(reports, tmp_path, key, value, where):
    """merge checks types[] rows as it folds them (load_report(rows=False)): the error is check_report's, and it
    comes before the duplicate-host error the same file would also give, as when load_report checked every row."""
    doc = json.loads(Path(reports[0]).read_text())
    doc["types"][1][key] = value
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))  # also host p4-a, as reports[0]
    with pytest.raises(UsageError) as e:
        api.merge_inventories([reports[0], str(bad)])
    assert e.value.message == f"{bad}: {where} has the wrong type"
    del doc["types"][1]["stranded"]
    bad.write_text(json.dumps(doc))
    with pytest.raises(UsageError) as e:
        api.merge_inventories([str(bad)])
    assert e.value.message.startswith(f"{bad}: a types[] row lacks one of ")


def _fleet_of(reports: list[str], directory: Path, hosts: list[str]) -> list[str]:
    """One report file per name in `hosts` ("a100-…" the A100 host's report, any other the P4 host's; "…-nomax"
    without its types' maxima, as a report that could not say them), in order."""
    docs = {"p4": json.loads(Path(reports[0]).read_text()), "a100": json.loads(Path(reports[1]).read_text())}
    paths = []
    for i, host in enumerate(hosts):
        doc = dict(docs["a100" if host.startswith("a100") else "p4"], host=host)
        if host.endswith("-nomax"):
            doc["types"] = [dict(row, max=None) for row in doc["types"]]
        path = directory / f"{i:02d}-{host}.json"
        path.write_text(json.dumps(doc))
        paths.append(str(path))
    return paths


def _outcome(fold: Callable[[], Any]) -> Any:
    """The fleet document's bytes (generated_at "T"), or the error as (class, message, hint)."""
    try:
        return orjson.dumps(fold().document("T"))
    except UsageError as exc:
        return (type(exc), exc.message, exc.hint)


def _serial_and_in_processes(paths: list[str], processes: int, chunks: int | None = None) -> tuple[Any, Any]:
    """What one fold of `paths` gives, and what folding them in `chunks` chunks taken by `processes` processes
    (forked children) gives."""
    return _outcome(lambda: fleet._fold(paths)), _outcome(lambda: fleet._fold_in_processes(paths, processes, chunks))


def _joined_from_anywhere(paths: list[str], size: int) -> set[Any]:
    """What joining chunks of `size` paths gives for every choice of the chunks a child folded (sent pickled)
    and those folded here: which process takes which chunk is up to the scheduler."""
    chunks = [paths[i : i + size] for i in range(0, len(paths), size)]
    outcomes = set()
    for elsewhere in itertools.product((False, True), repeat=len(chunks)):
        done = {k: pickle.loads(pickle.dumps(fleet._fold_chunk(c))) for k, c in enumerate(chunks) if elsewhere[k]}
        outcomes.add(_outcome(lambda done=done: fleet._join(chunks, done)))
    return outcomes


@pytest.mark.process
def test_the_merge_in_processes_writes_what_one_fold_writes(reports, tmp_path):
    """Shares folded in forked children and joined in path order: byte for byte the one fold's document (the
    first share has only A100 types, so later shares add types; leaks, missing and warnings in host order)."""
    hosts = [f"a100-{i}" for i in range(4)] + [f"p4-{i}" for i in range(5)] + ["a100-x-nomax", "p4-x"]
    paths = _fleet_of(reports, tmp_path, hosts)
    for processes, chunks in ((2, None), (3, 3), (3, None), (4, 5), (len(paths), len(paths))):
        serial, parallel = _serial_and_in_processes(paths, processes, chunks)
        assert parallel == serial
    assert _joined_from_anywhere(paths, 3) == {serial}
    doc = json.loads(serial)
    assert [h["host"] for h in doc["hosts"]] == hosts
    assert [leak["host"] for leak in doc["leaks"]] == [h for h in hosts if h.startswith("p4")]
    a100 = [t for t in doc["types"] if any(h["host"] == "a100-x-nomax" for h in t["hosts"])]
    assert a100 and all(t["max"] is None for t in a100)  # a host that cannot say a maximum: the fleet cannot
    assert api.merge_inventories(paths, processes=3) | {"generated_at": "T"} == doc


@pytest.mark.process
@pytest.mark.parametrize(
    ("hosts", "bad", "message"),
    [
        # a bad file in the last share; another in the second share comes first
        (["p4-0", "p4-1", "p4-2", "p4-3", "p4-4", "p4-5"], {5: "cut"}, "{5} is not valid JSON"),
        (["p4-0", "p4-1", "p4-2", "p4-3", "p4-4", "p4-5"], {3: "schema", 5: "cut"}, "{3} has schema"),
        # a host again in a later share, or twice in one share: the first repeat in path order
        (["p4-0", "p4-1", "p4-2", "p4-3", "p4-2", "p4-0"], {}, "host 'p4-2' appears in both {2} and {4}"),
        (["p4-0", "p4-1", "p4-2", "p4-2", "p4-4", "p4-0"], {}, "host 'p4-2' appears in both {2} and {3}"),
        (["p4-0", "p4-1", "p4-2", "p4-3", "p4-0", "p4-0"], {}, "host 'p4-0' appears in both {0} and {4}"),
        (["p4-0", "p4-1", "p4-2", "p4-3", "p4-4", "p4-1"], {}, "host 'p4-1' appears in both {1} and {5}"),
        # a wrong types[] value and a repeated host in one late file: the value first, as one fold says
        (["p4-0", "p4-1", "p4-2", "p4-3", "p4-4", "p4-0"], {5: "types"}, "{5}: types[1].used has the wrong type"),
        (["p4-0", "p4-1", "p4-2", "p4-3", "p4-4", "p4-0"], {4: "missing"}, "cannot read {4}: No such file"),
    ],
)
def test_an_error_in_a_late_share_is_the_one_folds_error(reports, tmp_path, hosts, bad, message):
    """Three chunks of two files (and one a file), wherever each is folded: the error raised is the first in path
    order, with one fold's exact message."""
    paths = _fleet_of(reports, tmp_path, hosts)
    for i, how in bad.items():
        doc = json.loads(Path(paths[i]).read_text())
        if how == "cut":
            Path(paths[i]).write_text(json.dumps(doc)[:300])
        elif how == "schema":
            Path(paths[i]).write_text(json.dumps(dict(doc, schema="vgpuadm-inventory/2")))
        elif how == "types":
            doc["types"][1]["used"] = True
            Path(paths[i]).write_text(json.dumps(doc))
        else:
            Path(paths[i]).unlink()
    for chunks in (3, 6):
        serial, parallel = _serial_and_in_processes(paths, 3, chunks)
        assert parallel == serial
    assert _joined_from_anywhere(paths, 2) == _joined_from_anywhere(paths, 1) == {serial}
    assert serial[0] is UsageError and serial[1].startswith(message.format(*paths)), serial
    with pytest.raises(UsageError) as e:
        api.merge_inventories(paths, processes=3)
    assert (type(e.value), e.value.message, e.value.hint) == serial


def test_a_share_no_child_can_be_started_for_is_folded_here(reports, tmp_path, monkeypatch):
    """The system refusing a fork (mocked: os.fork raises EAGAIN, as under a process limit, which cannot be set for
    one call) leaves the shares to this process: the same document and the same first error."""

    def refused() -> int:
        raise OSError(errno.EAGAIN, "Resource temporarily unavailable")

    monkeypatch.setattr(os, "fork", refused)
    paths = _fleet_of(reports, tmp_path, ["a100-0", "p4-0", "p4-1", "a100-1", "p4-2", "p4-0"])
    serial, parallel = _serial_and_in_processes(paths[:5], 3, 3)
    assert parallel == serial and isinstance(serial, bytes)
    serial, parallel = _serial_and_in_processes(paths, 3, 3)
    assert parallel == serial == (UsageError, f"host 'p4-0' appears in both {paths[1]} and {paths[5]}",
                                  "merge one report per host; regenerate the stale one or rename it with --host")  # fmt: skip
