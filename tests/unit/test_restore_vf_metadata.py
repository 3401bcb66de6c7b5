"""Issue #20, re-run: domain metadata recording a `vf` device whose type is not `nvidia-<number>` ended `restore` in
an internal error (exit 70) before any other domain was restored; it is now that domain's problem, named in one
line, and restore reports it with its own exit code."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.domains import WEB01, device, domain, save, vgpuadm


@pytest.mark.process
def test_a_vf_type_that_is_not_a_number_is_a_named_restore_problem(
    sim_host: Callable[[str], Path], tmp_path: Path, cli: Any
) -> None:
    saved = tmp_path / "domains"
    saved.mkdir()
    save(saved, domain(uuid=WEB01, metadata=vgpuadm(device(slot=0, mode="vf", type="nvidia-x"))))
    res = cli("--root", str(sim_host("h200-vendor-vfio")), "restore", "--domain-xml-dir", str(saved))
    assert res.code == 3
    assert res.out == "vgpu: cannot restore: web01: vf device #0: type 'nvidia-x' is not nvidia-<number>\n"
    assert res.err.splitlines()[0] == (
        "error: 1 device(s) could not be restored: vgpu: web01: vf device #0: type 'nvidia-x' is not nvidia-<number>"
    )


def test_a_record_restore_rejects_is_rejected_before_it_waits(
    sim_host: Callable[[str], Path], tmp_path: Path, cli: Any
) -> None:
    """Its VF not there yet (a host without it, or at boot before SR-IOV): restore used to wait its whole --timeout
    for the VF to register and then reject the record for its type; the record is checked first, no wait."""
    saved = tmp_path / "domains"
    saved.mkdir()
    record = device(slot=0, mode="vf", type="nvidia-x", parent="0000:18:00.4", address="0000:18:00.4")
    save(saved, domain(uuid=WEB01, metadata=vgpuadm(record)))
    started = time.monotonic()
    res = cli("--root", str(sim_host("p4")), "restore", "--domain-xml-dir", str(saved), "--timeout", "20")
    assert time.monotonic() - started < 10
    assert res.code == 3
    assert res.out == "vgpu: cannot restore: web01: vf device #0: type 'nvidia-x' is not nvidia-<number>\n"
