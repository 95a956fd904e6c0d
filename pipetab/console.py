"""Output for people: tables and progress through ``rich`` on a terminal, plain text when
the output is piped or ``--quiet`` is given, every human line at most ``WIDTH`` columns.

``table(head, rows, right=...)`` prints an aligned table (a rich table on a terminal, the
same columns as plain text otherwise); ``say(text)`` prints a paragraph wrapped at
``WIDTH`` with a hanging indent; ``Progress`` reports the stages of a long command on
stderr (a rich status line on a terminal, plain lines otherwise, nothing with ``quiet``).
Text from users' files is shown through ``pipetab.files.printable``.
"""

from __future__ import annotations

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
    return "\n".join(textwrap.fill(printable(line), WIDTH, subsequent_indent=indent, break_on_hyphens=False,
                                   break_long_words=False) for line in str(text).split("\n"))


def say(text: str, indent: str = "  ") -> None:
    """Print ``text`` wrapped at ``WIDTH`` columns."""
    print(wrap(text, indent))


def table(head: Sequence[str], rows: Sequence[Sequence[object]], right: AbstractSet[int] = frozenset(),
          title: str | None = None) -> None:
    """Print ``rows`` under ``head`` (columns in ``right`` right-aligned): a rich table on a
    terminal, plain aligned text when piped (the same cells, two spaces between columns)."""
    head = tuple(head)
    cells = [tuple(printable(c) for c in r) for r in rows]
    if title:
        say(title)
    if _terminal(sys.stdout):
        from rich import box
        from rich.console import Console
        from rich.table import Table

        t = Table(box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1), show_edge=False)
        for i, h in enumerate(head):
            t.add_column(h, justify="right" if i in right else "left", no_wrap=True)
        for r in cells:
            t.add_row(*r)
        Console(width=WIDTH, highlight=False).print(t)
        return
    widths = [max(len(r[i]) for r in [head, *cells]) for i in range(len(head))]
    gap = "  " if sum(widths) + 2 * (len(widths) - 1) <= WIDTH else " "  # one space when two do not fit
    for r in [head, *cells]:
        print(gap.join(x.rjust(w) if i in right else x.ljust(w) for i, (x, w) in enumerate(zip(r, widths))).rstrip())


class Progress:
    """The stages of a long command on stderr: ``update(message)`` replaces a rich status
    line on a terminal, prints ``PREFIX [  1.2 s] message`` lines otherwise, and nothing
    with ``quiet``. Use as a context manager (the status line ends with it)."""

    def __init__(self, prefix: str, quiet: bool = False) -> None:
        self.prefix, self.quiet, self.t0 = prefix, quiet, time.perf_counter()
        self._status: Any = None

    def __enter__(self) -> Self:
        if not self.quiet and _terminal(sys.stderr):
            from rich.console import Console

            self._status = Console(stderr=True, width=WIDTH).status(f"{self.prefix}: starting")
            self._status.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._status is not None:
            self._status.__exit__(*exc)
            self._status = None

    def update(self, message: str) -> None:
        if self.quiet:
            return
        line = f"{self.prefix} [{time.perf_counter() - self.t0:5.1f} s] {printable(message)}"
        if self._status is not None:
            self._status.update(line[:WIDTH])
        else:
            print(wrap(line, " " * 4), file=sys.stderr, flush=True)

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
