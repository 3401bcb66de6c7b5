"""What the commands' parameters share. Identities as they enter on the command line: every PCI address (`--gpu`, `--vf`, `--parent`, a VF or GPU
argument) and every device id (`--uuid`: an mdev UUID or a PCI address) is parsed here, once, into the one
canonical form the host and the metadata use (model.pci_address, model.device_key) — so `18:00.4`, `0000:18:00.4`
and `0000:18:00.4 ` name the same VF for every check that follows (ownership, presence, locks). And the options every changing
command takes (--dry-run, --json)."""

from vgpuadm.model import device_key, mdev_uuid, pci_address

TYPE_CHECKING = False  # `typing` stays off the fast path of the read commands (bench/bench_cold_start.py)
if TYPE_CHECKING:
    from typing import Any


def bdf(value: str | None) -> str | None:
    """typer callback: a PCI address in canonical form (0000:18:00.4), None when not given."""
    return None if value is None else pci_address(value)


def device(value: str | None) -> str | None:
    """typer callback: an mdev UUID (lower-case) or a PCI address (canonical), None when not given."""
    return None if value is None else device_key(value)


def uuid(value: str | None) -> str | None:
    """typer callback: an mdev UUID in canonical (lower-case) form, None when not given."""
    return None if value is None else mdev_uuid(value, "as `vgpuadm devices` lists them")


def plan_options() -> "tuple[Any, Any]":
    """The --dry-run and --json options every changing command takes."""
    import typer

    dry = typer.Option(False, "--dry-run", help="Print the plan; change nothing.")
    js = typer.Option(False, "--json", help="Print the result as JSON.")
    return dry, js
