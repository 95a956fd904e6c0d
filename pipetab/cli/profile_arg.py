"""``--profile FILE.toml``: measured op times instead of the roofline model, for any command.

``add_profile_arg(parser)`` adds the option; ``profile_costs_of(args, schedule)`` returns the
schedule's ``Costs`` from the profile (``solver.costs.profile_costs``), or None without it.
"""

from __future__ import annotations


def add_profile_arg(p) -> None:
    p.add_argument("--profile", metavar="FILE.toml", default=None,
                   help="measured op times per stage (T_F, T_B, T_W, message, memory; see docs/cluster.md) "
                        "instead of the roofline model")


def profile_of(args):
    """The ``Profile`` named by ``--profile`` (None without the option)."""
    if getattr(args, "profile", None) is None:
        return None
    from pipetab.hardware.profile import load_profile

    return load_profile(args.profile)


def profile_costs_of(args, schedule):
    """``schedule``'s costs from ``--profile`` (None without the option)."""
    profile = profile_of(args)
    if profile is None:
        return None
    from pipetab.solver.costs import profile_costs

    return profile_costs(schedule, profile)
