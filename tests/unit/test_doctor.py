"""`vgpuadm doctor` as a user types it (a subprocess: libvirt's embedded driver is one per process) on several
simulated profiles, and on hosts with planted problems: golden text and JSON (regenerate with
VGPUADM_UPDATE_GOLDENS=1 and review the diff), the exit status, and the JSON schema.

Outputs are compared after two substitutions only: the temporary root becomes ROOT and libvirt's version X.Y.Z
(the machine's libvirt answers)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.goldens import golden
from vgpuadm import api
from vgpuadm.schemas import validate
from vgpuadm.sim.profiles import build

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "golden" / "doctor"
LEAK = "0a0a0a0a-0000-4000-8000-00000000d0c7"


def _plant_problems_p4(root: Path) -> None:
    """A leaked mdev, a pending journal and an ACS override on the command line."""
    (root / "proc").mkdir()
    (root / "proc/cmdline").write_text(
        "BOOT_IMAGE=/vmlinuz root=/dev/sda1 intel_iommu=on pcie_acs_override=downstream\n"
    )
    api.open_sysfs(str(root)).write("/sys/class/mdev_bus/0000:01:00.0/mdev_supported_types/nvidia-63/create", LEAK)
    journal = root / "var/lib/vgpuadm/journal.json"
    journal.parent.mkdir(parents=True, exist_ok=True)
    step = {"kind": "detach-hostdev", "domain": "web01", "device_xml": "<hostdev/>", "what": "x"}
    doc = {"version": 1, "pid": 1, "state": "applying", "current": 0, "done": 0,
           "plan": {"summary": "give web01 1 x nvidia-63", "steps": [step]}}  # fmt: skip
    journal.write_text(json.dumps(doc) + "\n")
    journal.chmod(0o600)


def _plant_unsafe_group(root: Path) -> None:
    """0000:65:00.1 (another GPU's audio) moved into the passthrough GPU 0000:01:00.0's group 1; vfio-pci not
    loaded; a sys/module without vfio_iommu_type1."""
    dev = root / "sys/bus/pci/devices/0000:65:00.1"
    real = Path(os.path.realpath(dev))
    old = os.readlink(real / "iommu_group")
    (root / "sys/kernel/iommu_groups" / os.path.basename(old) / "devices/0000:65:00.1").unlink()
    (real / "iommu_group").unlink()
    (real / "iommu_group").symlink_to(os.path.join(os.path.dirname(old), "1"))
    (root / "sys/kernel/iommu_groups/1/devices/0000:65:00.1").symlink_to(
        os.path.relpath(real, root / "sys/kernel/iommu_groups/1/devices")
    )
    shutil.rmtree(root / "sys/bus/pci/drivers/vfio-pci")
    (root / "sys/module/nvidia").mkdir(parents=True)


def _plant_iommu_off(root: Path) -> None:
    """No IOMMU groups and no IOMMU flag on the kernel command line."""
    for group in (root / "sys/kernel/iommu_groups").iterdir():
        shutil.rmtree(group)
    (root / "proc").mkdir()
    (root / "proc/cmdline").write_text("BOOT_IMAGE=/vmlinuz root=/dev/sda1 quiet\n")


CASES: dict[str, tuple[str, Callable[[Path], None] | None, int]] = {
    "mixed": ("mixed", None, 0),
    "h200-vendor-vfio": ("h200-vendor-vfio", None, 0),
    "kernel-samples": ("kernel-samples", None, 0),
    "p4-problems": ("p4", _plant_problems_p4, 1),
    "mixed-unsafe-group": ("mixed", _plant_unsafe_group, 1),
    "passthrough-iommu-off": ("passthrough", _plant_iommu_off, 1),
}


def _doctor(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "vgpuadm", "--root", str(root), "doctor", *args],
                          capture_output=True, text=True, env=env, check=False)  # fmt: skip


def _normal(text: str, root: Path) -> str:
    return re.sub(r"libvirt \d+\.\d+\.\d+ ", "libvirt X.Y.Z ", text.replace(str(root), "ROOT"))


def _golden(name: str, text: str) -> str:
    return golden(GOLDEN / name, text)


@pytest.mark.process
@pytest.mark.parametrize("case", CASES)
def test_doctor_text_and_json(tmp_path: Path, case: str) -> None:
    profile, plant, code = CASES[case]
    root = tmp_path / "host"
    build(profile, str(root))
    if plant:
        plant(root)
    text = _doctor(root)
    assert (text.returncode, text.stderr) == (code, "")
    assert _normal(text.stdout, root) == _golden(f"{case}.txt", _normal(text.stdout, root))
    as_json = _doctor(root, "--json")
    assert (as_json.returncode, as_json.stderr) == (code, "")
    doc = json.loads(as_json.stdout)
    validate("doctor", doc)
    assert doc["ok"] is (code == 0)
    normal = _normal(json.dumps(doc, indent=1, sort_keys=True) + "\n", root)
    assert normal == _golden(f"{case}.json", normal)


@pytest.mark.process
def test_doctor_reports_a_leak_by_its_uuid_and_the_fix(tmp_path: Path) -> None:
    """The fix of a leak is `reconcile --fix`; while an interrupted change is pending (it may have made the device)
    it is `recover` first, the command the journal check names too."""
    root = tmp_path / "host"
    build("p4", str(root))
    _plant_problems_p4(root)
    doc = json.loads(_doctor(root, "--json").stdout)
    checks = {c["check"]: c for c in doc["checks"]}
    fix = "vgpuadm reconcile --fix (removes it), or give it to a VM"
    assert checks[f"leak {LEAK}"] == {
        "check": f"leak {LEAK}", "status": "warn", "detail": f"mdev {LEAK} (nvidia-63 on 0000:01:00.0) is owned by no domain",
        "hint": f"vgpuadm recover first (the interrupted change may have made it); if it is still here, {fix}",
    }  # fmt: skip
    assert checks["journal"]["status"] == "fail"
    assert checks["journal"]["hint"] == "vgpuadm recover (rolls it back; --finish completes it)"
    assert checks["acs"]["status"] == "warn"
    (root / "var/lib/vgpuadm/journal.json").unlink()
    checks = {c["check"]: c for c in json.loads(_doctor(root, "--json").stdout)["checks"]}
    assert checks[f"leak {LEAK}"]["hint"] == fix


@pytest.mark.process
def test_after_a_kill_the_journal_check_names_the_step_in_flight(tmp_path: Path) -> None:
    """#30.11: killed right after its second step, a run left the journal at index 1 and doctor said "(step 1)"
    where two steps had run; it numbers steps from 1 as the step lines do, names the one in flight and says which
    may have run."""
    root = tmp_path / "host"
    build("p4", str(root))
    uuids = [f"83b8f4f2-509f-382f-3c1e-e6bfe0fa100{n}" for n in (1, 2, 3)]
    env = {**os.environ, "PYTHONPATH": str(REPO), "VGPUADM_TEST_CRASH_AFTER_STEP": "2"}
    killed = subprocess.run([sys.executable, "-m", "vgpuadm", "--root", str(root), "mdev", "create", "--type",
                             "nvidia-63", "--count", "3", *(a for u in uuids for a in ("--uuid", u))],
                            capture_output=True, text=True, env=env, check=False)  # fmt: skip
    assert killed.returncode == 99, killed.stderr
    assert sorted(os.listdir(root / "sys/bus/mdev/devices")) == uuids[:2]  # two steps ran
    checks = {c["check"]: c for c in json.loads(_doctor(root, "--json").stdout)["checks"]}
    assert checks["journal"] == {
        "check": "journal", "status": "fail",
        "detail": "an interrupted change is pending: create 3 × nvidia-63 on 0000:01:00.0 (stopped at step 2 of 3: "
                  f"create mdev {uuids[1]} of type nvidia-63 on 0000:01:00.0; steps 1–2 may have run)",
        "hint": "vgpuadm recover (rolls it back; --finish completes it)",
    }  # fmt: skip


@pytest.mark.process
def test_recover_and_reconcile_state_their_split() -> None:
    """One home for a journal's rollback: `recover`, which every "interrupted change" message names; `reconcile`'s
    help says it runs it first and is about leaks."""
    helps = {verb: " ".join(subprocess.run([sys.executable, "-m", "vgpuadm", verb, "--help"], capture_output=True,
                                           text=True, check=True).stdout.split()) for verb in ("recover", "reconcile")}  # fmt: skip
    assert "`vgpuadm reconcile` runs it too, then looks for leaked devices" in helps["recover"]
    assert (
        "List devices that no domain owns (leaks; --fix removes them). It first does what `vgpuadm recover`"
        in helps["reconcile"]
    )
    readme = (REPO / "README.md").read_text()
    assert "refuses to run until `vgpuadm recover` rolls it back" in readme
    assert "`vgpuadm reconcile` rolls" not in readme and "rolled back by `vgpuadm reconcile`" not in readme


@pytest.mark.process
def test_doctor_on_a_missing_root_is_one_error(tmp_path: Path) -> None:
    r = _doctor(tmp_path / "nope")
    assert (r.returncode, r.stdout) == (3, "")
    assert r.stderr.startswith(f"error: host root {tmp_path / 'nope'} does not exist\n")


def test_a_host_without_gpus_says_so(tmp_path: Path) -> None:
    """The pure check on the snapshot of an empty sys/ tree (no libvirt involved)."""
    from vgpuadm.host.discover import snapshot
    from vgpuadm.host.sysfs import Sysfs
    from vgpuadm.report.doctor import HostFacts, check_vendor_drivers

    (tmp_path / "sys").mkdir()
    facts = HostFacts(snap=snapshot(Sysfs(str(tmp_path))), iommu_group_count=0, cmdline=None, modules=None,
                      pci_drivers=frozenset(), tools={}, libvirt_uri="test:///default", libvirt_version=None,
                      libvirt_error="x", uses_ramfb=False, journal=None, journal_error=None, leaks=None)  # fmt: skip
    assert [c.to_json() for c in check_vendor_drivers(facts)] == [{
        "check": "gpus", "status": "warn",
        "detail": "no GPU found (no display-class PCI function under /sys/bus/pci/devices)",
        "hint": "check the card is seated and seen: lspci -nn | grep -i -e vga -e 3d -e display",
    }]  # fmt: skip
