"""A simulated `nvidia-smi` for simulated NVIDIA hosts, answering from the simulated host's model in the real tool's
layouts (the real H200's `mig -lgip`/`-lgipp`, the published `-lgi`/`-lci`; tests/data/README.md):

  vgpu -s [-v]                every vGPU type each GPU supports, whether or not one can be created now
  -q -x                       MIG mode current/pending, virtualization mode, host vGPU mode
  -q                          the same as text, with the vGPU heterogeneous mode and device capabilities
  vgpu -c -v                  the types creatable now, with Placement Size and Creatable Placement IDs
  vgpu -i N -shm 1|0          heterogeneous (mixed-size) time-sliced mode (sim/hetero.py)
  vgpu -ss                    the vGPU scheduler state of each GPU
  vgpu -q                     the active vGPUs with their VM and usage figures (sim/usage.py: `vgpuadm sim usage`)
  --query-gpu=pci.bus_id,utilization.gpu,utilization.memory,memory.used,memory.total,mig.mode.current --format=csv
                              GPU figures and MIG mode
  vgpu -i N --set-vgpu-scheduler-state POLICY [--timeslice MS]   set it (POLICY bestEffort|equalShare|fixedShare)
  -i N -mig 1|0, -r -i N      MIG mode (sim/mig.py: refused while busy, pending where the board needs a reset)
  mig -lgip|-lgipp|-lgi|-lci  profiles, placements, GPU and compute instances (`-i N` filters)
  mig -i N -cgi P[:S],… [-C]  create GPU instances (profile id or name, optional start slot), with compute instances
  mig -i N -dgi [-gi ID,…]    destroy GPU instances; `-cci`/`-dci` with `-gi` for compute instances

`vgpuadm sim build` installs it as <root>/usr/bin/nvidia-smi (a wrapper running `python -m vgpuadm.sim.nvidia_smi
ROOT ARGS…`), as the real driver package installs nvidia-smi. Other invocations say what the real one says to an
unknown combination and exit 2. Changing commands hold the simulated kernel's root lock. A read meets the faults
injected for `/usr/bin/nvidia-smi ARGS…` (sim/faults.py): a stall (a slow driver) or a failure (_driver_fault).
"""

from __future__ import annotations

import os
import re
import sys
import time
import uuid
import zlib
from collections.abc import Sequence
from typing import Any
from xml.sax.saxutils import escape

from vgpuadm.model import UUID_PATTERN
from vgpuadm.sim import faults, hetero, heteromodel, mdevs, mig, migmodel, usage, vendor_vfio
from vgpuadm.sim.state import SimHost, load_model, root_lock
from vgpuadm.sim.tools import install_tool

WRAPPER = "/usr/bin/nvidia-smi"
DRIVER_VERSION = "580.159.04"  # the real H200's (shared/fixtures/real); `sim reload-driver --version` changes it
ECC_DEFAULT = "Enabled"  # [I] data-center boards ship with ECC on; `vgpuadm sim ecc` changes it
INVALID = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n"

# The real H200's `mig -lgip` frame (81 columns, driver 580.159.04), verbatim.
_GIP_HEAD = (
    "+-------------------------------------------------------------------------------+\n"
    "| GPU instance profiles:                                                        |\n"
    "| GPU   Name               ID    Instances   Memory     P2P    SM    DEC   ENC  |\n"
    "|                                Free/Total   GiB              CE    JPEG  OFA  |\n"
    "|===============================================================================|\n"
)
_GIP_RULE = "+-------------------------------------------------------------------------------+\n"
# The published `mig -lgi` and `-lci` frames (tests/data/nvidia-smi-published/a100-pcie-40gb-510.txt).
_GI_RULE = "+-------------------------------------------------------+\n"
_GI_HEAD = (
    _GI_RULE + "| GPU instances:                                        |\n"
    "| GPU   Name             Profile  Instance   Placement  |\n"
    "|                          ID       ID       Start:Size |\n"
    "|=======================================================|\n"
)
_CI_RULE = "+--------------------------------------------------------------------+\n"
_CI_HEAD = (
    _CI_RULE + "| Compute instances:                                                 |\n"
    "| GPU     GPU       Name             Profile   Instance   Placement  |\n"
    "|       Instance                       ID        ID       Start:Size |\n"
    "|         ID                                                         |\n"
    "|====================================================================|\n"
)
NO_MIG = "No MIG-enabled devices found.\n"
_UUID = re.compile(UUID_PATTERN)


def supported_types(model: dict[str, Any], verbose: bool = True) -> str:
    """`vgpu -s -v` (or `vgpu -s`): the GPU Instance Profile ID names what a MIG-backed type needs."""
    out = []
    vendor = model.get("vendor_vfio") or {}
    states = model.get("mig") or {}
    for pf in migmodel.gpu_order(model):
        types = (vendor.get(pf) or {}).get("types") or []
        if not types:
            continue
        out.append(f"GPU {mig.nv_address(pf)}")
        need = (states.get(pf) or {}).get("types") or {}
        for num, name, fb_mib, mx in types:
            if not verbose:
                out.append(f"    {name}")
                continue
            gi = need.get(str(num), {}).get("profile", "N/A")
            out += [
                f"    vGPU Type ID                          : {num:#x}",
                f"        Name                              : {name}",
                "        Class                             : Compute",
                f"        GPU Instance Profile ID           : {gi}",
                f"        Max Instances                     : {mx if mx is not None else 'N/A'}",
                "        Max Instances Per VM              : 1",
                f"        FB Memory                         : {fb_mib} MiB",
            ]
            out += _placement_lines(model, pf, num, fb_mib, "Supported")
    return "\n".join(out) + "\n" if out else "No supported devices in vGPU mode\n"


def _placement_lines(model: dict[str, Any], pf: str, num: int, fb_mib: int, word: str, ids: list[int] | None = None
                     ) -> list[str]:  # fmt: skip
    """`Placement Size` and `<word> Placement IDs` of a time-sliced type on a GPU with heterogeneous support [I:
    IDs separated by spaces; shown whatever the mode, as NVML's heterogeneous placement lists]."""
    st = hetero.state_of(model, pf)
    if not hetero.has_placement(st, num) or not fb_mib:
        return []
    assert st is not None
    shown = heteromodel.supported_ids(st, fb_mib) if ids is None else ids
    return [
        f"        Placement Size                    : {heteromodel.placement_size(fb_mib)}",
        f"        {word + ' Placement IDs':<34}: {' '.join(map(str, shown)) if shown else 'None'}",
    ]


def creatable_types(host: SimHost) -> str:
    """`vgpu -c -v`: per GPU, the types a free VF can take now, with the placements free now."""
    out = []
    for pf in migmodel.gpu_order(host.model):
        info = host.model["sriov"].get(pf)
        types = (host.model["vendor_vfio"].get(pf) or {}).get("types") or []
        if info is None or not types:
            continue
        listed: set[int] = set()
        for vf in info["vfs"]:
            text = host.read(f"{info['parent_dir']}/{vf}/nvidia/creatable_vgpu_types") or ""
            listed |= {int(x.split(":")[0]) for x in text.splitlines()[1:] if x.split(":")[0].strip().isdigit()}
        out.append(f"GPU {mig.nv_address(pf)}")
        for num, name, fb_mib, _mx in types:
            if num not in listed:
                continue
            out += [f"    vGPU Type ID                          : {num:#x}",
                    f"        Name                              : {name}"]  # fmt: skip
            out += _placement_lines(host.model, pf, num, fb_mib, "Creatable", hetero.creatable_ids(host, pf, num, fb_mib)
                                    if hetero.enabled(hetero.state_of(host, pf)) else None)  # fmt: skip
    return "\n".join(out) + "\n" if out else "No supported devices in vGPU mode\n"


_POLICY_WORDS = {"best-effort": "Best Effort", "equal-share": "Equal Share", "fixed-share": "Fixed Share"}
_POLICY_ARGS = {"bestEffort": "best-effort", "equalShare": "equal-share", "fixedShare": "fixed-share"}


def _product(model: dict[str, Any], pf: str) -> str:
    """The board's product name (`NVIDIA H200`), not the simulated host's profile; N/A on a root built before."""
    return str((model.get("products") or {}).get(pf, "N/A"))


def query_text(model: dict[str, Any]) -> str:
    """`-q`, the vGPU fields vgpuadm reads [I: the section layout of the real -q, trimmed]."""
    states = model.get("mig") or {}
    order = migmodel.gpu_order(model)
    out = ["", "==============NVSMI LOG==============", "", f"{'Attached GPUs':<42}: {len(order)}"]
    for pf in order:
        st, hs = states.get(pf), hetero.state_of(model, pf)
        out += [
            f"GPU {mig.nv_address(pf)}",
            f"    {'Product Name':<38}: {_product(model, pf)}",
            "    MIG Mode",
            f"        {'Current':<34}: {st['mode'] if st else 'N/A'}",
            f"        {'Pending':<34}: {st['pending'] if st else 'N/A'}",
            "    GPU Virtualization Mode",
            f"        {'Virtualization Mode':<34}: Host VGPU",
            f"        {'Host VGPU Mode':<34}: SR-IOV",
            f"        {'vGPU Heterogeneous Mode':<34}: "
            + ("N/A" if hs is None else "Enabled" if hs["enabled"] else "Disabled"),
            "    vGPU Device Capability",
            f"        {'Heterogeneous Time-Slice Sizes':<34}: "
            + ("Supported" if hs and hs["supported"] else "Not Supported"),
        ]
    return "\n".join(out) + "\n"


def scheduler_state(model: dict[str, Any]) -> str:
    """`vgpu -ss` [I: layout]: policy and time slice of each GPU."""
    out = []
    for pf in migmodel.gpu_order(model):
        hs = hetero.state_of(model, pf)
        if hs is None:
            continue
        sched = hs["scheduler"]
        ts = f"{sched['timeslice_ms']} ms" if sched["timeslice_ms"] else "Default"
        out += [f"GPU {mig.nv_address(pf)}", "    vGPU Scheduler State",
                f"        {'Scheduler Policy':<34}: {_POLICY_WORDS[sched['policy']]}",
                f"        {'Time Slice':<34}: {ts}"]  # fmt: skip
    return "\n".join(out) + "\n" if out else "No supported devices in vGPU mode\n"


def query_xml(model: dict[str, Any]) -> str:
    """`-q -x`, the fields vgpuadm reads (the real document has ~300 more)."""
    states, ecc = model.get("mig") or {}, model.get("ecc") or {}
    gpus = []
    for pf in migmodel.gpu_order(model):
        st = states.get(pf)
        cur, pend = (st["mode"], st["pending"]) if st else ("N/A", "N/A")
        gpus.append(
            f'\t<gpu id="{mig.nv_address(pf)}">\n\t\t<product_name>{escape(_product(model, pf))}</product_name>\n'
            f"\t\t<mig_mode>\n\t\t\t<current_mig>{cur}</current_mig>\n\t\t\t<pending_mig>{pend}</pending_mig>\n"
            "\t\t</mig_mode>\n\t\t<gpu_virtualization_mode>\n\t\t\t<virtualization_mode>Host VGPU</virtualization_mode>\n"
            "\t\t\t<host_vgpu_mode>SR-IOV</host_vgpu_mode>\n\t\t</gpu_virtualization_mode>\n"
            f"\t\t<ecc_mode>\n\t\t\t<current_ecc>{ecc.get(pf, ECC_DEFAULT)}</current_ecc>\n"
            f"\t\t\t<pending_ecc>{ecc.get(pf, ECC_DEFAULT)}</pending_ecc>\n\t\t</ecc_mode>\n\t</gpu>\n"
        )
    version = escape(str(model.get("driver_version", DRIVER_VERSION)))
    return (f'<?xml version="1.0" ?>\n<nvidia_smi_log>\n\t<driver_version>{version}</driver_version>\n'
            f"\t<attached_gpus>{len(gpus)}</attached_gpus>\n" + "".join(gpus) + "</nvidia_smi_log>\n")  # fmt: skip


def _selected(model: dict[str, Any], index: int | None) -> list[tuple[int, str, dict[str, Any]]]:
    states = model.get("mig") or {}
    order = migmodel.gpu_order(model)
    return [(i, pf, states[pf]) for i, pf in enumerate(order) if pf in states and index in (None, i)]


def gi_profiles(model: dict[str, Any], index: int | None) -> str:
    """`mig -lgip`, listed whatever the MIG mode (the real H200 lists them with MIG off)."""
    rows = []
    for i, _pf, st in _selected(model, index):
        for p in st["profiles"]:
            ft = f"{_free_count(st, p) if migmodel.enabled(st) else p['total']}/{p['total']}"
            rows.append(
                f"|{i:>4}  MIG {p['name']:<15}{p['id']:>3}{ft:>8}        {p['mem_gib']:<7.2f}{'No':>6}     "
                f"{p['sm']:<3}{p['dec']:>5}{p['enc']:>6}   |\n"
                f"|{'':62}{p['ce']:>2}{p['jpeg']:>6}{p['ofa']:>6}   |\n" + _GIP_RULE
            )
    return _GIP_HEAD + "".join(rows) if rows else NO_MIG


def _free_count(st: dict[str, Any], p: dict[str, Any]) -> int:
    """How many more instances of `p` fit now: place them greedily on free starts (nvidia-smi's Free column)."""
    trial = {**st, "instances": list(st["instances"])}
    n = sum(1 for gi in st["instances"] if gi["profile"] == p["id"])
    free = 0
    while n + free < p["total"]:
        used = migmodel.used_slots(trial)
        fits = [s for s in p["starts"] if not used & set(range(s, s + p["size"]))]
        if not fits:
            break
        trial["instances"].append({"id": -1, "profile": p["id"], "start": fits[0], "users": []})
        free += 1
    return free


def gi_placements(model: dict[str, Any], index: int | None) -> str:
    lines = []
    for i, _pf, st in _selected(model, index):
        for p in st["profiles"]:
            word = "Placements:" if len(p["starts"]) > 1 else "Placement :"
            lines.append(f"GPU {i:2d} Profile ID {p['id']:2d} {word} {{{','.join(map(str, p['starts']))}}}:{p['size']}")
    return "\n".join(lines) + "\n" if lines else NO_MIG


def gpu_instances(model: dict[str, Any], index: int | None) -> str:
    chosen = [(i, st) for i, _pf, st in _selected(model, index) if migmodel.enabled(st)]
    if not chosen:
        return NO_MIG
    rows = []
    for i, st in chosen:
        for gi in sorted(st["instances"], key=lambda g: g["start"]):
            p = migmodel.profile(st, gi["profile"]) or {"name": "?", "size": 0}
            place = f"{gi['start']}:{p['size']}"
            rows.append(f"|{i:>4}  MIG {p['name']:<16}{gi['profile']:>2}{gi['id']:>9}{place:>13}     |\n" + _GI_RULE)
    return _GI_HEAD + "".join(rows) if rows else "No GPU instances found: Not Found\n"


def smi_gpus(host: SimHost) -> list[str]:
    """The GPUs the usage reads list: those the MIG and vGPU reads list, and every PF bound to nvidia (a layout A
    GPU's driver answers for it too)."""
    bound = {pf for pf, drv in host.model["drivers"].items()
             if drv == "nvidia" and host.link_name(f"/sys/bus/pci/devices/{pf}/driver") == "nvidia"
             and host.link_name(f"/sys/bus/pci/devices/{pf}/physfn") is None}  # fmt: skip
    return sorted(set(migmodel.gpu_order(host.model)) | bound)


def _vgpu_id(device_dir: str) -> int:
    """A made-up vGPU ID, stable for the device (the driver's are opaque 32-bit numbers)."""
    return 3251634176 + zlib.crc32(device_dir.rsplit("/", 1)[-1].encode()) % 65536


def _mdev_vgpu(host: SimHost, dev: str) -> tuple[str, int | None, str, int | None, str]:
    """An mdev's (GPU, type number, type name, FB MiB, MDEV UUID)."""
    parent_dir = os.path.dirname(dev)
    parent = os.path.basename(parent_dir)
    type_id = host.link_name(f"{dev}/mdev_type") or ""
    info = host.parent_info(parent) or {}
    t = (info.get("types") or {}).get(type_id) or {}
    gpu = info.get("physical_gpu") or host.link_name(f"{parent_dir}/physfn") or parent
    num = type_id.rsplit("-", 1)[-1]
    name = host.read(f"{parent_dir}/mdev_supported_types/{type_id}/name") or t.get("name") or type_id
    return gpu, int(num) if num.isdecimal() else None, name, t.get("fb_mib"), os.path.basename(dev)


def _vf_vgpu(host: SimHost, dev: str) -> tuple[str, int | None, str, int | None, str]:
    """A layout C VF's (GPU, type number, type name, FB MiB, "N/A": no MDEV UUID)."""
    pf = host.link_name(f"{dev}/physfn") or ""
    text = host.read(f"{dev}/nvidia/current_vgpu_type") or "0"
    num = int(text) if text.isdecimal() else 0
    types = (host.model["vendor_vfio"].get(pf) or {}).get("types") or []
    name, fb = next(((n, fb) for t, n, fb, _mx in types if t == num), (str(num), None))
    return pf, num, name, fb, "N/A"


def _line(indent: int, key: str, value: object) -> str:
    return f"{' ' * indent}{key:<{38 - indent}}: {value}\n"


def _usage_block(host: SimHost, dev: str, f: dict[str, Any], gi: int | None) -> tuple[str, str]:
    """(GPU, the `vGPU ID` block) of a vGPU a guest runs on, in the layout of NVIDIA's vGPU user guide ("Getting
    Details About vGPUs": `nvidia-smi vgpu -q`) [I: the simulated fields and values; utilization reads N/A on a GPU
    with MIG on, as NVML documents it unsupported there]."""
    is_mdev = _UUID.fullmatch(os.path.basename(dev)) is not None
    gpu, num, name, fb, mdev = (_mdev_vgpu if is_mdev else _vf_vgpu)(host, dev)
    if gi is None and not is_mdev:
        text = host.read(f"{dev}/nvidia/gpu_instance_id")
        gi = int(text) if text and text.isdecimal() else None
    placement = host.read(f"{dev}/nvidia/placement_id") if not is_mdev else None
    vid = _vgpu_id(dev)
    fb = fb or 0
    mig_on = gi is not None
    util = {k: "N/A" if mig_on else f"{f[k]} %" for k in ("gpu", "memory", "encoder", "decoder")}
    out = [_line(4, "vGPU ID", vid), _line(8, "VM UUID", f["vm_uuid"]), _line(8, "VM Name", f["vm_name"] or "N/A"),
           _line(8, "vGPU Name", name), _line(8, "vGPU Type", num if num is not None else "N/A"),
           _line(8, "vGPU UUID", uuid.uuid5(uuid.NAMESPACE_URL, dev)),
           _line(8, "MDEV UUID", mdev), _line(8, "Guest Driver Version", f["driver"]),
           _line(8, "License Status", f["license"]), _line(8, "GPU Instance ID", gi if gi is not None else "N/A"),
           _line(8, "Placement ID", placement if placement not in (None, "-1") else "N/A"),
           _line(8, "Accounting Mode", "Disabled"), _line(8, "ECC Mode", "N/A"),
           _line(8, "Accounting Buffer Size", 4000), _line(8, "Frame Rate Limit", "N/A"), "        PCI\n",
           _line(12, "Bus Id", "00000000:00:00.0"), "        FB Memory Usage\n", _line(12, "Total", f"{fb} MiB"),
           _line(12, "Used", f"{f['fb_used_mib']} MiB"), _line(12, "Free", f"{max(fb - f['fb_used_mib'], 0)} MiB"),
           "        Utilization\n", _line(12, "Gpu", util["gpu"]), _line(12, "Memory", util["memory"]),
           _line(12, "Encoder", util["encoder"]), _line(12, "Decoder", util["decoder"])]  # fmt: skip
    for section in ("Encoder Stats", "FBC Stats"):
        out += [f"        {section}\n", _line(12, "Active Sessions", 0), _line(12, "Average FPS", 0),
                _line(12, "Average Latency", 0)]  # fmt: skip
    return gpu, "".join(out)


def vgpu_query(host: SimHost) -> str:
    """`nvidia-smi vgpu -q`: per GPU its active vGPUs. A vGPU a guest runs on (sim/usage.py: `vgpuadm sim usage`)
    has the full block (_usage_block); a vGPU on a GPU instance without a guest keeps the short block of the
    published fragment (tests/data/nvidia-smi-published/vgpu-q-fragment.txt: `MDEV UUID`, N/A for a layout C VF's,
    and `GPU Instance ID`) [I: the simulated driver tracks GPU-instance users per vGPU, not guests]."""
    model = host.model
    figures: dict[str, dict[str, Any]] = model.get(usage.FIGURES) or {}
    on_gi = {u: gi["id"] for st in (model.get("mig") or {}).values() for gi in st.get("instances", [])
             for u in gi["users"]}  # fmt: skip
    blocks: dict[str, list[tuple[str, str]]] = {}
    for dev, f in figures.items():
        if host.exists(dev):
            gpu, text = _usage_block(host, dev, f, on_gi.get(dev))
            blocks.setdefault(gpu, []).append((dev.rsplit("/", 1)[-1], text))
    for pf, st in (model.get("mig") or {}).items():
        for gi in st.get("instances", []):
            for device in gi["users"]:
                if device in figures and host.exists(device):
                    continue
                name = device.rsplit("/", 1)[-1]
                mdev = name if _UUID.fullmatch(name) else "N/A"
                blocks.setdefault(pf, []).append((name, _line(4, "vGPU ID", _vgpu_id(device)) + _line(8, "MDEV UUID", mdev)
                                                  + _line(8, "GPU Instance ID", gi["id"])))  # fmt: skip
    out = []
    for pf in sorted(set(smi_gpus(host)) | set(blocks)):
        mine = sorted(blocks.get(pf, []))
        out.append(f"GPU {mig.nv_address(pf)}\n{_line(4, 'Active vGPUs', len(mine))}" + "".join(t for _, t in mine))
    return "".join(out)


GPU_USAGE_FIELDS = "pci.bus_id,utilization.gpu,utilization.memory,memory.used,memory.total,mig.mode.current"


def _fb_total(host: SimHost, pf: str) -> int:
    """The board's memory [I]: the largest FB one type's instances cover."""
    sizes = [fb * (mx or 1) for _n, _name, fb, mx in (host.model["vendor_vfio"].get(pf) or {}).get("types") or []]
    for info in host.model["mdev_parents"].values():
        if info.get("physical_gpu") == pf:
            sizes += [(t.get("fb_mib") or 0) * (t.get("max") or 1) for t in info["types"].values()]
    return max(sizes, default=0)


def gpu_usage(host: SimHost) -> str:
    """`--query-gpu=pci.bus_id,utilization.gpu,utilization.memory,memory.used,memory.total,mig.mode.current
    --format=csv`, in the real H200's CSV layout (tests/data/h200-passthrough-guest/nvidia-host.txt: units after each
    value); utilization `[N/A]` on a GPU with MIG on (NVML: not supported on MIG-enabled GPUs), `[N/A]` the MIG mode
    of a GPU without MIG."""
    figures = host.model.get(usage.GPU_FIGURES) or {}
    states = host.model.get("mig") or {}
    rows = [
        "pci.bus_id, utilization.gpu [%], utilization.memory [%], memory.used [MiB], memory.total [MiB], "
        "mig.mode.current"
    ]
    for pf in smi_gpus(host):
        f = {**usage.GPU_DEFAULTS, **(figures.get(pf) or {})}
        mig_on = migmodel.enabled(states[pf]) if pf in states else False
        gpu, mem = ("[N/A]", "[N/A]") if mig_on else (f"{f['gpu']} %", f"{f['memory']} %")
        mode = (states.get(pf) or {}).get("mode", "[N/A]")
        rows.append(f"{mig.nv_address(pf)}, {gpu}, {mem}, {f['fb_used_mib']} MiB, {_fb_total(host, pf)} MiB, {mode}")
    return "\n".join(rows) + "\n"


def compute_instances(model: dict[str, Any], index: int | None) -> str:
    chosen = [(i, st) for i, _pf, st in _selected(model, index) if migmodel.enabled(st)]
    if not chosen:
        return NO_MIG
    rows = []
    for i, st in chosen:
        for ci in st["cis"]:
            gi = next(g for g in st["instances"] if g["id"] == ci["gi"])
            p = migmodel.profile(st, gi["profile"]) or {"name": "?", "size": 0}
            place = f"0:{p['size']}"
            rows.append(f"|{i:>4}{ci['gi']:>7}       MIG {p['name']:<16}{ci['profile']:>2}{ci['id']:>10}{place:>13}     |\n"
                        + _CI_RULE)  # fmt: skip
    return _CI_HEAD + "".join(rows) if rows else "No compute instances found: Not Found\n"


def refresh(host: SimHost, pf: str) -> None:
    """What the GPU's VFs offer after a MIG change."""
    if pf in host.model["vendor_vfio"]:
        vendor_vfio.recompute(host, pf)
    names = [n for n in host.parent_names() if (host.parent_info(n) or {}).get("physical_gpu") == pf]
    if names:
        mdevs.recompute(host, names)


def _opt(args: list[str], flag: str) -> str | None:
    if flag in args:
        i = args.index(flag)
        if i + 1 < len(args):
            return args[i + 1]
    return None


def _ids(text: str | None) -> list[int] | None:
    if text is None:
        return None
    if not all(part.isdecimal() for part in text.split(",")):
        raise mig.MigError(INVALID.strip(), 2)
    return [int(part) for part in text.split(",")]


def change(root: str, args: list[str]) -> str:
    """A changing command, under the root lock."""
    index_text = _opt(args, "-i")
    if index_text is None or not index_text.isdecimal():
        raise mig.MigError("Please specify the GPU with -i", 2)  # [I]: vgpuadm always names the GPU
    index = int(index_text)
    with root_lock(root):
        host = SimHost(root, load_model(root))
        if args[:1] == ["vgpu"]:
            pf = migmodel.gpu_order(host.model)[index] if index < len(migmodel.gpu_order(host.model)) else None
            if pf is None:
                raise mig.MigError(f"No GPU with index {index}", 6)
            text = _policy_change(host, pf, args)
            vendor_vfio.recompute(host, pf)
            return text
        if "-mig" in args:
            value = _opt(args, "-mig")
            if value not in ("0", "1"):
                raise mig.MigError(INVALID.strip(), 2)
            text = mig.set_mode(host, index, value == "1")
        elif "-r" in args:
            text = mig.reset(host, index)
        elif "-cgi" in args:
            items = (_opt(args, "-cgi") or "").split(",")
            text = mig.create_gi(host, index, [x for x in items if x], "-C" in args)
        elif "-dgi" in args:
            text = mig.destroy_gi(host, index, _ids(_opt(args, "-gi")))
        elif "-cci" in args:
            text = mig.create_ci(host, index, _ids(_opt(args, "-gi")) or [])
        elif "-dci" in args:
            text = mig.destroy_ci(host, index, _ids(_opt(args, "-gi")))
        else:
            raise mig.MigError(INVALID.strip(), 2)
        refresh(host, mig.by_index(host, index)[0])
    return text


def _policy_change(host: SimHost, pf: str, args: list[str]) -> str:
    try:
        if "-shm" in args:
            value = _opt(args, "-shm")
            if value not in ("0", "1"):
                raise mig.MigError(INVALID.strip(), 2)
            return hetero.set_mode(host, pf, mig.nv_address(pf), value == "1")
        policy = _POLICY_ARGS.get(_opt(args, "--set-vgpu-scheduler-state") or "")
        ts_text = _opt(args, "--timeslice") if "--timeslice" in args else "0"
        if policy is None or ts_text is None or not ts_text.isdecimal():
            raise mig.MigError(INVALID.strip(), 2)
        return hetero.set_scheduler(host, pf, mig.nv_address(pf), policy, int(ts_text))
    except hetero.PolicyError as exc:
        raise mig.MigError(exc.message, exc.code) from exc


DRIVER_FAILED = "Failed to initialize NVML: Unknown Error\n"


def _driver_fault(root: str, args: list[str]) -> bool:
    """Injected faults (sim/faults.py) for a read, matched against `/usr/bin/nvidia-smi ARGS…` (e.g.
    `vgpuadm sim fail DIR '/usr/bin/nvidia-smi vgpu*' EIO`): a stall makes the driver slow to answer (the read
    waits, then answers); an errno makes it fail as a driver that lost its GPU does [I: the message and exit status
    255]. True when the read fails."""
    with root_lock(root):
        code, stall = faults.check(root, load_model(root)["faults"], (" ".join([WRAPPER, *args]),))
    if stall:
        time.sleep(stall)
    return code is not None


def main(argv: Sequence[str]) -> int:
    root, args = argv[0], list(argv[1:])
    index_text = _opt(args, "-i")
    index = int(index_text) if index_text and index_text.isdecimal() else None
    reads = {
        ("vgpu", "-s", "-v"): lambda m: supported_types(m), ("vgpu", "-v", "-s"): lambda m: supported_types(m),
        ("vgpu", "-s"): lambda m: supported_types(m, verbose=False), ("-q", "-x"): query_xml, ("-q",): query_text,
        ("vgpu", "-ss"): scheduler_state, ("vgpu", "-q"): lambda m: vgpu_query(SimHost(root, m)),
        (f"--query-gpu={GPU_USAGE_FIELDS}", "--format=csv"): lambda m: gpu_usage(SimHost(root, m)),
        ("mig", "-lgip"): lambda m: gi_profiles(m, index), ("mig", "-lgipp"): lambda m: gi_placements(m, index),
        ("mig", "-lgi"): lambda m: gpu_instances(m, index), ("mig", "-lci"): lambda m: compute_instances(m, index),
    }  # fmt: skip
    plain = tuple(a for a in args if a not in ("-i", index_text))
    try:
        if plain in reads:
            model = load_model(root)
            if model["faults"] and _driver_fault(root, args):
                sys.stderr.write(DRIVER_FAILED)
                return 255
            sys.stdout.write(reads[plain](model))
            return 0
        if plain in (("vgpu", "-c", "-v"), ("vgpu", "-v", "-c")):
            sys.stdout.write(creatable_types(SimHost(root, load_model(root))))
            return 0
        if args[:1] == ["vgpu"] and {"-shm", "--set-vgpu-scheduler-state"} & set(args):
            sys.stdout.write(change(root, args))
            return 0
        if {"-mig", "-r"} & set(args) or (args[:1] == ["mig"] and {"-cgi", "-dgi", "-cci", "-dci"} & set(args)):
            sys.stdout.write(change(root, args))
            return 0
    except mig.MigError as exc:
        sys.stderr.write(exc.message + "\n")
        return exc.code
    except OSError as exc:  # a vGPU write inside the change failed: the driver's errno
        sys.stderr.write(f"{os.strerror(exc.errno or 5)}\n")
        return 1
    sys.stderr.write(INVALID)
    return 2


def install(root: str) -> None:
    """Put the wrapper at <root>/usr/bin/nvidia-smi."""
    install_tool(root, WRAPPER, "vgpuadm.sim.nvidia_smi",
                 "nvidia-smi on a simulated host (installed by `vgpuadm sim build`): vgpu -s, -q -x, -mig, mig …")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
