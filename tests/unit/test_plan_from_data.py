"""plan_from_data: a plan given as data (the Ansible module's) is checked by the plan file schema and converted
like a plan file, without lines."""

from __future__ import annotations

import dataclasses

import pytest

from vgpuadm.errors import UsageError
from vgpuadm.io.planfile import parse_plan, plan_from_data


def test_data_becomes_the_plan_a_file_with_the_same_content_does_without_lines() -> None:
    data = {"vms": {"web01": {"type": "nvidia-63", "count": 2, "params": {"frame_rate_limiter": 0, "vnc": True}}}}
    plan = plan_from_data(data, "task")
    from_file = parse_plan("vms:\n  web01:\n    type: nvidia-63\n    count: 2\n"
                           "    params: {frame_rate_limiter: 0, vnc: true}\n", "task")  # fmt: skip
    (spec,) = plan.vms.values()
    assert (spec.line, spec.key_lines) == (0, {})
    assert spec == dataclasses.replace(from_file.vms["web01"], line=0) and spec.params == "frame_rate_limiter=0, vnc=1"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"type": "nvidia-63", "count": 0}, "task: vms.web01.count: must be ≥ 1"),
        ({"type": "nvidia-63", "colour": 1}, "task: vms.web01.colour: unknown key colour"),
        ({"passthrough": "65:00"}, "task: vms.web01.passthrough: '65:00' is not a PCI address"),
        ({}, "task: vms.web01: needs a type or passthrough"),
    ],
)
def test_faults_name_the_key_path_but_no_line(body: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError) as exc:
        plan_from_data({"vms": {"web01": body}}, "task")
    assert exc.value.message == message
