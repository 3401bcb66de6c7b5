"""The fuzz lane's settings and counts.

Every target runs a fixed number of examples with derandomized generation (the same inputs on every CI run; set
VGPUADM_FUZZ_RANDOM=1 for fresh ones, VGPUADM_FUZZ_SCALE=N for N times as many). Each test counts its inputs, clean
errors, successes and violations in a Tally; the counts reach the terminal summary through the `fuzz` user property
(tests/conftest.py), also under pytest-xdist."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, settings

SCALE = float(os.environ.get("VGPUADM_FUZZ_SCALE", "1"))

settings.register_profile(
    "vgpuadm-fuzz",
    derandomize=not os.environ.get("VGPUADM_FUZZ_RANDOM"),
    database=None,
    deadline=None,
    print_blob=True,
    suppress_health_check=list(HealthCheck),
)


def examples(n: int) -> settings:
    """The lane's settings with n examples (times VGPUADM_FUZZ_SCALE)."""
    return settings(settings.get_profile("vgpuadm-fuzz"), max_examples=max(1, int(n * SCALE)))


@dataclass
class Tally:
    target: str
    inputs: int = 0
    errors: int = 0
    successes: int = 0
    violations: int = 0

    def ok(self) -> None:
        self.inputs += 1
        self.successes += 1

    def error(self) -> None:
        self.inputs += 1
        self.errors += 1

    def violation(self, what: str) -> AssertionError:
        self.inputs += 1
        self.violations += 1
        return AssertionError(what)


@pytest.fixture
def tally(request: pytest.FixtureRequest, record_property) -> Iterator[Tally]:
    t = Tally(request.node.name.removeprefix("test_"))
    yield t
    record_property("fuzz", [t.target, t.inputs, t.errors, t.successes, t.violations])
