"""Links and FIFOs never steer root: an imported recording or snapshot archive, a planted link one directory above
the ones vgpuadm writes, a planted FIFO where it reads state, a cached capability file that is a link — each ends
in a one-line error (or is skipped where it is only a cache), with nothing written outside the root and nothing
hanging (issue #31). Every file goes through host/root.py's descriptor-based helpers."""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

DEV = "/devices/pci0000:00/0000:00:03.0/0000:08:00.0"


def one_error(r, code: int) -> str:
    assert (r.code, "Traceback" in r.err, "internal error" in r.err) == (code, False, False), (r.out, r.err)
    lines = r.err.splitlines()
    assert lines[0].startswith("error: ") and all(line.startswith("hint: ") for line in lines[1:]), r.err
    return lines[0]


def tree(top: Path) -> list[str]:
    return sorted(str(p.relative_to(top)) for p in top.rglob("*"))


# --- the helper itself --------------------------------------------------------------------------------------------


def test_helper_follows_no_link_at_any_component(tmp_path: Path) -> None:
    # imported here (a new API), so that the behaviour tests below also run against the code before it
    from vgpuadm.host.root import BeneathError, read_beneath, write_beneath

    # behaviour tests below also run against code without it)
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "etc").mkdir(parents=True)
    outside.mkdir()
    (outside / "f").write_text("secret")
    (root / "etc" / "libvirt").symlink_to(outside)
    (root / "etc" / "f").symlink_to(outside / "f")
    with pytest.raises(BeneathError, match=r"^\[Errno 40\] /etc/libvirt is a symlink, not a directory$"):
        write_beneath(str(root), "etc/libvirt/hooks/qemu", b"x", mode=0o755)
    with pytest.raises(BeneathError, match=r"/etc/libvirt is a symlink, not a directory"):
        read_beneath(str(root), "etc/libvirt/f")
    with pytest.raises(BeneathError, match=r"/etc/f is a symlink, not a regular file"):
        read_beneath(str(root), "etc/f")
    with pytest.raises(BeneathError, match=r"'etc/../x' is not a plain path"):
        write_beneath(str(root), "etc/../x", b"x", mode=0o644)
    assert tree(outside) == ["f"] and (outside / "f").read_text() == "secret"


def test_helper_reads_regular_files_only_and_never_blocks_on_a_fifo(tmp_path: Path) -> None:
    from vgpuadm.host.root import BeneathError, read_beneath

    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(BeneathError, match=r"^\[Errno 22\] /fifo is a FIFO, not a regular file"):
        read_beneath(str(tmp_path), "fifo")
    (tmp_path / "big").write_bytes(b"x" * 11)
    with pytest.raises(BeneathError, match=r"/big is larger than 10 bytes"):
        read_beneath(str(tmp_path), "big", limit=10)
    assert read_beneath(str(tmp_path), "big", limit=10, truncate=True) == b"x" * 10
    assert read_beneath(str(tmp_path), "missing/f") is None


def test_helper_writes_atomically_with_exact_modes_whatever_the_umask(tmp_path: Path) -> None:
    from vgpuadm.host.root import write_beneath

    old = os.umask(0o077)
    try:
        write_beneath(str(tmp_path), "a/b/f", b"text", mode=0o644, dir_mode=0o755)
    finally:
        os.umask(old)
    modes = [stat.S_IMODE(os.lstat(tmp_path / p).st_mode) for p in ("a", "a/b", "a/b/f")]
    assert modes == [0o755, 0o755, 0o644]
    os.mkfifo(tmp_path / "a/b/g")
    write_beneath(str(tmp_path), "a/b/g", b"new", mode=0o600)  # a FIFO there is replaced, never opened
    assert (tmp_path / "a/b/g").read_bytes() == b"new" and tree(tmp_path) == ["a", "a/b", "a/b/f", "a/b/g"]


def test_the_one_writer_follows_directory_links_only_when_not_confined(tmp_path: Path) -> None:
    """confine=False is the executor's state on `/` (root's own directory links; nothing lies outside `/`): the
    directories above the file are followed, the file itself is still replaced, never written through."""
    from vgpuadm.host.root import BeneathError, write_beneath

    (tmp_path / "real").mkdir()
    (tmp_path / "var").symlink_to("real")
    (tmp_path / "victim").write_text("keep")
    (tmp_path / "real/state.json").symlink_to(tmp_path / "victim")
    with pytest.raises(BeneathError, match=r"^\[Errno 40\] /var is a symlink, not a directory$"):
        write_beneath(str(tmp_path), "var/state.json", b"{}", mode=0o600)
    write_beneath(str(tmp_path), "var/state.json", b"{}", mode=0o600, dir_mode=0o700, confine=False)
    write_beneath(str(tmp_path), "var/lib/new.json", b"{}", mode=0o600, dir_mode=0o700, confine=False)
    assert (tmp_path / "victim").read_text() == "keep" and not (tmp_path / "real/state.json").is_symlink()
    modes = [stat.S_IMODE(os.lstat(tmp_path / p).st_mode) for p in ("real/state.json", "real/lib", "real/lib/new.json")]
    assert modes == [0o600, 0o700, 0o600]


# --- 1. a umockdev recording cannot write outside the imported root -----------------------------------------------


def chain_recording(victim_name: str) -> str:
    """Links that each resolve under /sys as text, but chained climb out: a -> /sys, b -> a/.. (the root),
    c -> b/../<victim> (beside the root); a second block of the same device then writes attribute c."""
    return f"P: {DEV}\nL: a=../../../..\nL: b=a/..\nL: c=b/../{victim_name}\n\nP: {DEV}\nA: c=owned\\n\n"


@pytest.mark.parametrize("command", ["import-umockdev", "import"])
def test_recording_with_a_chain_of_links_writes_nothing_outside(cli, tmp_path: Path, command: str) -> None:
    """The chain is followed as the kernel would, through the recording's own links, and refused before anything
    is written; the file it points at, beside the root, is untouched."""
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    recording = tmp_path / "rec.umockdev"
    recording.write_text(chain_recording("victim"))
    r = cli("sim", command, str(recording), str(tmp_path / "root"))
    assert one_error(r, 2) == (
        f"error: rec.umockdev: link /sys{DEV}/b -> 'a/..' leads outside /sys through the recording's other links"
    )
    assert victim.read_text() == "keep\n"
    assert sorted(os.listdir(tmp_path)) == ["rec.umockdev", "victim"]


def test_recording_never_writes_through_a_link_it_planted(cli, tmp_path: Path) -> None:
    """A link that stays inside (c -> /sys/devices) is still never written through: the attribute under it is
    refused by descriptor, and the half-laid root is taken back (an empty directory the user made stays, empty)."""
    recording = tmp_path / "rec.umockdev"
    recording.write_text(f"P: {DEV}\nL: c=../../..\n\nP: {DEV}\nA: c/x=owned\n")
    (tmp_path / "root").mkdir()
    r = cli("sim", "import-umockdev", str(recording), str(tmp_path / "root"))
    assert one_error(r, 2) == f"error: rec.umockdev: /sys{DEV}/c is a symlink, not a directory; nothing was written"
    assert tree(tmp_path / "root") == []


# --- 2. a snapshot archive's links cannot carry the replay script or sriov-manage outside ---------------------------

# sys/x/l1 -> ../.. (the root), sys/l2 -> x/l1/.. (beside the root), usr -> sys/l2: each stays inside as text.
CHAIN = {"sys/x/l1": "../..", "sys/l2": "x/l1/..", "usr": "sys/l2"}
INSIDE = {"usr": "sys"}  # a link that stays inside: the tools are still never written through it


def rebuilt(archive: Path, out: Path, *, simulated: bool, chain: dict[str, str]) -> Path:
    """`archive` (a real snapshot) with its usr/ replaced by the link chain, and its marker kept or dropped."""
    with tarfile.open(archive) as src, tarfile.open(out, "w:gz") as dst:
        for info in src:
            if info.name == "usr" or info.name.startswith("usr/"):
                continue
            if info.name == "vgpuadm-simulated-host.json" and not simulated:
                continue
            dst.addfile(info, src.extractfile(info) if info.isreg() else None)
        for name, target in chain.items():
            if name == "sys/x/l1":
                d = tarfile.TarInfo("sys/x")
                d.type, d.mode = tarfile.DIRTYPE, 0o755
                dst.addfile(d)
            link = tarfile.TarInfo(name)
            link.type, link.linkname = tarfile.SYMTYPE, target
            dst.addfile(link)
    return out


CHAIN_REFUSED = "link 'sys/l2' leads out of the host root through the archive's links ('x/l1/..')"
INSIDE_REFUSED = "/usr is a symlink, not a directory"


@pytest.mark.process
@pytest.mark.parametrize(("profile", "simulated", "chain", "message"), [
    ("h200-vendor-vfio", False, CHAIN, CHAIN_REFUSED),  # the nvidia-smi replay of a captured host
    ("h200-vendor-vfio", True, CHAIN, CHAIN_REFUSED),  # the simulated nvidia-smi
    ("a100-mdev-vf", True, CHAIN, CHAIN_REFUSED),  # the simulated sriov-manage
    ("h200-vendor-vfio", False, INSIDE, INSIDE_REFUSED),
    ("a100-mdev-vf", True, INSIDE, INSIDE_REFUSED),
])  # fmt: skip
def test_archive_with_a_chain_of_links_installs_no_tool_outside(
    cli, sim_host, tmp_path: Path, profile: str, simulated: bool, chain: dict[str, str], message: str
) -> None:
    """Before: the replay script, nvidia-smi or sriov-manage (0755) landed beside the destination."""
    work = tmp_path / "work"
    work.mkdir()
    snap = work / "host.tar.gz"
    assert cli("--root", str(sim_host(profile)), "snapshot", str(snap)).code == 0
    archive = rebuilt(snap, work / "evil.tar.gz", simulated=simulated, chain=chain)
    r = cli("sim", "import", str(archive), str(work / "dest"))
    assert one_error(r, 2) == f"error: {archive}: {message}; nothing was written"
    assert sorted(os.listdir(work)) == ["evil.tar.gz", "host.tar.gz"]  # no bin/ beside it, no half-made dest


# --- 5. a link one directory above the checked ones, inside mdevctl.d, in a --domain-xml-dir ----------------------

U1 = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001"
P4 = "0000:01:00.0"
MDEVCTL_TEXT = '{\n  "mdev_type": "nvidia-63",\n  "start": "auto",\n  "attrs": []\n}'


def planted(root: Path, link: str, outside: Path) -> None:
    """<root>/<link> is a link to `outside` (an empty directory), replacing what was there."""
    where = root / link
    where.parent.mkdir(parents=True, exist_ok=True)
    if where.is_dir() and not where.is_symlink():
        os.rename(where, root / "moved-away")
    where.symlink_to(outside)


@pytest.mark.parametrize(("link", "command", "code", "message"), [
    ("etc/libvirt", ("hook", "install"), 7,
     "refusing to read /etc/libvirt/hooks/qemu.d/vgpuadm: /etc/libvirt is a symlink, not a directory"),
    ("etc", ("hook", "install"), 7, "refusing to read /etc/libvirt/hooks/qemu.d/vgpuadm: /etc is a symlink, not a "
                                    "directory"),
    ("etc/systemd", ("unit", "install"), 7,
     "refusing to read /etc/systemd/system/vgpuadm-restore.service: /etc/systemd is a symlink, not a directory"),
    ("etc/mdevctl.d", ("mdevctl", "export", "--from-host"), 7,
     f"refusing to read /etc/mdevctl.d/{P4}/{U1}: /etc/mdevctl.d is a symlink, not a directory"),
    ("etc", ("mdevctl", "export", "--from-host"), 7,
     f"refusing to read /etc/mdevctl.d/{P4}/{U1}: /etc is a symlink, not a directory"),
])  # fmt: skip
def test_a_link_above_the_files_vgpuadm_installs_is_never_written_through(
    cli, sim_host, tmp_path: Path, link: str, command: tuple[str, ...], code: int, message: str
) -> None:
    root = sim_host("p4")
    assert cli("--root", str(root), "mdev", "create", "--type", "nvidia-63", "--uuid", U1).code == 0
    outside = tmp_path / "outside"
    outside.mkdir()
    planted(root, link, outside)
    r = cli("--root", str(root), *command)
    assert one_error(r, code) == f"error: {message}"
    assert tree(outside) == []


@pytest.mark.parametrize("where", ["parent", "definition"])
def test_mdevctl_import_reads_no_definition_through_a_link(cli, sim_host, tmp_path: Path, where: str) -> None:
    root = sim_host("p4")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / U1).write_text(MDEVCTL_TEXT)
    base = root / "etc/mdevctl.d"
    base.mkdir(parents=True)
    if where == "parent":
        (base / P4).symlink_to(outside)
        shown = f"/etc/mdevctl.d/{P4}"
    else:
        (base / P4).mkdir()
        (base / P4 / U1).symlink_to(outside / U1)
        shown = f"/etc/mdevctl.d/{P4}/{U1}"
    r = cli("--root", str(root), "mdevctl", "import")
    assert one_error(r, 7) == f"error: refusing to read {shown}: {shown} is a symlink, not a " + (
        "directory" if where == "parent" else "regular file"
    )
    assert cli("--root", str(root), "mdevs", "--json").out.count(U1) == 0  # nothing was created from it


def test_domain_xml_dir_entries_are_never_followed(cli, sim_host, tmp_path: Path) -> None:
    root = sim_host("p4")
    xml_dir = tmp_path / "domains"
    xml_dir.mkdir()
    secret = tmp_path / "secret"
    secret.write_text("root-only secret\n")
    (xml_dir / "web01.xml").symlink_to(secret)
    r = cli("--root", str(root), "mdevctl", "export", "--domain-xml-dir", str(xml_dir))
    assert (
        one_error(r, 2)
        == f"error: refusing to read domain XML {xml_dir}/web01.xml: it is a symlink, not a regular file"
    )
    assert "secret" not in r.out + r.err.replace(str(tmp_path), "")
    (xml_dir / "web01.xml").unlink()
    os.mkfifo(xml_dir / "web01.xml")
    r = cli("--root", str(root), "restore", "--domain-xml-dir", str(xml_dir))
    assert (
        one_error(r, 2) == f"error: refusing to read domain XML {xml_dir}/web01.xml: it is a FIFO, not a regular file"
    )


# --- 7. a FIFO where vgpuadm reads or writes state hangs nothing --------------------------------------------------

HOOK = "etc/libvirt/hooks/qemu.d/vgpuadm"


class Ran:
    def __init__(self, proc: subprocess.CompletedProcess[str]) -> None:
        self.code, self.out, self.err = proc.returncode, proc.stdout, proc.stderr


def run_bounded(*args: str) -> Ran:
    """The CLI in a child process, killed after 60 s: the bug was a hang (a FIFO blocks open() in the kernel,
    where no in-process timeout reaches)."""
    try:
        proc = subprocess.run([sys.executable, "-m", "vgpuadm", *args], capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL, check=False)  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail(f"vgpuadm {' '.join(args)} hung")
    return Ran(proc)


@pytest.mark.process
def test_a_fifo_at_the_lock_owner_is_refused_at_once(cli, sim_host) -> None:
    root = sim_host("p4")
    (root / "run/vgpuadm").mkdir(parents=True, mode=0o700)
    os.mkfifo(root / "run/vgpuadm/lock.owner", 0o600)
    r = run_bounded("--root", str(root), "mdev", "create", "--type", "nvidia-63", "--uuid", U1)
    assert one_error(r, 6) == "error: refusing /run/vgpuadm/lock.owner: it is a FIFO, not a regular file"
    assert r.err.splitlines()[1] == "hint: someone planted it: remove it (and check who could write that directory)"
    assert cli("--root", str(root), "mdevs", "--json").out.count(U1) == 0


@pytest.mark.process
@pytest.mark.parametrize(("fifo", "command", "message"), [
    (HOOK, ("hook", "status"), f"refusing to read /{HOOK}: /{HOOK} is a FIFO, not a regular file"),
    (HOOK, ("hook", "install"), f"refusing to read /{HOOK}: /{HOOK} is a FIFO, not a regular file"),
    (f"etc/mdevctl.d/{P4}/{U1}", ("mdevctl", "import"),
     f"refusing to read /etc/mdevctl.d/{P4}/{U1}: /etc/mdevctl.d/{P4}/{U1} is a FIFO, not a regular file"),
    ("etc/systemd/system/vgpuadm-restore.service", ("unit", "install"), "refusing to read /etc/systemd/system/"
     "vgpuadm-restore.service: /etc/systemd/system/vgpuadm-restore.service is a FIFO, not a regular file"),
])  # fmt: skip
def test_a_fifo_where_a_configuration_file_is_is_refused_at_once(
    sim_host, fifo: str, command: tuple[str, ...], message: str
) -> None:
    root = sim_host("p4")
    (root / fifo).parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(root / fifo)
    r = run_bounded("--root", str(root), *command)
    assert one_error(r, 7) == f"error: {message}"
    assert stat.S_ISFIFO(os.lstat(root / fifo).st_mode)  # left as it was


@pytest.mark.process
def test_snapshot_of_a_root_whose_machine_id_is_a_fifo_does_not_hang(cli, sim_host, tmp_path: Path) -> None:
    """A FIFO is no machine-id: the snapshot is taken without one, as on a root that has none."""
    root = sim_host("p4")
    (root / "etc").mkdir(exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        (root / "etc/machine-id").unlink()
    os.mkfifo(root / "etc/machine-id")
    r = run_bounded("--root", str(root), "snapshot", str(tmp_path / "s.tar.gz"))
    assert (r.code, r.err) == (0, ""), r.err
    with tarfile.open(tmp_path / "s.tar.gz") as tf:
        assert "etc/machine-id" not in tf.getnames()


@pytest.mark.process
def test_sim_import_of_a_fifo_is_refused_at_once(tmp_path: Path) -> None:
    """`sim import FIFO DIR` names the FIFO as no archive (it waited for a writer forever; found by the CLI fuzz)."""
    os.mkfifo(tmp_path / "fifo")
    r = run_bounded("sim", "import", str(tmp_path / "fifo"), str(tmp_path / "new"))
    assert r.code == 2
    assert r.err.splitlines() == [
        f"error: {tmp_path}/fifo is not a regular file",
        "hint: give a snapshot .tar.gz or a umockdev-record file",
    ]
    assert not (tmp_path / "new").exists()


# --- 6. libvirt's cached QEMU capability files are copied only as regular files --------------------------------


def test_a_planted_capability_link_copies_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The embedded root's cache → the user's cache (after libvirt probed), and the user's cache → a fresh root:
    a `*.xml` link (or FIFO) on either side is skipped, a real result is copied 0600."""
    from vgpuadm.virt import conn

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    secret = tmp_path / "secret"
    secret.write_text("root-only secret\n")
    embed = tmp_path / "root/var/lib/vgpuadm/libvirt"
    caps = embed / "cache/qemu/capabilities"
    caps.mkdir(parents=True)
    (caps / "0123.xml").write_text("<qemuCaps/>\n")
    (caps / "evil.xml").symlink_to(secret)
    conn._save_caps_cache(str(embed))
    store = tmp_path / "xdg/vgpuadm/qemu-capabilities"
    assert tree(store) == ["0123.xml"] and stat.S_IMODE(os.stat(store / "0123.xml").st_mode) == 0o600
    (store / "evil2.xml").symlink_to(secret)
    os.mkfifo(store / "fifo.xml")
    fresh = tmp_path / "fresh"
    conn._seed_caps_cache(str(fresh))
    assert tree(fresh) == ["cache", "cache/qemu", "cache/qemu/capabilities", "cache/qemu/capabilities/0123.xml"]
    assert (fresh / "cache/qemu/capabilities/0123.xml").read_text() == "<qemuCaps/>\n"


# --- 11. the embedded libvirt URI carries the root escaped ------------------------------------------------------


@pytest.mark.parametrize("name", ["a b", "a#b", "a&root=/etc", "%2e%2e%2f", "q'\"", "a+b", "a;b", "x?y"])
def test_the_embedded_uri_escapes_the_root_and_reads_back_as_it(name: str) -> None:
    """libvirt unescapes the root= value (tests/libvirt/test_embedded.py opens such a root for real)."""
    from vgpuadm.virt.conn import _embed_root_of, embed_uri

    uri = embed_uri(f"/srv/{name}/h")
    assert uri.startswith("qemu:///embed?root=/srv/") and uri.count("?") == 1 and "#" not in uri and "&" not in uri
    assert " " not in uri and "'" not in uri and '"' not in uri and ";" not in uri
    assert _embed_root_of(uri) == f"/srv/{name}/h/var/lib/vgpuadm/libvirt"


def test_a_fifo_where_the_lock_directory_goes_is_one_error(cli, sim_host) -> None:
    """Found by the fuzz lane (tests/fuzz/test_imports_and_planted_fifos.py): it was exit 70, an internal error."""
    root = sim_host("p4")
    (root / "run").mkdir(exist_ok=True)
    os.mkfifo(root / "run/vgpuadm", 0o600)
    r = cli("--root", str(root), "hook", "install")
    assert one_error(r, 6) == "error: refusing /run/vgpuadm: it is not a directory"
    assert not (root / "etc/libvirt/hooks").exists()


@pytest.mark.parametrize("link", ["etc", "etc/modprobe.d", "var/lib", "var/lib/vgpuadm"])
def test_policy_files_are_never_written_through_a_link_above_them(tmp_path: Path, link: str) -> None:
    """io/policyfile.py (the host-policy managed files) checked only their own directory."""
    from vgpuadm.errors import HostIOError
    from vgpuadm.io.policyfile import host_path, write_file

    root, outside = tmp_path / "root", tmp_path / "outside"
    outside.mkdir()
    planted(root, link, outside)
    name = "modprobe" if link.startswith("etc") else "state"
    with pytest.raises(HostIOError) as info:
        write_file(str(root), name, "options nvidia\n")
    shown = "/" + link
    assert info.value.message == f"refusing to write {host_path(name)}: {shown} is a symlink, not a directory"
    assert tree(outside) == []
