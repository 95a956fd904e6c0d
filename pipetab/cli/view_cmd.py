"""``pipetab view``: schedules side by side on one self-contained HTML page."""

from __future__ import annotations

from . import common
from .common import UsageError
from .hardware_args import add_hardware_args, cost_source


def register(sub) -> None:
    p = sub.add_parser(
        "view", help="write an HTML page comparing schedules (tables, timelines, memory, levels)",
        description="Write one self-contained HTML page (no server, no network) showing each named "
        "schedule as its table, its simulated timeline and its memory per device over time, with "
        "the levels' numbers. Hover an op for its times and memory; the wheel zooms.")
    common.add_schedule_args(p, several=True)
    add_hardware_args(p)
    p.add_argument("--output", "-o", metavar="FILE.html", default="pipetab-view.html",
                   help="page to write (default pipetab-view.html)")
    p.add_argument("--open", action="store_true", help="open the page in the web browser")
    p.set_defaults(func=run)


def run(args) -> None:
    from pipetab.solver.levels import evaluate_levels
    from pipetab.view import write_page

    if len(set(args.names)) != len(args.names):
        raise UsageError("NAME lists a schedule twice")
    common.check_options_apply(args, args.names)
    path = common.output_path(args.output, "--output", (".html", ".htm"))
    source = cost_source(args, args.stages, args.microbatches)
    levels, titles = [], []
    for name in args.names:
        schedule = common.build_schedule(args, name, strict=len(args.names) == 1)
        levels.append(evaluate_levels(schedule, slots=common.slots_of(args),
                                      costs=None if source is None else source.costs(schedule)))
        on = "(table slot costs)" if source is None else source.label
        titles.append(f"{common.schedule_title(args, name)} S={args.stages} B={args.microbatches} {on}")
    common.write_output(path, "--output", lambda p: write_page(p, levels, titles))
    print(f"wrote {path} ({len(levels)} schedule{'s' if len(levels) > 1 else ''})")
    if args.open:
        import webbrowser

        if not webbrowser.open(path.resolve().as_uri()):  # the page is written: a note, not a failure
            print(f"--open found no web browser here; open {path} yourself")
