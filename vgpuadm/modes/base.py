"""The small interface every GPU sharing mode implements, and the id and parameter grammars the modes share.
The registry that maps a layout or a recorded mode to its Mode is vgpuadm/modes/__init__.py.

A mode validates a request against a HostSnapshot, plans Steps (pure: it never reads the host) and says what the
libvirt hostdev needs (`hostdev_spec`): mdev → {"mode": "mdev", "uuid"}; vendor-VFIO VF → {"mode": "vf", "address",
"managed": "no"}; passthrough → {"mode": "pci", "functions": [...], "managed": "yes"}.
"""

from __future__ import annotations

import re
import uuid as uuid_mod
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from vgpuadm.errors import UsageError
from vgpuadm.model import Allocation, HostSnapshot, Layout
from vgpuadm.steps import Step

HostdevSpec = dict[str, Any]


class Mode(ABC):
    """One GPU sharing mode. `name` is what Allocation.mode records ("mdev", "vf", "pci")."""

    name: ClassVar[str]
    layouts: ClassVar[tuple[Layout, ...]]

    @abstractmethod
    def validate(self, snapshot: HostSnapshot, device_id: str) -> None:
        """Raise a VgpuadmError when `device_id` cannot be used in this mode on this host."""

    @abstractmethod
    def hostdev_spec(self, snapshot: HostSnapshot, device_id: str) -> HostdevSpec:
        """What the libvirt hostdev template needs for `device_id` (an mdev UUID, a VF or GPU address)."""

    def plan_free(self, snapshot: HostSnapshot, a: Allocation, drivers: Mapping[str, str]) -> list[Step]:
        """Steps that free what allocation `a` holds on the host ([] when it does not exist now)."""
        return []

    def missing(self, snapshot: HostSnapshot, a: Allocation) -> bool:
        """Whether the device a domain records for `a` is absent from the host (restore brings it back)."""
        return False

    def record_problem(self, a: Allocation) -> str | None:
        """Why a recorded `a` can never be restored whatever the host shows (None: it can)."""
        return None


# One vgpu_params pair (reference §2.5): keys such as `frame_rate_limiter` or `vgpu-placement-id`; a value holds
# neither whitespace nor a comma, so the list splits unambiguously on both.
_PARAM = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*=[^\s,]+$")
_PARAM_SEP = re.compile(r"[\s,]+")
PARAM_SEPARATOR = ", "  # what NVIDIA documents: `echo "frame_rate_limiter=0, disable_vnc=1" > vgpu_params`


def check_uuid(text: str, hint: str = "or omit --uuid") -> str:
    """The canonical lower-case form of a UUID the kernel accepts (36 characters), else UsageError whose hint ends
    with `hint`."""
    try:
        value = uuid_mod.UUID(text)
    except ValueError:
        value = None
    if value is None or len(text) != 36:
        raise UsageError(
            f'Malformed UUID "{text}"', f"give 36 characters like 83b8f4f2-509f-382f-3c1e-e6bfe0fa1001, {hint}"
        )
    return str(value)


def split_params(text: str | None) -> list[str]:
    """The `key=value` pairs of vgpu_params text, read in either form: comma-separated as NVIDIA documents and as
    this tool writes (`a=1, b=2`), or space-separated as earlier versions wrote (`a=1 b=2`). Not validated."""
    return [w for w in _PARAM_SEP.split(text or "") if w]


def join_params(pairs: Iterable[str]) -> str:
    """The canonical text of vgpu_params pairs: `k=v, k=v` ("" for none)."""
    return PARAM_SEPARATOR.join(pairs)


def same_params(a: str | None, b: str | None) -> bool:
    """Same vgpu_params whatever the form (commas or spaces) and order: the driver reads a set of pairs."""
    return sorted(split_params(a)) == sorted(split_params(b))


def normalise_params(text: str) -> str:
    """Validate vgpu_params text in either form and return the canonical `k=v, k=v`; UsageError on a bad pair."""
    pairs = split_params(text)
    for w in pairs:
        if not _PARAM.fullmatch(w):
            raise UsageError(
                f'Malformed vgpu parameter "{w}"',
                "write key=value, e.g. --param frame_rate_limiter=0",
            )
    return join_params(pairs)


def check_params(params: str, type_id: str) -> str:
    """Normalise vgpu_params (reference §2.5) given as `k=v, k=v` or `k=v k=v` to `k=v, k=v`; only NVIDIA types
    take them."""
    if not split_params(params):
        return ""
    if not type_id.startswith("nvidia-"):
        raise UsageError(f"{type_id} takes no vgpu_params", "vgpu_params exist only for NVIDIA vGPU types")
    return normalise_params(params)
