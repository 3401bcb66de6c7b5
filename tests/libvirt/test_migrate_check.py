"""`vgpuadm migrate check` as an operator runs it (one process per command): a VM's devices on one simulated host
(libvirt's embedded driver under it) against another host's `vgpuadm inventory --json` — live, only stopped (cold),
or not at all, with the reason per device, the exit code and the JSON schema. No mocks: the target inventories are
the real command's output (edited where a test needs a board the simulator does not have)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.libvirt.embedded_host import define, vgpuadm
from vgpuadm.schemas import validate
from vgpuadm.sim.profiles import build

NOT_COMPARED = ("note: not compared (the driver of this host or of the target does not report them): the GPUs' ECC "
                "settings and the host driver releases, which NVIDIA requires to match for a live move")  # fmt: skip


def _host(tmp_path: Path, profile: str, name: str, *vms: str) -> Path:
    root = tmp_path / name
    build(profile, str(root))
    if vms:
        define(root, *vms)
    return root


def _inventory(root: Path, tmp_path: Path, name: str) -> Path:
    r = vgpuadm(root, "inventory", "--json")
    assert r.code == 0, r.err
    path = tmp_path / f"{name}.json"
    path.write_text(r.out)
    return path


def _ids(root: Path, vm: str) -> list[str]:
    return [d["id"] for d in json.loads(vgpuadm(root, "show", "--vm", vm, "--json").out)["devices"]]


def test_mdevs_move_live_to_a_host_with_room_and_are_counted_against_each_other(tmp_path: Path) -> None:
    src = _host(tmp_path, "p4", "src", "mg-web01")
    dst = _host(tmp_path, "p4", "dst", "mg-other")
    assert vgpuadm(src, "create", "--type", "nvidia-63", "--vm", "mg-web01", "--total", "2").code == 0
    u0, u1 = _ids(src, "mg-web01")
    roomy = _inventory(dst, tmp_path, "roomy")
    r = vgpuadm(src, "migrate", "check", "--vm", "mg-web01", "--to", "qemu+ssh://gpu2/system",
                "--target-inventory", str(roomy))  # fmt: skip
    assert (r.code, r.err) == (0, "")
    assert r.out.splitlines() == [
        "mg-web01 (shut off) to qemu+ssh://gpu2/system: can move live",
        f"  mdev {u0} (nvidia-63): live to GPU 0000:01:00.0",
        f"  mdev {u1} (nvidia-63): live to GPU 0000:01:00.0",
        NOT_COMPARED,
    ]
    # the target's two P4s hold 8 P4-1Q each: with 15 taken there, the VM's second vGPU has no room
    assert vgpuadm(dst, "create", "--type", "nvidia-63", "--vm", "mg-other", "--total", "15").code == 0
    full = _inventory(dst, tmp_path, "full")
    r = vgpuadm(src, "migrate", "check", "--vm", "mg-web01", "--target-inventory", str(full), "--json")
    assert r.code == 1, r.err
    doc = json.loads(r.out)
    validate("migrate-check", doc)
    assert [(d["device"], d["move"], d["target_gpu"], d["reasons"]) for d in doc["devices"]] == [
        (u0, "live", "0000:02:00.0", []),
        (u1, "no", None, ["no free nvidia-63 on the target"]),
    ]
    assert (doc["move"], doc["ok"], doc["running"], doc["domain"]) == ("no", False, False, "mg-web01")


def test_a_type_the_target_does_not_offer_cannot_move(tmp_path: Path) -> None:
    src = _host(tmp_path, "p4", "src", "mg-web02")
    assert vgpuadm(src, "create", "--type", "nvidia-63", "--vm", "mg-web02").code == 0
    (u0,) = _ids(src, "mg-web02")
    t4 = _inventory(_host(tmp_path, "t4", "t4"), tmp_path, "t4")
    r = vgpuadm(src, "migrate", "check", "--vm", "mg-web02", "--target-inventory", str(t4))
    assert r.code == 1
    host = json.loads(t4.read_text())["host"]
    assert r.out.splitlines() == [
        f"mg-web02 (shut off) to host {host}: cannot move",
        f"  mdev {u0} (nvidia-63): no: the target does not offer nvidia-63 (GRID P4-1Q)",
    ]


def test_params_that_forbid_a_live_move_and_post_copy_leave_a_cold_move(tmp_path: Path) -> None:
    src = _host(tmp_path, "p4", "src", "mg-uvm")
    assert vgpuadm(src, "create", "--type", "nvidia-63", "--vm", "mg-uvm", "--param", "enable_uvm=1").code == 0
    (u0,) = _ids(src, "mg-uvm")
    dst = _inventory(_host(tmp_path, "p4", "dst"), tmp_path, "dst")
    r = vgpuadm(src, "migrate", "check", "--vm", "mg-uvm", "--target-inventory", str(dst), "--postcopy", "--json")
    assert r.code == 0, r.err  # a stopped VM moves cold
    doc = json.loads(r.out)
    validate("migrate-check", doc)
    assert doc["devices"][0]["reasons"] == [
        "its vgpu_params enable enable_uvm: NVIDIA allows no live migration then",
        "post-copy was asked for: QEMU 8.2 and later refuse post-copy with a VFIO device (drop --postcopy)",
    ]
    assert (doc["move"], doc["ok"], doc["notes"]) == ("cold", True, [])
    assert doc["devices"][0]["device"] == u0


def test_a_passed_through_gpu_moves_only_cold_to_a_free_gpu_of_its_model(tmp_path: Path) -> None:
    src = _host(tmp_path, "passthrough", "src", "mg-pt")
    gpus = json.loads(vgpuadm(src, "gpus", "--json").out)
    gpu = gpus[0]["address"]
    assert vgpuadm(src, "passthrough", "--gpu", gpu, "--vm", "mg-pt").code == 0
    same = _inventory(_host(tmp_path, "passthrough", "dst"), tmp_path, "dst")
    r = vgpuadm(src, "migrate", "check", "--vm", "mg-pt", "--target-inventory", str(same), "--json")
    doc = json.loads(r.out)
    validate("migrate-check", doc)
    first = doc["devices"][0]
    assert (first["device"], first["move"], first["target_gpu"], first["reasons"]) == (
        gpu,
        "cold",
        gpu,
        ["a GPU passed through whole (vfio-pci) has no live migration"],
    )
    assert all(d["move"] == "cold" and d["target_gpu"] is None for d in doc["devices"][1:])  # its companions
    assert r.code == 0  # shut off: a cold move is the move
    p4 = _inventory(_host(tmp_path, "p4", "p4"), tmp_path, "p4")
    r = vgpuadm(src, "migrate", "check", "--vm", "mg-pt", "--target-inventory", str(p4))
    assert r.code == 1
    assert f"  PCI function {gpu}: no: the target has no free whole " in r.out


def test_hopper_boards_do_not_move_live_between_each_other(tmp_path: Path) -> None:
    """The reference names the pair (H200 to H100); the simulator has no H100, so the target inventory is the
    H200 host's own with its GPU's model edited — the type offered stays the same."""
    src = _host(tmp_path, "h200-vendor-vfio", "src", "mg-h")
    assert vgpuadm(src, "create", "--type", "nvidia-1420", "--vm", "mg-h").code == 0
    doc = json.loads(vgpuadm(_host(tmp_path, "h200-vendor-vfio", "dst"), "inventory", "--json").out)
    same = tmp_path / "h200.json"
    same.write_text(json.dumps(doc))
    doc["gpus"][0]["model"] = "H100 SXM 80GB"
    h100 = tmp_path / "h100.json"
    h100.write_text(json.dumps(doc))
    r = json.loads(vgpuadm(src, "migrate", "check", "--vm", "mg-h", "--target-inventory", str(same), "--json").out)
    assert (r["move"], r["devices"][0]["mode"], r["devices"][0]["reasons"]) == ("live", "vf", [])
    r = json.loads(vgpuadm(src, "migrate", "check", "--vm", "mg-h", "--target-inventory", str(h100), "--json").out)
    assert r["devices"][0]["reasons"] == ["a vGPU does not migrate between a H200 SXM 141GB and a H100 SXM 80GB"]


def test_gpus_whose_ecc_or_driver_release_differ_leave_a_cold_move(tmp_path: Path) -> None:
    """Both hosts' drivers report ECC and their release (`nvidia-smi -q -x`, the target's through its inventory):
    equal, the vGPU moves live and nothing is left uncompared; ECC off on the target GPU, or a driver of another
    release branch there (`sim reload-driver --version`, an upgrade), and it moves only cold, saying why."""
    src = _host(tmp_path, "h200-vendor-vfio", "src", "mg-e")
    dst = _host(tmp_path, "h200-vendor-vfio", "dst")
    assert vgpuadm(src, "create", "--type", "nvidia-1420", "--vm", "mg-e").code == 0
    gpu = json.loads(vgpuadm(dst, "inventory", "--json").out)["gpus"][0]
    assert (gpu["ecc"], gpu["driver_version"]) == ("Enabled", "580.159.04")

    def check() -> dict:
        target = _inventory(dst, tmp_path, "dst")
        r = vgpuadm(src, "migrate", "check", "--vm", "mg-e", "--target-inventory", str(target), "--json")
        doc = json.loads(r.out)
        validate("migrate-check", doc)
        return doc

    doc = check()
    assert (doc["move"], doc["devices"][0]["reasons"], doc["notes"]) == ("live", [], [])
    r = vgpuadm(dst, "sim", "ecc", str(dst), gpu["address"], "off")
    assert (r.code, r.out) == (0, f"ECC of GPU {gpu['address']} on {dst} is off\n")
    doc = check()
    assert (doc["move"], doc["devices"][0]["reasons"]) == ("cold", [
        f"ECC is enabled here and disabled on the target's {gpu['address']}: NVIDIA migrates a vGPU only between "
        "GPUs with the same ECC setting"])  # fmt: skip
    assert vgpuadm(dst, "sim", "ecc", str(dst), gpu["address"], "on").code == 0
    assert vgpuadm(dst, "sim", "reload-driver", str(dst), "--version", "590.44.01").code == 0
    assert vgpuadm(dst, "sriov", "enable", gpu["address"]).code == 0  # a reload takes the VFs along
    doc = check()
    assert (doc["move"], doc["devices"][0]["reasons"]) == ("cold", [
        "the host drivers are of different release branches (580.159.04 here, 590.44.01 on the target): NVIDIA "
        "migrates a vGPU live only between releases its notes pair"])  # fmt: skip


def test_a_bad_target_inventory_is_one_line_naming_the_file(tmp_path: Path) -> None:
    src = _host(tmp_path, "p4", "src", "mg-bad")
    doc = json.loads(vgpuadm(src, "inventory", "--json").out)
    cases = {
        "address": ("gpus", lambda d: d["gpus"][0].update(address="../../etc"), "gpus[] address '../../etc' is no PCI address or device name"),
        "type": ("types", lambda d: d["types"][0].update(type_id="nvidia-63/../x"), "types[] type_id 'nvidia-63/../x' is no vGPU type id"),
        "ecc": ("gpus", lambda d: d["gpus"][0].update(ecc="on"), "gpus[] 0000:01:00.0: ecc is Enabled or Disabled, driver_version a release such as 580.159.04"),
        "driver": ("gpus", lambda d: d["gpus"][0].update(driver_version="580; rm -rf /"), "gpus[] 0000:01:00.0: ecc is Enabled or Disabled, driver_version a release such as 580.159.04"),
    }  # fmt: skip
    for name, (_part, edit, message) in cases.items():
        bad = json.loads(json.dumps(doc))
        edit(bad)
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(bad))
        r = vgpuadm(src, "migrate", "check", "--vm", "mg-bad", "--target-inventory", str(path))
        assert (r.code, r.out) == (2, "")
        assert r.err.splitlines() == [f"error: {path}: {message}",
                                      "hint: pass the target's `vgpuadm inventory --json` (schema vgpuadm-inventory/1)"]  # fmt: skip
    r = vgpuadm(src, "migrate", "check", "--vm", "mg-bad")
    assert (r.code, r.err.splitlines()) == (2, [
        "error: migrate check needs the target host: --to URI or --target-inventory FILE",
        "hint: give the target's libvirt URI (--to qemu+ssh://root@gpu2/system: its vgpuadm is asked over ssh), or run "
        "`vgpuadm inventory --json > target.json` there and pass --target-inventory target.json",
    ])  # fmt: skip


def test_a_simulated_target_on_this_machine_is_read_by_its_own_vgpuadm(tmp_path: Path) -> None:
    """--target-root DIR: the target's `vgpuadm --root DIR inventory --json` runs as its own process (as over ssh);
    the answer is the one its inventory file gives. A directory that is no simulated host is refused."""
    src = _host(tmp_path, "p4", "src", "mg-local")
    assert vgpuadm(src, "create", "--type", "nvidia-63", "--vm", "mg-local").code == 0
    dst = _host(tmp_path, "p4", "dst")
    by_root = vgpuadm(src, "migrate", "check", "--vm", "mg-local", "--target-root", str(dst), "--json")
    by_file = vgpuadm(src, "migrate", "check", "--vm", "mg-local", "--target-inventory",
                      str(_inventory(dst, tmp_path, "dst")), "--json")  # fmt: skip
    assert (by_root.code, by_root.err) == (0, ""), by_root.err
    assert json.loads(by_root.out) == json.loads(by_file.out)
    r = vgpuadm(src, "migrate", "check", "--vm", "mg-local", "--target-root", str(tmp_path))
    assert (r.code, r.err.splitlines()[0]) == (2, f"error: --target-root {tmp_path} is no simulated host")
