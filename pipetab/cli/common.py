"""Shared pieces of the command line: a one-line-error parser, schedule arguments, output."""

from __future__ import annotations

import argparse
import json
import sys

from pipetab.schedules import registry
from pipetab.schedules.table import SlotDurations


class UsageError(Exception):
    """Bad input: printed as one line, exit code 2."""


class Parser(argparse.ArgumentParser):
    """argparse, but errors are one line on stderr with exit code 2."""

    def error(self, message: str):  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def positive_int(name: str, minimum: int = 1):
    """argparse type: an integer >= ``minimum``, else a one-line error naming ``name``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{name} must be an integer >= {minimum}, got {value}")
        return value

    parse.__name__ = name
    return parse


def add_schedule_args(p: argparse.ArgumentParser, name: bool = True) -> None:
    """NAME --stages --microbatches [--waves] [--chunks] [--split] [--forward-slots] [--backward-slots]."""
    if name:
        p.add_argument("name", metavar="NAME", help="schedule name (see 'pipetab schedules')")
    p.add_argument("--stages", "-S", type=positive_int("stages"), required=True,
                   help="devices S (= stages for GPipe, 1F1B, ZB-H1, Chimera; Hanayo, "
                        "interleaved, ZB-V and DualPipeV hold several stages per device)")
    p.add_argument("--microbatches", "-B", type=positive_int("microbatches"), required=True,
                   help="microbatches per training step B")
    p.add_argument("--waves", type=positive_int("waves"), default=None, help="Hanayo waves W (default 1)")
    p.add_argument("--chunks", type=positive_int("chunks"), default=None,
                   help="interleaved chunks per device v (default 2)")
    p.add_argument("--split", default=None, help="chimera-asym layer split A:B (default 1:2)")
    add_slot_args(p)


def add_slot_args(p: argparse.ArgumentParser, weight: bool = True) -> None:
    """--forward-slots, --backward-slots and (for split-backward schedules) --weight-slots."""
    p.add_argument("--forward-slots", type=positive_int("forward slots"), default=1,
                   help="slots of one forward (default 1)")
    p.add_argument("--backward-slots", type=positive_int("backward slots"), default=2,
                   help="slots of one backward; the input-gradient part when it is split (default 2)")
    if weight:
        p.add_argument("--weight-slots", type=positive_int("weight slots"), default=1,
                       help="slots of one weight-gradient op in split-backward schedules (default 1)")


def schedule_options(args) -> dict:
    """The schedule-specific options the user gave, checked against the registry."""
    entry = registry.spec(args.name)
    allowed = {o.name for o in entry.options}
    given = {}
    if args.waves is not None:
        given["waves"] = args.waves
    if getattr(args, "chunks", None) is not None:
        given["chunks"] = args.chunks
    if args.split is not None:
        given["split"] = registry.parse_split(args.split)
    for key in given:
        if key not in allowed:
            raise UsageError(f"--{key} does not apply to schedule {args.name!r}")
    return given


def build_schedule(args):
    """The schedule named on the command line."""
    return registry.generate(args.name, args.stages, args.microbatches, **schedule_options(args))


def slots_of(args) -> SlotDurations:
    return SlotDurations(forward=args.forward_slots, backward=args.backward_slots, weight=args.weight_slots)


def emit_json(doc) -> None:
    json.dump(doc, sys.stdout, indent=1)
    sys.stdout.write("\n")


def save_plot(fn, path, *a, **kw) -> None:
    """Draw with ``fn(*a, ax=..., **kw)`` on a new figure and save it to ``path`` (PNG)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError("--plot needs matplotlib: pip install 'pipetab[plot]'") from None
    fig, ax = plt.subplots(figsize=(12, 3 + 0.35 * kw.pop("rows", 4)))
    fn(*a, ax=ax, **kw)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
