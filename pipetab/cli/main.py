"""``pipetab`` entry point: sub-commands and the one-line error contract."""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path

from pipetab.schedules import formats, registry
from pipetab.schedules.limits import check_grid_ops
from pipetab.schedules.metrics import table_metrics
from pipetab.schedules.table import layout
from pipetab.schedules.validate import schedule_from_table, validate

from . import common
from .common import Parser, UsageError, emit_json


def cmd_schedules(args) -> None:
    rows: list[dict] = []
    for spec in registry.REGISTRY.values():
        rows.append({
            "name": spec.name,
            "summary": spec.summary,
            "regime": spec.regime,
            "options": [{"name": o.flag, "default": _plain(o.default), "help": o.help} for o in spec.options],
        })
    if args.format == "json":
        emit_json(rows)
        return
    for r in rows:
        opts = "".join(f" [--{o['name']} (default {o['default']}): {o['help']}]" for o in r["options"])
        print(f"{r['name']:<13} {r['summary']}")
        print(f"{'':<13} requires: {r['regime']}; --stages S --microbatches B{opts}")


def _plain(value):
    return ":".join(map(str, value)) if isinstance(value, tuple) else value


def cmd_table(args) -> None:
    plot = common.check_plot_path(args.plot)
    if args.format in ("text", "torch-csv"):  # a grid: refuse one too big before generating
        options = common.schedule_options(args, args.name)
        registry.check_request(args.name, args.stages, args.microbatches, **options)
        check_grid_ops(registry.num_ops(args.name, args.stages, args.microbatches, **options) or 0)
    schedule = common.build_schedule(args)
    table = layout(schedule, common.slots_of(args))
    validate(table, schedule)
    metrics = table_metrics(table, schedule)
    if plot:
        from pipetab.plot import plot_table

        common.save_plot(plot_table, plot, table, rows=table.num_devices,
                         title=f"{common.schedule_title(args, args.name)}  S={args.stages} B={args.microbatches}")
    if args.format == "json":
        sys.stdout.writelines(formats.json_chunks(table, schedule=args.name, stages=args.stages,
                                                  bubble_ratio=metrics.bubble_ratio))
        sys.stdout.write("\n")
    elif args.format == "csv":
        sys.stdout.writelines(formats.csv_chunks(table))
    elif args.format == "torch-csv":
        sys.stdout.write(formats.to_torch_csv(table))
        common.torch_notes(schedule)
    else:
        sys.stdout.write(formats.to_text(table))
        print(f"makespan {metrics.makespan_slots:g} slots{columns_note(table)}, "
              f"bubble ratio {metrics.bubble_ratio:.4f}")


def columns_note(table) -> str:
    """`` (N ticks of 1/v slot)`` when a table tick is not one slot."""
    if table.tick_slots == 1:
        return ""
    from fractions import Fraction

    return f" ({table.makespan} ticks of {Fraction(table.tick_slots).limit_denominator(64)} slot)"


def read_table(path: str):
    """Read a table file; the format follows the extension (.json, .csv, else text)."""
    p = Path(path)
    text = formats.read_text_file(p, "table file")
    suffix = p.suffix.lower()
    if suffix == ".json":
        return formats.from_json(text, p.stem)
    if suffix == ".csv":
        first = text.lstrip().split("\n", 1)[0]
        if first.startswith("device,"):
            return formats.from_csv(text, p.stem)
        return formats.from_torch_csv(text, p.stem)
    return formats.from_text(text, p.stem)


def cmd_check(args) -> None:
    table = read_table(args.file)
    validate(table)
    metrics = table_metrics(table, schedule_from_table(table))
    if Path(args.file).suffix.lower() == ".json":
        check_claims(args.file, formats.read_text_file(args.file, "table file"), table, metrics)
    if args.format == "json":
        emit_json({"valid": True, "devices": table.num_devices, "microbatches": table.microbatches,
                   **metrics.as_dict()})
    else:
        print(f"{args.file}: valid table, {table.num_devices} devices, {table.microbatches} microbatches")
        _print_metrics(metrics.as_dict())


def check_claims(path: str, text: str, table, metrics) -> None:
    """What a JSON table file says of itself (``makespan_slots``, ``tick_slots``,
    ``bubble_ratio``, ``microbatches``, ``stages``) must be what its ops give."""
    import json
    import math

    doc = json.loads(text)
    measured = {"makespan_slots": metrics.makespan_slots, "tick_slots": table.tick_slots,
                "bubble_ratio": metrics.bubble_ratio, "microbatches": table.microbatches,
                "stages": table.num_devices}
    for key, value in measured.items():
        if key not in doc:
            continue
        claim = doc[key]
        same = (isinstance(claim, (int, float)) and not isinstance(claim, bool)
                and math.isclose(claim, value, rel_tol=1e-9, abs_tol=1e-12))
        if not same:
            raise UsageError(f"{path}: the file says {key} {claim!r} but its ops give {value:g}")


def _print_metrics(d: dict, indent: str = "  ") -> None:
    for k, v in d.items():
        if isinstance(v, float):
            v = f"{v:.4f}"
        elif isinstance(v, list):
            v = ", ".join(f"{x:.4g}" if isinstance(x, float) else str(x) for x in v)
        print(f"{indent}{k}: {v}")


COMMANDS = ("schedules", "table", "check", "systems", "models", "evaluate", "search", "bound", "sweep",
            "view", "plan", "calibrate", "profile")


def build_parser() -> Parser:
    from . import calibrate_cmd, evaluate_cmd, plan_cmd, presets_cmd, profile_cmd, solve_cmd, sweep_cmd, view_cmd

    parser = Parser(prog="pipetab", description="Explore pipeline-parallel training schedules as tables.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)

    p = sub.add_parser("schedules", help="list the known schedules, their options and constraints")
    p.add_argument("--format", choices=["text", "json"], default="text")
    p.set_defaults(func=cmd_schedules)

    p = sub.add_parser("table", help="print a schedule as a table (devices x slots)")
    common.add_schedule_args(p)
    p.add_argument("--format", choices=["text", "csv", "json", "torch-csv"], default="text")
    p.add_argument("--plot", metavar="FILE.png", help="also draw the table as a picture")
    p.set_defaults(func=cmd_table)

    p = sub.add_parser("check", help="validate a table file (.json, .csv, torch .csv, or text grid)")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--format", choices=["text", "json"], default="text")
    p.set_defaults(func=cmd_check)

    presets_cmd.register(sub)

    evaluate_cmd.register(sub)
    solve_cmd.register(sub)
    sweep_cmd.register(sub)
    view_cmd.register(sub)
    plan_cmd.register(sub)
    calibrate_cmd.register(sub)
    profile_cmd.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit code (0 ok, 2 bad input, 130 interrupted).
    Every error is one line, ``pipetab COMMAND: error: ...`` (``common.error_line``)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    command = next((a for a in argv[:1] if a in COMMANDS), None)  # before parsing, for its errors
    if sys.stdout is None or _closed(sys.stdout):
        if sys.stderr is not None:
            print(common.error_line(command, "standard output is closed, so nothing could be printed; "
                                             "redirect it to a file or /dev/null"), file=sys.stderr)
        return 2
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        command = args.command
        args.func(args)
        sys.stdout.flush()
    except BrokenPipeError:  # e.g. piping into head: the reader has what it wanted
        _discard_stdout()
        return 0
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EIO, errno.EFBIG, errno.EDQUOT):
            raise
        _discard_stdout()
        return _fail(command, f"cannot write the output: {exc.strerror}")
    except UsageError as exc:
        return _fail(exc.command or command, str(exc))
    except (ValueError, KeyError) as exc:
        return _fail(command, str(exc.args[0] if exc.args else exc))
    except RecursionError:
        return _fail(command, "an input is nested too deeply")
    except KeyboardInterrupt:
        import signal

        signal.signal(signal.SIGINT, signal.SIG_IGN)  # one line, however often Ctrl-C is pressed
        print(common.error_line(command, "interrupted").replace(" error: ", " ", 1), file=sys.stderr)
        return 130
    return 0


def _closed(stream) -> bool:
    """Whether ``stream``'s file descriptor is closed (a shell's ``>&-``); a stream without
    one (tests capture output) is open."""
    try:
        fd = stream.fileno()
    except (OSError, ValueError, AttributeError):
        return False
    try:
        os.fstat(fd)
    except OSError:
        return True
    return False


def _fail(command: str | None, message: str) -> int:
    print(common.error_line(command, message), file=sys.stderr)
    return 2


def _discard_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush of what could not be
    written adds no second message."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # stdout without a file descriptor (tests)
        pass


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
