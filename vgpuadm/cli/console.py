"""The one place that prints, and where parameters come in. JSON goes to stdout as is; tables through rich; errors
and warnings to stderr as one line each (`error: …` then `hint: …`). rich is imported only when a table or progress
bar is drawn.

The parameters every command shares come in here too. Identities as they enter on the command line: every PCI address
(`--gpu`, `--vf`, `--parent`, a VF or GPU argument) and every device id (`--uuid`: an mdev UUID or a PCI address) is
parsed once (`as_bdf`, `as_device`, `as_uuid`) into the one canonical form the host and the metadata use
(model.pci_address, model.device_key), so `18:00.4`, `0000:18:00.4` and `0000:18:00.4 ` name the same VF for every
check that follows (ownership, presence, locks). And the options every changing command takes (--dry-run, --json:
`plan_options`).
"""

from __future__ import annotations

import sys

from vgpuadm.errors import VgpuadmError

TYPE_CHECKING = False  # `typing` stays off the fast path of the read commands (bench/bench_cold_start.py)
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any, TextIO


class OutputClosed(Exception):
    """stdout's reader closed the pipe (`| head -1`). Not an OSError, so click does not turn it into exit 1."""


# Columns that hold identifiers people copy (PCI addresses, UUIDs, type ids): never wrapped or folded, in every
# table, whatever the command's own `keep` says.
IDENTIFIERS = frozenset({"address", "parent", "id", "uuid", "type", "device", "gpu", "GPU", "function",
                         "physical gpu", "instance", "vendor:device"})  # fmt: skip


class Console:
    def __init__(self, out: TextIO | None = None, err: TextIO | None = None) -> None:
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.printed_json = False
        self.plain = False  # --plain: tables as tab-separated lines, no box drawing (awk, grep, cut)
        self.headers = True  # --no-headers: no column names (with --plain: data lines only)

    def json(self, doc: Any) -> None:
        from vgpuadm.cli.jsontext import chunks  # exactly json.dumps(doc, indent=2), faster on big documents

        self.printed_json = True
        for text in chunks(doc, "\n"):
            self._write(text)

    def line(self, text: str = "") -> None:
        """Text as is, but for the control characters host data may bring (an ESC sequence in a sysfs type name
        or a domain name would recolor or retitle the terminal): shown escaped, line breaks and tabs kept."""
        self._write(text.translate(_CONTROL) + "\n")

    def _write(self, text: str) -> None:
        try:
            self.out.write(text)
        except BrokenPipeError:
            raise OutputClosed from None

    def table(
        self,
        title: str,
        columns: Sequence[str],
        rows: Sequence[Sequence[Any]],
        keep: Sequence[str] = (),
        optional: Sequence[str] = (),
        empty: str = "",
    ) -> None:
        """`keep`: the columns that never break besides IDENTIFIERS (ids people copy: UUIDs, PCI addresses, type
        ids); the others wrap when the terminal is narrow. `optional`: columns left out, in this order, while the
        table is wider than the terminal (a footnote names them); then the outer border goes. `empty`: what an
        empty table says instead (why it is empty, what to run). --plain prints every column, tab-separated."""
        cells = [["-" if v is None else str(v) for v in row] for row in rows]
        if self.plain:
            if self.headers:
                self.line("\t".join(columns))
            for row in cells:
                self.line("\t".join(one_line(c).replace("\t", " ") for c in row))
            return
        if not cells and empty:
            self.line(empty)
            return
        from rich.table import Table
        from rich.text import Text

        width = _width(self.out)
        cells = [[one_line(c) for c in row] for row in cells]
        shown = list(range(len(columns)))
        widths = [max([len(columns[i]), *(len(r[i]) for r in cells)]) for i in shown]
        for name in optional:
            if sum(widths[i] + 3 for i in shown) + 1 <= width:
                break
            if name in columns:
                shown.remove(columns.index(name))
        edge = sum(widths[i] + 3 for i in shown) + 1 <= width
        # Every cell, title and header is rich Text, never markup: cells hold user data (VM names, --param values,
        # --host names), and `[/x]` in one must print as is, not raise rich's MarkupError or restyle the table.
        table = Table(title=Text(one_line(title)), title_justify="left", header_style="bold", show_edge=edge,
                      show_header=self.headers)  # fmt: skip
        for i in shown:
            if columns[i] in keep or columns[i] in IDENTIFIERS:
                table.add_column(Text(columns[i]), no_wrap=True, overflow="ignore", min_width=widths[i])
            else:
                table.add_column(Text(columns[i]), overflow="fold")
        for row in cells:
            table.add_row(*(Text(row[i]) for i in shown))
        _rich_console(self.out, width).print(table)
        dropped = [c for i, c in enumerate(columns) if i not in shown]
        if dropped:
            import textwrap

            note = f"(left out for width: {', '.join(dropped)}; --plain shows all)"
            for line in textwrap.wrap(note, width):
                self.line(line)

    def progress(self, label: str) -> _Progress:
        """A context whose value is a callback `(done, total, text)` for long plans: a rich progress bar on a
        terminal, else one line per step (`[3/12] create mdev …`) so logs and tests see every step."""
        return _Progress(self, label)

    def warn(self, text: str) -> None:
        self.err.write(f"warning: {one_line(text)}\n")

    def error(self, exc: VgpuadmError) -> None:
        self.err.write(f"error: {one_line(exc.message)}\n")
        if exc.hint:
            self.err.write(f"hint: {one_line(exc.hint)}\n")


class SyslogConsole(Console):
    """A Console for runs nobody watches (`restore --syslog`, the udev rule's runs): every line goes to the system
    log (Python's syslog, ident vgpuadm: journald or the syslog daemon), nothing to the terminal. Lines are info,
    warnings warning, errors err; a JSON document is logged as one line."""

    def __init__(self, ident: str = "vgpuadm", err: TextIO | None = None) -> None:
        super().__init__(err=err)
        import syslog

        self._syslog = syslog
        syslog.openlog(ident, syslog.LOG_PID, syslog.LOG_DAEMON)

    def _log(self, priority: int, text: str) -> None:
        self._syslog.syslog(priority, one_line(text))

    def line(self, text: str = "") -> None:
        for part in text.splitlines() or [""]:
            if part.strip():
                self._log(self._syslog.LOG_INFO, part)

    def json(self, doc: Any) -> None:
        from vgpuadm.cli.jsontext import dumps

        self.printed_json = True
        self._log(self._syslog.LOG_INFO, dumps(doc).replace("\n", " "))

    def warn(self, text: str) -> None:
        self._log(self._syslog.LOG_WARNING, f"warning: {text}")

    def error(self, exc: VgpuadmError) -> None:
        """An error goes to the system log and, as from every command, to stderr (its one line and hint): a
        caller that reads nothing there (udevd) loses nothing, an operator who typed the command sees why."""
        self._log(self._syslog.LOG_ERR, f"error: {exc.message}" + (f" (hint: {exc.hint})" if exc.hint else ""))
        super().error(exc)


class _Progress:
    """Console.progress. A class, not contextlib.contextmanager: contextlib (with functools and collections) stays
    off the read commands' path (bench/bench_cold_start.py)."""

    def __init__(self, console: Console, label: str) -> None:
        self.console = console
        self.label = label
        self.bar: Any = None
        self.task: Any = None

    def __enter__(self) -> Callable[[int, int, str], None]:
        console = self.console
        if not console.out.isatty():
            return lambda i, n, text: console.line(f"[{i}/{n}] {text}")
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        bar = Progress(TextColumn(self.label), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
                       console=_rich_console(console.out), transient=False)  # fmt: skip
        bar.__enter__()
        self.bar, self.task = bar, bar.add_task("", total=None)

        def step(i: int, n: int, text: str) -> None:
            bar.update(self.task, completed=i - 1, total=n, description=text)

        return step

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        if self.bar is None:
            return
        try:
            if exc is None:
                self.bar.update(self.task, completed=self.bar.tasks[0].total or 0)
        finally:
            self.bar.__exit__(kind, exc, tb)


def logged(console: Console, run: Callable[[], object]) -> int:
    """Run `run` (a command writing to `console`); a VgpuadmError it raises goes to `console` as the error line:
    the exit code (what `run` returned when it is a number, else 0 when it succeeded)."""
    try:
        code = run()
    except VgpuadmError as exc:
        console.error(exc)
        return exc.exit_code
    return code if isinstance(code, int) else 0


_LINE_BREAKING = {c: repr(chr(c))[1:-1] for c in [*range(0x20), *range(0x7F, 0xA0), 0x2028, 0x2029]}
_CONTROL = {c: e for c, e in _LINE_BREAKING.items() if c not in (0x09, 0x0A)}


def one_line(text: str) -> str:
    """A message as one line of text: control characters and line separators a value brought into it (a VM name,
    a plan key, a metadata value) are shown escaped (\\n, \\x1b), so they can neither break nor color the line."""
    return text.translate(_LINE_BREAKING)


def _rich_console(stream: TextIO, width: int | None = None) -> Any:
    """A rich Console on `stream` whose broken pipe is an exception (OutputClosed: cli/app.py exits 0), not rich's
    own SystemExit(1)."""
    from rich.console import Console as RichConsole

    class PipeConsole(RichConsole):
        def on_broken_pipe(self) -> None:
            raise OutputClosed

    return PipeConsole(file=stream, width=width, markup=False, emoji=False, highlight=False)


def _width(stream: TextIO) -> int:
    """$COLUMNS when set (`COLUMNS=80 vgpuadm devices`), else the terminal's width, else 160 (pipes, files)."""
    import os
    import shutil

    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    return shutil.get_terminal_size((120, 24)).columns if stream.isatty() else 160


# The read commands (types, devices, …) print without model's grammars: each callback imports model when a command
# that takes an address runs it (bench/bench_cold_start.py; test_fast_path_imports_stay_light).
def as_bdf(value: str | None) -> str | None:
    """typer callback: a PCI address in canonical form (0000:18:00.4), None when not given."""
    from vgpuadm.model import pci_address

    return None if value is None else pci_address(value)


def as_device(value: str | None) -> str | None:
    """typer callback: an mdev UUID (lower-case) or a PCI address (canonical), None when not given."""
    from vgpuadm.model import device_key

    return None if value is None else device_key(value)


def as_uuid(value: str | None) -> str | None:
    """typer callback: an mdev UUID in canonical (lower-case) form, None when not given."""
    from vgpuadm.model import mdev_uuid

    return None if value is None else mdev_uuid(value, "as `vgpuadm devices` lists them")


def plan_options() -> tuple[Any, Any]:
    """The --dry-run and --json options every changing command takes."""
    import typer

    dry = typer.Option(False, "--dry-run", help="Print the plan; change nothing.")
    js = typer.Option(False, "--json", help="Print the result as JSON.")
    return dry, js
