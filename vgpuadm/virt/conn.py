"""The one class that talks to libvirt, and the executor's handlers of the libvirt steps. libvirt-python is imported
lazily (so --help, discovery and most tests never load it) and every libvirtError becomes a vgpuadm error carrying
libvirt's own message.

Which libvirt: `--connect URI`, else $LIBVIRT_DEFAULT_URI, else qemu:///system — except on a simulated host root
with neither set, where it is libvirt's embedded QEMU driver under the root (`qemu:///embed?root=…`): real
libvirt, in-process, no daemon.

It also carries out the libvirt steps (vgpuadm/steps.py) for the executor: `HANDLERS` lists (step class, apply, undo,
is_applied[, lane]): ops/session.py adds them to the executor's table for the plans a Session runs (virt sits below
the executor, so it cannot import it). A DefineDomain's lane is its domain: the executor runs consecutive definitions
of distinct domains concurrently over the one VirtConn (libvirt's connections serve calls from several threads;
libvirtd runs them on its worker pool). Undo handlers look before they act: after a crash they may run for a step that
never happened.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from vgpuadm.errors import ConflictError, LibvirtError, LibvirtMissingError, NotFoundError, UsageError, VgpuadmError
from vgpuadm.host.root import EMBED_LIBVIRT, list_beneath, read_beneath, write_beneath
from vgpuadm.model import MDEV_KEY
from vgpuadm.polling import wait_until
from vgpuadm.steps import AttachHostdev, DefineDomain, DetachHostdev, DomainDefinition, SetMetadata, SetVirtioGl
from vgpuadm.virt.xml import (
    NS,
    PREFIX,
    HostdevRef,
    for_libvirt_metadata,
    has_virtio_gl,
    hostdev_elements,
    hostdev_key,
    parse_domain,
    parse_hostdevs,
    redefine,
    same_metadata,
    stamped,
    to_string,
    with_virtio_gl,
    without_virtio_gl,
)

DEFAULT_URI = "qemu:///system"
EMBED_SUBDIR = EMBED_LIBVIRT.lstrip("/")  # under a simulated root

# libvirt error codes (virterror.h) that mean something to the user beyond "libvirt failed".
_ERR_NO_DOMAIN = 42
_ERR_NO_DOMAIN_METADATA = 80

_lock = threading.Lock()
_embedded_root: str | None = None  # libvirt allows ONE embedded driver root per process, for the process's life


def choose_uri(connect: str | None, root: str, simulated: bool) -> str:
    """--connect, else $LIBVIRT_DEFAULT_URI, else the embedded driver on a simulated root, else qemu:///system."""
    if connect:
        return connect
    env = os.environ.get("LIBVIRT_DEFAULT_URI")
    if env:
        return env
    if simulated:
        return embed_uri(root)
    return DEFAULT_URI


def embed_uri(root: str) -> str:
    """libvirt's embedded driver under `root`. The path is percent-escaped (libvirt unescapes a query value): a
    `#`, `&`, `%`, space or quote in the root cannot end the value, add a parameter or move the driver's state."""
    return embed_uri_of_dir(os.path.join(os.path.abspath(root), EMBED_SUBDIR))


def embed_uri_of_dir(embed_root: str) -> str:
    """libvirt's embedded driver whose own root is `embed_root` (escaped as embed_uri says)."""
    from urllib.parse import quote

    return "qemu:///embed?root=" + quote(embed_root, safe="/")


# libvirt logs to stderr when no log output is set: the embedded driver's `info : libvirt version …` and
# `error : virStateInitialize …` lines would precede vgpuadm's own one-line error. Read by libvirt when it loads;
# a user's own LIBVIRT_LOG_OUTPUTS (or LIBVIRT_DEBUG) still wins.
QUIET_LOG_OUTPUTS = "4:file:/dev/null"


def _libvirt() -> Any:
    global _quiet
    if "libvirt" not in sys.modules and not os.environ.get("LIBVIRT_DEBUG"):
        os.environ.setdefault("LIBVIRT_LOG_OUTPUTS", QUIET_LOG_OUTPUTS)
    try:
        import libvirt
    except ImportError:
        raise LibvirtMissingError() from None
    if not _quiet:
        # libvirt also prints every error to stderr by default; vgpuadm reports them itself, once. Installed
        # before the first call into libvirt, whichever it is.
        libvirt.registerErrorHandler(lambda _ctx, _err: None, None)
        _quiet = True
    return libvirt


_quiet = False
# libvirt error codes (virterror.h) of a connection this user may not open, as opposed to a daemon not running.
_ERR_AUTH = (45, 79, 94)  # VIR_ERR_AUTH_FAILED, VIR_ERR_AUTH_CANCELLED, VIR_ERR_AUTH_UNAVAILABLE


def _connect_hint(exc: Any, uri: str) -> str:
    """What to do about a refused connection: an embedded driver that could not start (no daemon involved),
    permission (auth, or the socket's EACCES) or no daemon."""
    embed_root = _embed_root_of(uri)
    if embed_root:
        return (
            f"libvirt's embedded driver (no daemon) could not start under {embed_root}: this user must be able to "
            "create its directories there and in ~/.cache (or run as root); or pick a running libvirt with --connect"
        )
    if exc.get_error_code() in _ERR_AUTH or os.strerror(errno.EACCES) in _message(exc):
        return (
            f"this user may not use {uri}: rerun as root (sudo), or add the user to the libvirt group "
            "(polkit's org.libvirt.unix.manage)"
        )
    return "start libvirtd (systemctl start libvirtd) or pick another URI with --connect"


def library_version() -> tuple[int, int, int]:
    """The version of the libvirt installed here (the client library; the daemon comes from the same release)."""
    v = int(_libvirt().getVersion())
    return v // 1_000_000, v // 1000 % 1000, v % 1000


def _caps_cache_store() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "vgpuadm", "qemu-capabilities")


CAPS_DIR = os.path.join("cache", "qemu", "capabilities")  # under an embedded root
MAX_CAPS = 16 << 20  # bytes of one cached capability file (libvirt's are ~1 MB)


def _copy_caps(src_top: str, src_rel: str, dest_top: str, dest_rel: str, dir_mode: int) -> None:
    """Copy one cached capability file by descriptor (host/root.py): a regular file only, no link followed at
    any component on either side, written private (0600): a planted `*.xml` link copies nothing."""
    data = read_beneath(src_top, src_rel, limit=MAX_CAPS)
    if data is not None:
        write_beneath(dest_top, dest_rel, data, mode=0o600, dir_mode=dir_mode, sync=False)


def _seed_caps_cache(embed_root: str, source: str | None = None) -> None:
    """A fresh embedded root makes libvirt probe QEMU's capabilities (~4 s). The probe result is keyed by the
    QEMU binary and re-validated by libvirt on load, so copying a previous result in is safe and makes it 0.05 s.
    `source`: the folder of results to copy (default: the user's cache)."""
    if _cached_caps(embed_root):
        return
    top = source or _caps_cache_store()
    names = _caps_names(top, "")
    if names:
        with contextlib.suppress(OSError):
            os.makedirs(embed_root, exist_ok=True)
    for name in names:
        with contextlib.suppress(OSError):  # only a cache: libvirt probes again
            _copy_caps(top, name, embed_root, os.path.join(CAPS_DIR, name), 0o755)


def _caps_names(top: str, rel: str) -> list[str]:
    """The regular `*.xml` files of directory `rel` under `top` (reached through no link), by name."""
    try:
        listed = list_beneath(top, rel) or []
    except OSError:
        return []
    return [name for name, mode in listed if name.endswith(".xml") and stat.S_ISREG(mode)]


# libvirt probes QEMU through a UNIX socket at <embedded root>/lib/qemu/qmp-XXXXXX/qmp.monitor, and a socket path
# must fit sun_path (108 bytes with its NUL): under a longer root the probe, and with it every definition, fails.
_PROBE_SOCKET = "/lib/qemu/qmp-XXXXXX/qmp.monitor"
_SUN_PATH_MAX = 107
_PROBE = """
import sys, libvirt
libvirt.virEventRegisterDefaultImpl()
conn = libvirt.open(sys.argv[1])
conn.getDomainCapabilities()
conn.close()
"""
PROBE_TIMEOUT = 120.0  # seconds; one probe takes ~4 s


def _probe_caps_short(embed_root: str) -> None:
    """For a root too long for libvirt's probe socket and no cached result: probe QEMU once under a short private
    directory (mkdtemp: 0700, a fresh name), in a child process (one embedded root per process), and seed the
    root's cache with the result. Best effort: without it libvirt probes, and fails with its own message."""
    if len(embed_root) + len(_PROBE_SOCKET) <= _SUN_PATH_MAX:
        return
    short = tempfile.mkdtemp(prefix="vgpuadm-caps-")
    try:
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            subprocess.run([sys.executable, "-I", "-c", _PROBE, embed_uri_of_dir(short)], capture_output=True, timeout=PROBE_TIMEOUT,
                           check=False, stdin=subprocess.DEVNULL)  # fmt: skip
        _seed_caps_cache(embed_root, os.path.join(short, "cache", "qemu", "capabilities"))
        _save_caps_cache(short)
    finally:
        shutil.rmtree(short, ignore_errors=True)


def prepare_embedded(embed_root: str) -> None:
    """Make an embedded driver root ready for its first open, by vgpuadm or by `virsh -c URI` (which knows nothing
    of the probe socket's length limit): QEMU's capabilities seeded from the user's cache, else probed under a
    short directory when the root is too long for libvirt's own probe."""
    os.makedirs(embed_root, exist_ok=True)
    _seed_caps_cache(embed_root)
    if not _cached_caps(embed_root):
        _probe_caps_short(embed_root)


def _cached_caps(embed_root: str) -> list[str]:
    return _caps_names(embed_root, CAPS_DIR)


def _save_caps_cache(embed_root: str) -> None:
    store = _caps_cache_store()
    for name in _cached_caps(embed_root):
        with contextlib.suppress(OSError):
            src, dest = os.path.join(embed_root, CAPS_DIR, name), os.path.join(store, name)
            if not os.path.exists(dest) or os.path.getmtime(dest) < os.path.getmtime(src):
                os.makedirs(store, mode=0o700, exist_ok=True)
                _copy_caps(embed_root, os.path.join(CAPS_DIR, name), store, name, 0o700)


EMBED_PIDFILE = os.path.join("run", "qemu", "driver.pid")  # under the embedded root; libvirt holds it for life
EMBED_WAIT = 30.0  # seconds; the host lock's default timeout


def _wait_for_embedded_driver(embed_root: str, timeout: float = EMBED_WAIT) -> None:
    """Wait until no other process runs the embedded driver of this root. libvirt keeps the driver (and the fcntl
    lock on its pid file) until the process EXITS, so a vgpuadm that has released the host lock may still hold it
    for a moment; an open then fails ("Failed to acquire pid file") and cannot be retried in this process. Only
    called before this process's first embedded open: closing our descriptor would drop libvirt's own lock."""
    import fcntl
    import time

    path = os.path.join(embed_root, EMBED_PIDFILE)
    deadline = time.monotonic() + timeout
    while True:
        try:
            fd = os.open(path, os.O_RDWR)
        except OSError:
            return  # never started here: nothing to wait for
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
        except OSError:
            if time.monotonic() >= deadline:
                return  # libvirt's own error names the pid file
            time.sleep(0.02)  # polling interval for a lock libvirt offers no way to wait on
            continue
        finally:
            os.close(fd)  # also releases our probe lock
        return


def _embed_root_of(uri: str) -> str | None:
    """The (unescaped) root of an embedded-driver URI, as libvirt reads it: `+` stays a plus."""
    if not uri.startswith("qemu:///embed"):
        return None
    from urllib.parse import unquote, urlsplit

    for param in urlsplit(uri).query.replace(";", "&").split("&"):
        name, eq, value = param.partition("=")
        if eq and unquote(name) == "root":
            return unquote(value)
    return None


class VirtConn:
    """A libvirt connection with the few operations vgpuadm needs. Domains are addressed by name."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self._conn: Any = None
        self._opening = threading.Lock()  # the executor's threads share this connection: it is opened once
        self._domains: dict[str, Any] = {}
        self._active: dict[str, bool] = {}
        self.embed_root = _embed_root_of(uri)
        self.quoted_uri = shlex.quote(uri)  # for hints the user pastes into a shell (embed URIs hold '?')

    # -- connection ------------------------------------------------------------------------------------------------
    @property
    def conn(self) -> Any:
        if self._conn is None:
            with self._opening:
                if self._conn is None:
                    self._conn = self._open()
        return self._conn

    def _open(self) -> Any:
        global _embedded_root
        libvirt = _libvirt()
        if self.embed_root:
            with _lock:
                if _embedded_root is not None and _embedded_root != self.embed_root:
                    raise ConflictError(
                        f"this process already runs libvirt's embedded driver at {_embedded_root}; "
                        f"libvirt cannot open a second one at {self.embed_root}",
                        "run one vgpuadm process per simulated host, or pass --connect qemu:///system",
                    )
                if _embedded_root is None:
                    # The embedded driver needs an event loop implementation registered before the first open.
                    libvirt.virEventRegisterDefaultImpl()
                    _wait_for_embedded_driver(self.embed_root)
                prepare_embedded(self.embed_root)
                _embedded_root = self.embed_root
        try:
            conn = libvirt.open(self.uri)
        except libvirt.libvirtError as exc:
            raise LibvirtError(f"cannot connect to {self.uri}: {_message(exc)}", _connect_hint(exc, self.uri)) from None
        return conn

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):  # closing is best effort; the process may be exiting
                self._conn.close()
            if self.embed_root:
                _save_caps_cache(self.embed_root)  # libvirt probed QEMU on first use; keep it for the next root
        self._conn = None
        self._domains.clear()
        self._active.clear()

    def __enter__(self) -> VirtConn:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- errors ----------------------------------------------------------------------------------------------------
    def _fail(self, exc: Any, action: str, name: str | None = None) -> Exception:
        code = exc.get_error_code()
        if code == _ERR_NO_DOMAIN and name is not None:
            return self._no_domain(name)
        target = f" {shlex.quote(name)}" if name else ""
        return LibvirtError(f"{action}: {_message(exc)}", f"check with `virsh -c {self.quoted_uri} dumpxml{target}`")

    def _no_domain(self, name: str) -> NotFoundError:
        return NotFoundError(
            f"No domain named '{name}'", f"list the domains with `virsh -c {self.quoted_uri} list --all`"
        )

    # -- domains ---------------------------------------------------------------------------------------------------
    def domain(self, name: str) -> Any:
        dom = self._domains.get(name)
        if dom is None:
            libvirt = _libvirt()
            try:
                dom = self.conn.lookupByName(name)
            except libvirt.libvirtError as exc:
                raise self._fail(exc, f"looking up domain '{name}'", name) from None
            self._domains[name] = dom
        return dom

    def list_domains(self) -> list[str]:
        libvirt = _libvirt()
        try:
            found = {d.name(): d for d in self.conn.listAllDomains(0)}
        except libvirt.libvirtError as exc:
            raise self._fail(exc, "listing domains") from None
        self._domains.update(found)  # the handles listed: no look-up round trip per domain afterwards
        return sorted(found)

    def xml(self, name: str, *, inactive: bool = True, secure: bool = False, migratable: bool = False) -> str:
        """The persistent definition (XMLDesc with VIR_DOMAIN_XML_INACTIVE), or the live one. secure=True keeps
        secrets (graphics passwords): only for XML that is defined back, never for XML that is shown.
        migratable=True: as another host is given it when the domain moves there (VIR_DOMAIN_XML_MIGRATABLE)."""
        libvirt = _libvirt()
        flags = (libvirt.VIR_DOMAIN_XML_INACTIVE if inactive else 0) | (libvirt.VIR_DOMAIN_XML_SECURE if secure else 0)
        flags |= libvirt.VIR_DOMAIN_XML_MIGRATABLE if migratable else 0
        try:
            return str(self.domain(name).XMLDesc(flags))
        except libvirt.libvirtError as exc:
            raise self._fail(exc, f"reading the XML of '{name}'", name) from None

    def uuid(self, name: str) -> str:
        libvirt = _libvirt()
        try:
            return str(self.domain(name).UUIDString())
        except libvirt.libvirtError as exc:
            raise self._fail(exc, f"reading the UUID of '{name}'", name) from None

    def autostart(self, name: str) -> bool:
        """Whether libvirt starts the domain when the daemon starts (at boot)."""
        libvirt = _libvirt()
        try:
            return bool(self.domain(name).autostart())
        except libvirt.libvirtError as exc:
            raise self._fail(exc, f"reading the autostart flag of '{name}'", name) from None

    def is_active(self, name: str, *, fresh: bool = True) -> bool:
        """Whether the domain runs. fresh=False may answer from this connection's earlier look (device changes of
        one command ask several times, and each look is a daemon round trip)."""
        libvirt = _libvirt()
        if not fresh and name in self._active:
            return self._active[name]
        try:
            self._active[name] = bool(self.domain(name).isActive())
        except libvirt.libvirtError as exc:
            raise self._fail(exc, f"reading the state of '{name}'", name) from None
        return self._active[name]

    def define(self, xml: str) -> str:
        """Define (or redefine) a persistent domain; returns its name."""
        libvirt = _libvirt()
        try:
            dom = self.conn.defineXML(xml)
        except libvirt.libvirtError as exc:
            raise LibvirtError(f"defining a domain: {_message(exc)}", "check the domain XML") from None
        self._domains[dom.name()] = dom
        return str(dom.name())

    def undefine(self, name: str, *, keep_nvram: bool = False) -> None:
        """Undefine the domain (stopped first when it runs); its NVRAM file goes too unless `keep_nvram`."""
        libvirt = _libvirt()
        nvram = "VIR_DOMAIN_UNDEFINE_KEEP_NVRAM" if keep_nvram else "VIR_DOMAIN_UNDEFINE_NVRAM"
        try:
            dom = self.domain(name)
            if dom.isActive():
                dom.destroy()
            dom.undefineFlags(getattr(libvirt, nvram, 0))
        except libvirt.libvirtError as exc:
            raise self._fail(exc, f"undefining '{name}'", name) from None
        self._domains.pop(name, None)

    def migrate_live(
        self, name: str, target: VirtConn, *, live_xml: str, persistent_xml: str, data_uri: str | None = None
    ) -> None:
        """Move the running domain to `target`'s host while it runs, as `virsh migrate --live --persistent
        --undefinesource --xml` does: the target runs `live_xml` and keeps `persistent_xml` as its definition (each
        the source's, with what differs on the target rewritten: its devices, vgpuadm's metadata), and the source
        forgets the domain once the target runs it. Never post-copy (QEMU ≥ 8.2 refuses it with a VFIO device: a
        page fault on the target cannot reach a device's state). The data goes to `data_uri` (tcp://ADDRESS) when
        given, else to the address the target's libvirt names. Raises LibvirtError with libvirt's reason; the domain
        then still runs on the source, as libvirt leaves it after a failed migration."""
        libvirt = _libvirt()
        flags = libvirt.VIR_MIGRATE_LIVE | libvirt.VIR_MIGRATE_PERSIST_DEST | libvirt.VIR_MIGRATE_UNDEFINE_SOURCE
        params = {libvirt.VIR_MIGRATE_PARAM_DEST_XML: live_xml, libvirt.VIR_MIGRATE_PARAM_PERSIST_XML: persistent_xml}
        if data_uri:
            params[libvirt.VIR_MIGRATE_PARAM_URI] = data_uri
        try:
            self.domain(name).migrate3(target.conn, params, flags)
        except libvirt.libvirtError as exc:
            raise LibvirtError(
                f"moving '{name}' to {target.uri}: {_message(exc)}",
                f"'{name}' runs here as before; see why with `vgpuadm migrate check --vm {name} --to {target.quoted_uri}`",
            ) from None
        self._domains.pop(name, None)
        self._active.pop(name, None)

    # -- devices ---------------------------------------------------------------------------------------------------
    def _device_flags(self, name: str) -> tuple[int, bool]:
        libvirt = _libvirt()
        live = self.is_active(name, fresh=False)
        flags = libvirt.VIR_DOMAIN_AFFECT_CONFIG | (libvirt.VIR_DOMAIN_AFFECT_LIVE if live else 0)
        return flags, live

    def attach(self, name: str, device_xml: str) -> None:
        """Add a device to the persistent definition, and to the running guest when it runs. With both flags libvirt
        commits the definition only after the hot-plug succeeded, so a refused hot-plug changes nothing."""
        self._change_device(name, device_xml, "attachDeviceFlags", "hot-plug", "attaching a device to")

    def detach(self, name: str, device_xml: str, *, config_only: bool = False) -> None:
        """Remove a device from the definition, and from the running guest when it runs (config_only: from the
        definition only; the caller unplugged it and saw it go, vgpuadm/virt/conn.py's `unplug`)."""
        self._change_device(name, device_xml, "detachDeviceFlags", "unplug", "detaching a device from",
                            config_only=config_only)  # fmt: skip

    def attach_live(self, name: str, device_xml: str) -> None:
        """Hot-plug a device into the running guest only (its persistent definition is written separately)."""
        self._change_device(name, device_xml, "attachDeviceFlags", "hot-plug", "attaching a device to", live_only=True)

    def detach_live(self, name: str, device_xml: str) -> None:
        """Ask the running guest to let go of a device. libvirt may return before the guest did (a PCIe unplug
        needs the guest OS): handlers.py's `unplug` confirms it left."""
        self._change_device(name, device_xml, "detachDeviceFlags", "unplug", "detaching a device from", live_only=True)

    def _change_device(
        self,
        name: str,
        device_xml: str,
        method: str,
        live_verb: str,
        doing: str,
        *,
        live_only: bool = False,
        config_only: bool = False,
    ) -> None:
        libvirt = _libvirt()
        flags, live = self._device_flags(name)
        if live_only:
            flags, live = libvirt.VIR_DOMAIN_AFFECT_LIVE, True
        elif config_only:
            flags, live = libvirt.VIR_DOMAIN_AFFECT_CONFIG, False
        try:
            getattr(self.domain(name), method)(device_xml, flags)
        except libvirt.libvirtError as exc:
            if live:
                raise ConflictError(
                    f"domain '{name}' is running and libvirt cannot {live_verb} the device: {_message(exc)}",
                    f"shut it down (virsh -c {self.quoted_uri} shutdown {name}) and run the command again",
                ) from None
            raise self._fail(exc, f"{doing} '{name}'", name) from None

    # -- metadata --------------------------------------------------------------------------------------------------
    def get_metadata(self, name: str, uri: str) -> str | None:
        """The persistent metadata element in namespace `uri` (without namespace, as libvirt returns it), or None."""
        libvirt = _libvirt()
        try:
            return str(
                self.domain(name).metadata(libvirt.VIR_DOMAIN_METADATA_ELEMENT, uri, libvirt.VIR_DOMAIN_AFFECT_CONFIG)
            )
        except libvirt.libvirtError as exc:
            if exc.get_error_code() == _ERR_NO_DOMAIN_METADATA:
                return None
            raise self._fail(exc, f"reading the metadata of '{name}'", name) from None

    def set_metadata(self, name: str, key: str, uri: str, element_xml: str | None, *, live_only: bool = False) -> None:
        """Replace the element in namespace `uri` (None removes it). Persistent, plus live when running; live_only:
        the running guest's copy only."""
        libvirt = _libvirt()
        flags, _live = self._device_flags(name)
        if live_only:
            flags = libvirt.VIR_DOMAIN_AFFECT_LIVE
        try:
            self.domain(name).setMetadata(
                libvirt.VIR_DOMAIN_METADATA_ELEMENT, element_xml, key if element_xml else None, uri, flags
            )
        except libvirt.libvirtError as exc:
            raise self._fail(exc, f"writing the metadata of '{name}'", name) from None

    # -- versions --------------------------------------------------------------------------------------------------
    def lib_version(self) -> tuple[int, int, int]:
        """The libvirt library version of the connection's driver (major, minor, micro)."""
        libvirt = _libvirt()
        try:
            v = int(self.conn.getLibVersion())
        except libvirt.libvirtError as exc:
            raise self._fail(exc, "reading the libvirt version") from None
        return v // 1_000_000, v // 1000 % 1000, v % 1000


def _message(exc: Any) -> str:
    """libvirt's own one-line message."""
    msg = exc.get_error_message() if hasattr(exc, "get_error_message") else None
    return " ".join(str(msg or exc).split())


def _virt(ctx: Any) -> Any:
    if ctx.virt is None:
        raise UsageError(
            "this change needs libvirt but no libvirt connection was given",
            "pass --connect URI (or run on a simulated root, which uses libvirt's embedded driver)",
        )
    return ctx.virt


def _ref(device_xml: str) -> HostdevRef:
    refs = parse_hostdevs(f"<domain><devices>{device_xml}</devices></domain>")
    if len(refs) != 1:
        raise UsageError(f"not one hostdev element: {device_xml[:60]!r}", "this is a bug in vgpuadm; report it")
    return refs[0]


def _element(device_xml: str) -> Any:
    found = hostdev_elements(device_xml)
    if len(found) != 1:
        raise UsageError(f"not one hostdev element: {device_xml[:60]!r}", "this is a bug in vgpuadm; report it")
    return found[0]


def has_hostdev(ctx: Any, domain: str, device_xml: str) -> bool:
    want = _ref(device_xml)
    return any((r.kind, r.key) == (want.kind, want.key) for r in parse_hostdevs(_virt(ctx).xml(domain)))


def _attach(s: AttachHostdev | DetachHostdev, ctx: Any) -> None:
    _virt(ctx).attach(s.domain, s.device_xml)


def _detach(s: AttachHostdev | DetachHostdev, ctx: Any) -> None:
    """Out of the persistent definition; out of the running guest first, confirmed (see `unplug`): with both flags
    at once libvirt would save the definition while the guest still holds the device."""
    virt = _virt(ctx)
    if virt.is_active(s.domain, fresh=False):
        el = _element(s.device_xml)
        if hostdev_key(el) in _live_keys(virt, s.domain):
            unplug(virt, s.domain, el)
        virt.detach(s.domain, s.device_xml, config_only=True)
        return
    virt.detach(s.domain, s.device_xml)


def _undo_attach(s: AttachHostdev, ctx: Any) -> None:
    if has_hostdev(ctx, s.domain, s.device_xml):
        _detach(s, ctx)


def _undo_detach(s: DetachHostdev, ctx: Any) -> None:
    if not has_hostdev(ctx, s.domain, s.device_xml):
        _attach(s, ctx)


def _set_metadata(s: SetMetadata, ctx: Any) -> None:
    _virt(ctx).set_metadata(s.domain, PREFIX, NS, s.element or None)


def _undo_metadata(s: SetMetadata, ctx: Any) -> None:
    _virt(ctx).set_metadata(s.domain, PREFIX, NS, s.previous or None)


def _metadata_applied(s: SetMetadata, ctx: Any) -> bool:

    return same_metadata(_virt(ctx).get_metadata(s.domain, NS), s.element)


def _defined(s: DefineDomain, ctx: Any) -> bool:
    return _has_effect(parse_domain(_virt(ctx).xml(s.domain)), s)


def _has_effect(doc: Any, s: DefineDomain) -> bool:
    """Whether a persistent definition has the step's effect: its hostdevs in, the detached ones out, the metadata."""
    keys = {(r.kind, r.key) for r in parse_hostdevs(doc)}
    if any(hostdev_key(el) not in keys for el in hostdev_elements(s.attach)):
        return False
    if any(hostdev_key(el) in keys for el in hostdev_elements(s.detach)):
        return False
    return same_metadata(_element_of(doc), s.element)


def _element_of(doc: Any) -> str | None:
    el = doc.find(f"metadata/{{{NS}}}{PREFIX}")
    return None if el is None else to_string(el)


UNPLUG_WAIT = 10  # seconds, from the request, that a running guest has to release a device it is unplugged from
UNPLUG_POLL = 0.25  # seconds between two looks at the live definition while waiting


def _live_keys(virt: Any, domain: str) -> set[tuple[str, str] | None]:
    return {hostdev_key(el) for el in parse_domain(virt.xml(domain, inactive=False)).findall("devices/hostdev")}


def unplug(
    virt: Any,
    domain: str,
    el: Any,
    *,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Unplug one hostdev from the running guest and confirm it left. libvirt's detach can return with the unplug
    only requested: PCIe hot-unplug completes when the guest OS acknowledges it, libvirt waits 5 s and then returns
    anyway ("detach request sent"; virDomainDetachDeviceFlags says to recheck the live XML or await the
    DEVICE_REMOVED event). QEMU then still holds the device, and removing the mdev or unbinding the VF would block
    in the kernel. So the live XML is read until the device is gone, UNPLUG_WAIT s from the request at most;
    otherwise ConflictError, and nothing else is touched."""
    key = hostdev_key(el)
    deadline = time.monotonic() + UNPLUG_WAIT
    virt.detach_live(domain, to_string(el))
    left = deadline - time.monotonic()  # libvirt itself waited some of it
    if wait_until(lambda: key in _live_keys(virt, domain), lambda present: not present, left, UNPLUG_POLL,
                  max_interval=UNPLUG_POLL, sleep=sleep):  # fmt: skip
        what = f"mdev {key[1]}" if key and key[0] == MDEV_KEY else f"PCI device {key[1] if key else '?'}"
        raise ConflictError(
            f"the guest of domain {domain} has not released {what} (PCIe unplug not acknowledged within "
            f"{UNPLUG_WAIT} s); nothing removed",
            f"the guest OS must accept hot-unplug; or shut the domain down (virsh -c {virt.quoted_uri} shutdown "
            f"{domain}) and run the command again",
        )


def _live_change(s: DefineDomain, ctx: Any) -> tuple[list[str], list[str], dict[tuple[str, str] | None, Any]]:
    """Unplug `detach` and hot-plug `attach` in the running guest (each only when needed). Returns what was plugged
    and unplugged (for undoing it when the define fails) and the live hostdev elements by key afterwards."""
    virt = _virt(ctx)
    plugged: list[str] = []
    unplugged: list[str] = []
    try:
        live = _live_keys(virt, s.domain)
        for el in hostdev_elements(s.detach):
            if hostdev_key(el) in live:
                unplug(virt, s.domain, el)
                unplugged.append(to_string(el))
        for el in hostdev_elements(s.attach):
            if hostdev_key(el) not in live:
                virt.attach_live(s.domain, to_string(el))
                plugged.append(to_string(el))
        after = parse_domain(virt.xml(s.domain, inactive=False)).findall("devices/hostdev")
    except VgpuadmError:
        _unlive(ctx, s.domain, plugged, unplugged)
        raise
    return plugged, unplugged, {hostdev_key(el): el for el in after}


def _unlive(ctx: Any, domain: str, plugged: list[str], unplugged: list[str]) -> None:
    for device in reversed(plugged):
        with contextlib.suppress(VgpuadmError):
            unplug(_virt(ctx), domain, _element(device))
    for device in reversed(unplugged):
        with contextlib.suppress(VgpuadmError):
            _virt(ctx).attach_live(domain, device)


def _define(s: DefineDomain, ctx: Any, *, stamp: bool = True) -> None:
    """One persistent write (defineXML of the current secure definition with the change applied); when the domain
    runs, the live hot-plug/unplug first, and the devices go into the definition at the guest addresses the live
    guest gave them. The metadata is stamped with the time of the change (`stamp`; an undo puts the old one back)."""
    virt = _virt(ctx)
    element = stamped(s.element, _now()) if stamp and s.element else s.element
    plugged: list[str] = []
    unplugged: list[str] = []
    attach = s.attach
    if virt.is_active(s.domain, fresh=False):
        plugged, unplugged, live = _live_change(s, ctx)
        elements = []
        for el in hostdev_elements(s.attach):
            el = live.get(hostdev_key(el), el)
            for alias in el.findall("alias"):  # libvirt's live names; a definition keeps only user aliases
                el.remove(alias)
            elements.append(to_string(el))
        attach = "".join(elements)
    try:
        current = parse_domain(virt.xml(s.domain, secure=True))
        if not _has_effect(current, s):
            virt.define(redefine(current, add=attach, remove=s.detach, element=element))
        if virt.is_active(s.domain, fresh=False):
            virt.set_metadata(s.domain, PREFIX, NS, for_libvirt_metadata(element) if element else None,
                              live_only=True)  # fmt: skip
    except VgpuadmError:
        _unlive(ctx, s.domain, plugged, unplugged)
        raise


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _reversed(s: DefineDomain) -> DefineDomain:
    return dataclasses.replace(s, attach=s.detach, detach=s.attach, element=s.previous, previous=s.element)


def _undo_define(s: DefineDomain, ctx: Any) -> None:
    """The same change reversed: the old hostdevs and metadata back; each part only when it is not there yet."""
    _define(_reversed(s), ctx, stamp=False)


def _virtio_gl(s: SetVirtioGl, ctx: Any, enable: bool) -> None:
    virt = _virt(ctx)
    current = virt.xml(s.domain, inactive=True)
    if has_virtio_gl(current, s.rendernode) == enable:
        return
    if enable:
        virt.define(with_virtio_gl(current, s.rendernode, s.graphics)[0])
    else:
        virt.define(without_virtio_gl(current, s.rendernode, s.previous_video))


def _exists(virt: Any, domain: str) -> bool:
    try:
        virt.domain(domain)
    except NotFoundError:
        return False
    return True


def _definition(s: DomainDefinition, ctx: Any, defined: bool) -> None:
    """Define the domain from the step's XML, or undefine it (never a running one: a cold move's source is shut
    off; its NVRAM file stays, for the operator to copy); each only when it is not so already."""
    virt = _virt(ctx)
    if _exists(virt, s.domain) == defined:
        return
    if defined:
        virt.define(s.xml)
        return
    if virt.is_active(s.domain):
        raise ConflictError(f"domain {s.domain} is running: it is not undefined", f"shut it down (virsh shutdown "
                            f"{s.domain}) and run the command again")  # fmt: skip
    virt.undefine(s.domain, keep_nvram=True)


HANDLERS: list[tuple[Any, ...]] = [
    (
        DomainDefinition,
        lambda s, ctx: _definition(s, ctx, s.defined),
        lambda s, ctx: _definition(s, ctx, not s.defined),
        lambda s, ctx: _exists(_virt(ctx), s.domain) == s.defined,
    ),
    (AttachHostdev, _attach, _undo_attach, lambda s, ctx: has_hostdev(ctx, s.domain, s.device_xml)),
    (DetachHostdev, _detach, _undo_detach, lambda s, ctx: not has_hostdev(ctx, s.domain, s.device_xml)),
    (SetMetadata, _set_metadata, _undo_metadata, _metadata_applied),
    (DefineDomain, _define, _undo_define, _defined, lambda s: s.domain),  # lane: definitions of distinct domains
    (
        SetVirtioGl,
        lambda s, ctx: _virtio_gl(s, ctx, s.enable),
        lambda s, ctx: _virtio_gl(s, ctx, not s.enable),
        lambda s, ctx: has_virtio_gl(_virt(ctx).xml(s.domain, inactive=True), s.rendernode) == s.enable,
    ),
]
