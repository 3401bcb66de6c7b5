"""The two files that keep NVIDIA host policies across a reboot (docs/reference/nvidia-host-policies.md):

  /etc/modprobe.d/vgpuadm-nvidia.conf  (0644) the RmPVMRL registry key per GPU, read by the nvidia driver when it
                                       loads: `options nvidia NVreg_RegistryDwordsPerDevice="pci=…;RmPVMRL=0x…;…"`
  /var/lib/vgpuadm/gpus.json           (0600, directory 0700) the `gpus:` section vgpuadm applied, for `restore`
                                       (heterogeneous mode does not survive a reboot; the driver knows no file for it)

Both are written through the WritePolicyFile step (lock, journal, undo); reads never follow a symlink; the texts
are catalog/hetero.py's (the state file is read back as untrusted input, its grammar checked there)."""

from __future__ import annotations

import os

from vgpuadm.errors import HostIOError, UsageError
from vgpuadm.host.files import read_nofollow, write_atomic

FILES = {  # name → (host path, mode, directory mode)
    "modprobe": ("/etc/modprobe.d/vgpuadm-nvidia.conf", 0o644, 0o755),
    "state": ("/var/lib/vgpuadm/gpus.json", 0o600, 0o700),
}


def host_path(name: str) -> str:
    return FILES[name][0]


def _path(root: str, name: str) -> str:
    if name not in FILES:
        raise UsageError(f"{name!r} is not a vgpuadm policy file", f"the files are {', '.join(FILES)}")
    return os.path.join(root, FILES[name][0].lstrip("/"))


def read_file(root: str, name: str) -> str | None:
    try:
        return read_nofollow(_path(root, name))
    except OSError as exc:
        raise HostIOError(f"reading {host_path(name)} failed: {exc.strerror}", path=host_path(name),
                          errno=exc.errno) from None  # fmt: skip


def write_file(root: str, name: str, text: str | None) -> None:
    """Write atomically with the file's mode whatever the umask; None removes it."""
    path = _path(root, name)
    try:
        if text is None:
            if os.path.lexists(path):
                os.unlink(path)
            return
        if os.path.islink(os.path.dirname(path)):
            raise UsageError(
                f"{os.path.dirname(host_path(name))} is a symlink", "vgpuadm does not write through symlinks"
            )
        _, mode, dir_mode = FILES[name]
        write_atomic(path, text, mode=mode, dir_mode=dir_mode)
        os.chmod(path, mode)
    except OSError as exc:
        raise HostIOError(f"writing {host_path(name)} failed: {exc.strerror}",
                          "run as root, or point --root at a writable host root", path=host_path(name),
                          errno=exc.errno) from None  # fmt: skip
