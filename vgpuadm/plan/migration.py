"""`vgpuadm migrate check`: whether each device of a VM can move to a target host live, only with the VM stopped
(cold), or not at all, and why. Each mode answers for its devices (Mode.live_move, Mode.room_on) against the target's
inventory (catalog/migration.py TargetHost); the devices of one VM are counted against each other on the target.
Pure."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from vgpuadm import modes
from vgpuadm.catalog.migration import POSTCOPY, GpuDriver, TargetHost, compared, driver_rule
from vgpuadm.model import Allocation, HostSnapshot

SCHEMA = "vgpuadm-migrate-check/1"
MOVES = ("live", "cold", "no")  # best first
NOT_COMPARED = (
    "not compared (the driver of this host or of the target does not report them): the GPUs' ECC settings and the "
    "host driver releases, which NVIDIA requires to match for a live move"
)


@dataclass(frozen=True)
class DeviceMove:
    """How one recorded device moves: `move` live | cold | no, `reasons` why not live (cold) or not at all (no),
    `target_gpu` the target GPU it would be made on (None: nothing to make there)."""

    device: str
    what: str
    mode: str
    type_id: str | None
    move: str
    target_gpu: str | None
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class MoveCheck:
    domain: str
    running: bool | None
    offline: bool
    target: str
    devices: tuple[DeviceMove, ...]
    notes: tuple[str, ...]

    @property
    def move(self) -> str:
        """How the whole VM moves: as its least movable device (live when it has none)."""
        return max((d.move for d in self.devices), key=MOVES.index, default="live")

    @property
    def ok(self) -> bool:
        """The VM can move the way asked: live while it runs (unless --offline), else cold."""
        return self.move == "live" or (self.move == "cold" and (self.offline or self.running is False))

    def to_json(self) -> dict[str, Any]:
        """The `migrate check --json` document (vgpuadm/schemas/migrate-check.schema.json)."""
        return {
            "schema": SCHEMA,
            "domain": self.domain,
            "running": self.running,
            "offline": self.offline,
            "target": self.target,
            "move": self.move,
            "ok": self.ok,
            "devices": [
                {"device": d.device, "what": d.what, "mode": d.mode, "type_id": d.type_id, "move": d.move,
                 "target_gpu": d.target_gpu, "reasons": list(d.reasons)}
                for d in self.devices
            ],
            "notes": list(self.notes),
        }  # fmt: skip


def check(
    snap: HostSnapshot,
    domain: str,
    running: bool | None,
    allocations: Iterable[Allocation],
    target: TargetHost,
    *,
    postcopy: bool = False,
    offline: bool = False,
    drivers: Mapping[str, GpuDriver] | None = None,
) -> MoveCheck:
    """Each of `domain`'s recorded devices against the target: a device the target has no room for cannot move; one
    its mode cannot move live (or a board pair, GPUs whose drivers differ, or post-copy for a VFIO device) moves only
    cold. `drivers`: what this host's driver reports per physical GPU (GpuDriver)."""
    taken: Counter[str] = Counter()
    out: list[DeviceMove] = []
    reasons: tuple[str, ...]
    uncompared = False
    for a in sorted(allocations, key=lambda a: (a.slot is None, a.slot or 0)):
        mode = modes.for_name(a.mode)
        landing = mode.room_on(snap, target, a, taken)
        if landing.why_not is not None:
            move, reasons = "no", (landing.why_not,)
        else:
            if landing.take is not None:
                taken[landing.take] += 1
            vfio = POSTCOPY if postcopy and mode.hostdev else None
            source = (drivers or {}).get(snap.physical_gpu(mode.host_device(a) or ""))
            there = target.gpus.get(landing.gpu) if landing.gpu else None
            reasons = tuple(r for r in (mode.live_move(a), landing.not_live, driver_rule(source, there), vfio) if r)
            move = "cold" if reasons else "live"
            uncompared |= move == "live" and landing.gpu is not None and not compared(source, there)
        out.append(DeviceMove(mode.handle(a) or mode.describe(a), mode.describe(a), a.mode, a.type_id, move,
                              landing.gpu, reasons))  # fmt: skip
    notes = (NOT_COMPARED,) if uncompared else ()
    return MoveCheck(domain, running, offline, target.name, tuple(out), notes)
