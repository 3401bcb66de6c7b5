"""The device planners every verb shares: create (placement + the mode's steps), remove, layout C types, SR-IOV,
vfio-pci bind and give-back. Pure: a HostSnapshot in, a Plan out; each dispatches to its mode (vgpuadm.modes)."""

from __future__ import annotations

import functools
import uuid as uuid_mod
from collections.abc import Mapping, Sequence
from typing import Any

from vgpuadm import modes
from vgpuadm.catalog import capacity
from vgpuadm.catalog.naming import resolve_type
from vgpuadm.errors import FREE, CapacityError, ConflictError, NotFoundError, UsageError
from vgpuadm.model import HostSnapshot, VgpuType, device_key, nvidia_type_number, pci_address
from vgpuadm.modes import mdev, passthrough, sriov, vf_vgpu
from vgpuadm.modes.base import Instance, Made, check_uuid
from vgpuadm.plan.placement import place
from vgpuadm.steps import Plan


def plan_create(snap: HostSnapshot, type_name: str, count: int = 1, **options: Any) -> tuple[Plan, list[str]]:
    """plan_devices (same options) as one plan, and the device ids it makes (mdev UUIDs, or VF addresses on layout C
    and VF pools): what `mdev create` runs."""
    made, summary = plan_devices(snap, type_name, count, **options)
    return Plan.of([s for m in made for s in m.steps], summary), [m.device for m in made]


def plan_devices(
    snap: HostSnapshot,
    type_name: str,
    count: int = 1,
    *,
    gpu: str | None = None,
    policy: str = "pack",
    numa: int | None = None,
    params: str = "",
    uuids: Sequence[str] = (),
    taken: Mapping[str, str] | None = None,
    have: Sequence[str] = (),
) -> tuple[list[Made], str]:
    """Plan `count` vGPUs of `type_name`, per device (each with its own steps and what its allocation records, as
    the mode that makes it says: Mode.plan_instance), and a summary of the whole. `uuids` fixes the mdev UUIDs (one
    per instance), else random ones are drawn. `have`: the devices of the type the requester has already
    (placement's errors name the total asked for)."""
    if uuids and len(uuids) != count:
        raise UsageError(f"{len(uuids)} UUIDs given for {count} devices", "give one --uuid per device, or none")
    if uuids and all(check_uuid(u) in snap.mdevs for u in uuids):
        # Idempotence: every named mdev already exists; fine when each runs the requested type.
        wanted = {t.type_id for t in resolve_type(snap.types(), type_name)}
        existing = [snap.mdevs[check_uuid(u)] for u in uuids]
        if all(m.type_id in wanted for m in existing):
            kept = [Made((), m.uuid, (mode := modes.for_type_on(snap, m.parent, m.type_id)).name, m.type_id, m.parent,
                         uuid=m.uuid, display=True, placed_at_start=mode.placed_at_start) for m in existing]  # fmt: skip
            return kept, f"mdevs {', '.join(m.uuid for m in existing)} already exist"
    gpu = pci_address(gpu) if gpu is not None else None
    placement = place(snap, type_name, count, gpu=gpu, policy=policy, numa=numa, taken=taken, have=have)
    out: list[Made] = []
    ids: list[str] = []
    enabling: set[str] = set()
    planned: dict[str, list[tuple[int, int]]] = {}  # GPU in heterogeneous mode → placements this plan takes
    for i, (_parent, t) in enumerate(placement.choices):
        ask = Instance(
            params,
            functools.partial(_uuid, uuids[i] if uuids else None, ids),
            functools.partial(_placement, snap, t, planned),
            lambda: {*(taken or {}), *ids},
            enabling,
        )
        one = modes.for_type(t).plan_instance(snap, t, ask)
        out.append(one)
        ids.append(one.device)
    where = ", ".join(sorted({p for p, _ in placement.choices}))
    return out, f"create {count} × {placement.type_id} on {where}"


def _uuid(given: str | None, ids: Sequence[str]) -> str:
    """The UUID of the next mdev of a create plan: the one given (checked), else a random one."""
    dev = check_uuid(given) if given is not None else str(uuid_mod.uuid4())
    if dev in ids:
        raise UsageError(f"UUID {dev} given twice", "give distinct UUIDs")
    return dev


def _placement(snap: HostSnapshot, t: VgpuType, planned: dict[str, list[tuple[int, int]]]) -> int | None:
    """The placement ID of one more vGPU of `t` on its GPU in heterogeneous mode (None elsewhere), counting what
    this plan already placed; a CapacityError saying which vGPUs hold the slots when none is free."""
    gpu = snap.physical_gpu(t.parent)
    policy = capacity.policy_of(snap, gpu)
    tp = policy.placement(t.numeric_id or 0) if policy is not None and policy.heterogeneous else None
    if tp is None:
        return None
    also = planned.setdefault(gpu, [])
    pid = capacity.choose_placement(snap, gpu, tp.type_num, also)
    if pid is None:
        raise CapacityError(
            f"No room for one more {t.type_id} ({tp.name}) on {gpu}: {capacity.why_no_placement(snap, gpu, tp.type_num, also)}",
            "free a vGPU on that GPU or pick a smaller type; `vgpuadm inventory` shows each GPU's free pieces",
        )
    also.append((pid, tp.size))
    return pid


def explain_placement(
    snap: HostSnapshot,
    type_name: str,
    count: int = 1,
    *,
    gpu: str | None = None,
    policy: str = "pack",
    numa: int | None = None,
) -> str:
    """Why each candidate parent was chosen or rejected (the CapacityError, when nothing fits, says the same)."""

    gpu = pci_address(gpu) if gpu is not None else None
    try:
        return place(snap, type_name, count, gpu=gpu, policy=policy, numa=numa).explain()
    except CapacityError as exc:
        return f"placement of {type_name}: {exc.message}"


def plan_remove(snap: HostSnapshot, device_id: str) -> Plan:
    """Remove a vGPU: an mdev by UUID, or clear a layout C VF by address."""
    device_id = device_key(device_id)

    if device_id in snap.vendor_vfs:
        return Plan.of(vf_vgpu.MODE.plan_clear(snap, device_id), f"clear VF {device_id}")
    return Plan.of(
        mdev.MODE.plan_remove(snap, check_uuid(device_id, "as `vgpuadm devices` lists them")),
        f"remove mdev {device_id}",
    )


def plan_vf_type(
    snap: HostSnapshot, type_name: str, vf: str | None = None, *, params: str = "", policy: str = "pack"
) -> tuple[Plan, str]:
    """Layout C: set a vGPU type on `vf` (or on a VF placement picks); returns the plan and the VF address."""
    vf = pci_address(vf) if vf is not None else None

    if vf is not None:
        found = vf_vgpu.MODE.find(snap, vf)
        if found.in_use:
            # A typed VF lists nothing creatable: compare with the number the name stands for instead.
            if _type_number(snap, type_name) == found.current_type:
                return Plan.of([], f"VF {vf} already runs {found.current_type_id}"), vf
            raise ConflictError(
                f"VF {vf} already runs {found.current_type_id}",
                f"{FREE}or pick another VF",
                blockers=[(vf, "vf clear")],
            )
    placement = place(snap, type_name, 1, gpu=vf, policy=policy)
    t = placement.choices[0][1]
    if not t.layout.types_by_number:
        raise UsageError(f"{t.type_id} on {t.parent} is an mdev type", "use `vgpuadm mdev create` for mdev types")
    return Plan.of(vf_vgpu.MODE.plan_create(snap, t, params), f"set {t.type_id} on VF {t.parent}"), t.parent


def _type_number(snap: HostSnapshot, type_name: str) -> int | None:

    try:
        return resolve_type(snap.types(), type_name)[0].numeric_id
    except NotFoundError:
        name = type_name.strip().lower()
        return int(name) if name.isdigit() else nvidia_type_number(name)


def plan_vf_clear(snap: HostSnapshot, vf: str) -> Plan:
    vf = pci_address(vf)

    return Plan.of(vf_vgpu.MODE.plan_clear(snap, vf), f"clear VF {vf}")


def plan_sriov(snap: HostSnapshot, pf: str, enable: bool, num: int | None = None, *, present: bool = False) -> Plan:
    """Enable (`num` VFs, default all) or disable a PF's VFs; `present`: NVIDIA's sriov-manage is installed."""
    pf = pci_address(pf)

    if enable:
        return Plan.of(sriov.MODE.plan_enable(snap, pf, num, sriov_manage=present), f"enable VFs of {pf}")
    return Plan.of(sriov.MODE.plan_disable(snap, pf, sriov_manage=present), f"disable VFs of {pf}")


def plan_vfio_bind(snap: HostSnapshot, gpu: str, force: bool = False) -> Plan:
    """Bind the whole IOMMU group of `gpu` to vfio-pci (empty when already bound)."""
    gpu = pci_address(gpu)

    return Plan.of(passthrough.MODE.plan_bind(snap, gpu, force), f"bind the IOMMU group of {gpu} to vfio-pci")


def plan_vfio_restore(snap: HostSnapshot, gpu: str, original: dict[str, str]) -> Plan:
    """Give the group of `gpu` back to its original drivers (`original`: those `vfio bind` remembered)."""
    gpu = pci_address(gpu)

    return Plan.of(passthrough.MODE.plan_restore(snap, gpu, original), f"give {gpu} back to its drivers")
