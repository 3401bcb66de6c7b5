"""The test lanes (tests/conftest.py): a pure unit test that starts a process or opens libvirt fails at once."""

from __future__ import annotations

import subprocess

import pytest


def test_a_unit_test_is_refused_a_process(request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("unit") is not None
    with pytest.raises(AssertionError, match=r"started a process: mark its module `pytestmark = pytest.mark.process`"):
        subprocess.run(["true"], check=False)


def test_a_unit_test_is_refused_libvirt() -> None:
    import libvirt

    with pytest.raises(AssertionError, match=r"opened libvirt: mark its module `pytestmark = pytest.mark.libvirt`"):
        libvirt.open("test:///default")


@pytest.mark.process
def test_a_process_test_may_start_one() -> None:
    assert subprocess.run(["true"], check=False).returncode == 0
