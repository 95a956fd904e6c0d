"""The stage partition of ``pipetab search`` and ``pipetab bound``: ``--partition even|free|LIST``,
``--layers``, ``--head-slots``, ``--embedding-slots`` (docs/partition.md)."""

from __future__ import annotations

from pipetab.schedules.placements import traits

from . import common, hardware_args
from .common import UsageError


def _partition_arg(text: str):
    from pipetab.solver.partition import Partition

    try:
        return Partition.parse(text)
    except ValueError as exc:
        raise UsageError(f"--{exc}") from None


def add_partition_options(p) -> None:
    p.add_argument("--partition", type=_partition_arg, default=None,
                   help="layers per stage: even (default), free (the solver chooses; exact by enumeration), or "
                        "counts such as 9,8,8,7 (bidirectional: DOWN/UP, e.g. 9,8,8,7/7,8,8,9); with --layers or "
                        "--system, linear or bidirectional placement")
    p.add_argument("--layers", type=common.positive_int("layers"), default=None,
                   help="idealized model of L layers: --forward/backward/weight-slots become per layer")
    p.add_argument("--head-slots", type=common.positive_int("head slots", minimum=0), default=None,
                   help="with --layers: LM head and loss on each pipeline's last stage, slots added to its F "
                        "and twice to its backward (default 0)")
    p.add_argument("--embedding-slots", type=common.positive_int("embedding slots", minimum=0), default=None,
                   help="with --layers: embedding on each pipeline's first stage, by the same rule (default 0)")


def partition_rules(args) -> list:
    layered = args.layers is not None or (args.partition is not None and args.partition.mode != "even")
    return [
        (args.layers is not None and args.system is not None,
         "--layers goes with idealized costs; with --system the model's layers are split"),
        ((args.head_slots is not None or args.embedding_slots is not None) and args.layers is None,
         "--head-slots and --embedding-slots need --layers"),
        (layered and args.profile is not None,
         "--partition free or a list needs the model's layers (--system and --model); a --profile times "
         "its stages as measured"),
        (args.layers is not None and args.profile is not None,
         "--layers goes with idealized costs; a --profile times its stages as measured"),
        (layered and args.system is None and args.layers is None and args.profile is None,
         "--partition free or a list needs --layers L (idealized) or --system (the model's layers)"),
        ((layered or args.partition is not None) and not traits(args.placement).partitionable,
         "--partition and --layers apply to --placement linear or bidirectional"),
        (getattr(args, "layout", None) is not None and (layered or args.partition is not None),
         "--layout fixes the layers per stage: it does not combine with --partition or --layers"),
    ]


def _layer_costs(args, shape):
    """The costs of any layer split of ``shape`` (None when the partition is the default
    even split of the old path)."""
    from pipetab.solver.partition import shape_schedule
    from pipetab.solver.pricing import HardwareLayers, IdealizedLayers

    part = args.partition
    if args.layers is None and (part is None or part.mode == "even" or args.system is None):
        return None
    try:
        if args.system is None:
            return IdealizedLayers(
                args.layers, shape.num_devices, shape.num_stages, forward=args.forward_slots or 1,
                backward=args.backward_slots or 2, weight=args.weight_slots or 1, head=args.head_slots or 0,
                embedding=args.embedding_slots or 0, comm=args.comm_slots or 0, activation_cap=args.activation_cap,
                split_backward=args.split_backward,
                weight_memory=1.0 if args.weight_memory is None else args.weight_memory)
        src = hardware_args.cost_source(args, shape.num_devices, shape.num_microbatches)
        return HardwareLayers(shape_schedule(shape), src.system, src.model, src.context, args.memory_cap,
                              "up" if args.mode == "search" and part.mode == "fixed" else "down", args.tick)
    except (ValueError, KeyError, FileNotFoundError) as exc:
        raise UsageError(f"--{exc}" if str(exc).startswith("layers") else
                         f"{exc}") from None


def even_layers_of(args, shape):
    """On hardware the default split is even over the model's layers: (the layers, the
    assumption that says which)."""
    from pipetab.hardware import load_model
    from pipetab.solver.partition import Partition
    from pipetab.solver.pricing import even_layers

    if getattr(args, "layout", None) is not None:  # every pipeline as --layout says
        layers = tuple(args.layout.layers for _ in shape.num_stages)
        return layers, Partition("fixed", layers).label(layers)
    layers = even_layers(load_model(args.model or "paper_gpt").num_layers, shape.num_stages)
    return layers, Partition("even").label(layers)


def solve_layers(args, shape, config, deadline=None):
    """Solve with the stage partition as a decision: (the problem of the chosen split,
    result, real costs of its split (of the even split when none was found), real costs
    of the even split for known schedules — both None on idealized costs — layers),
    within the command's ``deadline``."""
    from pipetab.solver.cpsat.api import solve_partition
    from pipetab.solver.cpsat.decompose.partition import partition_problem
    from pipetab.solver.partition import PARTITION_FORMS, Partition
    from pipetab.solver.pricing import even_layers

    lc = _layer_costs(args, shape)
    part = args.partition or Partition("even")
    try:
        out = solve_partition(shape, lc, part, config, args.mode, deadline=deadline)
    except ValueError as exc:
        if str(exc).startswith("partition"):
            raise UsageError(f"--{exc}; allowed: {PARTITION_FORMS}") from None
        raise
    problem = partition_problem(shape, lc, out.layers) if out.layers else shape
    if args.system is None:
        return problem, out.result, None, None, out.layers
    even = lc.real_costs(even_layers(lc.num_layers, shape.num_stages))
    return problem, out.result, lc.real_costs(out.layers) if out.layers else even, even, out.layers
