"""`vgpuadm sim …`: build and reboot simulated hosts (the embedded default needs no GPU)."""

from typing import Any


def build_app() -> Any:
    import typer

    from vgpuadm.sim.profiles import PROFILES, build

    app = typer.Typer(help="Simulated hosts: byte-exact sysfs trees with a kernel that reacts to writes.",
                      no_args_is_help=True)  # fmt: skip

    @app.command("build", epilog="Example: vgpuadm sim build p4 /tmp/p4-host")
    def build_cmd(
        ctx: typer.Context,
        profile: str = typer.Argument(..., help=f"One of: {', '.join(PROFILES)}."),
        directory: str = typer.Argument(..., help="A new or empty directory for the host root."),
    ) -> None:
        """Write a simulated host root for PROFILE into DIRECTORY."""
        build(profile, directory)
        ctx.obj["console"].line(f"built simulated host {profile!r} at {directory} (use --root {directory})")

    @app.command("list")
    def list_cmd(ctx: typer.Context) -> None:
        """List the simulated host profiles."""
        ctx.obj["console"].table("profiles", ["profile", "what it is"], [(k, v[0]) for k, v in PROFILES.items()])

    return app
