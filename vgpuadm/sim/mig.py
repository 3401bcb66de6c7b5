"""Simulated MIG: mode changes, GPU and compute instances, and vGPUs binding to GPU instances (the driver's side of
MIG-backed vGPU). The state is the marker's `mig` model (sim/migmodel.py): it is not a sysfs file, as with the
vGPU usage count (sim/usage.py). Every operation runs under the root lock and either changes the state whole or
raises MigError with nvidia-smi's words; nothing is half-done.

Rules (the MIG user guide and NVIDIA's vGPU documentation, reference §3.5):
- `-mig 1|0` is refused while a vGPU exists on the GPU or one of its VFs is open ("In use by another client"), and
  `-mig 0` while GPU instances exist. On a board that needs a reset the change stays pending (nvidia-smi prints the
  published "pending enable state" warning) until `nvidia-smi -r` or a reboot.
- `-cgi` places an instance at the given start slot or, without one, at the lowest free start for 1-slot profiles
  and the highest for larger ones [I: the published A100 sequence 9,19,14,19 → 4:4, 0:1, 2:2, 1:1]. GPU instance
  ids are the lowest unused from 1 [I: real ids follow the hardware's slice map (the A100 printed 1, 11, 6, 12);
  nothing may depend on them].
- `-dgi` is refused while a vGPU or a compute instance uses the instance.
- GPU instances and compute instances do not survive a reboot; MIG mode does (reference §3.5). A GPU reset loses
  the instances too, and MIG mode on the boards whose mode does not survive one (Hopper and newer; migmodel.py).
"""

from __future__ import annotations

import errno as errno_mod
from typing import Any

from vgpuadm.sim import migmodel
from vgpuadm.sim.state import SimHost, fail


class MigError(Exception):
    """nvidia-smi's refusal: `message` is its line, `code` its exit status."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def nv_address(pf: str) -> str:
    """0000:18:00.0 → 00000000:18:00.0, as nvidia-smi prints a GPU."""
    domain, rest = pf.split(":", 1)
    return f"{int(domain, 16):08X}:{rest.upper()}"


def states(host: SimHost) -> dict[str, dict[str, Any]]:
    return host.model.get("mig") or {}


def by_index(host: SimHost, index: int) -> tuple[str, dict[str, Any]]:
    order = migmodel.gpu_order(host.model)
    if 0 <= index < len(order) and order[index] in states(host):
        return order[index], states(host)[order[index]]
    raise MigError(f"No GPU with index {index}", 6)  # nvidia-smi: "No devices were found" / exit 6


def save(host: SimHost) -> None:
    host.tree.marker(host.model)


def _vgpu_dirs(host: SimHost, pf: str) -> list[str]:
    """Device dirs of the vGPUs on the GPU's VFs: layout C VFs with a type, layout B mdevs on its VFs."""
    info = host.model["sriov"].get(pf)
    if info is None:
        return []
    vf_dirs = {f"{info['parent_dir']}/{vf}" for vf in info["vfs"]}
    out = [d for d in sorted(vf_dirs) if int(host.read(f"{d}/nvidia/current_vgpu_type") or 0) != 0]
    out += [m.path for m in host.mdevs().values() if host.resolve(f"{m.path}/..") in vf_dirs]
    return out


def _busy(host: SimHost, pf: str) -> bool:
    info = host.model["sriov"].get(pf) or {"vfs": [], "parent_dir": ""}
    in_use = set(host.model.get("vgpu_in_use") or ())
    vf_dirs = {f"{info['parent_dir']}/{vf}" for vf in info["vfs"]}
    return bool(_vgpu_dirs(host, pf)) or bool(in_use & vf_dirs)


def set_mode(host: SimHost, index: int, on: bool) -> str:
    """`nvidia-smi -i N -mig 1|0`: the text it prints."""
    pf, st = by_index(host, index)
    word = "Enabled" if on else "Disabled"
    verb = "enable" if on else "disable"
    if _busy(host, pf) or (not on and st["instances"]):
        raise MigError(f"Unable to {verb} MIG Mode for GPU {nv_address(pf)}: In use by another client")
    if st["reset_needed"] and st["mode"] != word:
        st["pending"] = word
        save(host)
        return (f"Warning: MIG mode is in pending {verb} state for GPU {nv_address(pf)}:Not Supported\n"
                f"Reboot the system or try nvidia-smi --gpu-reset to make MIG mode effective on GPU "
                f"{nv_address(pf)}\nAll done.\n")  # fmt: skip
    st["mode"] = st["pending"] = word
    save(host)
    return f"{word} MIG Mode for GPU {nv_address(pf)}\nAll done.\n"


def reset(host: SimHost, index: int) -> str:
    """`nvidia-smi -r -i N`: refused while the GPU is busy; applies a pending MIG mode."""
    pf, st = by_index(host, index)
    if _busy(host, pf):
        raise MigError(f"Unable to reset GPU {nv_address(pf)} because it's being used by some other process")
    _apply_pending(host, pf, st)
    return f"GPU {nv_address(pf)} was successfully reset.\nAll done.\n"


def _apply_pending(host: SimHost, pf: str, st: dict[str, Any]) -> None:
    st["mode"] = st["pending"]
    st["instances"], st["cis"] = [], []
    save(host)


def reboot(host: SimHost) -> None:
    """Pending modes take effect; GPU and compute instances are gone (caller holds the lock)."""
    for pf, st in states(host).items():
        _apply_pending(host, pf, st)


def gpu_reset(host: SimHost, pf: str) -> list[str]:
    """The GPU was reset (a recovered Xid, `vgpuadm sim reset`; caller holds the lock): its GPU and compute instances
    are gone, a pending mode takes effect, and on a board whose mode does not survive a reset (Hopper and newer,
    migmodel's `mode_survives_reset`) MIG mode is off. What was lost, in words."""
    st = state_of_pf(host, pf)
    if st is None:
        return []
    lost = [f"{len(st['instances'])} GPU instance(s)"] if st["instances"] else []
    if not st.get("mode_survives_reset", True):
        if migmodel.enabled(st) or st["pending"] == "Enabled":
            lost.append("MIG mode")
        st["pending"] = "Disabled"
    _apply_pending(host, pf, st)
    return lost


def _profile_by_word(st: dict[str, Any], word: str) -> dict[str, Any]:
    """A `-cgi` item: a profile id (`19`) or name (`1g.18gb`, `MIG 1g.18gb`)."""
    word = word.strip().removeprefix("MIG ").strip()
    for p in st["profiles"]:
        if word == str(p["id"]) or word == p["name"]:
            return p
    raise MigError(f"Unable to create a GPU instance using profile {word}: Not Found", 2)


def create_gi(host: SimHost, index: int, items: list[str], with_ci: bool) -> str:
    """`nvidia-smi mig -i N -cgi A[:START],B… [-C]`: all or nothing (the whole list is placed before any is kept)."""
    _pf, st = by_index(host, index)
    if not migmodel.enabled(st):
        raise MigError(f"Unable to create a GPU instance on GPU  {index}: MIG mode is not enabled", 6)  # [I] wording
    instances = list(st["instances"])
    cis = list(st["cis"])
    lines = []
    trial = dict(st, instances=instances)
    for item in items:
        word, _, start_text = item.partition(":")
        p = _profile_by_word(st, word)
        count = sum(1 for gi in instances if gi["profile"] == p["id"])
        used = migmodel.used_slots(trial)
        fits = [s for s in p["starts"] if not used & set(range(s, s + p["size"]))]
        if start_text:
            if not start_text.isdecimal() or int(start_text) not in p["starts"]:
                raise MigError(f"Invalid placement {start_text} for profile {p['name']}", 2)
            fits = [s for s in fits if s == int(start_text)]
        if not fits or count >= p["total"]:
            raise MigError(f"Unable to create a GPU instance on GPU  {index} using profile {p['id']}: "
                           "Insufficient Resources")  # fmt: skip
        start = fits[0] if p["size"] == 1 or start_text else fits[-1]
        ids = {gi["id"] for gi in instances}
        gid = next(n for n in range(1, 64) if n not in ids)
        instances.append({"id": gid, "profile": p["id"], "start": start, "users": []})
        lines.append(f"Successfully created GPU instance ID {gid:2d} on GPU {index:2d} using profile MIG {p['name']} "
                     f"(ID {p['id']:2d})")  # fmt: skip
        if with_ci:
            cis.append({"gi": gid, "id": 0, "profile": 0})
            lines.append(f"Successfully created compute instance ID  0 on GPU {index:2d} GPU instance ID {gid:2d} "
                         f"using profile MIG {p['name']} (ID  0)")  # fmt: skip
    st["instances"], st["cis"] = instances, cis
    save(host)
    return "\n".join(lines) + "\n"


def destroy_gi(host: SimHost, index: int, gi_ids: list[int] | None) -> str:
    """`nvidia-smi mig -i N -dgi [-gi ID,…]`: every named instance (all when none is named), all or nothing."""
    _pf, st = by_index(host, index)
    targets = [gi for gi in st["instances"] if gi_ids is None or gi["id"] in gi_ids]
    missing = sorted(set(gi_ids or ()) - {gi["id"] for gi in targets})
    if missing:
        raise MigError(f"Unable to destroy GPU instance ID {missing[0]:2d} from GPU {index:2d}: Not Found", 6)
    if not targets:
        raise MigError("No GPU instances found: Not Found", 6)
    for gi in targets:
        if gi["users"] or any(ci["gi"] == gi["id"] for ci in st["cis"]):
            raise MigError(f"Unable to destroy GPU instance ID {gi['id']:2d} from GPU {index:2d}: In use by another "
                           "client")  # fmt: skip
    gone = {gi["id"] for gi in targets}
    st["instances"] = [gi for gi in st["instances"] if gi["id"] not in gone]
    save(host)
    return "".join(f"Successfully destroyed GPU instance ID {g:2d} from GPU {index:2d}\n" for g in sorted(gone))


def create_ci(host: SimHost, index: int, gi_ids: list[int]) -> str:
    """`nvidia-smi mig -i N -gi ID -cci`: the default compute instance (the whole GI) in each named GI."""
    _pf, st = by_index(host, index)
    lines = []
    for gid in gi_ids:
        gi = next((g for g in st["instances"] if g["id"] == gid), None)
        if gi is None:
            raise MigError(f"Unable to create a compute instance on GPU {index:2d} GPU instance ID {gid:2d}: Not Found",
                           6)  # fmt: skip
        if any(ci["gi"] == gid for ci in st["cis"]):
            raise MigError(f"Unable to create a compute instance on GPU {index:2d} GPU instance ID {gid:2d}: "
                           "Insufficient Resources")  # fmt: skip
    for gid in gi_ids:
        st["cis"].append({"gi": gid, "id": 0, "profile": 0})
        name = (migmodel.profile(st, next(g for g in st["instances"] if g["id"] == gid)["profile"]) or {})["name"]
        lines.append(f"Successfully created compute instance ID  0 on GPU {index:2d} GPU instance ID {gid:2d} using "
                     f"profile MIG {name} (ID  0)")  # fmt: skip
    save(host)
    return "\n".join(lines) + "\n"


def destroy_ci(host: SimHost, index: int, gi_ids: list[int] | None) -> str:
    _pf, st = by_index(host, index)
    gone = [ci for ci in st["cis"] if gi_ids is None or ci["gi"] in gi_ids]
    if not gone:
        raise MigError("No compute instances found: Not Found", 6)
    st["cis"] = [ci for ci in st["cis"] if ci not in gone]
    save(host)
    return "".join(f"Successfully destroyed compute instance ID  0 from GPU {index:2d} GPU instance ID {ci['gi']:2d}\n"
                   for ci in gone)  # fmt: skip


# -- the kernel side: vGPUs take and release GPU instances ----------------------------------------------------------
def state_of_pf(host: SimHost, pf: str | None) -> dict[str, Any] | None:
    return states(host).get(pf or "")


def bind(host: SimHost, pf: str, type_key: str | int, device_dir: str) -> int:
    """A vGPU of a MIG-backed type is created on `device_dir`: it takes a free matching GPU instance, or the write
    fails with EIO as the driver's does (NVRM 0x38, reference §3.3). Returns the instance id."""
    st = state_of_pf(host, pf)
    gi = migmodel.free_instance(st, type_key) if st else None
    if gi is None:
        fail(errno_mod.EIO)
    gi["users"].append(device_dir)
    save(host)
    return int(gi["id"])


def unbind(host: SimHost, device_dir: str) -> None:
    """The vGPU on `device_dir` is gone: its GPU instance is free again (for that vGPU)."""
    changed = False
    for st in states(host).values():
        for gi in st["instances"]:
            if device_dir in gi["users"]:
                gi["users"].remove(device_dir)
                changed = True
    if changed:
        save(host)
