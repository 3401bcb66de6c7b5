"""Fault injection: every Step kind fails at every position of a multi-step plan; afterwards the simulated tree is
byte-identical to before (sim.treestate) and the error names the failed step."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from vgpuadm import api
from vgpuadm.errors import VgpuadmError
from vgpuadm.executor import JOURNAL, load_drivers
from vgpuadm.host import root as files
from vgpuadm.model import HostSnapshot
from vgpuadm.sim.faults import clear_faults, inject_fault
from vgpuadm.sim.treestate import diff, tree_state
from vgpuadm.steps import (
    Bind,
    ClearVfVgpuType,
    CreateMdev,
    DriversProbe,
    Plan,
    RemoveMdev,
    SetDriverOverride,
    SetNumVfs,
    SetVfVgpuType,
    SetVgpuParams,
    SriovManage,
    Step,
    Unbind,
)

PCI = "/sys/bus/pci"
REPO = Path(__file__).resolve().parents[2]


_MDEV_GROUP = re.compile(r"^sys/kernel/iommu_groups/(\d+)/devices/([0-9a-f-]{36})$")


def kernel_state(root: Path) -> dict[str, Any]:
    """tree_state with each mdev's IOMMU group number replaced by the mdev's UUID. Re-creating a removed mdev
    (the undo of RemoveMdev) gets the lowest free group id, as the kernel's ida does, so undoing two removals in
    reverse order swaps their numbers; everything else must match byte for byte."""
    state = tree_state(root)
    names = {m[1]: f"mdev-{m[2]}" for m in map(_MDEV_GROUP.match, state) if m}
    if not names:
        return dict(state)
    pattern = re.compile(r"(iommu_groups/|dev/vfio/)(" + "|".join(sorted(names, key=len, reverse=True)) + r")\b")

    def rename(text: str) -> str:
        return pattern.sub(lambda m: m[1] + names[m[2]], text)

    out: dict[str, Any] = {}
    for key, entry in state.items():
        value: object = ("link", rename(entry[1])) if entry[0] == "link" else entry  # type: ignore[misc]
        out[rename(key)] = value
    return out


def step_path(step: Step) -> str | None:
    """The host path the step writes (None for steps that write no sysfs file)."""
    match step:
        case CreateMdev(parent=p, type_id=t):
            return f"/sys/class/mdev_bus/{p}/mdev_supported_types/{t}/create"
        case RemoveMdev(uuid=u):
            return f"/sys/bus/mdev/devices/{u}/remove"
        case SetVgpuParams(device_path_kind="mdev", id=i):
            return f"/sys/bus/mdev/devices/{i}/nvidia/vgpu_params"
        case SetVgpuParams(id=i):
            return f"{PCI}/devices/{i}/nvidia/vgpu_params"
        case SetVfVgpuType(vf=v) | ClearVfVgpuType(vf=v):
            return f"{PCI}/devices/{v}/nvidia/current_vgpu_type"
        case SetNumVfs(pf=p):
            return f"{PCI}/devices/{p}/sriov_numvfs"
        case SetDriverOverride(address=a):
            return f"{PCI}/devices/{a}/driver_override"
        case Unbind(address=a, driver=d):
            return f"{PCI}/drivers/{d}/unbind"
        case Bind(address=a, driver=d):
            return f"{PCI}/drivers/{d}/bind"
        case DriversProbe():
            return f"{PCI}/drivers_probe"
        case SriovManage():
            return f"{PCI}/drivers/nvidia/unbind"  # the script's first write (see fake_sriov_manage)
    return None


def _apply_now(root: Path, plan: Plan) -> None:
    api.apply(plan, str(root))


def _p4_create(root: Path) -> Plan:
    plan, _ = api.plan_create(api.discover(str(root)), "P4-1Q", 3, params="frame_rate_limiter=0")
    return plan


def _p4_remove(root: Path) -> Plan:
    _apply_now(root, _p4_create(root))
    snap = api.discover(str(root))
    plans = [api.plan_remove(snap, u) for u in sorted(snap.mdevs)]
    return plans[0] + plans[1] + plans[2]


def _a100_create(root: Path) -> Plan:
    plan, _ = api.plan_create(api.discover(str(root)), "A100-4C", 3, policy="spread")
    return plan


def _h200_create(root: Path) -> Plan:
    plan, _ = api.plan_create(api.discover(str(root)), "H200X-4C", 3, params="frame_rate_limiter=0")
    return plan


def _h200_clear(root: Path) -> Plan:
    _apply_now(root, _h200_create(root))
    snap = api.discover(str(root))
    plans = [api.plan_vf_clear(snap, vf) for vf, v in sorted(snap.vendor_vfs.items()) if v.in_use]
    return plans[0] + plans[1] + plans[2]


def _vfio_bind(root: Path) -> Plan:
    return api.plan_vfio_bind(api.discover(str(root)), "0000:65:00.0")


def _vfio_restore(root: Path) -> Plan:
    _apply_now(root, _vfio_bind(root))
    return api.plan_vfio_restore(api.discover(str(root)), "0000:65:00.0")


def _stub_pf(root: Path, pf: str) -> None:
    """Move the A100 PF to pci-pf-stub (whose sriov_configure lets sriov_numvfs work), via the simulated kernel."""
    sysfs = api.open_sysfs(str(root))
    sysfs.write(f"{PCI}/drivers/nvidia/unbind", pf)
    sysfs.write(f"{PCI}/devices/{pf}/driver_override", "pci-pf-stub\n")
    sysfs.write(f"{PCI}/drivers_probe", pf)


def _numvfs_change(root: Path) -> Plan:
    _stub_pf(root, "0000:41:00.0")
    return api.plan_sriov(api.discover(str(root)), "0000:41:00.0", True, 4)


def fake_sriov_manage(root: Path) -> None:
    """Install a stand-in for /usr/lib/nvidia/sriov-manage that performs the real script's sequence (reference
    §3.1: PF to pci-pf-stub, sriov_numvfs, back to nvidia) through the simulated kernel, so faults and effects are
    the kernel's. A simulated host cannot run NVIDIA's script, hence the stand-in."""
    script = root / "usr/lib/nvidia/sriov-manage"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(
        f"#!{sys.executable}\n"
        f"import os, sys\nsys.path.insert(0, {str(REPO)!r})\n"
        "from vgpuadm.api import open_sysfs\nfrom vgpuadm.errors import VgpuadmError\n"
        "flag, pf = sys.argv[1:3]\ns = open_sysfs(os.environ['VGPUADM_ROOT'])\nd = f'/sys/bus/pci/devices/{pf}'\n"
        "try:\n"
        "    s.write('/sys/bus/pci/drivers/nvidia/unbind', pf)\n"
        "    s.write(f'{d}/driver_override', 'pci-pf-stub\\n')\n"
        "    s.write('/sys/bus/pci/drivers_probe', pf)\n"
        "    s.write(f'{d}/sriov_numvfs', (s.read(f'{d}/sriov_totalvfs') if flag == '-e' else '0') + '\\n')\n"
        "    s.write('/sys/bus/pci/drivers/pci-pf-stub/unbind', pf)\n"
        "    s.write(f'{d}/driver_override', '\\n')\n"
        "    s.write('/sys/bus/pci/drivers_probe', pf)\n"
        "except VgpuadmError as exc:\n"
        "    sys.exit(f'sriov-manage: {exc.message}')\n"
    )
    script.chmod(0o755)


def _sriov_manage_between_creates(root: Path) -> Plan:
    fake_sriov_manage(root)
    snap = api.discover(str(root))
    first, _ = api.plan_create(snap, "P4-1Q", 1)
    second, _ = api.plan_create(snap, "P4-1Q", 1)
    return first + api.plan_sriov(snap, "0000:18:00.0", False) + second


SCENARIOS: dict[str, tuple[str, Callable[[Path], Plan], set[type]]] = {
    "create-mdev+params": ("p4", _p4_create, {CreateMdev, SetVgpuParams}),
    "remove-mdev": ("p4", _p4_remove, {RemoveMdev, SetVgpuParams}),
    "create-mdev-on-vfs": ("a100-mdev-vf", _a100_create, {CreateMdev}),
    "set-vf-type+params": ("h200-vendor-vfio", _h200_create, {SetVfVgpuType, SetVgpuParams}),
    "clear-vf-type": ("h200-vendor-vfio", _h200_clear, {ClearVfVgpuType, SetVgpuParams}),
    "vfio-bind": ("passthrough", _vfio_bind, {Unbind, SetDriverOverride, DriversProbe}),
    "vfio-restore": ("passthrough", _vfio_restore, {Unbind, SetDriverOverride, Bind}),
    "sriov-numvfs": ("a100-mdev-vf", _numvfs_change, {SetNumVfs}),
    "sriov-manage": ("mixed", _sriov_manage_between_creates, {SriovManage, CreateMdev}),
}


@pytest.mark.process
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_position_fails_cleanly(name: str, sim_host: Callable[[str], Path]) -> None:
    profile, make_plan, kinds = SCENARIOS[name]
    root = sim_host(profile)
    plan = make_plan(root)
    assert {type(s) for s in plan.steps} >= kinds
    assert len(plan.steps) >= 2
    before = kernel_state(root)
    drivers_before = load_drivers(str(root))
    failed_some = 0
    for i, step in enumerate(plan.steps):
        path = step_path(step)
        if path is None:
            continue
        earlier = sum(1 for s in plan.steps[:i] if step_path(s) == path)
        inject_fault(str(root), path, "EIO", times=1, after=earlier)
        with pytest.raises(VgpuadmError) as info:
            api.apply(plan, str(root))
        clear_faults(str(root))
        n = len(plan.steps)
        assert info.value.message.startswith(f"step {i + 1}/{n} {step.describe()} failed: "), info.value.message
        assert "(EIO)" in info.value.message
        assert "rolled back" in info.value.hint
        after = kernel_state(root)
        assert diff(before, after) == {}, f"position {i + 1}: tree differs"
        assert load_drivers(str(root)) == drivers_before
        assert not os.path.exists(root / JOURNAL)
        failed_some += 1
    assert failed_some >= 2
    # With no fault the plan applies, and planning again finds nothing to do for the create/bind kinds.
    api.apply(plan, str(root))
    assert kernel_state(root) != before


def _same_plan_again(snap: HostSnapshot, name: str) -> Plan:
    if name == "vfio-bind":
        return api.plan_vfio_bind(snap, "0000:65:00.0")
    if name == "vfio-restore":
        return api.plan_vfio_restore(snap, "0000:65:00.0")
    return api.plan_sriov(snap, "0000:41:00.0", True, 4)


@pytest.mark.parametrize("name", ["vfio-bind", "vfio-restore", "sriov-numvfs"])
def test_idempotent_after_apply(name: str, sim_host: Callable[[str], Path]) -> None:
    profile, make_plan, _ = SCENARIOS[name]
    root = sim_host(profile)
    api.apply(make_plan(root), str(root))
    assert _same_plan_again(api.discover(str(root)), name).empty


def test_rollback_restores_vgpu_params(sim_host: Callable[[str], Path]) -> None:
    root = sim_host("p4")
    api.apply(_p4_create(root), str(root))
    snap = api.discover(str(root))
    uuid = sorted(snap.mdevs)[0]
    assert snap.mdevs[uuid].vgpu_params == "frame_rate_limiter=0"
    plan = api.plan_remove(snap, uuid)
    assert [type(s) for s in plan.steps] == [SetVgpuParams, RemoveMdev]
    inject_fault(str(root), f"/sys/bus/mdev/devices/{uuid}/remove", "EBUSY")
    with pytest.raises(VgpuadmError) as info:
        api.apply(plan, str(root))
    assert info.value.hint.startswith("the mdev is in use by a running VM; stop the VM first")
    assert api.discover(str(root)).mdevs[uuid].vgpu_params == "frame_rate_limiter=0"


def test_state_file_failure_rolls_back_the_restore(
    sim_host: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """ForgetDrivers writes <root>/var/lib/vgpuadm/drivers.json; a directory in the way of its temp file makes
    that write fail like a full disk would (the temp name, unguessable, is pinned so that it can be in the way)."""
    root = sim_host("passthrough")
    plan = _vfio_restore(root)
    before = kernel_state(root)
    monkeypatch.setattr(files, "_temp_name", lambda name: f".{name}.pinned.tmp")
    blocker = root / "var/lib/vgpuadm/.drivers.json.pinned.tmp"
    blocker.mkdir()
    with pytest.raises(VgpuadmError) as info:
        api.apply(plan, str(root))
    assert info.value.message.startswith("step 7/7 forget original drivers of 0000:65:00.0, 0000:65:00.1 failed: ")
    assert diff(before, kernel_state(root)) == {}
    assert set(load_drivers(str(root))) == {"0000:65:00.0", "0000:65:00.1"}


def _interrupt_mid_change(root: Path, *json_flag: str) -> tuple[int, str, str]:
    """`vgpuadm mdev create --count 3` in a subprocess; the third mdev's create write takes effect and then stalls
    (sim/faults.py inject_stall), and a real SIGINT reaches the process while that step is in flight."""
    import signal
    import subprocess
    import time

    from vgpuadm.sim.faults import inject_stall

    inject_stall(str(root), "*/nvidia-63/create", 60.0, after=2)
    proc = subprocess.Popen(
        [sys.executable, "-m", "vgpuadm", "--root", str(root), "mdev", "create", "--type", "nvidia-63",
         "--gpu", "0000:01:00.0", "--count", "3", *json_flag],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
    )  # fmt: skip
    devices = root / "sys/bus/mdev/devices"
    deadline = time.monotonic() + 60
    while len(list(devices.iterdir()) if devices.is_dir() else []) < 3:  # the stalled step's mdev exists
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    return proc.returncode, out, err


@pytest.mark.process
def test_ctrl_c_mid_change_says_what_was_rolled_back(sim_host: Callable[[str], Path]) -> None:
    """Ctrl-C in the middle of a change: everything is rolled back (the tree is as before, no journal) and the
    last line says so — not silence after a line saying an mdev was created."""
    root = sim_host("p4")
    before = kernel_state(root)
    code, out, err = _interrupt_mid_change(root)
    assert code == 130
    lines = err.splitlines()
    uuids = re.findall(r"create mdev ([0-9a-f-]{36})", lines[-2])
    assert len(set(uuids)) == 3, err
    assert lines[-2:] == [
        f"error: interrupted: rolled back 3 steps (create mdev {uuids[0]} of type nvidia-63 on 0000:01:00.0; "
        f"create mdev {uuids[1]} of type nvidia-63 on 0000:01:00.0; "
        f"create mdev {uuids[2]} of type nvidia-63 on 0000:01:00.0)",
        "hint: nothing was changed; run the command again to make the change",
    ], err
    assert out == ""
    assert diff(before, kernel_state(root)) == {}
    assert not (root / JOURNAL).exists()


@pytest.mark.process
def test_ctrl_c_mid_change_under_json_prints_the_error_document(sim_host: Callable[[str], Path]) -> None:
    """Under --json the interruption is also the error document (schemas/error.schema.json) on stdout."""
    import json

    import jsonschema

    root = sim_host("p4")
    code, out, err = _interrupt_mid_change(root, "--json")
    assert code == 130
    doc = json.loads(out)
    schema = json.loads((REPO / "vgpuadm/schemas/error.schema.json").read_text())
    jsonschema.validate(doc, schema)
    assert doc["exit_code"] == 130
    assert doc["error"].startswith("interrupted: rolled back 3 steps (create mdev ")
    assert doc["hint"] == "nothing was changed; run the command again to make the change"
    assert err.splitlines()[-2] == f"error: {doc['error']}"
