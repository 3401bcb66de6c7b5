"""Values read back from domain metadata are checked against their grammar before they reach a path: a type,
parent, UUID or address that climbs out of the root (someone allowed to edit a domain's metadata) is a one-line
error naming the domain and the key, and nothing is written. Plain (non-simulated) roots: writes there are real
file writes, as on a host."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.domains import WEB01, device, domain, save, vgpuadm
from vgpuadm.host.sysfs import SIM_MARKER

UUID = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001"


@pytest.fixture
def plain_root(sim_host: Callable[[str], Path]) -> Path:
    root = sim_host("p4")
    os.remove(root / SIM_MARKER)
    return root


@pytest.mark.parametrize(
    ("key", "record", "shown"),
    [
        ("type", device(slot=0, mode="mdev", type="../../../../../canary/t", parent="0000:01:00.0", uuid=UUID),
         "'../../../../../canary/t'"),
        ("parent", device(slot=0, mode="mdev", type="nvidia-63", parent="../../../../canary", uuid=UUID),
         "'../../../../canary'"),
        ("uuid", device(slot=0, mode="mdev", type="nvidia-63", parent="0000:01:00.0", uuid="../x"), "'../x'"),
        ("address", device(slot=0, mode="vf", type="nvidia-1420", address="../../canary"), "'../../canary'"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("verb", [("restore",), ("mdevctl", "export")])
def test_a_climbing_metadata_value_is_refused_before_any_write(
    plain_root: Path, tmp_path: Path, cli, key: str, record: str, shown: str, verb: tuple[str, ...]
) -> None:  # type: ignore[no-untyped-def]
    canary = plain_root.parent / "canary"
    (canary / "t").mkdir(parents=True)
    saved = tmp_path / "domains"
    saved.mkdir()
    save(saved, domain(uuid=WEB01, metadata=vgpuadm(record)))
    before = sorted(str(p.relative_to(canary)) for p in canary.rglob("*"))
    res = cli("--root", str(plain_root), *verb, "--domain-xml-dir", str(saved))
    assert res.code != 0
    assert res.err.splitlines()[0] == (
        f"error: {saved}/web01.xml: domain web01: vgpuadm metadata device #0 has a malformed {key} {shown}"
    )
    assert res.err.splitlines()[1].startswith("hint: ")
    assert sorted(str(p.relative_to(canary)) for p in canary.rglob("*")) == before
    assert not (plain_root / "etc/mdevctl.d").exists()
