"""Flags as an operator types them (one real `vgpuadm` process per command, libvirt's embedded driver
under a simulated root): `apply -f -`, `create --total` (old `--count`), `-c`/`--root` after the subcommand,
`--domain-xml-dir` on inventory (old `--domains-xml`), `give-back`, errors as JSON under --json, and the host lock
that says at once whom it waits for."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.libvirt.embedded_host import _env, define, mdevs, vgpuadm
from vgpuadm.schemas import validate
from vgpuadm.sim.profiles import build
from vgpuadm.virt.conn import embed_uri

PLAN = "version: 1\nvms:\n  fl-web01: {type: nvidia-63, count: 2}\n"


def _host(tmp_path: Path, *vms: str) -> Path:
    root = tmp_path / "p4"
    build("p4", str(root))
    define(root, *vms)
    return root


def _stdin(root: Path, data: bytes, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "vgpuadm", "--root", str(root), *args], input=data,
                          capture_output=True, env=_env(), timeout=300, check=False)  # fmt: skip


def test_apply_reads_the_plan_from_stdin_with_the_file_limit(tmp_path: Path) -> None:
    root = _host(tmp_path, "fl-web01")
    check = _stdin(root, PLAN.encode(), "apply", "-f", "-", "--check")
    assert (check.returncode, check.stderr) == (0, b"")
    assert check.stdout.decode() == "+ fl-web01: nvidia-63 ×2\nwould run 3 step(s); nothing was changed (--check)\n"
    done = _stdin(root, PLAN.encode(), "apply", "-f", "-")
    assert done.returncode == 0, done.stderr
    assert len(mdevs(root)) == 2
    big = _stdin(root, b"#" * (4 * 1024 * 1024 + 1), "apply", "-f", "-", "--json")
    assert big.returncode == 2
    assert big.stderr.decode() == ("error: the plan on stdin is over the 4 MiB limit\n"
                                   "hint: pass an existing YAML file to -f (or `-f -` and the plan on stdin)\n")  # fmt: skip
    bad = _stdin(root, b"version: 1\nvms:\n  fl-web01: {count: 0}\n", "apply", "-f", "-")
    assert bad.returncode == 2 and bad.stderr.decode().startswith("error: <stdin>:3: vms.fl-web01")


def _bash(root: Path, script: str, data: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    vgpuadm_cmd = f"{sys.executable} -m vgpuadm --root {root}"
    return subprocess.run(["bash", "-c", script.replace("vgpuadm", vgpuadm_cmd)], input=data, capture_output=True,
                          env=_env(), timeout=300, check=False)  # fmt: skip


def test_apply_reads_dev_stdin_and_process_substitution_like_dash(tmp_path: Path) -> None:
    """`-f /dev/stdin` and the shell's `-f <(…)` are pipes this process holds: read like `-f -`, same limit; a
    named FIFO stays refused (test_hardening)."""
    root = _host(tmp_path, "fl-web01")
    want = b"+ fl-web01: nvidia-63 \xc3\x972\nwould run 3 step(s); nothing was changed (--check)\n"
    piped = _bash(root, "vgpuadm apply -f /dev/stdin --check", PLAN.encode())
    assert (piped.returncode, piped.stderr, piped.stdout) == (0, b"", want)
    sub = _bash(root, f"vgpuadm apply -f <(printf '{PLAN}') --check")
    assert (sub.returncode, sub.stderr, sub.stdout) == (0, b"", want)
    bad = _bash(root, "vgpuadm apply -f <(printf 'version: 1\\nvms: 3\\n') --check")
    assert (bad.returncode, bad.stderr.decode().splitlines()[0]) == (
        2,
        "error: /dev/fd/63:2: vms: must be an object, not 3",
    )
    big = _bash(root, "vgpuadm apply -f /dev/stdin --check", b"#" * (4 * 1024 * 1024 + 1))
    assert (big.returncode, big.stderr.decode().splitlines()[0]) == (
        2,
        "error: plan /dev/stdin is over the 4 MiB limit",
    )


def test_create_total_is_the_vms_total_and_count_still_works(tmp_path: Path) -> None:
    root = _host(tmp_path, "fl-web02")
    assert vgpuadm(root, "create", "--type", "nvidia-63", "--vm", "fl-web02", "--total", "2").code == 0
    again = vgpuadm(root, "create", "--type", "nvidia-63", "--vm", "fl-web02", "--count", "2")  # the old name
    assert (again.code, again.out) == (0, "nothing to do: domain fl-web02 already has 2 × nvidia-63\n")
    clash = vgpuadm(root, "create", "--type", "nvidia-63", "--vm", "fl-web02", "--total", "3", "--count", "2")
    assert (clash.code, clash.err) == (2, "error: --total 3 and --count 2 disagree\nhint: give --total alone\n")
    assert "--count" not in vgpuadm(root, "create", "--help").out
    assert len(mdevs(root)) == 2


def test_connect_and_root_after_the_subcommand_and_give_back(tmp_path: Path) -> None:
    root = _host(tmp_path, "fl-web03")
    assert vgpuadm(root, "create", "--type", "nvidia-63", "--vm", "fl-web03").code == 0
    [u] = mdevs(root)
    before = vgpuadm(root, "devices", "--vm", "fl-web03", "--json")
    r = subprocess.run([sys.executable, "-m", "vgpuadm", "devices", "--vm", "fl-web03", "--json", "--root", str(root),
                        "-c", f"qemu:///embed?root={root}/var/lib/vgpuadm/libvirt"],
                       capture_output=True, text=True, env=_env(), timeout=300, check=False)  # fmt: skip
    assert (r.returncode, r.stdout) == (0, before.out), r.stderr
    gone = vgpuadm(root, "give-back", "--vm", "fl-web03")
    assert (gone.code, gone.out) == (0, f"removed mdev nvidia-63 {u} on 0000:01:00.0 (from fl-web03)\n")
    assert mdevs(root) == []


def test_guest_changes_print_one_line_per_device_xml_on_request_and_nothing_with_q(tmp_path: Path) -> None:
    """`create` says what it attached (the <hostdev> XML only with -v/--show-xml), `-q` says nothing, `destroy`
    says "removed" (it detaches and removes), `release` "released"; --json is unchanged by either flag."""
    root = _host(tmp_path, "fl-web04", "fl-web05")
    made = vgpuadm(root, "create", "--type", "nvidia-63", "--vm", "fl-web04")
    [u] = mdevs(root)
    assert (made.code, made.out) == (0, f"attached mdev nvidia-63 {u} on 0000:01:00.0 (to fl-web04)\n")
    xml = vgpuadm(root, "create", "--type", "nvidia-63", "--vm", "fl-web05", "-v")
    v = next(m for m in mdevs(root) if m != u)
    assert xml.out.splitlines()[:3] == [f"attached mdev nvidia-63 {v} on 0000:01:00.0 (to fl-web05)", "",
                                        f"hostdev XML added to fl-web05 ({embed_uri(str(root))}):"]  # fmt: skip
    assert f'<address uuid="{v}"/>' in xml.out
    gone = vgpuadm(root, "destroy", "--vm", "fl-web04")
    assert (gone.code, gone.out) == (0, f"removed mdev nvidia-63 {u} on 0000:01:00.0 (from fl-web04)\n")
    quiet = [vgpuadm(root, "create", "--type", "nvidia-63", "--vm", "fl-web04", "-q"),
             vgpuadm(root, "destroy", "--vm", "fl-web04", "--quiet")]  # fmt: skip
    assert [(r.code, r.out, r.err) for r in quiet] == [(0, "", "")] * 2
    plain = json.loads(vgpuadm(root, "create", "--type", "nvidia-63", "--vm", "fl-web04", "--json").out)
    assert plain["hostdevs"] and validate("guest", plain) is None


def test_inventory_domain_xml_dir_and_its_old_name(tmp_path: Path) -> None:
    root = _host(tmp_path)
    saved = tmp_path / "saved-xml"
    saved.mkdir()
    new = vgpuadm(root, "inventory", "--domain-xml-dir", str(saved), "--format", "json")
    old = vgpuadm(root, "inventory", "--domains-xml", str(saved), "--format", "json")
    docs = [json.loads(r.out) for r in (new, old)]
    for doc in docs:
        doc.pop("generated_at")
    assert (new.code, old.code) == (0, 0) and docs[0] == docs[1]
    assert docs[0]["ownership_source"] == f"domains-xml:{saved}"
    assert "--domains-xml" not in vgpuadm(root, "inventory", "--help").out


def test_errors_under_json_are_a_json_object_too(tmp_path: Path) -> None:
    root = _host(tmp_path)
    r = vgpuadm(root, "types", "--gpu", "0000:09:00.0", "--json")
    doc = json.loads(r.out)
    validate("error", doc)
    assert r.code == 3 and doc == {"error": "No GPU or mdev parent 0000:09:00.0 on this host",
                                   "hint": "run `vgpuadm gpus` to list them", "exit_code": 3}  # fmt: skip
    assert r.err == "error: No GPU or mdev parent 0000:09:00.0 on this host\nhint: run `vgpuadm gpus` to list them\n"
    usage = vgpuadm(root, "inventory", "--format", "json", "--bogus")
    assert usage.code == 2 and json.loads(usage.out)["error"].startswith("No such option: --bogus")
    create = vgpuadm(root, "create", "--type", "nvidia-63", "--vm", "nosuchvm", "--json")
    assert create.code == json.loads(create.out)["exit_code"] == 3


_HOLD = """
import sys, time
from vgpuadm.executor import host_lock, set_lock_policy
set_lock_policy(argv=("vgpuadm", "apply", "-f", "plan.yaml"))
with host_lock(sys.argv[1]):
    print("held", flush=True)
    time.sleep(120)
"""


def test_a_held_lock_names_its_holder_at_once_and_wait_no_wait(tmp_path: Path) -> None:
    root = _host(tmp_path)
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(root)], stdout=subprocess.PIPE, text=True,
                              env=_env())  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        who = f"pid {holder.pid} (vgpuadm apply -f plan.yaml)"
        waited = vgpuadm(root, "--wait", "0.5", "mdev", "create", "--type", "nvidia-63")
        assert waited.code == 5
        assert waited.err == (
            f"warning: waiting for {who} (up to 0.5 s; --no-wait fails at once)\n"
            f"error: another vgpuadm is changing this host: {who}, still after 0.5 s\n"
            "hint: retry when it has finished, or wait for it with --wait SECONDS; the lock is /run/vgpuadm/lock\n"
        )
        now = vgpuadm(root, "--no-wait", "mdev", "create", "--type", "nvidia-63", "--json")
        assert now.code == 5 and json.loads(now.out)["error"] == f"another vgpuadm is changing this host: {who}"
        assert now.err.startswith(f"error: another vgpuadm is changing this host: {who}\n")
    finally:
        holder.kill()
        holder.wait()
    assert mdevs(root) == []
    free = vgpuadm(root, "--no-wait", "mdev", "create", "--type", "nvidia-63")
    assert (free.code, free.err) == (0, "")
