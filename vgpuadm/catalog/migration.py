"""What moving a VM's GPU devices to another host needs, as data and rules (`vgpuadm migrate check`). Pure.

The target host is read from its inventory document (vgpuadm-inventory/1, `vgpuadm inventory --json` run there),
checked here where it enters into a TargetHost: the types it offers with their free instances per GPU, and its
GPUs (model, PCI ids, whether the whole GPU is free). Each mode says how its devices move (modes/base.py
Mode.live_move / Mode.room_on); the rules they share are here:

- NVIDIA vGPU live migration (VFIO migration v2: Linux ≥ 5.18, QEMU ≥ 8.1, libvirt ≥ 8.6) needs a free vGPU of
  the same type on the target, and is refused while the VM enables unified memory, debugging or profiling
  (`vgpu_params` enable_uvm, enable_debugging, enable_profiling — NVIDIA's vGPU user guide, "Migrating a VM
  Configured with vGPU").
- Some board pairs never migrate: Hopper boards only to the same board (H100, H200 and H800 not between each
  other; the 80 GB PCIe H100 not with the 94 GB NVL one) — the model names compared as pci.ids prints them [I: the
  release notes name the pairs, not the ids].
- QEMU ≥ 8.2 refuses post-copy with a VFIO device: a live move of a VM with one is pre-copy only.
- Both GPUs need the same ECC setting, and the host drivers compatible releases (NVIDIA's vGPU user guide, "Migrating
  a VM Configured with vGPU"; which releases pair is in each release's notes, so vgpuadm asks for the same release
  branch, 580.x with 580.x [I]). Compared where both hosts' drivers report them (`nvidia-smi -q`: GpuDriver).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vgpuadm.errors import UsageError
from vgpuadm.model import VERSION_PATTERN, mdev_parent_name, split_params

FORBIDDING_PARAMS = ("enable_uvm", "enable_debugging", "enable_profiling")  # vgpu_params that block a live move
HOPPER = ("H100", "H200", "H800")
POSTCOPY = "post-copy was asked for: QEMU 8.2 and later refuse post-copy with a VFIO device (drop --postcopy)"
MAX_TARGET_GPUS = 1024  # GPUs one target inventory may list
_VERSION = re.compile(VERSION_PATTERN)  # a driver release
_TYPE_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:-")
_HINT = "pass the target's `vgpuadm inventory --json` (schema vgpuadm-inventory/1)"


@dataclass(frozen=True)
class Landing:
    """Where a moved device would be made on the target (Mode.room_on): `take`, what it takes there as TargetHost
    counts it (None: nothing on the target's GPUs); `gpu`, the target GPU; `why_not`, why the target has nothing
    for it; `not_live`, why it could then move only with its domain stopped (a board pair)."""

    take: str | None = None
    gpu: str | None = None
    why_not: str | None = None
    not_live: str | None = None


@dataclass(frozen=True)
class GpuDriver:
    """What a GPU's driver reports of it that a live move needs to match on both hosts (None: not reported)."""

    ecc: str | None = None  # Enabled | Disabled
    version: str | None = None  # the host driver's release, 580.159.04


@dataclass(frozen=True)
class TargetGpu:
    """One physical GPU of the target host, as its inventory lists it."""

    address: str
    model: str | None
    vendor_id: str | None
    device_id: str | None
    whole_gpu_free: bool
    driver: GpuDriver = GpuDriver()


@dataclass(frozen=True)
class TargetHost:
    """The target host, from its inventory: `types` type id → (its name, (GPU address, free instances) per GPU)."""

    name: str
    gpus: Mapping[str, TargetGpu]
    types: Mapping[str, tuple[str, tuple[tuple[str, int], ...]]]

    def type_gpus(self, type_id: str, name: str | None, taken: Counter[str]) -> tuple[list[TargetGpu], str | None]:
        """The target GPUs with a free `type_id` of the same `name` (type ids differ between driver releases; None:
        the source does not list the name now), less what this move already `taken` (per type and GPU); else []
        and why none."""
        offered = self.types.get(type_id)
        if offered is None or (name is not None and offered[0] != name):
            return [], f"the target does not offer {type_id}" + (f" ({name})" if name else "")
        free = [self.gpus[g] for g, n in offered[1] if n - taken[f"{type_id}@{g}"] > 0 and g in self.gpus]
        return free, None if free else f"no free {type_id} on the target"

    def whole_gpus(self, vendor_id: str | None, device_id: str | None, taken: Counter[str]) -> list[TargetGpu]:
        """The target's free whole GPUs of this vendor and device id, less those this move already takes."""
        return [g for g in self.gpus.values() if g.whole_gpu_free and (g.vendor_id, g.device_id) == (vendor_id,
                device_id) and not taken[f"gpu@{g.address}"]]  # fmt: skip


def vgpu_landing(target: TargetHost, type_id: str, name: str | None, board: str | None, taken: Counter[str]) -> Landing:
    """A vGPU of `type_id` (`name`) from a `board`: a target GPU with one free, preferring a board it can move to
    live (board_pair); else why none."""
    gpus, why = target.type_gpus(type_id, name, taken)
    if not gpus:
        return Landing(why_not=why)
    live = [g for g in gpus if board_pair(board, g.model) is None]
    g = (live or gpus)[0]
    return Landing(take=f"{type_id}@{g.address}", gpu=g.address, not_live=board_pair(board, g.model))


def live_params(params: str | None) -> str | None:
    """Why vgpu_params `params` keep a vGPU from moving live (None: they do not)."""
    pairs = dict(p.partition("=")[::2] for p in split_params(params))
    on = [k for k in FORBIDDING_PARAMS if pairs.get(k, "0") not in ("0", "")]
    return f"its vgpu_params enable {', '.join(on)}: NVIDIA allows no live migration then" if on else None


def board_pair(source: str | None, target: str | None) -> str | None:
    """Why a vGPU on a `source` board cannot move live to a `target` board (None: it can, as far as known)."""
    if source and target and source != target and any(h in source for h in HOPPER) and any(h in target for h in HOPPER):
        return f"a vGPU does not migrate between a {source} and a {target}"
    return None


def driver_rule(source: GpuDriver | None, target: TargetGpu | None) -> str | None:
    """Why a vGPU cannot move live from a GPU whose driver reports `source` to the target GPU (None: it can, or what
    it needs is not reported on one side: `compared` says which)."""
    if source is None or target is None:
        return None
    there = target.driver
    if source.ecc and there.ecc and source.ecc != there.ecc:
        return (f"ECC is {source.ecc.lower()} here and {there.ecc.lower()} on the target's {target.address}: NVIDIA "
                "migrates a vGPU only between GPUs with the same ECC setting")  # fmt: skip
    if source.version and there.version and source.version.split(".")[0] != there.version.split(".")[0]:
        return (f"the host drivers are of different release branches ({source.version} here, {there.version} on "
                "the target): NVIDIA migrates a vGPU live only between releases its notes pair")  # fmt: skip
    return None


def compared(source: GpuDriver | None, target: TargetGpu | None) -> bool:
    """Whether both hosts' drivers report what driver_rule compares."""
    return bool(source and target and source.ecc and source.version and target.driver.ecc and target.driver.version)


def target_host(doc: Mapping[str, Any], where: str) -> TargetHost:
    """The TargetHost of an inventory document already checked by report/merge.load_report (schema, host, types
    rows); its gpus[] are checked here: one UsageError naming `where` on the first value out of its grammar."""

    def bad(what: str) -> UsageError:
        return UsageError(f"{where}: {what}", _HINT)

    rows = doc.get("gpus")
    if not isinstance(rows, list) or len(rows) > MAX_TARGET_GPUS:
        raise bad(f"gpus is not a list of at most {MAX_TARGET_GPUS} GPUs")
    gpus: dict[str, TargetGpu] = {}
    for row in rows:
        if not isinstance(row, dict) or not isinstance(row.get("address"), str):
            raise bad("a gpus[] row has no address")
        address = _gpu_name(row["address"], bad, "gpus[] address")
        texts = [row.get(k) for k in ("model", "vendor_id", "device_id")]
        if not all(v is None or (isinstance(v, str) and len(v) <= 80 and v.isprintable()) for v in texts):
            raise bad(f"gpus[] {address}: model, vendor_id and device_id are short printable text or null")
        whole = row.get("whole_gpu_free")  # 1: the whole GPU is free for passthrough; 0 or null: it is not
        ecc, version = row.get("ecc"), row.get("driver_version")
        if ecc not in (None, "Enabled", "Disabled") or not (
            version is None or (isinstance(version, str) and _VERSION.fullmatch(version))
        ):
            raise bad(f"gpus[] {address}: ecc is Enabled or Disabled, driver_version a release such as 580.159.04")
        gpus[address] = TargetGpu(address, texts[0], texts[1], texts[2], type(whole) is int and whole > 0,
                                  GpuDriver(ecc, version))  # fmt: skip
    types: dict[str, tuple[str, tuple[tuple[str, int], ...]]] = {}
    for t in doc.get("types", ()):
        if not _TYPE_ID_CHARS.issuperset(t["type_id"]) or not 0 < len(t["type_id"]) <= 64:
            raise bad(f"types[] type_id {t['type_id'][:40]!r} is no vGPU type id")
        if t["name"] is not None and not (len(t["name"]) <= 128 and t["name"].isprintable()):
            raise bad(f"types[] {t['type_id']}: the name is not short printable text")
        per_gpu = t.get("gpus") if isinstance(t.get("gpus"), list) else []
        free = tuple(_free(g, t["type_id"], bad) for g in per_gpu)
        types[t["type_id"]] = (t["name"], free)
    return TargetHost(str(doc["host"]), gpus, types)


def _free(row: Any, type_id: str, bad: Any) -> tuple[str, int]:
    if not (isinstance(row, dict) and isinstance(row.get("gpu"), str) and type(row.get("free")) is int):
        raise bad(f"types[] {type_id}: a gpus[] row needs a gpu address and a free count")
    return _gpu_name(row["gpu"], bad, f"types[] {type_id}: gpu"), max(row["free"], 0)


def _gpu_name(text: str, bad: Any, what: str) -> str:
    """A GPU as an inventory names it: a PCI address (canonical form), or a virtual mdev parent's name (mtty)."""
    try:
        return mdev_parent_name(text)
    except UsageError:
        raise bad(f"{what} {text[:40]!r} is no PCI address or device name") from None
