"""The one place that prints. JSON goes to stdout as is; tables through rich; errors and warnings to stderr as one
line each (`error: …` then `hint: …`). rich is imported only when a table or progress bar is drawn."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from vgpuadm.errors import VgpuadmError


class Console:
    def __init__(self, out: TextIO | None = None, err: TextIO | None = None) -> None:
        self.out = out or sys.stdout
        self.err = err or sys.stderr

    def json(self, doc: Any) -> None:
        self.out.write(json.dumps(doc, indent=2) + "\n")

    def line(self, text: str = "") -> None:
        self.out.write(text + "\n")

    def table(self, title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        from rich.console import Console as RichConsole
        from rich.table import Table

        table = Table(title=title, title_justify="left", header_style="bold")
        for col in columns:
            table.add_column(col, overflow="fold")
        for row in rows:
            table.add_row(*("-" if v is None else str(v) for v in row))
        RichConsole(file=self.out, width=max(100, _width(self.out))).print(table)

    def warn(self, text: str) -> None:
        self.err.write(f"warning: {text}\n")

    def error(self, exc: VgpuadmError) -> None:
        self.err.write(f"error: {exc.message}\n")
        if exc.hint:
            self.err.write(f"hint: {exc.hint}\n")


def _width(stream: TextIO) -> int:
    import shutil

    return shutil.get_terminal_size((120, 24)).columns if stream.isatty() else 160
