"""NVIDIA vgpu_params (reference §2.5, issue 12 item 10): written comma-separated `k=v, k=v` with echo's newline,
cleared with a single space; the legacy space-separated form written by earlier versions reads back as the same
parameters; the simulated driver refuses a write while the vGPU is in use (EPERM) and an over-long one (E2BIG)."""

from __future__ import annotations

import errno

import pytest

from vgpuadm.errors import UsageError
from vgpuadm.executor import ExecContext, execute
from vgpuadm.host.discover import snapshot
from vgpuadm.host.sysfs import Sysfs
from vgpuadm.model import check_params, normalise_params, params_text
from vgpuadm.modes.mdev import MdevMode
from vgpuadm.plan.desired import format_params, params_equal
from vgpuadm.sim.kernel import SimKernel
from vgpuadm.sim.usage import set_in_use
from vgpuadm.sim.vendor_vfio import PARAMS_MAX_WRITE
from vgpuadm.steps import Plan, SetVgpuParams

U1 = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001"
P4 = "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0"
P4_TYPES = "/sys/class/mdev_bus/0000:01:00.0/mdev_supported_types"
PARAMS = f"/sys/bus/mdev/devices/{U1}/nvidia/vgpu_params"
VF = "/sys/bus/pci/devices/0000:18:00.7/nvidia/vgpu_params"  # an h200-vendor-vfio VF (layout C)


def _raw(root, path: str) -> bytes:
    with open(f"{root}{path}", "rb") as f:
        return f.read()


def _p4_with_mdev(sim_host):
    root = sim_host("p4")
    SimKernel(str(root)).write(f"{P4_TYPES}/nvidia-63/create", U1)
    return root


def _run(root, *steps) -> None:
    sysfs = Sysfs(str(root), writer=SimKernel(str(root)))  # through the simulated driver, as a session does
    execute(Plan.of(list(steps), "params"), ExecContext(sysfs, str(root)))


def test_two_parameters_are_written_comma_separated_with_a_newline(sim_host) -> None:
    root = _p4_with_mdev(sim_host)
    params = check_params("frame_rate_limiter=0 disable_vnc=1", "nvidia-63")  # --param repeated, legacy spacing
    assert (
        params
        == check_params("frame_rate_limiter=0,disable_vnc=1", "nvidia-63")
        == ("frame_rate_limiter=0, disable_vnc=1")
    )
    _run(root, SetVgpuParams("mdev", U1, params))
    assert _raw(root, PARAMS) == b"frame_rate_limiter=0, disable_vnc=1\n"
    _run(root, SetVgpuParams("mdev", U1, "", previous=params))
    assert _raw(root, PARAMS) == b" \n"  # a single space clears them


def test_legacy_metadata_is_written_in_the_comma_form(sim_host) -> None:
    """A domain recorded by an earlier version holds `k=v k=v`: restore writes NVIDIA's form all the same."""
    root = _p4_with_mdev(sim_host)
    _run(root, SetVgpuParams("mdev", U1, "frame_rate_limiter=0 vgpu-placement-id=2"))
    assert _raw(root, PARAMS) == b"frame_rate_limiter=0, vgpu-placement-id=2\n"


def test_the_legacy_space_form_reads_back_as_the_same_parameters(sim_host) -> None:
    assert params_equal("frame_rate_limiter=0 disable_vnc=1", "disable_vnc=1, frame_rate_limiter=0")
    assert params_equal("frame_rate_limiter=0 disable_vnc=1\n", format_params({"frame_rate_limiter": False,
                                                                               "disable_vnc": True}))  # fmt: skip
    assert not params_equal("frame_rate_limiter=0 disable_vnc=1", "frame_rate_limiter=0, disable_vnc=0")
    root = _p4_with_mdev(sim_host)
    SimKernel(str(root)).write(PARAMS, "frame_rate_limiter=0 disable_vnc=1\n")  # as the old version wrote it
    snap = snapshot(Sysfs(str(root)))
    assert MdevMode().plan_params(snap, U1, "frame_rate_limiter=0, disable_vnc=1") == []  # unchanged: nothing to do


def test_grammar_keys_may_have_hyphens_values_no_comma() -> None:
    assert check_params("vgpu-placement-id=1", "nvidia-63") == "vgpu-placement-id=1"
    for bad in ("frame_rate_limiter", "1x=2", "a=", "=1", "-a=1"):
        with pytest.raises(UsageError):
            check_params(bad, "nvidia-63")
    with pytest.raises(UsageError):
        format_params({"frame_rate_limiter": "0,1"})


def test_sim_refuses_a_params_write_while_the_vgpu_is_in_use(sim_host) -> None:
    root = _p4_with_mdev(sim_host)
    k = SimKernel(str(root))
    k.write(PARAMS, "frame_rate_limiter=0\n")
    set_in_use(str(root), f"/sys/bus/mdev/devices/{U1}")
    with pytest.raises(OSError) as info:
        k.write(PARAMS, "disable_vnc=1\n")
    assert info.value.errno == errno.EPERM
    assert _raw(root, PARAMS) == b"frame_rate_limiter=0\n"  # a refused write changes nothing
    set_in_use(str(root), f"/sys/bus/mdev/devices/{U1}", False)
    k.write(PARAMS, "disable_vnc=1\n")
    assert _raw(root, PARAMS) == b"disable_vnc=1\n"


def test_sim_refuses_a_params_write_on_an_in_use_vf(sim_host) -> None:
    root = sim_host("h200-vendor-vfio")
    set_in_use(str(root), VF.rsplit("/nvidia/", 1)[0])
    with pytest.raises(OSError) as info:
        SimKernel(str(root)).write(VF, "enable_uvm=1\n")
    assert info.value.errno == errno.EPERM


def test_sim_refuses_an_over_long_params_write(sim_host) -> None:
    assert PARAMS_MAX_WRITE == 1024  # VGPU_CONFIG_PARAMS_MAX_LENGTH in NVIDIA's nvidia-vgpu-vfio
    root = _p4_with_mdev(sim_host)
    k = SimKernel(str(root))
    longest = "a=" + "1" * (PARAMS_MAX_WRITE - 3) + "\n"
    k.write(PARAMS, longest)  # exactly 1024 bytes: taken
    assert _raw(root, PARAMS) == longest.encode()
    with pytest.raises(OSError) as info:
        k.write(PARAMS, "a=" + "1" * (PARAMS_MAX_WRITE - 2) + "\n")
    assert info.value.errno == errno.E2BIG
    assert _raw(root, PARAMS) == longest.encode()


@pytest.mark.parametrize(
    ("given", "ok"),
    [
        ("frame_rate_limiter=0", True),
        ("vgpu-placement-id=7", True),
        (f"{'k' * 64}=1", True),
        (f"{'k' * 65}=1", False),  # a key over 64 characters
        (f"k={'v' * 256}", True),
        (f"k={'v' * 257}", False),  # a value over 256 characters: the journal's check refused it after the fact
        ("9k=1", False),
        ("k=", False),
        ("k", False),
        ("k=v\u00a0w", False),  # a no-break space in a value
    ],
)
def test_one_vgpu_params_grammar_for_the_command_line_and_the_journal(given: str, ok: bool) -> None:
    """What --param accepts is exactly what a journal read back may hold (steps.SetVgpuParams' check): one grammar,
    model.is_param, where there were two with different bounds (modes/base.py unbounded, steps.py bounded)."""
    assert params_text(given) is ok
    if ok:
        assert normalise_params(given) == given
    else:
        with pytest.raises(UsageError, match="Malformed vgpu parameter"):
            normalise_params(given)


def test_more_than_64_vgpu_params_are_refused_where_they_enter() -> None:
    with pytest.raises(UsageError, match="65 vgpu parameters given"):
        normalise_params(", ".join(f"k{i}=1" for i in range(65)))
