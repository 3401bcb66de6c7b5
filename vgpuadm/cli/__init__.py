"""The command line: a typer app, one module per command group; cli/console.py owns all printing."""
