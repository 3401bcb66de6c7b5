"""One Session per verb: the host lock, one snapshot, a lazily opened libvirt connection and ONE domain scan.

Every verb that changes the host runs inside `Session.open(...)`: the lock is taken first, a pending journal is
refused before anything is planned (a half-done change would make the plan nonsense), the snapshot and the domains
are read under the lock, and the plan is executed under the same hold, so racing commands never plan against a
stale view. Read-only commands use the same object without the lock.
"""

from __future__ import annotations

import dataclasses
import glob
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, ExitStack, contextmanager
from typing import Any

from vgpuadm import executor
from vgpuadm.errors import NotFoundError, VgpuadmError
from vgpuadm.executor import (
    ExecContext,
    ExecResult,
    execute,
    handlers,
    host_lock,
    pending_error,
    read_journal,
)
from vgpuadm.host import hetero as host_hetero
from vgpuadm.host.discover import snapshot
from vgpuadm.host.root import EMBED_LIBVIRT, HostRoot, check_exists
from vgpuadm.host.sysfs import Sysfs, Writer, check_root
from vgpuadm.io.domainxml import read_libvirt_domains
from vgpuadm.model import HostSnapshot
from vgpuadm.plan.domains import Domains
from vgpuadm.sim.kernel import SimKernel
from vgpuadm.steps import AttachHostdev, DefineDomain, DetachHostdev, DomainDefinition, Plan, SetMetadata
from vgpuadm.virt.conn import HANDLERS as LIBVIRT_HANDLERS
from vgpuadm.virt.conn import VirtConn, choose_uri, embed_uri
from vgpuadm.virt.xml import NS

Progress = Callable[[int, int, str], None]
LIBVIRT_STEPS = (AttachHostdev, DetachHostdev, SetMetadata, DefineDomain, DomainDefinition)
LIBVIRT_STEP_KINDS = frozenset(cls.kind for cls in LIBVIRT_STEPS)

WITH_LIBVIRT = {**executor.HANDLERS, **handlers(LIBVIRT_HANDLERS)}  # what a Session's plans run through


def open_sysfs(root: HostRoot) -> Sysfs:
    """The kernel of `root`: plain writes on a real host, the simulated kernel under a simulated root."""
    if not root.simulated:
        return root.sysfs()

    def sim_kernel() -> Writer:
        return SimKernel(root.path)

    return root.sysfs(writer_factory=sim_kernel)


class Session:
    """A verb's view of one host. Create with `Session.open` (locked) or `Session.read` (no lock)."""

    def __init__(self, root: str | None, connect: str | None = None) -> None:
        self.root = HostRoot(root)
        self.connect = connect
        self.sysfs = open_sysfs(self.root)
        self._snap: HostSnapshot | None = None
        self._virt: VirtConn | None = None
        self._domains: Domains | None = None
        self._stack = ExitStack()

    @classmethod
    @contextmanager
    def open(
        cls, root: str | None, connect: str | None = None, *, allow_pending: bool = False,
        timeout: float | None = None, needs_sys: bool = True,
    ) -> Iterator[Session]:  # fmt: skip
        """Hold the host lock for the whole verb; refuse while a journal is pending (unless `allow_pending`, for
        the verbs that deal with it: recover, reconcile, restore). The root is checked before the lock is taken
        (a mistyped --root gets no run/ or lock created under it): it exists, has a sys/ tree (unless not
        `needs_sys`: `unit install` writes only under etc/); host_lock checks that this process can write it."""
        s = cls(root, connect)
        (check_root if needs_sys else check_exists)(s.root.path)
        with host_lock(s.root.path, timeout), s._stack, s._owners_named():
            if not allow_pending and read_journal(s.root.path) is not None:
                raise pending_error()
            yield s

    @classmethod
    def changing(
        cls, root: str | None, connect: str | None = None, *, dry_run: bool = False, **options: Any
    ) -> AbstractContextManager[Session]:
        """`open` for a change; `read` for its dry run, which only reads: no lock, no journal, no root needed."""
        return cls.read(root, connect) if dry_run else cls.open(root, connect, **options)

    @classmethod
    @contextmanager
    def read(cls, root: str | None, connect: str | None = None) -> Iterator[Session]:
        s = cls(root, connect)
        with s._stack, s._owners_named():
            yield s

    @contextmanager
    def _owners_named(self) -> Iterator[None]:
        """An error that names devices in its way (VgpuadmError.blockers) leaves with each one's owner named in
        its hint, from this Session's one domain scan (read now if the verb had not needed it). When the domains
        cannot be read, the hint keeps both ways to free a device."""
        try:
            yield
        except VgpuadmError as exc:
            if exc.blockers:
                try:
                    domains = None if self.holds_no_domains() else self.domains()
                except VgpuadmError:  # libvirt cannot be read: the owners stay unknown
                    raise exc from None
                exc.name_owners(domains.owner_of if domains is not None else lambda _dev: None, self._exists)
            raise

    def _exists(self, device_id: str) -> bool:
        """Whether a device exists in the kernel now: an mdev, a layout C VF running a vGPU, another function."""
        snap = self.snap
        vf = snap.vendor_vfs.get(device_id)
        return device_id in snap.mdevs or (vf.in_use if vf is not None else device_id in snap.functions)

    # -- the host ----------------------------------------------------------------------------------------------

    @property
    def snap(self) -> HostSnapshot:
        if self._snap is None:
            self._snap = self._read_snapshot()
        return self._snap

    def refresh(self) -> HostSnapshot:
        """Read the host again (after a phase of changes)."""
        self._snap = self._read_snapshot()
        return self._snap

    def _read_snapshot(self) -> HostSnapshot:
        """sysfs, plus the GPUs' heterogeneous mode and placements from nvidia-smi where the driver has placement
        IDs (the planner needs them to place mixed sizes)."""
        snap = snapshot(self.sysfs, names=True)
        if snap.has_placement_ids:
            snap = dataclasses.replace(snap, policies=host_hetero.read(self.root))
        return snap

    @property
    def simulated(self) -> bool:
        return self.sysfs.simulated

    @property
    def host_key(self) -> str:
        return self.snap.host_key

    # -- libvirt -----------------------------------------------------------------------------------------------

    @property
    def uri(self) -> str:
        return choose_uri(self.connect, self.root.path, self.simulated)

    @property
    def virt(self) -> VirtConn:
        if self._virt is None:
            self._virt = self._stack.enter_context(VirtConn(self.uri))
        return self._virt

    def domains(self) -> Domains:
        """Every domain of this host, read once (names that vanish while listing are skipped: a shared libvirtd)."""
        if self._domains is None:
            self._domains = Domains.of(self.host_key, self._scan())
        return self._domains

    def _scan(self) -> Iterator[tuple[str, str, str, bool, str]]:
        """Each domain's reads (three daemon round trips) on a few threads at once, taken in the listing's order."""
        virt = self.virt

        def read(name: str) -> tuple[str, str, str, bool, str] | None:
            try:
                return name, virt.uuid(name), virt.xml(name), virt.is_active(name), virt.get_metadata(name, NS) or ""
            except NotFoundError:  # undefined between listing and reading
                return None

        with ThreadPoolExecutor(executor.WAVE_WORKERS) as pool:
            yield from (entry for entry in pool.map(read, virt.list_domains()) if entry is not None)

    def domains_on_disk(self) -> Domains:
        """This host's domains read from libvirt's own files under the root (io/domainxml.py), never by calling
        libvirt: for the qemu hook, which libvirt runs and which must not call it back. They become this Session's
        one domain scan, so nothing later (an error naming owners) opens libvirt either."""
        self._domains = read_libvirt_domains(self.root, self.host_key)
        return self._domains

    def holds_no_domains(self) -> bool:
        """This simulated root's own embedded libvirt with no persistent domain XML holds no domains (its
        transient ones live only in the process that made them): answered without starting the driver, which
        libvirt allows only once per process."""
        if not self.simulated or self.uri != embed_uri(self.root.path):
            return False
        return not glob.glob(os.path.join(self.root.path, EMBED_LIBVIRT.lstrip("/"), "etc", "qemu", "*.xml"))

    def domain_xml(self, name: str) -> str:
        """A domain's persistent XML (NotFoundError when there is none)."""
        d = self.domains().by_name.get(name)
        return d.xml if d is not None else self.virt.xml(name)

    # -- executing ---------------------------------------------------------------------------------------------

    def context(self, **extras: Any) -> ExecContext:
        return ExecContext(sysfs=self.sysfs, root=self.root.path, virt=self._virt, extras=dict(extras),
                           handlers=WITH_LIBVIRT)  # fmt: skip

    def execute(self, plan: Plan, *, dry_run: bool = False, progress: Progress | None = None) -> ExecResult:
        """Run `plan` through the executor (lock, journal, undo); the snapshot and scan are stale afterwards."""
        ctx = self.context()
        if not dry_run and any(isinstance(s, LIBVIRT_STEPS) for s in plan.steps):
            ctx.virt = self.virt
        result = execute(plan, ctx, dry_run=dry_run, progress=progress)
        if result.changed:
            self._snap = None
            self._domains = None
        return result
