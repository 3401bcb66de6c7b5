"""`vgpuadm demo`: a guided tour for a newcomer with no GPU and no libvirtd. Builds a simulated `mixed` host (a
Tesla P4 on layout A, an A100 on layout B, an H200 on layout C, passthrough GPUs), defines three small demo domains
in libvirt's embedded QEMU driver under that root, and runs the real verbs one by one: discover → create (layout A)
→ a layout C VF → passthrough → look at a VM → inventory → reboot + restore → destroy. Each step reports the command
a user would type and what changed. The root is a temp dir removed at the end (unless `keep`), or `directory`,
kept, and re-runnable (a previous demo there is replaced; anything else there is refused)."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from vgpuadm import modes
from vgpuadm.errors import UsageError
from vgpuadm.model import Allocation, HostSnapshot
from vgpuadm.ops.guest import GuestResult, create, destroy, passthrough
from vgpuadm.ops.inventory import inventory, show_vm
from vgpuadm.ops.restore import restore
from vgpuadm.ops.session import Session
from vgpuadm.sim.profiles import build
from vgpuadm.sim.reboot import reboot
from vgpuadm.virt.conn import VirtConn, embed_uri
from vgpuadm.virt.xml import domain_definition

DEMO_PROFILE = "mixed"
DEMO_DOMAINS = ("web01", "train01", "db01")
LAYOUT_A_TYPE = "nvidia-63"  # GRID P4-1Q on the Tesla P4
LAYOUT_C_TYPE = "H200X-4C"  # a 4 GB vGPU on one VF of the H200
PASSTHROUGH_GPU = "0000:65:00.0"  # the GeForce RTX 3090 with its HD audio function
DEMO_MACHINE_ID = "766770756164656d6f686f7374000001"  # fixed, so the demo's mdev UUIDs are the same every run
MARKER = ".vgpuadm-demo"  # a directory holding it is a previous demo's, which a new run may replace
_DOMAIN_NS = uuid.UUID("2b1f4f52-9c8e-5d43-a3c1-766770756164")


@dataclass(frozen=True)
class TourStep:
    """One step of the tour: the command as a user types it, and what it changed (one line each)."""

    command: str
    changes: tuple[str, ...]


@dataclass
class DemoResult:
    root: str
    uri: str
    domains: list[str]
    kept: bool
    steps: list[TourStep] = field(default_factory=list)


Report = Callable[[TourStep], None]


def run(directory: str | None = None, *, keep: bool = False, report: Report | None = None) -> DemoResult:
    """Run the tour; `report` is told each step as it completes. The temp root (no `directory`) is removed at the
    end unless `keep`, also when a step fails."""
    root = _prepare(directory)
    kept = keep or directory is not None
    try:
        return _tour(root, kept, report or (lambda _step: None))
    finally:
        if not kept:
            shutil.rmtree(root, ignore_errors=True)


def _prepare(directory: str | None) -> str:
    if directory is None:
        root = tempfile.mkdtemp(prefix="vgpuadm-demo-")
    else:
        root = os.path.abspath(directory)
        if os.path.isdir(root) and os.listdir(root):
            if not os.path.isfile(os.path.join(root, MARKER)) or os.path.islink(os.path.join(root, MARKER)):
                raise UsageError(f"{root} is not empty", "give a new or empty directory, or one a demo made")
            shutil.rmtree(root)  # a previous demo's host: start again from scratch
    build(DEMO_PROFILE, root)
    with open(os.path.join(root, MARKER), "w") as f:
        f.write("a vgpuadm demo host: `vgpuadm demo --dir` may replace it\n")
    machine_id = os.path.join(root, "etc", "machine-id")
    os.makedirs(os.path.dirname(machine_id), exist_ok=True)
    with open(machine_id, "w") as f:
        f.write(DEMO_MACHINE_ID + "\n")
    return root


def _tour(root: str, kept: bool, report: Report) -> DemoResult:
    uri = embed_uri(root)
    with VirtConn(uri) as conn:
        for name in DEMO_DOMAINS:
            conn.define(domain_definition(name, uuid=str(uuid.uuid5(_DOMAIN_NS, name)), memory_mib=64))
        domains = conn.list_domains()
    result = DemoResult(root, uri, domains, kept)
    here = f"vgpuadm --root {root}"

    def step(command: str, changes: list[str]) -> None:
        result.steps.append(TourStep(command, tuple(changes)))
        report(result.steps[-1])

    snap = _snapshot(root)
    step(f"{here} gpus", _discovered(snap))
    made = create(root, "web01", LAYOUT_A_TYPE, connect=uri)
    step(f"{here} create --type {LAYOUT_A_TYPE} --vm web01", _given(made, _snapshot(root)))
    made = create(root, "train01", LAYOUT_C_TYPE, connect=uri)
    step(f"{here} create --type {LAYOUT_C_TYPE} --vm train01", _given(made, _snapshot(root)))
    made = passthrough(root, PASSTHROUGH_GPU, "db01", connect=uri)
    step(f"{here} passthrough --gpu {PASSTHROUGH_GPU} --vm db01", _given(made, _snapshot(root)))
    view = show_vm(root, "web01", connect=uri)
    step(f"{here} show --vm web01", [_shown(d) for d in view["devices"]] + [f"its XML: virsh -c '{uri}' dumpxml web01"])
    doc = inventory(root, connect=uri, host="demo")
    summary = doc["summary"]
    owners = sorted({d["domain"] for d in doc["devices"] if d.get("domain")})
    step(f"{here} inventory", [
        f"{summary['devices']} device(s), {summary['owned']} owned (by {', '.join(owners)}), {summary['unowned']} "
        f"leaked; {summary['framebuffer_free_mib']} of {summary['framebuffer_total_mib']} MiB framebuffer free",
    ])  # fmt: skip
    before = set(_snapshot(root).mdevs)
    reboot(root)
    after = _snapshot(root)
    step(f"vgpuadm sim reboot {root}", [
        f"the kernel forgot them: {len(after.mdevs)} mdev(s), {sum(vf.in_use for vf in after.vendor_vfs.values())} "
        f"typed VF(s), {PASSTHROUGH_GPU} back on {after.functions[PASSTHROUGH_GPU].driver}",
        "the domains' vgpuadm metadata still records every device",
    ])  # fmt: skip
    restored = restore(root, connect=uri, timeout=5)
    back = _snapshot(root)
    step(f"{here} restore", [
        f"{len(restored.done)} step(s) for {restored.devices} recorded device(s): {len(back.mdevs)} mdev(s), "
        f"{sum(vf.in_use for vf in back.vendor_vfs.values())} typed VF(s), {PASSTHROUGH_GPU} on "
        f"{back.functions[PASSTHROUGH_GPU].driver} again, "
        + ("with the same mdev UUIDs" if set(back.mdevs) == before else "with NEW mdev UUIDs"),
    ])  # fmt: skip
    gone = destroy(root, "web01", all_=True, connect=uri)
    step(f"{here} destroy --vm web01 --all", [f"web01 gave back {_what(a)}" for a in gone.removed])
    return result


def _snapshot(root: str) -> HostSnapshot:
    with Session.read(root) as s:
        return s.snap


def _discovered(snap: HostSnapshot) -> list[str]:
    lines = []
    for fn in snap.gpus:
        if fn.physfn:
            continue
        layout = snap.layouts.get(fn.address)
        vfs = f", {fn.sriov_num_vfs} VFs" if fn.sriov_num_vfs else ""
        lines.append(f"{snap.label(fn.address)}: {layout.summary if layout else 'no layout'}{vfs}")
    return lines


def _given(result: GuestResult, snap: HostSnapshot) -> list[str]:
    return [f"{result.domain} got {_what(a, snap)}" for a in result.added]


def _what(a: Allocation, snap: HostSnapshot | None = None) -> str:
    """`mdev U: nvidia-63 (GRID P4-1Q) on a Tesla P4 (0000:03:00.0)`; without `snap`, the ids alone."""
    if snap is None:
        return f"{a.mode} {a.uuid or a.address}" + (f" ({a.type_id})" if a.type_id else "")
    name = next((t.name for t in snap.types() if t.type_id == a.type_id), None) if a.type_id else None
    kind = f"{a.type_id} ({name})" if name else a.type_id
    where = a.parent or a.address or ""
    gpu = snap.physical_gpu(where)
    model = snap.models.get(gpu)
    on = f"on {_article(model)} {model} ({gpu})" if model else f"on {gpu}"
    label = modes.of(a).device_label(a)
    if label is not None:
        return f"{label}: {kind} {on}"
    return f"{snap.label(a.address or '')}, bound to vfio-pci"


def _article(word: str) -> str:
    return "an" if word[:1].upper() in "AEFHILMNORSX" else "a"  # as the letter or vowel is said: an H200, a Tesla


def _shown(d: dict[str, object]) -> str:
    present = "present" if d["present"] else "missing"
    return f"slot {d['slot']}: {d['mode']} {d['id']} {d['type_id']} ({d['name']}) on {d['physical_gpu']} ({d['model']}), {present}"
