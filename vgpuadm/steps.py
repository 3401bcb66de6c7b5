"""Data-only Steps and the Plan they form; the executor is the only thing that carries them out.

A Step is a frozen dataclass naming one kernel (or libvirt) change with everything needed to undo it. Steps know
how to describe themselves (dry-run output, journal, error messages) and how to round-trip through JSON (the
journal). They never touch the host: `vgpuadm.executor` dispatches each Step class to its handler (its table:
`vgpuadm.executor.HANDLERS`).

Every Step kind lives here: the kernel's (sysfs, nvidia-smi, files) and libvirt's (DefineDomain and the older
one-write domain steps, whose handlers are in virt/conn.py). Another distribution adds a kind with `@step_kind`
and lists its handlers for the executor's table.

A journal is untrusted when `recover` reads it back (executor/journalcheck.py): a field named like an identity
(parent, address, uuid, type_id, …) is held to that identity's grammar; every other text field declares its own
check here, with the step, through `field(metadata=check(…))` (a field without one must be one printable line).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from vgpuadm.errors import UsageError
from vgpuadm.host.paths import LIBVIRT_HOOKS, MDEVCTL_DIR, POLICY_FILES, SRIOV_MANAGE, UDEV_RULES_DIR, UNIT_DIR
from vgpuadm.model import PARENT_PATTERN, UUID_PATTERN, nvidia_type_id, params_text

STEP_KINDS: dict[str, type[Step]] = {}

# --- the checks of free-text fields, as a journal read back must hold them ----------------------------------------

Check = Callable[[str], bool]
DRIVER = re.compile(r"[A-Za-z0-9_-]{0,64}")  # a kernel driver name (or "" for none)
_PRINTABLE = re.compile(r"[^\x00-\x08\x0b-\x1f\x7f]*")  # text: no control character but tab and newline
_LINE = re.compile(r"[^\x00-\x1f\x7f]*")
_ENTITIES = ("&amp;", "&lt;", "&gt;", "&apos;", "&quot;")


def check(fn: Check) -> dict[str, Check]:
    """The metadata of a step field whose text a journal must hold to `fn`: `x: str = field(metadata=check(fn))`."""
    return {"check": fn}


def line(limit: int) -> Check:
    """One line of printable text of at most `limit` characters."""
    return lambda v: len(v) <= limit and _LINE.fullmatch(v) is not None


def text(limit: int) -> Check:
    """Printable text (tabs and newlines allowed) of at most `limit` characters."""
    return lambda v: len(v) <= limit and _PRINTABLE.fullmatch(v) is not None


def element(start: tuple[str, ...], limit: int, *, empty: bool = False) -> Check:
    """An XML element as vgpuadm renders it, starting with one of `start`: no declaration, DOCTYPE, entity (but the
    five predefined ones) or CDATA; `empty`: "" (nothing) passes too."""

    def ok(v: str) -> bool:
        rest = v
        for entity in _ENTITIES:
            rest = rest.replace(entity, "")
        return (empty and v == "") or (
            len(v) <= limit and _PRINTABLE.fullmatch(v) is not None and v.lstrip().startswith(start)
            and v.rstrip().endswith(">") and "<!" not in v and "<?" not in v and "&" not in rest
        )  # fmt: skip

    return ok


def json_object(limit: int) -> Check:
    """A JSON object of at most `limit` characters."""

    def ok(v: str) -> bool:
        if len(v) > limit:
            return False
        try:
            return isinstance(json.loads(v), dict)
        except ValueError:
            return False

    return ok


def one_of(*choices: str) -> Check:
    return lambda v: v in choices


def matching(pattern: str) -> Check:
    compiled = re.compile(pattern)
    return lambda v: compiled.fullmatch(v) is not None


HOSTDEV = ("<hostdev ", "<hostdev>", "<hostdev/")
UNIT_TEXT = text(64 * 1024)  # a systemd unit, the qemu hook, a policy file
MDEVCTL_JSON = json_object(64 * 1024)
S = TypeVar("S", bound="type[Step]")


def step_kind(name: str) -> Callable[[S], S]:
    """Class decorator: register a Step class under its journal name (`{"kind": name, …}`)."""

    def deco(cls: S) -> S:
        cls.kind = name
        STEP_KINDS[name] = cls
        return cls

    return deco


@dataclass(frozen=True)
class Step:
    """Base of every step. Subclasses are frozen dataclasses of plain values (str, int, bool, None, tuples)."""

    kind: ClassVar[str] = "step"
    # Whether the change outlives a power loss (a file, a libvirt definition). Runtime kernel state (mdevs, VFs,
    # binds) does not, so a journal of only such steps needs no fsync: see vgpuadm.executor._Journal.
    durable: ClassVar[bool] = True

    def describe(self) -> str:
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, **dataclasses.asdict(self)}

    @classmethod
    def checks(cls, doc: dict[str, Any]) -> dict[str, Check]:
        """The checks of this kind's free-text fields (each field's `check(…)`) for journal step `doc`; a kind whose
        grammars depend on another of its fields (WriteManagedFile: on the file's kind) narrows them here."""
        return {f.name: f.metadata["check"] for f in dataclasses.fields(cls) if "check" in f.metadata}


def _tupled(value: Any) -> Any:
    return tuple(_tupled(v) for v in value) if isinstance(value, list) else value


def step_from_dict(doc: dict[str, Any]) -> Step:
    """Inverse of Step.to_dict (JSON lists become tuples again); an older vgpuadm's kinds are upgraded."""
    doc = upgrade_step(doc)
    kind = doc.get("kind")
    cls = STEP_KINDS.get(str(kind))
    if cls is None:
        raise UsageError(f'Unknown step kind "{kind}" in journal', "the journal was written by a newer vgpuadm")
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: _tupled(v) for k, v in doc.items() if k in names})


# --- mdev (layouts A and B) -------------------------------------------------------------------------------------


@step_kind("create-mdev")
@dataclass(frozen=True)
class CreateMdev(Step):
    """Write `uuid` to <parent>/mdev_supported_types/<type_id>/create. Undo: remove the mdev."""

    durable: ClassVar[bool] = False

    parent: str
    type_id: str
    uuid: str

    def describe(self) -> str:
        return f"create mdev {self.uuid} of type {self.type_id} on {self.parent}"


@step_kind("remove-mdev")
@dataclass(frozen=True)
class RemoveMdev(Step):
    """Write 1 to /sys/bus/mdev/devices/<uuid>/remove. Undo: create it again with `type_id` (when known)."""

    durable: ClassVar[bool] = False

    parent: str
    uuid: str
    type_id: str = ""

    def describe(self) -> str:
        return f"remove mdev {self.uuid} from {self.parent}"


# SetVgpuParams.device_path_kind: whose vgpu_params file the step writes.
PARAMS_OF_MDEV = "mdev"  # an mdev's, by UUID
PARAMS_OF_VF = "vf"  # a layout C VF's, by PCI address


@step_kind("set-vgpu-params")
@dataclass(frozen=True)
class SetVgpuParams(Step):
    """Write NVIDIA vgpu_params (reference §2.5) as `k=v, k=v` with a trailing newline; "" clears (written as a
    single space). `params` and `previous` may be in either form (commas or legacy spaces); the executor writes the
    comma form (modes/base.py holds the grammar).

    device_path_kind "mdev": id is an mdev UUID (/sys/bus/mdev/devices/<id>/nvidia/vgpu_params);
    "vf": id is a layout C VF address (/sys/bus/pci/devices/<id>/nvidia/vgpu_params). Undo writes `previous`."""

    durable: ClassVar[bool] = False

    device_path_kind: str
    id: str
    params: str = field(metadata=check(params_text))
    previous: str = field(
        default="", metadata=check(line(1024))
    )  # what the driver showed before: it keeps any text, up to 1024 bytes

    @property
    def of_mdev(self) -> bool:
        """The file is an mdev's (id: its UUID), else a layout C VF's (id: its address)."""
        return self.device_path_kind == PARAMS_OF_MDEV

    def describe(self) -> str:
        what = "mdev" if self.of_mdev else "VF"
        if not self.params.strip():
            return f"clear vgpu_params of {what} {self.id}"
        return f'set vgpu_params of {what} {self.id} to "{self.params}"'


# --- NVIDIA vendor-specific VFIO (layout C) ---------------------------------------------------------------------


@step_kind("set-vf-vgpu-type")
@dataclass(frozen=True)
class SetVfVgpuType(Step):
    """Write type_num to <vf>/nvidia/current_vgpu_type (creates the vGPU). Undo: write 0."""

    durable: ClassVar[bool] = False

    vf: str
    type_num: int

    def describe(self) -> str:
        return f"set vGPU type {self.type_num} ({nvidia_type_id(self.type_num)}) on VF {self.vf}"


@step_kind("set-vf-placement")
@dataclass(frozen=True)
class SetVfPlacement(Step):
    """Write placement_id to <vf>/nvidia/placement_id before the type (heterogeneous mode: the vGPU's first slot;
    -1 lets the driver choose). Undo: write previous."""

    durable: ClassVar[bool] = False

    vf: str
    placement_id: int
    previous: int = -1

    def describe(self) -> str:
        return f"set placement ID {self.placement_id} on VF {self.vf}"


@step_kind("clear-vf-vgpu-type")
@dataclass(frozen=True)
class ClearVfVgpuType(Step):
    """Write 0 to <vf>/nvidia/current_vgpu_type (destroys the vGPU). Undo: write previous_type again."""

    durable: ClassVar[bool] = False

    vf: str
    previous_type: int

    def describe(self) -> str:
        return f"clear vGPU type {self.previous_type} ({nvidia_type_id(self.previous_type)}) from VF {self.vf}"


# --- SR-IOV -----------------------------------------------------------------------------------------------------


@step_kind("set-num-vfs")
@dataclass(frozen=True)
class SetNumVfs(Step):
    """Write count to <pf>/sriov_numvfs. The kernel refuses N→M with both non-zero (EBUSY): plans go through 0.
    Undo: write previous (through 0 when both are non-zero)."""

    durable: ClassVar[bool] = False

    pf: str
    count: int
    previous: int

    def describe(self) -> str:
        return f"set sriov_numvfs of {self.pf} to {self.count} (was {self.previous})"


@step_kind("set-sriov-autoprobe")
@dataclass(frozen=True)
class SetSriovAutoprobe(Step):
    """Write 0/1 to <pf>/sriov_drivers_autoprobe: with 0, VFs enabled afterwards come up with no driver, so a VF
    pool binds them to vfio-pci without a host driver probing them first. Undo: write previous."""

    pf: str
    enabled: bool
    previous: bool

    def describe(self) -> str:
        return f"set sriov_drivers_autoprobe of {self.pf} to {int(self.enabled)}"


@step_kind("sriov-manage")
@dataclass(frozen=True)
class SriovManage(Step):
    """Run <root>/usr/lib/nvidia/sriov-manage -e|-d <pf> (NVIDIA PFs bound to nvidia). Undo: the opposite."""

    durable: ClassVar[bool] = False

    pf: str
    enable: bool

    def describe(self) -> str:
        return f"run {SRIOV_MANAGE} {'-e' if self.enable else '-d'} {self.pf}"


# --- PCI driver binding (layout D and restore) ------------------------------------------------------------------


@step_kind("set-driver-override")
@dataclass(frozen=True)
class SetDriverOverride(Step):
    """Write driver (or "\\n" to clear when driver is "") to <address>/driver_override. Undo: write previous."""

    durable: ClassVar[bool] = False

    address: str
    driver: str
    previous: str = field(default="", metadata=check(lambda v: DRIVER.fullmatch(v) is not None))

    def describe(self) -> str:
        if not self.driver:
            return f"clear driver_override of {self.address}"
        return f"set driver_override of {self.address} to {self.driver}"


@step_kind("unbind")
@dataclass(frozen=True)
class Unbind(Step):
    """Write address to /sys/bus/pci/drivers/<driver>/unbind. Undo: bind it to driver again."""

    durable: ClassVar[bool] = False

    address: str
    driver: str

    def describe(self) -> str:
        return f"unbind {self.address} from {self.driver}"


@step_kind("bind")
@dataclass(frozen=True)
class Bind(Step):
    """Write address to /sys/bus/pci/drivers/<driver>/bind. Undo: unbind it."""

    durable: ClassVar[bool] = False

    address: str
    driver: str

    def describe(self) -> str:
        return f"bind {self.address} to {self.driver}"


@step_kind("drivers-probe")
@dataclass(frozen=True)
class DriversProbe(Step):
    """Write address to /sys/bus/pci/drivers_probe (honours driver_override). `expect` is the driver that must end
    up bound ("" = any). Undo: unbind whatever driver the probe bound."""

    durable: ClassVar[bool] = False

    address: str
    expect: str = ""

    def describe(self) -> str:
        suffix = f" (expect {self.expect})" if self.expect else ""
        return f"probe drivers for {self.address}{suffix}"


@step_kind("record-drivers")
@dataclass(frozen=True)
class RecordDrivers(Step):
    """Remember each function's driver before vfio-pci takes it, in <root>/var/lib/vgpuadm/drivers.json, so
    `vfio unbind` can give it back. `drivers` holds (address, driver) pairs ("" = was unbound). Undo: forget them."""

    drivers: tuple[tuple[str, str], ...]

    def describe(self) -> str:
        listed = ", ".join(f"{a}={d or 'none'}" for a, d in self.drivers)
        return f"remember original drivers ({listed})"


@step_kind("forget-drivers")
@dataclass(frozen=True)
class ForgetDrivers(Step):
    """Drop remembered original drivers after a restore. `drivers` holds the forgotten pairs (for undo)."""

    drivers: tuple[tuple[str, str], ...]

    def describe(self) -> str:
        return f"forget original drivers of {', '.join(a for a, _ in self.drivers)}"


# --- files vgpuadm manages: mdevctl definitions, its systemd unit, libvirt's qemu hook, its udev rule, policy files ----------

MDEVCTL_DEFINITION = "mdevctl-definition"
SYSTEMD_UNIT = "systemd-unit"
LIBVIRT_HOOK = "libvirt-hook"
UDEV_RULE = "udev-rule"
HOST_POLICY = "host-policy"


@dataclass(frozen=True)
class FileKind:
    """A kind of file vgpuadm manages: how a plan line names one (`what`, before its host path), and the grammars
    of its host paths and of its text that a journal read back must hold (its mode is its io module's)."""

    what: str
    path: Check
    text: Check
    directory: str = ""  # the directory its io module names files below ("": a policy file, named by POLICY_FILES)


FILE_KINDS: dict[str, FileKind] = {
    MDEVCTL_DEFINITION: FileKind("mdevctl definition ", matching(
        rf"{re.escape(MDEVCTL_DIR)}/(?:{PARENT_PATTERN})/{UUID_PATTERN}"), MDEVCTL_JSON, MDEVCTL_DIR),
    SYSTEMD_UNIT: FileKind("systemd unit ", matching(
        rf"{re.escape(UNIT_DIR)}/[A-Za-z0-9_@:-][A-Za-z0-9_.@:-]{{0,254}}"), UNIT_TEXT, UNIT_DIR),
    LIBVIRT_HOOK: FileKind("libvirt hook ", matching(
        rf"{re.escape(LIBVIRT_HOOKS)}/(?:qemu\.d/vgpuadm|qemu|qemu\.vgpuadm-chained)"), UNIT_TEXT, LIBVIRT_HOOKS),
    UDEV_RULE: FileKind("udev rule ", matching(rf"{re.escape(UDEV_RULES_DIR)}/61-vgpuadm\.rules"), UNIT_TEXT,
                        UDEV_RULES_DIR),
    HOST_POLICY: FileKind("", one_of(*POLICY_FILES.values()), UNIT_TEXT),
}  # fmt: skip


def _managed_path(v: str) -> bool:
    return any(k.path(v) for k in FILE_KINDS.values())


@step_kind("write-managed-file")
@dataclass(frozen=True)
class WriteManagedFile(Step):
    """Write `text` to the file at host path `path`, of kind `file` (FILE_KINDS), atomically with the mode its kind
    has (io/mdevctl.py, unitfile.py, hookfile.py, policyfile.py); text None removes it. `previous` is its text
    before (None: there was none). Undo: previous back (None: the file removed)."""

    file: str = field(metadata=check(one_of(*FILE_KINDS)))
    path: str = field(metadata=check(_managed_path))
    text: str | None = field(metadata=check(UNIT_TEXT))
    previous: str | None = field(default=None, metadata=check(UNIT_TEXT))

    def describe(self) -> str:
        return f"{'write' if self.text is not None else 'remove'} {FILE_KINDS[self.file].what}{self.path}"

    @classmethod
    def checks(cls, doc: dict[str, Any]) -> dict[str, Check]:
        kind = FILE_KINDS.get(doc["file"]) if isinstance(doc.get("file"), str) else None
        if kind is None:
            return super().checks(doc)
        return {**super().checks(doc), "path": kind.path, "text": kind.text, "previous": kind.text}


def WritePolicyFile(name: str, text: str | None, previous: str | None = None) -> WriteManagedFile:
    """The step writing host-policy file `name` (POLICY_FILES; None removes it): plan/policies.py's name for it."""
    return WriteManagedFile(HOST_POLICY, POLICY_FILES[name], text, previous)


# Journals an older vgpuadm wrote (a change interrupted across an upgrade) name one step kind per managed file:
# each is read as the WriteManagedFile it was. old kind → (file kind, the fields that named the file, removes).
LEGACY_KINDS: dict[str, tuple[str, tuple[str, ...], bool]] = {
    "write-mdevctl-definition": (MDEVCTL_DEFINITION, ("parent", "uuid"), False),
    "remove-mdevctl-definition": (MDEVCTL_DEFINITION, ("parent", "uuid"), True),
    "write-unit-file": (SYSTEMD_UNIT, ("name",), False),
    "remove-unit-file": (SYSTEMD_UNIT, ("name",), True),
    "write-hook-file": (LIBVIRT_HOOK, ("hook",), False),
    "remove-hook-file": (LIBVIRT_HOOK, ("hook",), True),
    "write-policy-file": (HOST_POLICY, ("name",), False),
}


def upgrade_step(doc: dict[str, Any]) -> dict[str, Any]:
    """A journal step of a kind LEGACY_KINDS names, as the step it is now (its path None when the old fields were
    not text, or the step has fields of the new kind: the journal check then refuses it); any other step as it is."""
    kind = doc.get("kind")
    if not isinstance(kind, str) or kind not in LEGACY_KINDS:
        return doc
    file, keys, removes = LEGACY_KINDS[kind]
    values = [doc.get(k) for k in keys]
    path: str | None = None
    if all(isinstance(v, str) for v in values) and not {"file", "path"} & set(doc):
        names = [str(v) for v in values]
        directory = FILE_KINDS[file].directory
        path = "/".join((directory, *names)) if directory else POLICY_FILES.get(names[0])
    rest = {k: v for k, v in doc.items() if k not in (*keys, "kind")}
    return {**rest, **({"text": None} if removes else {}), "kind": WriteManagedFile.kind, "file": file, "path": path}


@dataclass(frozen=True)
class Plan:
    """An ordered list of steps and a one-line summary. An empty plan means "nothing to do"."""

    steps: tuple[Step, ...] = ()
    summary: str = ""

    @property
    def empty(self) -> bool:
        return not self.steps

    @property
    def durable(self) -> bool:
        """Whether any step makes a change that outlives a power loss."""
        return any(s.durable for s in self.steps)

    def describe(self) -> list[str]:
        n = len(self.steps)
        return [f"step {i}/{n} {s.describe()}" for i, s in enumerate(self.steps, 1)]

    def to_dict(self) -> dict[str, Any]:
        return {"summary": self.summary, "steps": [s.to_dict() for s in self.steps]}

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> Plan:
        return cls(tuple(step_from_dict(s) for s in doc.get("steps", [])), str(doc.get("summary", "")))

    def __add__(self, other: Plan) -> Plan:
        summary = "; ".join(s for s in (self.summary, other.summary) if s)
        return Plan(self.steps + other.steps, summary)

    @classmethod
    def of(cls, steps: Iterable[Step], summary: str) -> Plan:
        return cls(tuple(steps), summary)


# --- NVIDIA host policies (nvidia-smi; files in io/policyfile.py) -----------------------------------------------


@step_kind("set-heterogeneous-mode")
@dataclass(frozen=True)
class SetHeterogeneousMode(Step):
    """Run `nvidia-smi vgpu -i <gpu_index> -shm 1|0` for the GPU at `address`. Undo: the opposite."""

    address: str
    gpu_index: int
    enable: bool

    def describe(self) -> str:
        word = "enable" if self.enable else "disable"
        return f"{word} heterogeneous (mixed-size) vGPU mode on GPU {self.address} (nvidia-smi -i {self.gpu_index})"


@step_kind("set-vgpu-scheduler")
@dataclass(frozen=True)
class SetVgpuScheduler(Step):
    """Set the running vGPU scheduler of a GPU through nvidia-smi. Undo: the previous policy and time slice."""

    address: str
    gpu_index: int
    policy: str = field(metadata=check(one_of("best-effort", "equal-share", "fixed-share")))
    timeslice_ms: int
    previous_policy: str = field(metadata=check(one_of("best-effort", "equal-share", "fixed-share")))
    previous_timeslice_ms: int

    def describe(self) -> str:
        ts = f", time slice {self.timeslice_ms} ms" if self.timeslice_ms else ""
        return f"set the vGPU scheduler of GPU {self.address} to {self.policy}{ts} (nvidia-smi -i {self.gpu_index})"


# --- MIG (nvidia-smi) -------------------------------------------------------------------------------------------


@step_kind("set-mig-mode")
@dataclass(frozen=True)
class SetMigMode(Step):
    """Run `nvidia-smi -i <gpu_index> -mig 1|0` for the GPU at `address`. Undo: the opposite mode. `effective`:
    the steps after it need the mode in effect now (GPU instances for a vGPU), so a change the board leaves pending
    until a GPU reset is taken back and fails the step; without it a pending change is the step done (`mig enable`).
    The one MIG-enable step every planner uses (`mig enable`, `create`, `restore`, plan files)."""

    address: str
    gpu_index: int
    enable: bool
    effective: bool = False

    def describe(self) -> str:
        return (
            f"{'enable' if self.enable else 'disable'} MIG mode on GPU {self.address} (nvidia-smi -i {self.gpu_index})"
        )


@step_kind("create-gpu-instance")
@dataclass(frozen=True)
class CreateGpuInstance(Step):
    """Run `nvidia-smi mig -i <gpu_index> -cgi <profile_id>:<start>`. Undo: destroy the instance at that start."""

    address: str
    gpu_index: int
    profile: str
    profile_id: int
    start: int

    def describe(self) -> str:
        return (
            f"create MIG GPU instance {self.profile} (profile {self.profile_id}) at slot {self.start} on {self.address}"
        )


@step_kind("destroy-gpu-instance")
@dataclass(frozen=True)
class DestroyGpuInstance(Step):
    """Run `nvidia-smi mig -i <gpu_index> -dgi -gi <instance_id>`. Undo: create the same profile at the same start."""

    address: str
    gpu_index: int
    instance_id: int
    profile: str
    profile_id: int
    start: int

    def describe(self) -> str:
        return f"destroy MIG GPU instance {self.instance_id} ({self.profile} at slot {self.start}) on {self.address}"


# -- libvirt steps: one domain definition change each (handlers: virt/conn.py) ------------------------------
# The device XML is rendered at plan time and carried by the step, so the journal holds exactly what was attached
# and undo detaches that same element. AttachHostdev, DetachHostdev and SetMetadata stay runnable for journals
# written before DefineDomain existed.

METADATA = element(("<vgpuadm",), 1024 * 1024, empty=True)  # the domain's vgpuadm <metadata> element, or none
HOSTDEVS = element(HOSTDEV, 256 * 1024, empty=True)  # one or more concatenated <hostdev> elements, or none


def _summary(v: str) -> bool:
    """What a DefineDomain attached or detached, in words: printable, one line (a tab allowed)."""
    return text(4096)(v) and "\n" not in v


@step_kind("attach-hostdev")
@dataclass(frozen=True)
class AttachHostdev(Step):
    """Attach `device_xml` (persistent, and live when the domain runs). `what` names the device for people.
    Undo: detach it when present."""

    domain: str
    device_xml: str = field(metadata=check(element(HOSTDEV, 16 * 1024)))
    what: str = field(metadata=check(line(512)))

    def describe(self) -> str:
        return f"attach {self.what} to domain {self.domain}"


@step_kind("detach-hostdev")
@dataclass(frozen=True)
class DetachHostdev(Step):
    """Detach `device_xml` from the domain. Undo: attach it again when absent."""

    domain: str
    device_xml: str = field(metadata=check(element(HOSTDEV, 16 * 1024)))
    what: str = field(metadata=check(line(512)))

    def describe(self) -> str:
        return f"detach {self.what} from domain {self.domain}"


@step_kind("set-metadata")
@dataclass(frozen=True)
class SetMetadata(Step):
    """Replace the domain's vgpuadm metadata element with `element` ("" removes it); `previous` is what was there
    ("" = nothing), written back on undo. `devices` is how many devices the new element records."""

    domain: str
    element: str = field(metadata=check(METADATA))
    previous: str = field(metadata=check(METADATA))
    devices: int

    def describe(self) -> str:
        if not self.element:
            return f"remove the vgpuadm metadata of domain {self.domain}"
        return f"record {self.devices} vgpuadm device(s) in the metadata of domain {self.domain}"


@step_kind("define-domain")
@dataclass(frozen=True)
class DefineDomain(Step):
    """Write the domain's new persistent definition once: its current definition with the hostdevs of `detach`
    taken out, those of `attach` added and the vgpuadm metadata element replaced by `element` ("" = none). When
    the domain runs, the hostdevs are also unplugged/hot-plugged live (before the define; a refused hot-plug
    changes nothing). `attach`/`detach` are concatenated hostdev elements; `previous` is the metadata element
    that was there, so undo (the same change reversed) gives back the old definition. `attached`/`detached`
    name the devices for people; `devices` is how many devices `element` records."""

    domain: str
    attach: str = field(metadata=check(HOSTDEVS))
    detach: str = field(metadata=check(HOSTDEVS))
    element: str = field(metadata=check(METADATA))
    previous: str = field(metadata=check(METADATA))
    devices: int
    attached: str = field(default="", metadata=check(_summary))
    detached: str = field(default="", metadata=check(_summary))

    def describe(self) -> str:
        parts = []
        if self.detached:
            parts.append(f"detach {self.detached} from domain {self.domain}")
        if self.attached:
            parts.append(f"attach {self.attached} to domain {self.domain}")
        meta = (
            f"record {self.devices} vgpuadm device(s) in its metadata"
            if self.element
            else "remove its vgpuadm metadata"
        )
        if not parts:
            return f"{meta.replace(' its ', ' the ')} of domain {self.domain}"
        if not self.element and not self.previous:  # a domain vgpuadm never recorded anything in
            return " and ".join(parts)
        return f"{' and '.join(parts)}, and {meta}"


@step_kind("domain-definition")
@dataclass(frozen=True)
class DomainDefinition(Step):
    """Define the domain from its whole persistent XML `xml` (`defined`), or undefine it (not `defined`; `xml` is
    the definition it had, which undo defines again): a cold migration's two ends (`vgpuadm migrate run`). `via`
    names the move for people. Undo: the opposite."""

    domain: str
    xml: str = field(metadata=check(element(("<domain ", "<domain>"), 1024 * 1024)))
    defined: bool
    via: str = field(default="", metadata=check(line(512)))

    def describe(self) -> str:
        verb = "define" if self.defined else "undefine"
        return f"{verb} domain {self.domain}" + (f" ({self.via})" if self.via else "")


@step_kind("set-virtio-gl")
@dataclass(frozen=True)
class SetVirtioGl(Step):
    """Give the domain's persistent definition a virtio-gpu with 3D on `rendernode` (`enable`) — a virtio <video>
    with accel3d replacing its video devices, and a `graphics` (egl-headless or spice) GL element — or take it
    away, putting back a <video> of model `previous_video` ("" for none). Undo: the opposite."""

    domain: str
    rendernode: str = field(metadata=check(matching(r"(/dev/dri/renderD[0-9]{1,4})?")))
    graphics: str = field(metadata=check(one_of("egl-headless", "spice")))
    enable: bool
    previous_video: str = field(metadata=check(matching(r"[a-z0-9_-]{0,32}")))

    def describe(self) -> str:
        if self.enable:
            return f"give domain {self.domain} a virtio-gpu with 3D on {self.rendernode} ({self.graphics})"
        return f"take the virtio-gpu on {self.rendernode} from domain {self.domain}"
