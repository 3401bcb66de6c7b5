"""The files that keep NVIDIA host policies across a reboot (docs/reference/nvidia-host-policies.md), and the
record of the MIG GPU instances the qemu hook made for on-demand vGPUs:

  /etc/modprobe.d/vgpuadm-nvidia.conf  (0644) the RmPVMRL registry key per GPU, read by the nvidia driver when it
                                       loads: `options nvidia NVreg_RegistryDwordsPerDevice="pci=…;RmPVMRL=0x…;…"`
  /var/lib/vgpuadm/gpus.json           (0600, directory 0700) the `gpus:` section vgpuadm applied, for `restore`
                                       (heterogeneous mode does not survive a reboot; the driver knows no file for it)
  /var/lib/vgpuadm/on-demand-mig.json  (0600) on-demand vGPU (mdev UUID or VF address) → the GPU instance the hook
                                       made for it (profile id:start), so that its stop destroys that one and no other

They are written through managed-file steps (steps.WriteManagedFile: lock, journal, undo); reads never follow a
symlink; the texts are catalog/hetero.py's (the state file is read back as untrusted input, its grammar checked there)."""

from __future__ import annotations

import json
import os
import re

from vgpuadm.errors import UsageError
from vgpuadm.host.paths import POLICY_FILES
from vgpuadm.host.root import file_error, read_beneath, remove_beneath, write_beneath
from vgpuadm.model import PCI_PATTERN, UUID_PATTERN

MODES = {"modprobe": (0o644, 0o755), "state": (0o600, 0o700), "on-demand-mig": (0o600, 0o700)}  # file, directory
FILES = {
    name: (POLICY_FILES[name], mode, dir_mode) for name, (mode, dir_mode) in MODES.items()
}  # name → (host path, …)
MAX_MADE = 512  # on-demand vGPUs with a recorded GPU instance (the journal holds the text: 64 KiB)
_DEVICE = re.compile(f"^(?:{UUID_PATTERN}|{PCI_PATTERN})$")  # a device key: an mdev UUID or a VF's address
_INSTANCE = re.compile(r"^[0-9]{1,3}:[0-9]{1,2}$")  # profile id:start, as a domain's `mig_instance` option


def host_path(name: str) -> str:
    return FILES[name][0]


def _path(root: str, name: str) -> str:
    if name not in FILES:
        raise UsageError(f"{name!r} is not a vgpuadm policy file", f"the files are {', '.join(FILES)}")
    return os.path.join(root, FILES[name][0].lstrip("/"))


def read_file(root: str, name: str) -> str | None:
    """The file's text, None when there is none; by descriptor beneath the root (host/root.py): no link at any
    component, regular files only."""
    _path(root, name)
    try:
        data = read_beneath(root, host_path(name))
        return None if data is None else data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise file_error("read", host_path(name), exc) from None


def write_file(root: str, name: str, text: str | None) -> None:
    """Write atomically with the file's mode whatever the umask (a created directory gets the file's directory
    mode); None removes it. No link at any component below the root is written through."""
    _path(root, name)
    _, mode, dir_mode = FILES[name]
    try:
        if text is None:
            remove_beneath(root, host_path(name))
        else:
            write_beneath(root, host_path(name), text.encode("utf-8"), mode=mode, dir_mode=dir_mode)
    except OSError as exc:
        raise file_error("remove" if text is None else "write", host_path(name), exc,
                         "run as root, or point --root at a writable host root") from None  # fmt: skip


def read_made(root: str) -> tuple[dict[str, str], str | None]:
    """The on-demand-mig record, {device: "profile id:start"}, and the file's text (None: no file); UsageError
    (naming the file) when it is not one."""
    text = read_file(root, "on-demand-mig")
    if text is None:
        return {}, None
    hint = f"remove {host_path('on-demand-mig')} (the GPU instances it names are then left to `vgpuadm mig destroy`)"
    try:
        doc = json.loads(text) if len(text) <= 64 * 1024 else None
    except ValueError:
        doc = None
    if (
        not isinstance(doc, dict)
        or len(doc) > MAX_MADE
        or not all(
            isinstance(k, str) and _DEVICE.match(k) and isinstance(v, str) and _INSTANCE.match(v)
            for k, v in doc.items()
        )
    ):
        raise UsageError(f"{host_path('on-demand-mig')} is not vgpuadm's record of on-demand GPU instances", hint)
    return dict(doc), text


def made_text(made: dict[str, str]) -> str | None:
    """The on-demand-mig record's text (None: no file)."""
    return json.dumps(dict(sorted(made.items())), indent=1) + "\n" if made else None
