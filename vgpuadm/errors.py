"""The one error hierarchy: every user-facing failure is a VgpuadmError with a one-line message and a hint.

The CLI prints `error: <message>` and `hint: <hint>` and exits with `exit_code`; nothing else prints tracebacks.
"""

from __future__ import annotations

import errno as _errno

TYPE_CHECKING = False  # `collections` stays off the fast path of the read commands (bench/bench_cold_start.py)
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

FREE = "{free}"  # where a hint says how to free the devices in the way (VgpuadmError's `blockers`); see free_clause

# A device in the way: its id (mdev UUID, PCI address) and the verb that frees it while no VM owns it ("mdev remove")
Blocker = tuple[str, str]


class VgpuadmError(Exception):
    """Base class. `message` says what is wrong (naming the value), `hint` says what to do.

    `blockers`: the devices that stand in the way; the hint's FREE placeholder becomes how to free them. The
    planners do not know who owns a device, so at first the hint gives both ways; the Session, which read the
    domains, names each owner (`name_owners`): a VM's device is freed with `vgpuadm destroy --vm VM`, only an
    unowned one with its verb (which refuses a VM's device)."""

    exit_code = 1

    def __init__(self, message: str, hint: str = "", *, blockers: Sequence[Blocker] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.blockers = tuple(blockers)
        self._template = hint
        self.hint = self._rendered = _render(hint, free_clause(self.blockers, None))

    def name_owners(self, owner_of: Callable[[str], str | None], exists: Callable[[str], bool]) -> None:
        """Name the owner of each blocker in the hint (`owner_of`: device id → the domain that owns it, or None).
        A blocker that does not exist and no domain owns is a device the failed plan itself would have made (a
        projection): it is left out."""
        if not self.blockers:
            return
        self.blockers = tuple(b for b in self.blockers if exists(b[0]) or owner_of(b[0]))
        named = _render(self._template, free_clause(self.blockers, owner_of))
        self.hint = self.hint.replace(self._rendered, named, 1)  # text a caller added after it stays
        self._rendered = named

    def __str__(self) -> str:
        return self.message


def _render(template: str, clause: str) -> str:
    """The hint `template` with FREE replaced by `clause`; with no clause, an "or " or "then " right after FREE goes
    too (so "{free}or pick another type" reads "pick another type")."""
    if clause:
        return template.replace(FREE, clause)
    return template.replace(FREE + "or ", "").replace(FREE + "then ", "").replace(FREE, "")


def free_clause(blockers: Sequence[Blocker], owner_of: Callable[[str], str | None] | None) -> str:
    """How to free `blockers`, grouped by owner, ending in "; ": "free what is in the way: web01 owns U1, U2
    (`vgpuadm destroy --vm web01 --uuid ID`); no VM owns U3 (`vgpuadm mdev remove U3`); ". `owner_of` None: the
    owners are unknown, so both ways are given. "" when there are no blockers."""
    groups: dict[tuple[str, str], list[str]] = {}
    for dev, verb in blockers:
        owner = owner_of(dev) if owner_of is not None else None
        groups.setdefault((owner, "") if owner else ("", verb), []).append(dev)
    parts = []
    for (owner, verb), devs in sorted(groups.items(), key=lambda kv: (kv[0][0] == "", kv[0])):
        shown = ", ".join(devs[:3]) + (f" and {len(devs) - 3} more" if len(devs) > 3 else "")
        one = devs[0] if len(devs) == 1 else "ID"
        if owner:
            parts.append(f"{owner} owns {shown} (`vgpuadm destroy --vm {owner} --uuid {one}`)")
        elif owner_of is not None:
            parts.append(f"no VM owns {shown} (`vgpuadm {verb} {one}`)")
        else:
            parts.append(f"{shown} (`vgpuadm {verb} {one}`, or `vgpuadm destroy --vm VM --uuid {one}` where a VM "
                         "owns it)")  # fmt: skip
    return f"free what is in the way: {'; '.join(parts)}; " if parts else ""


class UsageError(VgpuadmError):
    """Bad input from the user: an option value, a file, a name."""

    exit_code = 2


class NotFoundError(VgpuadmError):
    """A named GPU, type, VM, device or root does not exist."""

    exit_code = 3


class CapacityError(VgpuadmError):
    """No GPU can host the request now (instances exhausted, incompatible types running)."""

    exit_code = 4


class ConflictError(VgpuadmError):
    """The request clashes with what exists (device owned by another domain, VM running, lock held)."""

    exit_code = 5


class UnsafeError(VgpuadmError):
    """The change would hurt the host (boot VGA, host-used devices in the IOMMU group); --force overrides."""

    exit_code = 6


class HostIOError(VgpuadmError):
    """A kernel read or write failed; carries the host path (as /sys/..., never the temp root) and errno."""

    exit_code = 7

    def __init__(self, message: str, hint: str = "", *, path: str = "", errno: int | None = None) -> None:
        super().__init__(message, hint)
        self.path = path
        self.errno = errno

    @property
    def errno_name(self) -> str:
        return _errno.errorcode.get(self.errno or 0, "") if self.errno else ""


class NeedsRootError(VgpuadmError):
    """A changing command run without the rights it needs: not root and no write access to the host root's state
    directories (checked before anything is touched). Exit 77 = EX_NOPERM (sysexits.h)."""

    exit_code = 77


class LibvirtError(VgpuadmError):
    """libvirt refused an operation; the message carries libvirt's own text."""

    exit_code = 8


class Interrupted(VgpuadmError):
    """Ctrl-C (SIGINT) stopped the command; the message says what was rolled back. Exit 130 = 128 + SIGINT."""

    exit_code = 130


class LibvirtMissingError(LibvirtError):
    """libvirt-python is not installed: read commands go on without ownership, changing commands refuse."""

    def __init__(self) -> None:
        super().__init__(
            "libvirt-python is not installed",
            "install python3-libvirt (apt) or libvirt-python (pip, in vgpuadm's venv)",
        )


# Every exit status vgpuadm ends with (the classes above carry theirs); README and `vgpuadm --help` list these.
EXIT_CODES: tuple[tuple[int, str], ...] = (
    (0, "success"),
    (1, "other error"),
    (2, "usage: a bad option, value or file"),
    (3, "not found: GPU, type, VM, device or root"),
    (4, "capacity: no GPU has room now"),
    (5, "conflict: owned by another VM, VM running, host lock held"),
    (6, "unsafe: boot VGA or host-used IOMMU group (--force)"),
    (7, "host I/O: a kernel read or write failed"),
    (8, "libvirt refused"),
    (70, "internal error (a bug: rerun with VGPUADM_DEBUG=1)"),
    (77, "needs root (EX_NOPERM)"),
    (130, "interrupted"),
)
