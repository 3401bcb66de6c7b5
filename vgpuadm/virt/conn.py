"""The one class that talks to libvirt. libvirt-python is imported lazily (so --help, discovery and most tests never
load it) and every libvirtError becomes a vgpuadm error carrying libvirt's own message.

Which libvirt: `--connect URI`, else $LIBVIRT_DEFAULT_URI, else qemu:///system — except on a simulated host root
with neither set, where it is libvirt's embedded QEMU driver under the root (`qemu:///embed?root=…`): real
libvirt, in-process, no daemon.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
from typing import Any

from vgpuadm.errors import ConflictError, LibvirtError, LibvirtMissingError, NotFoundError
from vgpuadm.host.files import list_beneath, read_beneath, write_beneath
from vgpuadm.host.root import EMBED_LIBVIRT

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
    """Copy one cached capability file by descriptor (host/files.py): a regular file only, no link followed at
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
        definition only; the caller unplugged it and saw it go, vgpuadm/virt/handlers.py's `unplug`)."""
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
