"""`python -m vgpuadm` runs the CLI."""

from vgpuadm.cli.app import main

main()
