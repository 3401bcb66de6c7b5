"""`vgpuadm vfio bind|unbind` of a whole display function with its HD-audio companion: QEMU's VGA at 00:10.0 and
ich9-intel-hda at 00:10.1 share one IOMMU group on the guest's root bus. The VGA is the boot VGA device (refused
without --force) and has no driver (bochs is blacklisted); the audio function runs snd_hda_intel."""

from __future__ import annotations

import json

from vgpuadm import api
from vgpuadm.host.sysfs import Sysfs

PCI = "/sys/bus/pci/devices"
GPU, AUDIO = "0000:00:10.0", "0000:00:10.1"


def test_the_vga_and_its_audio_share_a_group(cli, sysfs: Sysfs) -> None:
    snap = api.discover(None)
    gpu, audio = snap.functions[GPU], snap.functions[AUDIO]
    assert (gpu.class_code, gpu.driver, gpu.boot_vga) == ("0x030000", None, True)
    assert (audio.class_code, audio.driver) == ("0x040300", "snd_hda_intel")
    assert snap.group_members(GPU) == (GPU, AUDIO)
    rows = {r["address"]: r for r in json.loads(cli("gpus", "--json").out)}
    assert rows[GPU]["layout"] == "passthrough"


def test_bind_takes_the_whole_group_and_unbind_gives_it_back(cli, sysfs: Sysfs) -> None:
    group = sysfs.link_name(f"{PCI}/{GPU}/iommu_group")
    result = cli("vfio", "bind", GPU)
    assert result.code == 6
    assert result.err.splitlines()[0] == (f"error: {GPU} is the boot VGA device (boot_vga=1); the host console uses it")
    assert sysfs.link_name(f"{PCI}/{AUDIO}/driver") == "snd_hda_intel"  # refused before any change

    result = cli("vfio", "bind", GPU, "--force", "--json")
    assert result.code == 0, result.err
    for fn in (GPU, AUDIO):
        assert sysfs.link_name(f"{PCI}/{fn}/driver") == "vfio-pci"
        assert sysfs.read(f"{PCI}/{fn}/driver_override") == "vfio-pci"
    assert sysfs.exists(f"/dev/vfio/{group}")

    result = cli("vfio", "unbind", GPU, "--json")
    assert result.code == 0, result.err
    assert sysfs.link_name(f"{PCI}/{GPU}/driver") is None
    assert sysfs.link_name(f"{PCI}/{AUDIO}/driver") == "snd_hda_intel"
    for fn in (GPU, AUDIO):
        assert sysfs.read(f"{PCI}/{fn}/driver_override") == "(null)"
    assert not sysfs.exists(f"/dev/vfio/{group}")
