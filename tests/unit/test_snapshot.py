"""`vgpuadm snapshot` + `vgpuadm sim import`, as a user types them: the round trip on EVERY simulated profile (with
devices of each kind made first) gives identical `gpus/types/devices --json`; a captured real host (the Harvester
A2 recording, with an nvidia-smi that prints UUIDs and serials) round-trips with both redacted; an imported
simulated host still behaves as the simulated kernel; and hostile archives are refused whole, before anything is
written."""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

import pytest

from vgpuadm import api
from vgpuadm.host.umockdev import load
from vgpuadm.io import snapshot_archive
from vgpuadm.sim.profiles import PROFILES, build
from vgpuadm.sim.treestate import tree_state

DATA = Path(__file__).resolve().parent.parent / "data"
READS = ("gpus", "types", "devices")


def _devices(root: Path, profile: str) -> None:
    """A device of every kind the profile can hold, so the round trip carries mdevs and typed VFs too."""
    sysfs = api.open_sysfs(str(root))
    snap = api.discover(str(root))
    for i, parent in enumerate(sorted(snap.mdev_parents.values(), key=lambda p: p.name)[:2]):
        free = [t for t in parent.types if t.available_instances]
        if free:
            sysfs.write(f"{parent.sysfs_path}/mdev_supported_types/{free[0].type_id}/create",
                        f"0a0a0a0a-0000-4000-8000-{i + 1:012d}")  # fmt: skip
    for vf in sorted(snap.vendor_vfs.values(), key=lambda v: v.address)[:1]:
        if vf.creatable:
            sysfs.write(f"/sys/bus/pci/devices/{vf.address}/nvidia/current_vgpu_type", f"{vf.creatable[0][0]}\n")


def _reads(cli, root: Path) -> dict[str, object]:
    out = {}
    for command in READS:
        r = cli("--root", str(root), command, "--json")
        assert (r.code, r.err) == (0, ""), r.err
        out[command] = json.loads(r.out)
    return out


@pytest.mark.process
@pytest.mark.parametrize("profile", PROFILES)
def test_round_trip_on_every_profile(cli, tmp_path: Path, profile: str) -> None:
    root, archive, copy = tmp_path / "host", tmp_path / "host.tar.gz", tmp_path / "copy"
    build(profile, str(root))
    _devices(root, profile)
    r = cli("--root", str(root), "snapshot", str(archive))
    assert r.code == 0 and r.err == "" and r.out.startswith(f"wrote {archive}: "), r.err
    assert archive.stat().st_mode & 0o777 == 0o600
    r = cli("sim", "import", str(archive), str(copy))
    assert (r.code, r.err) == (0, "")
    assert r.out.startswith("imported a snapshot (") and r.out.endswith(f"as a simulated host (use --root {copy})\n")
    assert _reads(cli, copy) == _reads(cli, root)
    assert cli("--root", str(copy), "gpus").out == cli("--root", str(root), "gpus").out  # model names too


def test_imported_simulated_host_reacts_like_the_kernel(cli, tmp_path: Path) -> None:
    root, archive, copy = tmp_path / "host", tmp_path / "h.tar.gz", tmp_path / "copy"
    build("p4", str(root))
    assert cli("--root", str(root), "snapshot", str(archive)).code == 0
    assert cli("sim", "import", str(archive), str(copy)).code == 0
    uuid = "0a0a0a0a-0000-4000-8000-0000000000aa"
    for host in (root, copy):
        r = cli("--root", str(host), "mdev", "create", "--type", "nvidia-63", "--uuid", uuid, "--gpu", "0000:01:00.0")
        assert r.code == 0, r.err
    assert _reads(cli, copy) == _reads(cli, root)
    state = {k: v for k, v in tree_state(str(copy)).items() if k.startswith("/sys/bus/mdev/devices/")}
    assert state == {k: v for k, v in tree_state(str(root)).items() if k.startswith("/sys/bus/mdev/devices/")}


FAKE_SMI = """#!/bin/sh
case "$*" in
  "-q") printf '%s\\n' "GPU 00000000:01:00.0" "    Serial Number                         : 1324321000123" \\
          "    GPU UUID                              : GPU-3a6b2f0c-8e4d-11ee-b9d1-0242ac120002" \\
          "GPU 00000000:02:00.0" "    Serial Number                         : 1324321000456" \\
          "    GPU UUID                              : GPU-9f1c2d3e-8e4d-11ee-b9d1-0242ac120002" ;;
  *) exit 1 ;;
esac
"""


@pytest.mark.process
def test_captured_real_host_round_trips_with_serials_and_uuids_redacted(cli, tmp_path: Path) -> None:
    root, archive, copy = tmp_path / "a2", tmp_path / "a2.tar.gz", tmp_path / "copy"
    load(str(DATA / "harvester-a2/vgpu-node.umockdev"), str(root), str(DATA / "harvester-a2/testdata-sys"),
         {"pci", "mdev"})  # fmt: skip
    smi = root / "usr/bin/nvidia-smi"
    smi.parent.mkdir(parents=True)
    smi.write_text(FAKE_SMI)
    smi.chmod(0o755)
    r = cli("--root", str(root), "snapshot", str(archive), "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    every_read = ["vgpu -s -v", "-q", "-q -x", "vgpu -q", "vgpu -ss", "mig -lgip", "mig -lgipp", "mig -lgi"]
    assert (doc["simulated"], doc["nvidia_smi"], doc["redacted_uuids"]) == (False, every_read, 2)
    with tarfile.open(archive) as tf:
        names = tf.getnames()
        text = tf.extractfile("vgpuadm-snapshot/nvidia-smi/q.txt").read().decode()  # type: ignore[union-attr]
        everything = b"".join(tf.extractfile(m).read() for m in tf if m.isreg())  # type: ignore[union-attr]
    assert text.splitlines() == [
        "GPU 00000000:01:00.0", "    Serial Number                         : REDACTED",
        "    GPU UUID                              : GPU-00000000-0000-0000-0000-000000000001",
        "GPU 00000000:02:00.0", "    Serial Number                         : REDACTED",
        "    GPU UUID                              : GPU-00000000-0000-0000-0000-000000000002",
    ]  # fmt: skip
    assert b"1324321000" not in everything and b"3a6b2f0c" not in everything
    assert all(n.split("/")[0] in ("sys", "proc", "etc", "vgpuadm-snapshot", "usr") for n in names)
    # Exactly what discovery reads: a PCI function's config space and BARs are never opened (placeholders only).
    with tarfile.open(archive) as tf:
        config = [m for m in tf if m.name.endswith("/config")]
    assert config and all(m.size == 0 for m in config)
    r = cli("sim", "import", str(archive), str(copy))
    assert r.code == 0 and "as a captured host" in r.out, r.err
    assert _reads(cli, copy) == _reads(cli, root)
    replay = os.popen(f"{copy}/usr/bin/nvidia-smi -q").read()
    assert replay == text


def _unsimulated_copy(sim_root: Path, dest: Path) -> None:
    """`sim_root` as a real host looks to vgpuadm: the same /sys tree, no simulator marker, and an nvidia-smi that
    answers every read vgpuadm makes with what the simulated driver answered (output, errors, exit status) —
    and refuses anything else, as a driver the snapshot never asked would be unknown."""
    import shutil
    import subprocess

    from vgpuadm.host.nvidia_smi import READS
    from vgpuadm.host.sysfs import SIM_MARKER

    shutil.copytree(sim_root / "sys", dest / "sys", symlinks=True)
    answers = dest.parent / f"{dest.name}-answers"
    answers.mkdir()
    cases = []
    for i, args in enumerate(READS):
        r = subprocess.run([str(sim_root / "usr/bin/nvidia-smi"), *args], capture_output=True, timeout=60, check=False)
        (answers / f"{i}.out").write_bytes(r.stdout)
        (answers / f"{i}.err").write_bytes(r.stderr)
        cases.append(f'  "{" ".join(args)}") cat {answers}/{i}.out; cat {answers}/{i}.err >&2; exit {r.returncode} ;;')
    smi = dest / "usr/bin/nvidia-smi"
    smi.parent.mkdir(parents=True)
    smi.write_text('#!/bin/sh\ncase "$*" in\n' + "\n".join(cases) + "\n  *) echo unknown >&2; exit 9 ;;\nesac\n")
    smi.chmod(0o755)
    assert not (dest / SIM_MARKER).exists()


@pytest.mark.process
def test_captured_real_mig_host_replays_every_nvidia_smi_read(cli, tmp_path: Path) -> None:
    """A snapshot of a host that is not simulated records every nvidia-smi read, so on the imported copy
    `mig status|profiles|instances` and the inventory's MIG section answer as on the host itself."""
    sim, host, archive, copy = tmp_path / "sim", tmp_path / "host", tmp_path / "host.tar.gz", tmp_path / "copy"
    build("h200-mig", str(sim))
    for args in (["mig", "enable"], ["mig", "create", "--profile", "1g.18gb", "--count", "2"],
                 ["mig", "create", "--profile", "19"]):  # fmt: skip
        r = cli("--root", str(sim), *args, "--gpu", "0000:18:00.0")
        assert r.code == 0, r.err
    _unsimulated_copy(sim, host)
    # Owners through libvirt's test driver: the embedded one is one root per process (this one is pytest's).
    reads = [["mig", "status", "--json"], ["mig", "profiles", "--json"], ["-c", "test:///default", "mig", "instances",
             "--json"], ["inventory", "--json", "--no-libvirt"], ["types", "--json"]]  # fmt: skip

    def answers(root: Path) -> list[object]:
        out = []
        for args in reads:
            r = cli("--root", str(root), *args)
            assert (r.code, r.err) == (0, ""), (args, r.err)
            doc = json.loads(r.out)
            if isinstance(doc, dict):
                doc.pop("generated_at", None)
            out.append(doc)
        return out

    on_host = answers(host)
    assert len(on_host[2]) == 3  # the three GPU instances, also in the inventory's MIG section
    assert len(on_host[3]["gpus"][0]["mig"]["instances"]) == 3  # type: ignore[index]
    r = cli("--root", str(host), "snapshot", str(archive))
    assert r.code == 0, r.err
    r = cli("sim", "import", str(archive), str(copy))
    assert r.code == 0 and "as a captured host" in r.out, r.err
    assert answers(copy) == on_host
    with tarfile.open(archive) as tf:
        manifest = json.load(tf.extractfile("vgpuadm-snapshot/manifest.json"))  # type: ignore[arg-type]
    assert manifest["redacted"]["machine_id"] == (
        "not the id: the first 32 hex digits of a salted sha256 of it (stable per host)"
    )


def test_snapshot_copies_only_the_proc_files_it_reads(cli, tmp_path: Path) -> None:
    """Of /proc, only /proc/cmdline (what doctor reads) goes into a snapshot — not an empty placeholder for
    every other entry of /proc."""
    root, archive = tmp_path / "host", tmp_path / "host.tar.gz"
    build("p4", str(root))
    (root / "proc/self").mkdir(parents=True)
    for name in ("cmdline", "meminfo", "uptime", "version"):
        (root / "proc" / name).write_text(f"{name}\n")
    r = cli("--root", str(root), "snapshot", str(archive))
    assert r.code == 0, r.err
    with tarfile.open(archive) as tf:
        proc = sorted(n for n in tf.getnames() if n.split("/")[0] == "proc")
        cmdline = tf.extractfile("proc/cmdline").read()  # type: ignore[union-attr]
    assert (proc, cmdline) == (["proc", "proc/cmdline"], b"cmdline\n")


def test_import_accepts_a_umockdev_recording(cli, tmp_path: Path) -> None:
    r = cli("sim", "import", str(DATA / "harvester-a2/vgpu-node.umockdev"), str(tmp_path / "h"))
    assert r.code == 0 and r.out.startswith("imported a umockdev recording ("), r.err
    assert cli("--root", str(tmp_path / "h"), "gpus", "--json").code == 0


def _tar(path: Path, *members: tuple[tarfile.TarInfo, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tf:
        for info, data in members:
            info.size = len(data) if info.isreg() else 0
            tf.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return path


def _info(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, link, 0o644
    return info


HOSTILE = {
    "absolute": ([(_info("/etc/passwd"), b"x")], "member '/etc/passwd' is not a plain relative path"),
    "climbing": ([(_info("sys/../../x"), b"x")], "member 'sys/../../x' is not a plain relative path"),
    "outside": ([(_info("home/x"), b"x")], "member 'home/x' is not part of a host snapshot"),
    "usr": ([(_info("usr/bin/nvidia-smi"), b"x")], "member 'usr/bin/nvidia-smi' is not part of a host snapshot"),
    "link out": ([(_info("sys/l", tarfile.SYMTYPE, "../../etc"), b"")],
                 "link 'sys/l' points out of the host root ('../../etc')"),
    "absolute link": ([(_info("sys/l", tarfile.SYMTYPE, "/etc"), b"")],
                      "link 'sys/l' points out of the host root ('/etc')"),
    "through a link": ([(_info("sys/l", tarfile.SYMTYPE, "devices"), b""), (_info("sys/l/x"), b"x")],
                       "member 'sys/l/x' sits under 'sys/l', which is not a directory"),
    "hard link": ([(_info("sys/h", tarfile.LNKTYPE, "sys/a"), b"")],
                  "member 'sys/h' is neither a file, a directory nor a link"),
    "device": ([(_info("sys/d", tarfile.CHRTYPE), b"")], "member 'sys/d' is neither a file, a directory nor a link"),
    "twice": ([(_info("sys/a"), b"x"), (_info("sys/a"), b"y")], "member 'sys/a' appears twice"),
    "big file": ([(_info("sys/a"), b"x" * (snapshot_archive.MAX_FILE + 1))],
                 f"member 'sys/a' holds {snapshot_archive.MAX_FILE + 1} bytes, more than {snapshot_archive.MAX_FILE}"),
    "bad model": ([(_info("vgpuadm-simulated-host.json"), b'{"mdev_parents": {"x": {"path": "/etc/x"}}}')],
                  "vgpuadm-simulated-host.json: the simulated host's model names '/etc/x', outside /sys; nothing "
                  "was written"),
}  # fmt: skip


@pytest.mark.parametrize("case", HOSTILE)
def test_hostile_archive_is_refused_before_anything_is_written(cli, tmp_path: Path, case: str) -> None:
    members, message = HOSTILE[case]
    archive = _tar(tmp_path / "evil.tar.gz", *members)
    r = cli("sim", "import", str(archive), str(tmp_path / "dest"))
    assert r.code == 2, r.err
    first = r.err.splitlines()[0]
    assert first.startswith(f"error: {archive}: ") and message in first, first
    assert r.err.splitlines()[1:] == ["hint: give an archive written by `vgpuadm snapshot OUT.tar.gz`"]
    assert not (tmp_path / "dest").exists()


def test_too_many_members_and_garbage_are_refused(cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(snapshot_archive, "MAX_MEMBERS", 2)
    archive = _tar(tmp_path / "many.tar.gz", *[(_info(f"sys/{i}"), b"") for i in range(3)])
    r = cli("sim", "import", str(archive), str(tmp_path / "d"))
    assert r.code == 2 and "more than 2 members" in r.err
    garbage = tmp_path / "g.tar.gz"
    garbage.write_bytes(b"\x1f\x8b" + b"\0" * 64)
    r = cli("sim", "import", str(garbage), str(tmp_path / "d"))
    assert r.code == 2 and r.err.startswith(f"error: {garbage}: not a readable .tar.gz"), r.err
    assert not (tmp_path / "d").exists()


def test_import_into_a_non_empty_directory_is_refused(cli, tmp_path: Path) -> None:
    build("p4", str(tmp_path / "h"))
    assert cli("--root", str(tmp_path / "h"), "snapshot", str(tmp_path / "h.tar.gz")).code == 0
    (tmp_path / "d").mkdir()
    (tmp_path / "d/keep").write_text("x")
    r = cli("sim", "import", str(tmp_path / "h.tar.gz"), str(tmp_path / "d"))
    assert (r.code, r.err.splitlines()[0]) == (2, f"error: {tmp_path / 'd'} is not empty")
    assert os.listdir(tmp_path / "d") == ["keep"]
