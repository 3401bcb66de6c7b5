"""The one error hierarchy: every user-facing failure is a VgpuadmError with a one-line message and a hint.

The CLI prints `error: <message>` and `hint: <hint>` and exits with `exit_code`; nothing else prints tracebacks.
"""

from __future__ import annotations

import errno as _errno


class VgpuadmError(Exception):
    """Base class. `message` says what is wrong (naming the value), `hint` says what to do."""

    exit_code = 1

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message


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
