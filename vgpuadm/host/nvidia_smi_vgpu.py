"""Parsers for nvidia-smi's GPU and vGPU reports: `vgpu -s`/`-c` (with and without `-v`; placement size and IDs),
`vgpu -q` (with the running vGPUs' VM and usage figures), `--query-gpu` (a GPU's usage), `-q -x` (MIG mode current/pending, virtualization mode, host vGPU mode), `-q` (vGPU heterogeneous mode
and the Heterogeneous Time-Slice Sizes capability), `vgpu -ss` (scheduler state) and `--query-gpu … --format=csv`.
Pure.

Tested on the real H200 (tests/data/h200-passthrough-guest/: `-q -x`, `--query-gpu`, and the answer "No supported
devices in vGPU mode") and the published outputs of tests/data/nvidia-smi-published/ (provenance in
tests/data/README.md).

`vgpu -s` lists every type a GPU supports even when none can be created now; `vgpu -c` only what is creatable now.
Without `-v` each type is one indented name under its `GPU <address>` line; with `-v` it is a `vGPU Type ID` block.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from vgpuadm.host.nvidia_smi import leading_int, pci_address, type_blocks
from vgpuadm.model import UUID_PATTERN, VERSION_PATTERN
from vgpuadm.usage import GpuUsage, VgpuUsage

TYPE_CHECKING = False  # lxml stays off the fast path of the read commands (tests/unit/test_read_commands.py)
if TYPE_CHECKING:
    from lxml import etree

MAX_XML = 4 << 20  # bytes of `-q -x` believed (one GPU is ~27 KB)


@dataclass(frozen=True)
class VgpuTypeInfo:
    """One `vGPU Type ID` block of `vgpu -s -v` / `vgpu -c -v`."""

    type_id: int
    name: str  # NVIDIA H200X-1-18C
    gi_profile_id: int | None  # the MIG GPU-instance profile a MIG-backed type needs; None for time-sliced
    max_instances: int | None
    fb_mib: int | None
    placement_size: int | None = None  # slots one vGPU of the type takes (heterogeneous time-slice sizes)
    placement_ids: tuple[int, ...] | None = None  # Supported (-s) or Creatable (-c) Placement IDs; None: not shown


MAX_PLACEMENT_IDS = 1024


def _ids(value: str | None) -> tuple[int, ...] | None:
    """`0 8 16` (or `None`) → (0, 8, 16); a malformed list → None (not believed)."""
    if value is None:
        return None
    words = value.replace(",", " ").split()
    if words == ["None"] or words == ["N/A"]:
        return ()
    if len(words) > MAX_PLACEMENT_IDS or not all(w.isdecimal() and len(w) <= 4 for w in words):
        return None
    return tuple(int(w) for w in words)


def parse_type_blocks(text: str) -> dict[str, tuple[VgpuTypeInfo, ...]]:
    """`nvidia-smi vgpu -s -v` or `vgpu -c -v`: PCI address → every type block, in the order printed."""
    out: dict[str, tuple[VgpuTypeInfo, ...]] = {}
    for address, blocks in type_blocks(text).items():
        infos = []
        for block in blocks:
            tid = leading_int(block.get("vGPU Type ID", ""), 0)
            if tid is not None and block.get("Name"):
                ids = block.get("Supported Placement IDs", block.get("Creatable Placement IDs"))
                gi, most, fb, size = (leading_int(block.get(k, "")) for k in ("GPU Instance Profile ID",
                                      "Max Instances", "FB Memory", "Placement Size"))  # fmt: skip
                infos.append(VgpuTypeInfo(tid, block["Name"], gi, most, fb, size, _ids(ids)))
        out[address] = tuple(infos)
    return out


def parse_type_names(text: str) -> dict[str, tuple[str, ...]]:
    """`nvidia-smi vgpu -s` or `vgpu -c` without `-v`: PCI address → type names (one indented name per line).
    "No supported devices in vGPU mode" gives {}."""
    out: dict[str, list[str]] = {}
    gpu: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("GPU "):
            address = pci_address(line[4:])
            gpu = out.setdefault(address, []) if address else None
        elif gpu is not None and line[:1].isspace() and line.strip() and ":" not in line:
            gpu.append(line.strip())
    return {k: tuple(v) for k, v in out.items()}


@dataclass(frozen=True)
class ActiveVgpu:
    """One `vGPU ID` block of `nvidia-smi vgpu -q`."""

    vgpu_id: int
    fields: dict[str, str]  # every `key : value` of the block (VM Name, vGPU Name, MDEV UUID, GPU Instance ID…)

    @property
    def gpu_instance_id(self) -> int | None:
        return leading_int(self.fields.get("GPU Instance ID", "N/A"))


@dataclass(frozen=True)
class VgpuQuery:
    """One GPU of `nvidia-smi vgpu -q`."""

    address: str
    active: int | None
    vgpus: tuple[ActiveVgpu, ...]


def parse_vgpu_query(text: str) -> dict[str, VgpuQuery]:
    """`nvidia-smi vgpu -q`: PCI address → active count and the running vGPUs' fields."""
    out: dict[str, VgpuQuery] = {}
    address: str | None = None
    active: int | None = None
    vgpus: list[ActiveVgpu] = []

    def flush() -> None:
        if address is not None:
            out[address] = VgpuQuery(address, active, tuple(vgpus))

    for line in text.splitlines():
        if line.startswith("GPU "):
            flush()
            address, active, vgpus = pci_address(line[4:]), None, []
            continue
        key, colon, value = line.partition(":")
        if not colon or address is None:
            continue
        key, value = key.strip(), value.strip()
        if key == "Active vGPUs":
            active = leading_int(value)
        elif key == "vGPU ID":
            vid = leading_int(value)
            if vid is not None:
                vgpus.append(ActiveVgpu(vid, {}))
        elif vgpus:
            vgpus[-1].fields.setdefault(key, value)
    flush()
    return out


MAX_VGPUS = 4096  # active vGPU blocks believed from one `vgpu -q` (a host has at most a few hundred)
_UUID = re.compile(UUID_PATTERN)
_TYPE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._+-]{0,63}")
_VERSION = re.compile(VERSION_PATTERN)
_VM_NAME = re.compile(r"[^\x00-\x1f\x7f]{1,256}")


def _number(value: str | None, unit: str = "", most: int = 1 << 40) -> int | None:
    """`700 MiB` (unit "MiB"), `31 %`, `63` → the whole number; N/A, another unit or an out-of-range one → None."""
    if value is None:
        return None
    word, _, rest = value.partition(" ")
    if rest.strip() != unit or not word.isdecimal() or len(word) > 12:
        return None
    n = int(word)
    return n if n <= most else None


def _match(pattern: re.Pattern[str], value: str | None) -> str | None:
    """`value` when it is in `pattern`'s grammar (N/A is no value)."""
    return value if value is not None and value != "N/A" and pattern.fullmatch(value) else None


def _usage(address: str, vid: int, f: dict[str, str]) -> VgpuUsage:
    """One `vGPU ID` block's fields (`Section/Key` below a section line) as canonical values."""
    uuid, mdev = (f.get(k, "").lower() for k in ("VM UUID", "MDEV UUID"))
    lic = f.get("License Status", "")
    return VgpuUsage(
        gpu=address, vgpu_id=vid, vm_uuid=uuid if _UUID.fullmatch(uuid) else None,
        vm_name=_match(_VM_NAME, f.get("VM Name")), type_name=_match(_TYPE_NAME, f.get("vGPU Name")),
        type_num=_number(f.get("vGPU Type"), most=1 << 20), mdev_uuid=mdev if _UUID.fullmatch(mdev) else None,
        gpu_instance_id=_number(f.get("GPU Instance ID"), most=1 << 16),
        placement_id=_number(f.get("Placement ID"), most=1 << 16),
        licensed=True if lic.startswith("Licensed") else False if lic.startswith("Unlicensed") else None,
        driver_version=_match(_VERSION, f.get("Guest Driver Version")),
        fb_total_mib=_number(f.get("FB Memory Usage/Total"), "MiB"),
        fb_used_mib=_number(f.get("FB Memory Usage/Used"), "MiB"),
        gpu_percent=_number(f.get("Utilization/Gpu"), "%", 100),
        memory_percent=_number(f.get("Utilization/Memory"), "%", 100),
        encoder_percent=_number(f.get("Utilization/Encoder"), "%", 100),
        decoder_percent=_number(f.get("Utilization/Decoder"), "%", 100),
    )  # fmt: skip


def parse_vgpu_usage(text: str) -> tuple[VgpuUsage, ...]:
    """`nvidia-smi vgpu -q`: every active vGPU with its VM and usage figures, each value checked once here (a value
    that does not fit its grammar is None: not believed). At most MAX_VGPUS blocks."""
    out: list[VgpuUsage] = []
    address: str | None = None
    block: tuple[int, dict[str, str]] | None = None
    section = ""

    def flush() -> None:
        if address is not None and block is not None and len(out) < MAX_VGPUS:
            out.append(_usage(address, block[0], block[1]))

    for line in text.splitlines():
        if line.startswith("GPU "):
            flush()
            address, block = pci_address(line[4:]), None
            continue
        key, colon, value = line.partition(":")
        indent = len(key) - len(key.lstrip())
        key, value = key.strip(), value.strip()
        if not colon:
            section = key if key else section
            continue
        if key == "vGPU ID":
            flush()
            vid = leading_int(value)
            block, section = ((vid, {}) if vid is not None and 0 <= vid < 1 << 32 else None), ""
        elif block is not None:
            block[1].setdefault(f"{section}/{key}" if indent > 8 and section else key, value)
    flush()
    return tuple(out)


GPU_USAGE_FIELDS = ("pci.bus_id", "utilization.gpu", "utilization.memory", "memory.used", "memory.total",
                    "mig.mode.current")  # fmt: skip


def parse_gpu_usage(text: str) -> dict[str, GpuUsage]:
    """`nvidia-smi --query-gpu=<GPU_USAGE_FIELDS> --format=csv`: PCI address → the GPU's figures (`[N/A]` → None;
    MIG on only for `Enabled`)."""
    out: dict[str, GpuUsage] = {}
    for row in parse_query_gpu(text)[:MAX_VGPUS]:
        address = pci_address(row.get("pci.bus_id", ""))
        if address is not None:
            out[address] = GpuUsage(address, _number(row.get("utilization.gpu"), "%", 100),
                                    _number(row.get("utilization.memory"), "%", 100),
                                    _number(row.get("memory.used"), "MiB"), _number(row.get("memory.total"), "MiB"),
                                    row.get("mig.mode.current") == "Enabled")  # fmt: skip
    return out


@dataclass(frozen=True)
class GpuModes:
    """One `<gpu>` of `nvidia-smi -q -x`: what MIG and vGPU need to know about it."""

    index: int  # position in the report = nvidia-smi's GPU index
    address: str
    product: str
    mig_current: str  # Enabled, Disabled, N/A
    mig_pending: str
    virtualization_mode: str  # None, Pass-Through, Host VGPU, VGPU
    host_vgpu_mode: str  # SR-IOV, Non SR-IOV, N/A
    ecc: str | None = None  # the current ECC mode, Enabled or Disabled; None: not reported (N/A, another word)
    driver_version: str | None = None  # the host driver's release (580.159.04), the same for every GPU

    @property
    def mig_supported(self) -> bool:
        return self.mig_current in ("Enabled", "Disabled")


def parse_query_xml(data: bytes) -> list[GpuModes]:
    """`nvidia-smi -q -x`: one GpuModes per `<gpu>` in order. The DTD is never loaded, entities never resolved."""
    from lxml import etree

    parser = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False)
    try:
        root = etree.fromstring(data[:MAX_XML], parser)
    except etree.XMLSyntaxError:
        return []
    out: list[GpuModes] = []
    version = _match(_VERSION, (root.findtext("driver_version") or "").strip())
    for gpu in root.findall("gpu"):
        address = pci_address(gpu.get("id", ""))
        if address is None:
            continue

        def text(path: str, element: etree._Element = gpu) -> str:
            return (element.findtext(path) or "N/A").strip()

        out.append(GpuModes(len(out), address, text("product_name"), text("mig_mode/current_mig"),
                            text("mig_mode/pending_mig"), text("gpu_virtualization_mode/virtualization_mode"),
                            text("gpu_virtualization_mode/host_vgpu_mode"),
                            ecc if (ecc := text("ecc_mode/current_ecc")) in ("Enabled", "Disabled") else None,
                            version))  # fmt: skip
    return out


_CSV_SPLIT = re.compile(r"\s*,\s*")


def parse_query_gpu(text: str) -> list[dict[str, str]]:
    """`nvidia-smi --query-gpu=… --format=csv`: one dict per GPU, keyed by the header's field names without the
    unit (`memory.total [MiB]` → `memory.total`)."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    header = [h.split(" [", 1)[0] for h in _CSV_SPLIT.split(lines[0].strip())]
    rows = []
    for line in lines[1:]:
        values = _CSV_SPLIT.split(line.strip())
        if len(values) == len(header):
            rows.append(dict(zip(header, values, strict=True)))
    return rows


@dataclass(frozen=True)
class GpuPolicies:
    """A GPU's `-q` vGPU fields and its `vgpu -ss` scheduler."""

    heterogeneous_supported: bool  # vGPU Device Capability › Heterogeneous Time-Slice Sizes : Supported
    heterogeneous_mode: str  # Enabled, Disabled, N/A
    scheduler: str | None = None  # best-effort, equal-share, fixed-share; None when not reported
    timeslice_ms: int = 0  # 0: the default time slice


def parse_query_text(text: str) -> dict[str, GpuPolicies]:
    """`nvidia-smi -q`: PCI address → the heterogeneous capability and mode (other sections are skipped)."""
    out: dict[str, GpuPolicies] = {}
    address: str | None = None
    fields: dict[str, str] = {}

    def flush() -> None:
        if address:
            out[address] = GpuPolicies(fields.get("Heterogeneous Time-Slice Sizes") == "Supported",
                                       fields.get("vGPU Heterogeneous Mode", "N/A"))  # fmt: skip

    for line in text.splitlines():
        if line.startswith("GPU "):
            flush()
            address, fields = pci_address(line[4:]), {}
            continue
        key, colon, value = line.partition(":")
        if colon and address:
            fields.setdefault(key.strip(), value.strip())
    flush()
    return out


_POLICY_WORDS = {"Best Effort": "best-effort", "Equal Share": "equal-share", "Fixed Share": "fixed-share"}


def parse_scheduler_state(text: str) -> dict[str, tuple[str, int]]:
    """`nvidia-smi vgpu -ss`: PCI address → (policy, time slice in ms; 0 for the default)."""
    out: dict[str, tuple[str, int]] = {}
    address: str | None = None
    for line in text.splitlines():
        if line.startswith("GPU "):
            address = pci_address(line[4:])
            continue
        key, colon, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if not colon or not address:
            continue
        if key == "Scheduler Policy" and value in _POLICY_WORDS:
            out[address] = (_POLICY_WORDS[value], out.get(address, ("", 0))[1])
        elif key == "Time Slice" and address in out:
            ms = value.removesuffix(" ms")
            out[address] = (out[address][0], int(ms) if ms.isdecimal() and len(ms) <= 3 else 0)
    return out
