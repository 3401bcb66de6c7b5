"""`vgpuadm inventory`: one host's report (snapshot + this host's domains, from libvirt or saved XML) and the fleet
merge of many hosts' reports. The rows and the capacity figures are report/inventory.py's (pure)."""

from __future__ import annotations

import contextlib
import gc
import os
import pickle
import signal
import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from vgpuadm import modes
from vgpuadm.errors import ConflictError, LibvirtError, LibvirtMissingError, VgpuadmError
from vgpuadm.executor import pending_error, read_journal
from vgpuadm.host import mig as host_mig
from vgpuadm.host import nvidia_smi
from vgpuadm.io.domainxml import read_domain_dir
from vgpuadm.model import Allocation, HostSnapshot
from vgpuadm.ops.exporter import read_driver
from vgpuadm.ops.session import Session
from vgpuadm.plan.domains import Domains
from vgpuadm.report.inventory import inventory as build_inventory
from vgpuadm.report.listing import vm_rows, vm_view
from vgpuadm.report.merge import Fold, load_report
from vgpuadm.report.mig import gpu_occupancy, instance_rows, made_by
from vgpuadm.report.usage import join, usage_now


def _now() -> str:
    return datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def inventory(
    root: str | None = None,
    *,
    connect: str | None = None,
    domains_xml: str | None = None,
    use_libvirt: bool = True,
    host: str | None = None,
    domains: Sequence[str] | None = None,
    usage: bool = False,
) -> dict[str, Any]:
    """The host's inventory document (vgpuadm-inventory/1). Ownership comes from saved domain XML when given,
    else from this host's libvirt domains (only the named `domains` when given) unless use_libvirt is False (then
    it is reported as unknown, never as leaks). `usage`: each device a guest runs on also gets `now`, what the
    driver reports it uses (usage_by_device; asked for, as the Cockpit page does: the figures change from one read
    to the next, where the rest of the document changes only with the host)."""
    with Session.read(root, connect) as s:
        snap = s.snap
        found: Domains | None = None
        running: frozenset[str] | None = None
        source = "none"
        saved: list[str] | None = None  # the domains read from --domain-xml-dir
        if domains_xml is not None:
            found = read_domain_dir(domains_xml, snap.host_key, option="--domain-xml-dir")
            source = f"domains-xml:{os.path.abspath(domains_xml)}"
            saved = sorted(found.by_name)
        warnings: list[str] = []
        if domains_xml is None and use_libvirt:
            try:
                found = s.domains().only(None if domains is None else set(domains))
                running = s.domains().running
                source = f"libvirt:{s.uri}"
            except LibvirtMissingError as exc:  # the rest of the host can still be read
                warnings.append(f"owners unknown: {exc.message}; {exc.hint}")
        mig = _mig_occupancy(s, found, warnings)
        doc = build_inventory(snap, found, host=host or s.root.hostname(), generated_at=_now(), source=source,
                              running=running, mig=mig)  # fmt: skip
        if usage and found is not None and doc["devices"]:
            now = usage_by_device(s, found)
            for row in doc["devices"]:
                figures = now.get((row["domain"] if row["owned"] else "", row["id"]))
                if figures is not None:
                    row["now"] = figures
        doc["warnings"] += warnings
        if saved is not None and doc["summary"]["unowned"]:
            doc["warnings"].append(_saved_only(saved, domains_xml or "", doc["summary"]["unowned"]))
        pending: VgpuadmError | None
        try:
            pending = pending_error() if read_journal(s.root.path) is not None else None
        except VgpuadmError as exc:  # unreadable or not a journal: still a change nobody finished
            pending = exc
        if pending is not None:
            doc["warnings"].append(f"{pending.message}: {pending.hint}")
        return doc


def _saved_only(saved: list[str], directory: str, unowned: int) -> str:
    """Ownership from saved XML knows only the domains saved there: say how many were read before the devices no
    saved domain owns are taken for leaks (a domain not saved there owns its devices all the same)."""
    n = len(saved)
    names = f" ({', '.join(saved[:3])}{', …' if n > 3 else ''})" if saved else ""
    it = "it" if unowned == 1 else "them"
    return (f"ownership read from {n} domain{'' if n == 1 else 's'} saved in {directory}{names}: {unowned} "
            f"device{'' if unowned == 1 else 's'} no saved domain owns {'is' if unowned == 1 else 'are'} shown as "
            f"{'a leak' if unowned == 1 else 'leaks'}, though a domain not saved there may own {it}; save every "
            "domain of the host (`virsh dumpxml DOMAIN`) for a complete answer")  # fmt: skip


def _mig_occupancy(s: Session, found: Domains | None, warnings: list[str]) -> dict[str, dict[str, Any]] | None:
    """GPU-instance occupancy per MIG-capable GPU (None on hosts without NVIDIA GPUs or nvidia-smi); owners (the
    domain scan's users(), as every reader) and who vgpuadm made an instance for come from `found` (unknown, null,
    when it is None)."""
    if not any(fn.vendor_id == "0x10de" for fn in s.snap.functions.values()) or nvidia_smi.locate(s.root) is None:
        return None
    try:
        gpus = [g for g in host_mig.read(s.root) if g.mig_capable]
    except VgpuadmError as exc:
        warnings.append(f"MIG state not read: {exc.message}")
        return None
    owners = made = None
    if found is not None:
        owners = {key: name for (_, key), name in found.users().items()}
        made = made_by(found.allocations, s.snap.physical_gpu)
    rows = instance_rows(gpus, owners, made)
    return {g.address: gpu_occupancy(g, rows) for g in gpus}


def device_users(
    root: str | None, *, connect: str | None = None
) -> tuple[HostSnapshot, dict[tuple[str, str], str] | None, str | None]:
    """The snapshot and who references each device ((kind, key) → domain, the Session's one domain scan), or None
    and the reason when libvirt cannot be reached (no daemon, no permission, no libvirt-python)."""
    with Session.read(root, connect) as s:
        snap = s.snap
        try:
            return snap, s.domains().users(), None
        except (LibvirtError, ConflictError) as exc:
            return snap, None, exc.message


def domain_allocations(root: str | None, vm: str, *, connect: str | None = None) -> list[Allocation]:
    """What domain `vm` owns, from its vgpuadm metadata (NotFoundError when there is no such domain)."""
    with Session.read(root, connect) as s:
        d = s.domains().by_name.get(vm)
        if d is None:
            s.virt.xml(vm)  # raises NotFoundError naming the domain
            return []
        return list(d.allocations)


def vms(root: str | None, *, connect: str | None = None) -> list[dict[str, Any]]:
    """This host's domains, their state and the devices each records (`vgpuadm vms`)."""
    with Session.read(root, connect) as s:
        return vm_rows(s.domains())


def show_vm(root: str | None, vm: str, *, connect: str | None = None) -> dict[str, Any]:
    """`vgpuadm show --vm NAME`: the domain's devices and where they are (report/listing.vm_view); NotFoundError
    when libvirt has no such domain."""
    with Session.read(root, connect) as s:
        d = s.domains().by_name.get(vm)
        if d is None:
            s.virt.xml(vm)  # raises NotFoundError naming the domain
            return vm_view(s.snap, vm, None, None, (), None, modes.of)
        view = vm_view(s.snap, d.name, d.uuid, d.running, d.allocations, d.changed, modes.of)
        if view["devices"]:
            now = usage_by_device(s, s.domains().only({d.name}))
            for device in view["devices"]:
                figures = now.get((d.name, device["id"] or ""))
                if figures is not None:
                    device["now"] = figures
        return view


def usage_by_device(s: Session, domains: Domains) -> dict[tuple[str, str], dict[str, Any]]:
    """(domain, device id) → what the driver reports the device uses now (`now`: report/usage.usage_now), from the
    exporter's join (report/usage.join: each mode finds its device's record; domain "" for a device no domain
    records). `show --vm` and the inventory (the Cockpit page's table) read it. Empty where the host has no
    nvidia-smi or it fails: they answer without it."""
    if nvidia_smi.locate(s.root) is None:
        return {}
    try:
        driver = read_driver(s)
    except VgpuadmError:
        return {}
    if driver is None:
        return {}
    now: dict[tuple[str, str], dict[str, Any]] = {}
    for row in join(s.snap, domains, driver):
        if row.record is not None and row.labels[2]:
            now.setdefault((row.labels[0], row.labels[2]), usage_now(row.record))
    return now


# The fleet merge folds shares of the reports in forked processes when there are enough of them: parsing the JSON
# is most of the time and orjson holds the GIL. A share below this many reports is not worth a process.
MERGE_SHARE = 500
MAX_MERGE_PROCESSES = 8


def merge_inventories(paths: list[str], *, processes: int | None = None) -> dict[str, Any]:
    """The fleet report (vgpuadm-fleet/1) of host inventory files; any bad file stops it with its name.

    Streamed: each report is read, checked and folded in before the next one is read. Loading 10,000 reports
    first held ~2 GB of parsed JSON, which the cyclic GC rescanned again and again while orjson allocated; the GC
    is also paused for the merge (it makes no reference cycles). 2.5× less CPU at 2,000 reports.

    Consecutive shares of the paths are folded at once, one per CPU (`processes`, by default the CPUs this
    process may run on, at most MAX_MERGE_PROCESSES, and one per MERGE_SHARE reports), and joined in path order:
    the same document, and the same first error (the first bad file in path order), as one fold."""
    if processes is None:
        processes = min(len(os.sched_getaffinity(0)), MAX_MERGE_PROCESSES, len(paths) // MERGE_SHARE)
    enabled = gc.isenabled()
    gc.disable()
    try:
        # a fork copies only the calling thread: one that holds a lock would leave it held in the child
        forks = processes > 1 and threading.active_count() == 1
        return (_fold_in_processes(paths, processes) if forks else _fold(paths)).document(_now())
    finally:
        if enabled:
            gc.enable()


def _fold(paths: Sequence[str]) -> Fold:
    fold = Fold()
    fold.add((p, load_report(p, rows=False)) for p in paths)
    return fold


def _fold_in_processes(paths: list[str], processes: int) -> Fold:
    """Fold the first share here while a forked child folds each later share; each child sends its Fold, or the
    hosts it folded and its error, pickled through a pipe. A child that fails otherwise (killed, out of memory,
    an error that is no VgpuadmError) has its share folded here after the shares before it, so what is raised is
    what one fold raises."""
    n = len(paths)
    shares = [paths[n * k // processes : n * (k + 1) // processes] for k in range(processes)]
    children: list[tuple[int, int, list[str]]] = []  # pid, read end of its pipe, its share
    try:
        for share in shares[1:]:
            read_end, write_end = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: never returns into the caller
                code = 1
                try:
                    os.close(read_end)
                    _send(write_end, _fold_share(share))
                    code = 0
                finally:
                    os._exit(code)  # no atexit handlers, no freeing of what it parsed
            os.close(write_end)
            children.append((pid, read_end, share))
        fold = _fold(shares[0])  # its error is the first in path order: raised at once
        while children:
            pid, read_end, share = children[0]
            data = _receive(read_end)
            children.pop(0)
            os.close(read_end)
            ok = os.waitpid(pid, 0)[1] == 0
            part = pickle.loads(data) if ok and data else None
            if part is None:
                fold.join(_fold(share))
                continue
            later, error = part
            fold.join(later)
            if error is not None:
                raise error
        return fold
    finally:
        for pid, read_end, _ in children:  # an error or an interrupt here: the children are not waited for
            os.close(read_end)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)


def _fold_share(paths: list[str]) -> tuple[Fold, VgpuadmError | None]:
    """A share's Fold and no error, or the Fold of the hosts before its first bad file (sums cleared) and that
    file's error."""
    fold = Fold()
    try:
        fold.add((p, load_report(p, rows=False)) for p in paths)
    except VgpuadmError as exc:
        done = Fold()
        done.hosts = fold.hosts
        return done, exc
    return fold, None


def _send(fd: int, value: Any) -> None:
    data = memoryview(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
    while data:
        data = data[os.write(fd, data) :]


def _receive(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)
