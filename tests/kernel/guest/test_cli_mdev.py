"""`vgpuadm mdev create|remove` against the real sample drivers: shared pools, refusals and their messages."""

from __future__ import annotations

import json

from vgpuadm.host.sysfs import Sysfs

U1 = "3c0a4f1e-0000-4000-8000-000000000001"
U2 = "3c0a4f1e-0000-4000-8000-000000000002"


def _available(cli, parent: str) -> dict[str, int]:
    result = cli("types", "--json")
    assert result.code == 0, result.err
    return {r["type_id"]: r["available_instances"] for r in json.loads(result.out) if r["parent"] == parent}


def test_create_and_remove_share_the_mtty_pool(cli, sysfs: Sysfs) -> None:
    result = cli("mdev", "create", "--type", "mtty-2", "--uuid", U1, "--json")
    assert result.code == 0, result.err
    assert json.loads(result.out)["devices"] == [U1]
    assert sysfs.link_name(f"/sys/bus/mdev/devices/{U1}/mdev_type") == "mtty-2"
    assert sysfs.resolve(f"/sys/bus/mdev/devices/{U1}") == f"/sys/devices/virtual/mtty/mtty/{U1}"
    assert _available(cli, "mtty") == {"mtty-1": 22, "mtty-2": 11}

    result = cli("mdev", "create", "--type", "Single port serial", "--uuid", U2)
    assert result.code == 0, result.err
    assert _available(cli, "mtty") == {"mtty-1": 21, "mtty-2": 10}

    devices = json.loads(cli("devices", "--json").out)
    assert sorted((d["id"], d["type_id"]) for d in devices) == [(U1, "mtty-2"), (U2, "mtty-1")]

    for uuid in (U1, U2):
        result = cli("mdev", "remove", uuid)
        assert result.code == 0, result.err
        assert not sysfs.exists(f"/sys/bus/mdev/devices/{uuid}")
    assert _available(cli, "mtty") == {"mtty-1": 24, "mtty-2": 12}


def test_over_commit_is_refused_with_the_pool_named(cli, sysfs: Sysfs) -> None:
    result = cli("mdev", "create", "--type", "mdpy-hd", "--count", "4", "--json")
    assert result.code == 0, result.err
    assert len(json.loads(result.out)["devices"]) == 4
    assert _available(cli, "mdpy") == {"mdpy-hd": 0, "mdpy-vga": 0, "mdpy-xga": 0}

    result = cli("mdev", "create", "--type", "mdpy-vga")
    assert result.code == 4
    assert result.err.splitlines()[0] == (
        "error: No room for 1 × mdpy-vga: mdpy: no free instances of mdpy-vga (available_instances 0)"
    )
    assert result.err.splitlines()[1].startswith("hint: ")
    assert len(sysfs.listdir("/sys/bus/mdev/devices")) == 4  # nothing half-made


def test_mbochs_budget_in_mib(cli, sysfs: Sysfs) -> None:
    assert cli("mdev", "create", "--type", "mbochs-large").code == 0
    assert _available(cli, "mbochs") == {"mbochs-large": 0, "mbochs-medium": 2, "mbochs-small": 8}
    result = cli("mdev", "create", "--type", "mbochs-medium", "--count", "3")
    assert result.code == 4
    assert "mbochs-medium" in result.err.splitlines()[0]
    assert len(sysfs.listdir("/sys/bus/mdev/devices")) == 1  # the refused request created none of its three


def test_duplicate_and_missing_uuids(cli, sysfs: Sysfs) -> None:
    assert cli("mdev", "create", "--type", "mdpy-vga", "--uuid", U1).code == 0
    result = cli("mdev", "create", "--type", "mtty-1", "--uuid", U1)
    assert result.code == 5
    assert result.err.splitlines()[0] == f"error: mdev {U1} already exists (type mdpy-vga on mdpy)"
    assert cli("mdev", "remove", U1).code == 0
    result = cli("mdev", "remove", U1)
    assert result.code == 3
    assert result.err.splitlines()[0] == f"error: No mdev {U1} on this host"
