"""Output for people: tables and progress through ``rich`` on a terminal, plain text when
the output is piped or ``--quiet`` is given, every human line at most ``WIDTH`` columns.

``table(head, rows, right=...)`` prints an aligned table (a rich table on a terminal, the
same columns as plain text otherwise); ``say(text)`` prints a paragraph wrapped at
``WIDTH`` with a hanging indent; ``Progress`` reports the stages of a long command on
stderr (a rich status line on a terminal, plain lines otherwise, nothing with ``quiet``).
Text from users' files is shown through ``pipetab.files.printable``.
"""

from __future__ import annotations

import re
import sys
import textwrap
import time
from typing import TYPE_CHECKING, Any, Self

from pipetab.files import printable

if TYPE_CHECKING:
    from collections.abc import Sequence
    from collections.abc import Set as AbstractSet

WIDTH = 100  # columns of every human line


def _terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def wrap(text: str, indent: str = "  ") -> str:
    """``text`` wrapped at ``WIDTH`` columns, continuation lines indented by ``indent``."""
    width = min(WIDTH, terminal_width())
    return "\n".join(textwrap.fill(printable(line), width, subsequent_indent=indent, break_on_hyphens=False,
                                   break_long_words=False) for line in str(text).split("\n"))


def say(text: str, indent: str = "  ") -> None:
    """Print ``text`` wrapped at ``WIDTH`` columns."""
    print(wrap(text, indent))


def terminal_width(stream=None) -> int:
    """Columns of the terminal ``stream`` (stdout) writes to; ``WIDTH`` when it is no terminal."""
    import shutil

    return shutil.get_terminal_size((WIDTH, 24)).columns if _terminal(stream or sys.stdout) else WIDTH


def _breakable(text: str) -> str:
    """``interleaved (chunks=4, ...)``: a label with places a wrapped column may break at."""
    return re.sub(r"(?<=\S)\(", " (", text).replace(",", ", ").replace(",  ", ", ")


def _column_widths(head: Sequence[str], rows: Sequence[Sequence[str]], cols: list[int], wrap: AbstractSet[int],
                   room: int) -> list[int] | None:
    """Widths of ``cols`` within ``room`` columns of text (gaps left out), or None: every
    value whole (the ``wrap`` columns at least their longest word), then the headers'
    longest words, then the wrapped labels, as far as the room goes."""
    def longest(texts, words: bool) -> int:
        return max((len(w) for t in texts for w in (t.split() if words else [t])), default=1)

    least = [longest([r[i] for r in rows], i in wrap) for i in cols]
    if sum(least) > room:
        return None
    out = list(least)
    for want in ([max(w, longest([head[i]], True)) for w, i in zip(least, cols)],
                 [max(w, longest([*(r[i] for r in rows), head[i]], False)) for w, i in zip(least, cols)]):
        for k, w in enumerate(want):
            out[k] += max(0, min(w - out[k], room - sum(out)))
    return out


def rich_table(head: Sequence[str], rows: Sequence[Sequence[str]], right: AbstractSet[int], width: int,
               drop: Sequence[int] = (), wrap: AbstractSet[int] = frozenset(), console=None):
    """(a rich table of ``rows`` that fits ``width`` columns without cutting a value, the
    headers of the columns left out). While the table is wider than ``width``: the columns
    in ``drop`` are left out (in that order), then the ``wrap`` columns wrap their labels at
    spaces and brackets and the headers wrap, then one space separates the columns. A
    value of any other column stays whole on its line."""
    from rich import box
    from rich.table import Table

    keep = list(range(len(head)))
    natural = [max(len(x) for x in [head[i], *(r[i] for r in rows)]) for i in keep]

    def build(cols: list[int], widths: list[int] | None = None, gap: int = 2):
        t = Table(box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, gap - 1), show_edge=False, collapse_padding=True)
        for k, i in enumerate(cols):
            t.add_column(head[i] if widths is None else _breakable(head[i]), justify="right" if i in right else "left",
                         no_wrap=widths is None, overflow="fold",
                         width=None if widths is None else widths[k])
        for r in rows:
            t.add_row(*(r[i] if widths is None or i not in wrap else _breakable(r[i]) for i in cols))
        return t

    left_out: list[str] = []
    for i in drop:
        if sum(natural[k] for k in keep) + 2 * (len(keep) - 1) <= width:
            break
        keep.remove(i)
        left_out.append(head[i])
    if sum(natural[k] for k in keep) + 2 * (len(keep) - 1) <= width:
        return build(keep), left_out
    labels = [tuple(_breakable(c) if i in wrap else c for i, c in enumerate(r)) for r in rows]
    for gap in (2, 1):
        widths = _column_widths(head, labels, keep, wrap, width - gap * (len(keep) - 1))
        if widths is not None:
            return build(keep, widths, gap), left_out
    return build(keep), left_out  # no room for every value: rich shrinks what it must


def table(head: Sequence[str], rows: Sequence[Sequence[object]], right: AbstractSet[int] = frozenset(),
          title: str | None = None, drop: Sequence[int] = (), wrap: AbstractSet[int] = frozenset()) -> None:
    """Print ``rows`` under ``head`` (columns in ``right`` right-aligned): a rich table
    fitting the terminal on a terminal (``rich_table``: columns in ``drop`` left out and
    ``wrap`` columns wrapped where it is narrow, no value cut), plain aligned text when
    piped (the same cells, two spaces between columns)."""
    head = tuple(head)
    cells = [tuple(printable(c) for c in r) for r in rows]
    if title:
        say(title)
    if _terminal(sys.stdout):
        from rich.console import Console

        width = terminal_width()
        t, left_out = rich_table(head, cells, right, width, drop, wrap)
        Console(width=width, highlight=False).print(t)
        if left_out:
            say(f"left out for the terminal's width of {width} columns: {', '.join(left_out)} "
                "(all columns: pipe the output, or --format json)")
        return
    widths = [max(len(r[i]) for r in [head, *cells]) for i in range(len(head))]
    gap = "  " if sum(widths) + 2 * (len(widths) - 1) <= WIDTH else " "  # one space when two do not fit
    for r in [head, *cells]:
        print(gap.join(x.rjust(w) if i in right else x.ljust(w) for i, (x, w) in enumerate(zip(r, widths))).rstrip())


class Progress:
    """The phases of a long command on a terminal: a live rich line on stderr, ``PREFIX
    [  1.2 s] message``, whose clock ticks while the phase runs (``update(message)`` starts
    the next phase; ``budget_s`` adds ``of N s``). Nothing at all when stderr is no
    terminal (piped, a log) or with ``quiet``. Use as a context manager (the line goes
    with it)."""

    def __init__(self, prefix: str, quiet: bool = False, stream=None) -> None:
        self.prefix, self.t0 = prefix, time.perf_counter()
        self.stream = stream or sys.stderr
        self.quiet = quiet or not _terminal(self.stream)
        self.message, self.phase_t0 = "starting", self.t0
        self.budget_s: float | None = None
        self._status: Any = None

    def line(self) -> str:
        now = time.perf_counter()
        budget = "" if self.budget_s is None else f" ({now - self.phase_t0:.0f} of {self.budget_s:g} s)"
        return f"{self.prefix} [{now - self.t0:5.1f} s] {self.message}{budget}"

    def __rich__(self):
        from rich.text import Text

        return Text(printable(self.line())[:max(20, min(WIDTH, terminal_width(self.stream)) - 4)])

    def __enter__(self) -> Self:
        if not self.quiet:
            from rich.console import Console

            console = Console(file=self.stream, width=min(WIDTH, terminal_width(self.stream)), highlight=False)
            self._status = console.status(self, refresh_per_second=4)
            self._status.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._status is not None:
            self._status.__exit__(*exc)
            self._status = None

    def update(self, message: str, budget_s: float | None = None) -> None:
        self.message, self.budget_s, self.phase_t0 = printable(message), budget_s, time.perf_counter()
        if self._status is not None:
            self._status.update(self)

    __call__ = update


def grid_blocks(text: str) -> str:
    """A text grid (``schedules.formats.to_text``) wider than ``WIDTH`` as blocks of columns
    one under the other, each line at most ``WIDTH`` columns (the device names repeated)."""
    lines = text.rstrip("\n").split("\n")
    if max(map(len, lines)) <= WIDTH or "|" not in lines[0]:
        return text
    prefix = lines[0].index("|") + 2
    head = lines[0][prefix:]
    cell = head.index(" 1") + 1 if " 1" in head else len(head) + 1  # cells are padded alike, one space apart
    per = max(1, (WIDTH - prefix + 1) // cell)
    columns = len(head.split())
    out = []
    for k in range(0, columns, per):
        out += [(line[:prefix] + line[prefix + k * cell:prefix + (k + per) * cell]).rstrip() for line in lines]
        out.append("")
    return "\n".join(out)
