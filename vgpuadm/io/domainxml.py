"""Saved domain XML (`virsh dumpxml` output, or libvirt's persistent /etc/libvirt/qemu/*.xml that boot-time restore
reads before libvirtd runs): one *.xml file per domain, read as the domains of this host."""

from __future__ import annotations

import os

from vgpuadm.errors import UsageError, VgpuadmError
from vgpuadm.host.paths import LIBVIRT_DOMAIN_DIRS
from vgpuadm.host.root import BeneathError, HostRoot, list_beneath, read_beneath
from vgpuadm.plan.domains import Domain, Domains
from vgpuadm.virt.xml import domain_identity, status_domain

MAX_FILES = 10_000  # domains on one host; more is not a domain directory
MAX_BYTES = 8 << 20  # one domain's XML


def read_domain_dir(directory: str, host_key: str, *, option: str = "--domain-xml-dir") -> Domains:
    """The domains saved in `directory` (every *.xml file); `option` names the flag in messages. Each file is read
    by descriptor in the directory (host/root.py): a link, FIFO or device named *.xml is refused unopened."""
    if not os.path.isdir(directory):
        raise UsageError(f"{option} {directory} is not a directory", "give a directory of saved domain XML files")
    try:
        listed = list_beneath(directory, "") or []
    except OSError as exc:
        raise UsageError(f"cannot read {option} {directory}: {exc.strerror}", "check its permissions") from None
    names = [name for name, _ in listed if name.endswith(".xml") and not name.startswith(".")]
    if len(names) > MAX_FILES:
        raise UsageError(f"{option} {directory} holds {len(names)} XML files", f"at most {MAX_FILES} domains are read")
    entries = []
    for name in names:
        path = os.path.join(directory, name)
        try:
            data = read_beneath(directory, name, limit=MAX_BYTES)
            if data is None:
                continue  # removed while listing
            text = data.decode("utf-8")
            dom_name, uuid = domain_identity(text)
            entries.append(Domain.read(dom_name, uuid, text, False, ""))
        except BeneathError as exc:
            raise UsageError(f"refusing to read domain XML {path}: it {exc.reason}",
                             "save each domain as a regular file with `virsh dumpxml DOMAIN`") from None  # fmt: skip
        except OSError as exc:
            raise UsageError(f"cannot read domain XML {path}: {exc.strerror}", "check the file's permissions") from None
        except UnicodeDecodeError as exc:
            raise UsageError(f"cannot read domain XML {path}: {exc}", "save it with `virsh dumpxml DOMAIN`") from None
        except VgpuadmError as exc:
            raise UsageError(f"{path}: {exc.message}", exc.hint) from None
    return Domains.mine(host_key, entries)


def read_libvirt_domains(root: HostRoot, host_key: str) -> Domains:
    """This host's domains as libvirt keeps them on disk under `root` (the system daemon's and the embedded
    driver's directories, LIBVIRT_DOMAIN_DIRS): each persistent definition, and each running domain's status file
    (running; a transient domain has only that one). For the qemu hook, which must not call libvirt back. Files are
    opened without following a link out of the root and read up to MAX_BYTES."""
    found: dict[str, Domain] = {}
    for config, status in LIBVIRT_DOMAIN_DIRS:
        for directory, running in ((config, False), (status, True)):
            try:
                names = sorted(n for n in os.listdir(root.real(directory)) if n.endswith(".xml"))
            except OSError:
                continue
            if len(names) > MAX_FILES:
                raise UsageError(f"{directory} holds {len(names)} XML files", f"at most {MAX_FILES} domains are read")
            for file in names:
                path = f"{directory}/{file}"
                text = root.read_small(path, MAX_BYTES + 1)
                if text is None:
                    continue  # removed while listing (a domain undefined or stopped), or not a regular file
                if len(text) > MAX_BYTES:
                    raise UsageError(f"domain XML {path} is larger than {MAX_BYTES >> 20} MiB", "is it a domain's XML?")
                try:
                    text = status_domain(text) if running else text
                    name, uuid = domain_identity(text)
                    found[name] = Domain.read(name, uuid, text, running, "")
                except VgpuadmError as exc:
                    raise UsageError(f"{path}: {exc.message}", exc.hint) from None
    return Domains.mine(host_key, found.values())
