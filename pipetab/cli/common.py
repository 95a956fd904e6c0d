"""Shared pieces of the command line: a one-line-error parser, schedule arguments, output."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import NoReturn

from pipetab.schedules import registry
from pipetab.schedules.limits import MAX_DEVICES
from pipetab.schedules.table import SlotDurations

# slots of one op: at most 2**30, so that a table of MAX_OPS ops ends within 2**53 slots
# (integer times, numpy's int64 and the text grid stay exact)
MAX_SLOTS = 2**30


class UsageError(Exception):
    """Bad input: printed as one line (``error_line``), exit code 2. ``command``: the
    sub-command it belongs to, when the raiser knows it better than ``main``."""

    def __init__(self, message: str, command: str | None = None):
        super().__init__(message)
        self.command = command


def error_line(command: str | None, message: str) -> str:
    """The one error line of every command: ``pipetab COMMAND: error: MESSAGE`` (``pipetab:
    error: MESSAGE`` before a command is known), on one line whatever ``message`` holds."""
    from pipetab.files import printable

    message = printable(" ".join(str(message).split()))
    return f"pipetab {command}: error: {message}" if command else f"pipetab: error: {message}"


class Parser(argparse.ArgumentParser):
    """argparse, but errors are one line on stderr with exit code 2."""

    def error(self, message: str) -> NoReturn:
        words = self.prog.split()
        raise UsageError(message, words[1] if len(words) > 1 else None)


def enum_choice(enum):
    """An argparse type: a member of the str-valued ``enum``, or 'invalid choice' naming them."""
    def parse(text: str):
        try:
            return enum(text)
        except ValueError:
            choices = ", ".join(repr(str(m)) for m in enum)
            raise argparse.ArgumentTypeError(f"invalid choice: {text!r} (choose from {choices})") from None
    return parse


def positive_int(name: str, minimum: int = 1, maximum: int | None = None):
    """argparse type: an integer >= ``minimum`` (and <= ``maximum``), else a one-line error
    naming ``name`` and the range allowed."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{name} must be an integer >= {minimum}, got {value}")
        if maximum is not None and value > maximum:
            shown = f"{value}" if len(str(value)) <= 30 else f"{str(value)[:12]}... ({len(str(value))} digits)"
            raise argparse.ArgumentTypeError(f"{name} must be an integer between {minimum} and {maximum:,}, "
                                             f"got {shown}")
        return value

    parse.__name__ = name
    return parse


def positive_float(name: str, maximum: float | None = None, minimum: float | None = None):
    """argparse type: a finite number > 0 (and within [``minimum``, ``maximum``]), else a
    one-line error naming ``name``."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number, got {text!r}") from None
        if (not math.isfinite(value) or value <= 0 or (maximum is not None and value > maximum)
                or (minimum is not None and value < minimum)):
            least = f" and >= {minimum:g}" if minimum is not None else ""
            most = f" and <= {maximum:g}" if maximum is not None else ""
            raise argparse.ArgumentTypeError(f"{name} must be a finite number > 0{least}{most}, got {text!r}")
        return value

    parse.__name__ = name
    return parse


def add_schedule_args(p: argparse.ArgumentParser, name: bool = True, several: bool = False) -> None:
    """NAME (or NAME... with ``several``) --stages --microbatches [--waves] [--chunks]
    [--split] [--forward-slots] [--backward-slots] [--weight-slots]."""
    if several:
        p.add_argument("names", metavar="NAME", nargs="+", help="schedule names (see 'pipetab schedules')")
    elif name:
        p.add_argument("name", metavar="NAME", help="schedule name (see 'pipetab schedules')")
    p.add_argument("--stages", "-S", type=positive_int("stages"), required=True,
                   help="devices S (= stages for GPipe, 1F1B, ZB-H1, Chimera; Hanayo, "
                        "interleaved, ZB-V and DualPipeV hold several stages per device)")
    p.add_argument("--microbatches", "-B", type=positive_int("microbatches"), required=True,
                   help="microbatches per training step B")
    p.add_argument("--waves", type=positive_int("waves", maximum=MAX_DEVICES), default=None,
                   help="Hanayo waves W (default 1)")
    p.add_argument("--chunks", type=positive_int("chunks", maximum=MAX_DEVICES), default=None,
                   help="interleaved chunks per device v (default 2)")
    p.add_argument("--split", default=None, help="chimera-asym layer split A:B (default 1:2)")
    p.add_argument("--overlap-pairs", default=None, metavar="on|off",
                   help="dualpipe, dualpipev, interleaved: run overlapped forward-backward pairs as one block "
                        "on two streams (dualpipe/dualpipev default on, interleaved default off)")
    add_slot_args(p)


def add_slot_args(p: argparse.ArgumentParser, weight: bool = True) -> None:
    """--forward-slots, --backward-slots and (for split-backward schedules) --weight-slots."""
    p.add_argument("--forward-slots", type=positive_int("forward slots", maximum=MAX_SLOTS), default=1,
                   help="slots of one forward (default 1)")
    p.add_argument("--backward-slots", type=positive_int("backward slots", maximum=MAX_SLOTS), default=2,
                   help="slots of one backward; the input-gradient part when it is split (default 2)")
    if weight:
        p.add_argument("--weight-slots", type=positive_int("weight slots", maximum=MAX_SLOTS), default=None,
                       help="slots of one weight-gradient op in split-backward schedules (default 1)")


def given_options(args) -> dict:
    """The schedule-specific options given on the command line (parsed)."""
    given = {}
    if args.waves is not None:
        given["waves"] = args.waves
    if getattr(args, "chunks", None) is not None:
        given["chunks"] = args.chunks
    if args.split is not None:
        try:
            given["split"] = registry.parse_split(args.split)
        except ValueError as exc:
            raise UsageError(f"--{exc.args[0]}") from None
    if getattr(args, "overlap_pairs", None) is not None:
        try:
            given["overlap"] = registry.parse_flag(args.overlap_pairs)
        except ValueError as exc:
            raise UsageError(f"--{exc.args[0]}") from None
    return given


def schedule_options(args, name: str, strict: bool = True) -> dict:
    """The given options that schedule ``name`` takes; with ``strict`` an option it does
    not take is refused (one schedule named), else left to the schedules that take it."""
    allowed = {o.name for o in registry.spec(name).options}
    given = given_options(args)
    if strict:
        for key in given:
            if key not in allowed:
                raise UsageError(f"--{_flag(key)} does not apply to schedule {name!r} "
                                 f"({_takers(key)})")
    return {k: v for k, v in given.items() if k in allowed}


def _flag(option: str) -> str:
    """The command-line flag of a schedule option's keyword name."""
    return next((o.flag for s in registry.REGISTRY.values() for o in s.options if o.name == option), option)


def _takers(option: str) -> str:
    names = [s.name for s in registry.REGISTRY.values() if any(o.name == option for o in s.options)]
    return f"only {', '.join(names)} take{'s' if len(names) == 1 else ''} it"


def build_schedule(args, name: str | None = None, strict: bool = True):
    """The schedule ``name`` (default: the one named on the command line) with the given
    options; ``--weight-slots`` is refused for a schedule without a split backward."""
    name = name or args.name
    schedule = registry.generate(name, args.stages, args.microbatches, **schedule_options(args, name, strict))
    if strict and getattr(args, "weight_slots", None) is not None and not schedule.split_backward:
        raise UsageError(f"--weight-slots does not apply to schedule {name!r} "
                         f"(its backward is not split; {', '.join(split_backward_schedules())} split it)")
    return schedule


def schedule_title(args, name: str) -> str:
    """``interleaved(chunks=2)``: the schedule with every option it takes, given or default
    (a title that drops them cannot be told from another run)."""
    from pipetab.plan.space import schedule_label

    opts = {o.name: o.default for o in registry.spec(name).options}
    opts.update(schedule_options(args, name, strict=False))
    return schedule_label(name, opts)


def split_backward_schedules() -> list[str]:
    """Registry names whose schedules split the backward (checked on a tiny instance)."""
    out = []
    for name in registry.REGISTRY:
        for S, B in ((2, 4), (4, 8), (2, 8)):
            try:
                if registry.generate(name, S, B).split_backward:
                    out.append(name)
                break
            except ValueError:
                continue
    return out


def check_options_apply(args, names: list[str]) -> None:
    """Each given option applies to at least one of the schedules ``names``."""
    for key in given_options(args):
        if not any(key in {o.name for o in registry.spec(n).options} for n in names):
            raise UsageError(f"--{_flag(key)} does not apply to {', '.join(map(repr, names))} "
                             f"({_takers(key)})")


def slots_of(args) -> SlotDurations:
    return SlotDurations(forward=args.forward_slots, backward=args.backward_slots,
                         weight=getattr(args, "weight_slots", None) or 1)


def output_path(text: str, flag: str, suffixes: tuple[str, ...]) -> Path:
    """An output file named on the command line: its suffix one of ``suffixes``, its folder
    existing, and it a regular file or new (never a link, FIFO, device or folder:
    ``pipetab.files.check_target``), checked before any work."""
    from pipetab.files import check_target

    path = Path(text)
    if path.suffix.lower() not in suffixes:
        raise UsageError(f"{flag} must end in {' or '.join(suffixes)}, got {text!r}")
    try:
        return check_target(path, flag)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def write_output(path: Path, flag: str, write) -> None:
    """Run ``write(tmp)`` on a temporary file beside ``path`` and rename it onto ``path``
    (``pipetab.files.write_atomic``); a failure to write (full disk, no permission) becomes
    one line naming ``flag`` and leaves no partial file."""
    from pipetab.files import write_atomic

    try:
        write_atomic(path, write, flag)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def torch_notes(schedule) -> None:
    """Beside a torch CSV on stdout: its stage -> rank layout and the torchtitan settings
    that build it (or a warning that none does), on stderr (``formats.torch_layout``)."""
    from pipetab.schedules.formats import torch_layout_lines

    for line in torch_layout_lines(schedule):
        print(line, file=sys.stderr)


def torch_csv_of(table, schedule, flag: str = "--format torch-csv") -> str:
    """``table`` as torch CSV, or one line saying why it has none."""
    from pipetab.schedules.formats import to_torch_csv

    if schedule.num_pipelines > 1:
        raise UsageError(f"{flag}: torch CSV holds one pipeline; {schedule.name} has {schedule.num_pipelines} "
                         "(Chimera-style schedules cannot be written for torch)")
    return to_torch_csv(table)


def emit_json(doc) -> None:
    json.dump(doc, sys.stdout, indent=1)
    sys.stdout.write("\n")


PLOT_SUFFIXES = (".png", ".svg", ".pdf")


def check_plot_path(text: str | None) -> Path | None:
    """``--plot FILE``: a picture file in an existing folder (checked before any work)."""
    if text is None:
        return None
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError("--plot needs matplotlib: pip install 'pipetab[plot]'") from None
    return output_path(text, "--plot", PLOT_SUFFIXES)


def save_plot(fn, path: Path, *a, **kw) -> None:
    """Draw with ``fn(*a, ax=..., **kw)`` on a new figure and save it to ``path`` (its
    suffix picks PNG, SVG or PDF); a failed write is one line naming --plot."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = kw.pop("rows", 4)
    fig, ax = plt.subplots(figsize=(14, 2.6 + 0.32 * min(rows, 32)))
    try:
        fn(*a, ax=ax, **kw)
        fig.tight_layout()
        buffer = io.BytesIO()
        fig.savefig(buffer, format=path.suffix[1:].lower(), dpi=120)
    finally:
        plt.close(fig)
    write_output(path, "--plot", lambda p: p.write_bytes(buffer.getvalue()))
