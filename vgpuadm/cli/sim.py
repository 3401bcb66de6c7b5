"""`vgpuadm sim …`: build and reboot simulated hosts (the embedded default needs no GPU)."""

import os
from typing import Any


def build_app() -> Any:
    import typer

    from vgpuadm import api

    app = typer.Typer(help="Simulated hosts: byte-exact sysfs trees with a kernel that reacts to writes.",
                      no_args_is_help=True)  # fmt: skip

    @app.command("build", epilog="Example: vgpuadm sim build p4 /tmp/p4-host")
    def build_cmd(
        ctx: typer.Context,
        profile: str = typer.Argument(..., help=f"One of: {', '.join(api.SIM_PROFILES)}."),
        directory: str = typer.Argument(..., help="A new or empty directory for the host root."),
    ) -> None:
        """Write a simulated host root for PROFILE into DIRECTORY."""
        api.sim_build(profile, directory)
        api.prepare_embedded(
            os.path.join(os.path.abspath(directory), api.EMBED_SUBDIR)
        )  # so `virsh -c URI` works at once
        console = ctx.obj["console"]
        console.line(f"built simulated host {profile!r} at {directory} (use --root {directory})")
        console.line(f"its libvirt (the embedded driver; `virsh -c URI` defines VMs there): {api.embed_uri(directory)}")

    @app.command(
        "import-umockdev",
        epilog="Example: vgpuadm sim import-umockdev host.umockdev /tmp/real-host --types-from captured-sys/",
    )
    def import_umockdev_cmd(
        ctx: typer.Context,
        recording: str = typer.Argument(..., help="A file written by `umockdev-record --all`."),
        directory: str = typer.Argument(..., help="A new or empty directory for the host root."),
        types_from: str = typer.Option(
            None, "--types-from", metavar="DIR",
            help="A captured sys/ tree holding class/mdev_bus/<BDF>/mdev_supported_types (umockdev omits them).",
        ),
    ) -> None:  # fmt: skip
        """Turn a umockdev recording of a real host into a host root that every command can read."""
        loaded = api.load_umockdev(recording, directory, types_from)
        console = ctx.obj["console"]
        console.line(
            f"imported {loaded.devices} devices, {len(loaded.mdev_parents)} mdev parents, {len(loaded.mdevs)} mdevs "
            f"into {directory} (use --root {directory})"
        )
        if loaded.untyped_vfs:
            first, n = loaded.untyped_vfs[0], len(loaded.untyped_vfs)
            console.warn(f"{n} NVIDIA VF(s) ({first}{' …' if n > 1 else ''}): types not recorded (use --types-from "
                         "a captured sys/ tree); until then they show as layout passthrough")  # fmt: skip

    @app.command("import", epilog="Example: vgpuadm snapshot host.tar.gz && vgpuadm sim import host.tar.gz /tmp/h")
    def import_cmd(
        ctx: typer.Context,
        archive: str = typer.Argument(..., metavar="ARCHIVE", help="A `vgpuadm snapshot` .tar.gz, or a file written "
                                      "by `umockdev-record --all`."),
        directory: str = typer.Argument(..., help="A new or empty directory for the host root."),
    ) -> None:  # fmt: skip
        """Turn a snapshot (or a umockdev recording) into a host root: a simulated host again when it was one."""

        ctx.obj["console"].line(api.snapshot_import(archive, directory).line())

    @app.command("reboot", epilog="Example: vgpuadm sim reboot /tmp/p4-host")
    def reboot_cmd(
        ctx: typer.Context,
        directory: str = typer.Argument(..., help="A simulated host root (made by `vgpuadm sim build`)."),
    ) -> None:
        """Reboot a simulated host: mdevs, VFs, vGPU types, overrides and vfio binds go; native drivers return."""
        api.sim_reboot(directory)
        ctx.obj["console"].line(f"rebooted simulated host {directory}: runtime state dropped, native drivers bound")

    @app.command(
        "reset",
        epilog="Example: vgpuadm sim reset /tmp/h200-host 0000:18:00.0   (then: vgpuadm restore --gpu 0000:18:00.0)",
    )
    def reset_cmd(
        ctx: typer.Context,
        directory: str = typer.Argument(..., help="A simulated host root."),
        gpu: str = typer.Argument(..., help="The GPU's PCI address (its PF), e.g. 0000:18:00.0 or 18:00.0."),
        keep_vfs: bool = typer.Option(
            False,
            "--keep-vfs",
            help="A reset through the PCI core (sysfs `reset`): the VFs stay, no uevent; their vGPU types go.",
        ),
    ) -> None:
        """Reset one simulated GPU as nvidia-smi -r or a recovered Xid does: its mdevs, VFs (with their vGPU types
        and params), GPU instances, MIG mode on Hopper and newer, heterogeneous mode and vfio binds go."""
        address, lost = api.sim_reset(directory, gpu, keep_vfs)
        ctx.obj["console"].line(f"reset GPU {address} of simulated host {directory}: "
                                + (f"lost {', '.join(lost)}" if lost else "it had nothing to lose"))  # fmt: skip

    @app.command("reload-driver", epilog="Example: vgpuadm sim reload-driver /tmp/p4-host   (every nvidia GPU)")
    def reload_driver_cmd(
        ctx: typer.Context,
        directory: str = typer.Argument(..., help="A simulated host root."),
        driver: str = typer.Argument("nvidia", help="The driver reloaded: nvidia (default), or mtty, mdpy, mbochs."),
        version: str = typer.Option(None, "--version", metavar="RELEASE",
                                    help="Load this nvidia release instead (an upgrade), e.g. 580.82.07."),
    ) -> None:  # fmt: skip
        """Reload a driver on a simulated host: every GPU it drives loses its state as at `sim reset`."""
        for name, lost in api.sim_reload_driver(directory, driver, version).items():
            ctx.obj["console"].line(f"reloaded {driver} on {name}: " + (f"lost {', '.join(lost)}" if lost else
                                                                       "it had nothing to lose"))  # fmt: skip

    @app.command("ecc", epilog="Example: vgpuadm sim ecc /tmp/h200-host 0000:18:00.0 off")
    def ecc_cmd(
        ctx: typer.Context,
        directory: str = typer.Argument(..., help="A simulated host root."),
        gpu: str = typer.Argument(..., help="The GPU's PCI address (its PF)."),
        state: str = typer.Argument(..., metavar="on|off", help="ECC on or off."),
    ) -> None:
        """Turn a simulated GPU's ECC on or off, as `nvidia-smi -e` and the GPU reset that applies it do."""
        from vgpuadm.errors import UsageError

        if state not in ("on", "off"):
            raise UsageError(f"ECC state {state!r} is neither on nor off", "e.g. vgpuadm sim ecc DIR GPU off")
        address = api.sim_ecc(directory, gpu, state == "on")
        ctx.obj["console"].line(f"ECC of GPU {address} on {directory} is {state}")

    @app.command(
        "fail",
        epilog="Example: vgpuadm sim fail /tmp/p4-host '*/nvidia-63/create' ENOSPC --times 2 --after 1",
    )
    def fail_cmd(
        ctx: typer.Context,
        directory: str = typer.Argument(..., help="A simulated host root."),
        path_glob: str = typer.Argument(None, help="fnmatch pattern of host paths (`*` crosses `/`)."),
        errno_name: str = typer.Argument(None, metavar="ERRNO", help="The errno the write fails with, e.g. EIO."),
        times: int = typer.Option(1, "--times", help="How many matching writes fail (0: all, forever)."),
        after: int = typer.Option(0, "--after", help="Let this many matching writes succeed first."),
        clear: bool = typer.Option(False, "--clear", help="Remove every injected fault instead."),
        stall: float = typer.Option(None, "--stall", metavar="SECONDS",
                                    help="Make them slow instead of failing (no ERRNO): the write takes effect, or "
                                    "nvidia-smi answers, after SECONDS."),
    ) -> None:  # fmt: skip
        """Make chosen writes (or nvidia-smi reads: '/usr/bin/nvidia-smi vgpu*') on a simulated host fail with a
        chosen errno, or stall (fault injection for tests)."""
        from vgpuadm.errors import UsageError

        if clear:
            api.clear_faults(directory)
            ctx.obj["console"].line(f"cleared injected faults on {directory}")
            return
        if path_glob is not None and stall is not None and errno_name is None:
            api.inject_stall(directory, path_glob, stall, times=times, after=after)
            ctx.obj["console"].line(f"writes and reads matching {path_glob} on {directory} will stall {stall:g} s"
                                    f" ({'every time' if times == 0 else f'{times} time(s)'}, after {after} "
                                    "success(es))")  # fmt: skip
            return
        if path_glob is None or errno_name is None:
            raise UsageError("sim fail needs PATH_GLOB and ERRNO", "e.g. vgpuadm sim fail DIR '*/create' EIO")
        api.inject_fault(directory, path_glob, errno_name, times=times, after=after)
        ctx.obj["console"].line(
            f"writes matching {path_glob} on {directory} will fail with {errno_name.upper()}"
            f" ({'every time' if times == 0 else f'{times} time(s)'}, after {after} success(es))"
        )

    @app.command(
        "usage",
        epilog="Examples: vgpuadm sim usage /tmp/h 3b1c… --vm-uuid $(virsh domuuid web01) --gpu 31 --fb-used 3174 · "
        "vgpuadm sim usage /tmp/h 0000:01:00.0 --gpu 40 (a GPU's own figures) · vgpuadm sim usage /tmp/h 3b1c… --stop",
    )
    def usage_cmd(
        ctx: typer.Context,
        directory: str = typer.Argument(..., help="A simulated host root."),
        device: str = typer.Argument(..., help="An mdev UUID or layout C VF (a guest runs on it), or a GPU's address."),
        vm_uuid: str = typer.Option(None, "--vm-uuid", help="The VM's UUID (libvirt's domain UUID)."),
        vm_name: str = typer.Option("", "--vm-name", help="The VM's name as QEMU's -name shows it."),
        fb_used: int = typer.Option(0, "--fb-used", metavar="MIB", help="Frame buffer used, MiB."),
        gpu: int = typer.Option(0, "--gpu", metavar="PERCENT", help="GPU utilization."),
        memory: int = typer.Option(0, "--memory", metavar="PERCENT", help="Memory utilization."),
        encoder: int = typer.Option(0, "--encoder", metavar="PERCENT", help="Encoder utilization (vGPU)."),
        decoder: int = typer.Option(0, "--decoder", metavar="PERCENT", help="Decoder utilization (vGPU)."),
        license_: str = typer.Option("Licensed", "--license", help="Licensed, 'Unlicensed (Restricted)', …"),
        stop: bool = typer.Option(False, "--stop", help="The guest stopped: the vGPU is no longer active."),
    ) -> None:  # fmt: skip
        """Set the usage the simulated driver reports (nvidia-smi vgpu -q, --query-gpu) for a vGPU or a GPU."""
        console = ctx.obj["console"]
        if vm_uuid is None and not stop:
            api.sim_gpu_usage(directory, device, {"gpu": gpu, "memory": memory, "fb_used_mib": fb_used})
            console.line(f"GPU {device} on {directory} reports {gpu} % GPU, {memory} % memory, {fb_used} MiB used")
            return
        figures = None if stop else {"vm_uuid": vm_uuid.lower(), "vm_name": vm_name, "fb_used_mib": fb_used,
                                     "gpu": gpu, "memory": memory, "encoder": encoder, "decoder": decoder,
                                     "license": license_}  # fmt: skip
        api.sim_vgpu_usage(directory, device, figures)
        console.line(f"{device} on {directory}: " + ("no guest runs on it" if stop else f"VM {vm_uuid} runs on it"))

    @app.command("list", epilog="Example: vgpuadm sim list --json")
    def list_cmd(
        ctx: typer.Context,
        as_json: bool = typer.Option(False, "--json", help="Print JSON: [{profile, description}, …]."),
    ) -> None:
        """List the simulated host profiles."""
        if as_json:
            ctx.obj["console"].json([{"profile": k, "description": v[0]} for k, v in api.SIM_PROFILES.items()])
            return
        ctx.obj["console"].table(
            "profiles", ["profile", "what it is"], [(k, v[0]) for k, v in api.SIM_PROFILES.items()]
        )

    return app
