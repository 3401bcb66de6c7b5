"""Every string field of a journal step has a grammar or a bound (issue #20): free text (vgpu_params, device XML,
metadata, mdevctl definitions, unit files, descriptions, the plan summary, progress states) is refused when it is
not what vgpuadm writes there — before `recover` acts on any step."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import vgpuadm.api  # noqa: F401  (registers the libvirt step kinds)
from vgpuadm.errors import UnsafeError
from vgpuadm.executor.journalcheck import GRAMMAR, check_document
from vgpuadm.steps import STEP_KINDS, Plan, WriteManagedFile

UUID = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001"
HOSTDEV = (
    "<hostdev mode='subsystem' type='mdev' managed='no' model='vfio-pci' display='off'>\n"
    f"  <source>\n    <address uuid='{UUID}'/>\n  </source>\n</hostdev>\n"
)
METADATA = (
    "<vgpuadm:vgpuadm xmlns:vgpuadm='https://vgpuadm.dev/xmlns/vgpuadm/1' version='1' host='h1'>"
    f"<vgpuadm:device slot='0' mode='mdev' type='nvidia-63' parent='0000:01:00.0' uuid='{UUID}'/></vgpuadm:vgpuadm>"
)
UNIT = "[Unit]\nDescription=vgpuadm restore\n\n[Service]\nType=oneshot\nExecStart=/usr/bin/vgpuadm restore\n"
MDEVCTL = json.dumps({"mdev_type": "nvidia-63", "start": "auto", "attrs": []})

# One step of every kind with the values vgpuadm writes.
VALID: dict[str, dict[str, Any]] = {
    "create-mdev": {"parent": "0000:01:00.0", "type_id": "nvidia-63", "uuid": UUID},
    "create-gpu-instance": {"address": "0000:18:00.0", "gpu_index": 0, "profile": "1g.18gb", "profile_id": 19,
                            "start": 0},
    "destroy-gpu-instance": {"address": "0000:18:00.0", "gpu_index": 0, "instance_id": 7, "profile": "1g.18gb",
                             "profile_id": 19, "start": 0},
    "set-mig-mode": {"address": "0000:18:00.0", "gpu_index": 0, "enable": True, "effective": True},
    "set-heterogeneous-mode": {"address": "0000:18:00.0", "gpu_index": 0, "enable": True},
    "set-vgpu-scheduler": {"address": "0000:18:00.0", "gpu_index": 0, "policy": "equal-share", "timeslice_ms": 3,
                           "previous_policy": "best-effort", "previous_timeslice_ms": 0},
    "remove-mdev": {"parent": "0000:01:00.0", "uuid": UUID, "type_id": "nvidia-63"},
    "write-managed-file": {"file": "mdevctl-definition", "path": f"/etc/mdevctl.d/0000:01:00.0/{UUID}", "text": MDEVCTL,
                           "previous": None},
    "set-vgpu-params": {"device_path_kind": "mdev", "id": UUID, "params": "frame_rate_limiter=0, disable_vnc=1",
                        "previous": ""},
    "set-vf-vgpu-type": {"vf": "0000:18:00.4", "type_num": 1420},
    "set-vf-placement": {"vf": "0000:18:00.4", "placement_id": 8, "previous": -1},
    "clear-vf-vgpu-type": {"vf": "0000:18:00.4", "previous_type": 1420},
    "set-num-vfs": {"pf": "0000:01:00.0", "count": 2, "previous": 0},
    "sriov-manage": {"pf": "0000:18:00.0", "enable": True},
    "set-driver-override": {"address": "0000:00:10.0", "driver": "vfio-pci", "previous": ""},
    "unbind": {"address": "0000:00:10.0", "driver": "snd_hda_intel"},
    "bind": {"address": "0000:00:10.0", "driver": "vfio-pci"},
    "drivers-probe": {"address": "0000:00:10.0", "expect": "vfio-pci"},
    "record-drivers": {"drivers": [["0000:00:10.0", ""]]},
    "forget-drivers": {"drivers": [["0000:00:10.0", "nouveau"]]},
    "attach-hostdev": {"domain": "web01", "device_xml": HOSTDEV, "what": f"mdev {UUID} (nvidia-63)"},
    "detach-hostdev": {"domain": "web01", "device_xml": HOSTDEV, "what": f"mdev {UUID} (nvidia-63)"},
    "set-metadata": {"domain": "web01", "element": METADATA, "previous": "", "devices": 1},
    "define-domain": {"domain": "web01", "attach": HOSTDEV + HOSTDEV, "detach": "", "element": METADATA,
                      "previous": "", "devices": 2, "attached": f"mdev {UUID} (nvidia-63)", "detached": ""},
    "set-virtio-gl": {"domain": "web01", "rendernode": "/dev/dri/renderD128", "graphics": "egl-headless",
                      "enable": True, "previous_video": "vga"},
    "set-sriov-autoprobe": {"pf": "0000:01:00.0", "enabled": False, "previous": True},
    "domain-definition": {"domain": "web01", "xml": "<domain type='kvm'><name>web01</name></domain>",
                          "defined": True, "via": "incoming"},
}  # fmt: skip

ENTITY = "<!DOCTYPE hostdev [<!ENTITY x SYSTEM 'file:///etc/shadow'>]>"
HOSTILE: list[tuple[str, str, Any]] = [
    ("set-vgpu-params", "params", "=1, frame_rate_limiter=0"),
    ("set-vgpu-params", "params", "x=1\n/sys/kernel/y"),
    ("set-vgpu-params", "previous", "a" * 1025),
    ("set-vgpu-params", "previous", "\x1b]0;owned\x07"),
    ("set-driver-override", "previous", "../../evil"),
    ("write-managed-file", "text", "not json"),
    ("write-managed-file", "text", "[1, 2]"),
    ("write-managed-file", "previous", json.dumps({"x": "y" * 70000})),
    ("write-managed-file", "previous", "{"),
    ("write-managed-file", "file", "shadow"),
    ("write-managed-file", "path", "/etc/shadow"),
    ("write-managed-file", "path", f"/etc/mdevctl.d/../{UUID}"),
    ("write-managed-file", "path", "/etc/systemd/system/vgpuadm-restore.service"),  # a unit's path, not a definition
    ("attach-hostdev", "device_xml", ENTITY + "<hostdev mode='subsystem' type='pci'>&x;</hostdev>"),
    ("attach-hostdev", "device_xml", "<disk type='file'><source file='/etc/shadow'/></disk>"),
    ("detach-hostdev", "device_xml", "<hostdev mode='subsystem'>" + "x" * 20000 + "</hostdev>"),
    ("attach-hostdev", "what", "x\nerror: forged line"),
    ("detach-hostdev", "what", "w" * 513),
    ("set-metadata", "element", "<?xml version='1.0'?><vgpuadm:vgpuadm/>"),
    ("set-metadata", "element", "<domain><devices/></domain>"),
    ("set-metadata", "previous", "<vgpuadm:vgpuadm>&xxe;</vgpuadm:vgpuadm>"),
    ("define-domain", "attach", ENTITY + "<hostdev mode='subsystem' type='pci'>&x;</hostdev>"),
    ("define-domain", "detach", "<interface type='bridge'/>"),
    ("define-domain", "element", "<domain/>"),
    ("define-domain", "attached", "x\nerror: forged line"),
    ("domain-definition", "xml", ENTITY + "<domain type='kvm'><name>&x;</name></domain>"),
    ("domain-definition", "xml", "<hostdev mode='subsystem' type='pci'/>"),
    ("domain-definition", "xml", "<domain>" + "x" * (1024 * 1024) + "</domain>"),
    ("domain-definition", "via", "x\nerror: forged line"),
    ("set-virtio-gl", "rendernode", "/dev/dri/../../etc/shadow"),
    ("set-virtio-gl", "graphics", "vnc' autoport='yes"),
    ("set-virtio-gl", "previous_video", "vga'/><disk"),
]


def journal(*steps: dict[str, Any], summary: str = "create 1 nvidia-63") -> dict[str, Any]:
    return {"version": 1, "pid": 1, "state": "applying", "current": 0, "done": 0,
            "plan": {"summary": summary, "steps": list(steps)}}  # fmt: skip


def test_every_string_field_of_every_step_kind_has_a_check() -> None:
    """The table of valid steps covers every kind vgpuadm defines, and each string field has its own grammar or
    free-text check declared with the field (steps.check; a new kind with a new string field shows up here)."""
    kinds = {k: c for k, c in STEP_KINDS.items() if c.__module__.startswith("vgpuadm.")}
    assert sorted(VALID) == sorted(kinds)
    for kind, cls in kinds.items():
        fields = dataclasses.fields(cls)
        assert sorted(VALID[kind]) == sorted(f.name for f in fields)
        for f in fields:
            if "str" in str(f.type) and not str(f.type).startswith("tuple"):
                assert f.name in GRAMMAR or f.name == "id" or "check" in f.metadata, (kind, f.name)


def test_the_steps_vgpuadm_writes_pass() -> None:
    check_document(journal(*({"kind": k, **v} for k, v in VALID.items())))


@pytest.mark.parametrize(
    ("kind", "field", "value"), HOSTILE, ids=[f"{k}.{f}-{i}" for i, (k, f, _) in enumerate(HOSTILE)]
)
def test_free_text_that_vgpuadm_never_writes_is_refused(kind: str, field: str, value: Any) -> None:
    with pytest.raises(UnsafeError) as info:
        check_document(journal({"kind": kind, **VALID[kind], field: value}))
    assert info.value.message == (
        f"refusing the journal /var/lib/vgpuadm/journal.json: step {kind} field {field} holds {str(value)[:60]!r}, "
        "not a valid value"
    )


HOOK = '#!/bin/sh\nexec vgpuadm hook "$@"\n'
# The managed-file step of each kind of file, as vgpuadm writes it (its path and text grammars are the kind's).
MANAGED: dict[str, dict[str, Any]] = {
    "mdevctl-definition": VALID["write-managed-file"],
    "systemd-unit": {"file": "systemd-unit", "path": "/etc/systemd/system/vgpuadm-restore.service", "text": UNIT,
                     "previous": None},
    "libvirt-hook": {"file": "libvirt-hook", "path": "/etc/libvirt/hooks/qemu.d/vgpuadm", "text": None,
                     "previous": HOOK},
    "host-policy": {"file": "host-policy", "path": "/etc/modprobe.d/vgpuadm-nvidia.conf", "text": "options nvidia\n",
                    "previous": None},
}  # fmt: skip
MANAGED_HOSTILE: list[tuple[str, str, Any]] = [
    ("systemd-unit", "text", "[Service]\nExecStart=/bin/sh\x00"),
    ("systemd-unit", "text", "x" * (64 * 1024 + 1)),
    ("systemd-unit", "previous", "\x1b[2J"),
    ("systemd-unit", "path", "/etc/systemd/system/../../shadow"),
    ("libvirt-hook", "previous", "#!/bin/sh\x00"),
    ("libvirt-hook", "path", "/etc/libvirt/hooks/../../../etc/shadow"),
    ("libvirt-hook", "path", "/etc/libvirt/hooks/qemu.d/other"),
    ("host-policy", "path", "/var/lib/vgpuadm/journal.json"),
]


def test_the_managed_files_of_every_kind_pass() -> None:
    check_document(journal(*({"kind": "write-managed-file", **v} for v in MANAGED.values())))


@pytest.mark.parametrize(("file", "field", "value"), MANAGED_HOSTILE,
                         ids=[f"{k}.{f}-{i}" for i, (k, f, _) in enumerate(MANAGED_HOSTILE)])  # fmt: skip
def test_a_managed_file_is_held_to_its_kinds_grammars(file: str, field: str, value: Any) -> None:
    with pytest.raises(UnsafeError) as info:
        check_document(journal({"kind": "write-managed-file", **MANAGED[file], field: value}))
    assert info.value.message == (
        f"refusing the journal /var/lib/vgpuadm/journal.json: step write-managed-file field {field} holds "
        f"{str(value)[:60]!r}, not a valid value"
    )


# The steps an older vgpuadm wrote, one kind per managed file, and what each is read as now.
LEGACY: list[tuple[dict[str, Any], WriteManagedFile]] = [
    ({"kind": "write-mdevctl-definition", "parent": "0000:01:00.0", "uuid": UUID, "text": MDEVCTL, "previous": None},
     WriteManagedFile("mdevctl-definition", f"/etc/mdevctl.d/0000:01:00.0/{UUID}", MDEVCTL, None)),
    ({"kind": "remove-mdevctl-definition", "parent": "0000:01:00.0", "uuid": UUID, "previous": MDEVCTL},
     WriteManagedFile("mdevctl-definition", f"/etc/mdevctl.d/0000:01:00.0/{UUID}", None, MDEVCTL)),
    ({"kind": "write-unit-file", "name": "vgpuadm-restore.service", "text": UNIT, "previous": None},
     WriteManagedFile("systemd-unit", "/etc/systemd/system/vgpuadm-restore.service", UNIT, None)),
    ({"kind": "remove-unit-file", "name": "vgpuadm-restore.service", "previous": UNIT},
     WriteManagedFile("systemd-unit", "/etc/systemd/system/vgpuadm-restore.service", None, UNIT)),
    ({"kind": "write-hook-file", "hook": "qemu.d/vgpuadm", "text": HOOK, "previous": None},
     WriteManagedFile("libvirt-hook", "/etc/libvirt/hooks/qemu.d/vgpuadm", HOOK, None)),
    ({"kind": "remove-hook-file", "hook": "qemu", "previous": HOOK},
     WriteManagedFile("libvirt-hook", "/etc/libvirt/hooks/qemu", None, HOOK)),
    ({"kind": "write-policy-file", "name": "state", "text": None, "previous": "{}"},
     WriteManagedFile("host-policy", "/var/lib/vgpuadm/gpus.json", None, "{}")),
]  # fmt: skip


def test_an_older_vgpuadms_file_steps_are_read_as_the_managed_file_step() -> None:
    """A change interrupted across an upgrade: its journal names the kinds before there was one managed-file step."""
    doc = journal(*(dict(old) for old, _ in LEGACY))
    check_document(doc)
    assert Plan.from_dict(doc["plan"]).steps == tuple(new for _, new in LEGACY)
    assert Plan.from_dict(journal(*(old for old, _ in LEGACY))["plan"]).steps == tuple(new for _, new in LEGACY)


@pytest.mark.parametrize(
    ("old", "field", "value"),
    [
        ({"kind": "write-mdevctl-definition", "parent": "0000:01:00.0", "uuid": UUID, "text": "not json"}, "text",
         "not json"),
        ({"kind": "remove-mdevctl-definition", "parent": "../..", "uuid": UUID, "previous": MDEVCTL}, "path",
         f"/etc/mdevctl.d/../../{UUID}"),
        ({"kind": "write-unit-file", "name": ["x"], "text": UNIT}, "path", None),
        ({"kind": "remove-unit-file", "name": "vgpuadm-restore.service", "previous": "\x1b[2J"}, "previous",
         "\x1b[2J"),
        ({"kind": "write-hook-file", "hook": "../../../etc/shadow", "text": "x"}, "path",
         "/etc/libvirt/hooks/../../../etc/shadow"),
        ({"kind": "write-policy-file", "name": "shadow", "text": "x"}, "path", None),
        ({"kind": "write-unit-file", "name": "vgpuadm-restore.service", "text": UNIT, "path": "/etc/systemd/system/x"},
         "path", None),
    ],
)  # fmt: skip
def test_an_older_vgpuadms_file_step_is_held_to_the_same_grammars(old: dict[str, Any], field: str, value: Any) -> None:
    with pytest.raises(UnsafeError) as info:
        check_document(journal(old))
    assert info.value.message == (
        f"refusing the journal /var/lib/vgpuadm/journal.json: step write-managed-file field {field} holds "
        f"{str(value)[:60]!r}, not a valid value"
    )


@pytest.mark.parametrize("summary", ["x\x1b[31m", "s" * 4097])
def test_a_summary_that_is_not_a_line_is_refused(summary: str) -> None:
    with pytest.raises(UnsafeError, match="its plan summary is not a line of text"):
        check_document(journal(summary=summary))


def test_a_progress_line_with_an_unknown_state_is_refused(sim_host: Callable[[str], Path], cli: Any) -> None:
    root = sim_host("p4")
    path = root / "var/lib/vgpuadm/journal.json"
    path.parent.mkdir(parents=True, mode=0o700)
    doc = journal({"kind": "create-mdev", **VALID["create-mdev"]})
    path.write_text(json.dumps(doc) + "\n" + json.dumps({"current": 0, "state": "\x1b[2Jdone"}) + "\n")
    os.chmod(path, 0o600)
    r = cli("--root", str(root), "recover")
    assert r.code == 6
    assert r.err.splitlines()[0] == (
        "error: refusing the journal /var/lib/vgpuadm/journal.json: a progress line holds the state '\\x1b[2Jdone'"
    )
    assert path.exists()
