"""The one place that prints. JSON goes to stdout as is; tables through rich; errors and warnings to stderr as one
line each (`error: …` then `hint: …`). rich is imported only when a table or progress bar is drawn."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator, Sequence

from vgpuadm.errors import VgpuadmError

TYPE_CHECKING = False  # `typing` stays off the fast path of the read commands (bench/bench_cold_start.py)
if TYPE_CHECKING:
    from typing import Any, TextIO


class Console:
    def __init__(self, out: TextIO | None = None, err: TextIO | None = None) -> None:
        self.out = out or sys.stdout
        self.err = err or sys.stderr

    def json(self, doc: Any) -> None:
        from vgpuadm.cli.jsontext import dumps  # exactly json.dumps(doc, indent=2), faster on big documents

        self.out.write(dumps(doc) + "\n")

    def line(self, text: str = "") -> None:
        self.out.write(text + "\n")

    def table(self, title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        from rich.console import Console as RichConsole
        from rich.table import Table
        from rich.text import Text

        # Every cell, title and header is rich Text, never markup: cells hold user data (VM names, --param values,
        # --host names), and `[/x]` in one must print as is, not raise rich's MarkupError or restyle the table.
        table = Table(title=Text(title), title_justify="left", header_style="bold")
        for col in columns:
            table.add_column(Text(col), overflow="fold")
        for row in rows:
            table.add_row(*(Text("-" if v is None else str(v)) for v in row))
        RichConsole(file=self.out, width=max(100, _width(self.out)), markup=False, emoji=False, highlight=False).print(
            table
        )

    @contextlib.contextmanager
    def progress(self, label: str) -> Iterator[Callable[[int, int, str], None]]:
        """A callback `(done, total, text)` for long plans: a rich progress bar on a terminal, else one line per
        step (`[3/12] create mdev …`) so logs and tests see every step."""
        if not self.out.isatty():
            yield lambda i, n, text: self.line(f"[{i}/{n}] {text}")
            return
        from rich.console import Console as RichConsole
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        with Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
                      console=RichConsole(file=self.out), transient=False) as bar:  # fmt: skip
            task = bar.add_task("", total=None)

            def step(i: int, n: int, text: str) -> None:
                bar.update(task, completed=i - 1, total=n, description=text)

            yield step
            bar.update(task, completed=bar.tasks[0].total or 0)

    def warn(self, text: str) -> None:
        self.err.write(f"warning: {text}\n")

    def error(self, exc: VgpuadmError) -> None:
        self.err.write(f"error: {exc.message}\n")
        if exc.hint:
            self.err.write(f"hint: {exc.hint}\n")


def _width(stream: TextIO) -> int:
    import shutil

    return shutil.get_terminal_size((120, 24)).columns if stream.isatty() else 160
