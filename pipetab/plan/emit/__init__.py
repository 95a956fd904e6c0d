"""A planned configuration as the frameworks that would run it take it, and read back
(``megatron``: Megatron-LM's arguments; ``megatron-bridge``: the same as overrides of
Megatron-Bridge's recipe; ``torchtitan``: the current torchtitan's command line and the
last TOML release's job file).

``emit`` picks what to write: the best configuration that fits (one that does not fit is
refused, or written with ``force`` and a header saying so); for Megatron-LM, when the best
runs a schedule Megatron does not (Chimera, DualPipe...), the best row it can run (Bridge
runs Megatron's schedules too), found
over the whole ranking (a plan of Megatron's schedules when none was simulated), named
with its cost. Every substitution or approximation is one ``DIFFERS`` line of the text
(``Notes``); ``no_substitute`` refuses them instead. ``read_megatron``, ``read_bridge``
and ``read_torchtitan`` parse what was emitted back; ``megatron_view`` and
``torchtitan_view`` say what each framework runs of a plan (the round trip's targets).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .bridge import BRIDGE, RECIPES, bridge_overrides, bridge_text, read_bridge
from .megatron import (
    MEGATRON,
    MEGATRON_COMMIT,
    MEGATRON_CORE,
    MEGATRON_SCHEDULES,
    dispatcher_of,
    megatron_args,
    megatron_text,
    megatron_view,
    read_megatron,
)
from .notes import Notes, planned_recompute, sizes_of
from .torchtitan import (
    MODELS,
    TORCH_NAMES,
    TORCHTITAN,
    TORCHTITAN_TOML,
    module_fqns,
    read_torchtitan,
    torchtitan_command,
    torchtitan_toml,
    torchtitan_view,
)

if TYPE_CHECKING:
    from pipetab.hardware.model import TransformerModel

    from ..result import Configuration, Plan
    from ..space import PlanSpace

FORMATS = ("megatron", "megatron-bridge", "torchtitan", "torchtitan-toml")
# the versions each format is written for, the default first (the names of the test data:
# tests/data/megatron_arguments.txt, megatron_bridge_fields.txt, torchtitan_fields.txt);
# torchtitan's TOML release is the torchtitan-toml format
VERSIONS = {"megatron": (MEGATRON_COMMIT[:12],), "megatron-bridge": (BRIDGE,),
            "torchtitan": (TORCHTITAN, TORCHTITAN_TOML), "torchtitan-toml": (TORCHTITAN_TOML,)}


def target(framework: str, version: str = "") -> tuple[str, str]:
    """The format and version ``--emit framework --emit-version version`` writes (the
    default version when ``version`` is empty; a Megatron-LM commit by a prefix of at least
    7 hex digits); ``ValueError`` naming the supported versions otherwise."""
    if framework not in FORMATS:
        raise ValueError(f"--emit must be one of {', '.join(FORMATS)}, got {framework!r}")
    known = VERSIONS[framework]
    if not version:
        return framework, known[0]
    if framework == "megatron" and len(version) >= 7 and MEGATRON_COMMIT.startswith(version.lower()):
        return framework, known[0]
    if version not in known:
        raise ValueError(f"--emit-version {version!r}: --emit {framework} writes for {' or '.join(known)}")
    return ("torchtitan-toml" if version == TORCHTITAN_TOML else framework), version

__all__ = ["BRIDGE", "FORMATS", "MEGATRON", "MEGATRON_COMMIT", "MEGATRON_CORE", "MEGATRON_SCHEDULES", "MODELS",
           "RECIPES", "TORCHTITAN", "TORCHTITAN_TOML", "TORCH_NAMES", "VERSIONS", "Emitted", "Notes",
           "bridge_overrides", "bridge_text", "emit", "megatron_args", "megatron_text", "megatron_view",
           "module_fqns", "planned", "read_bridge", "read_megatron", "read_torchtitan", "recheck", "target",
           "torch_csv", "torchtitan_command", "torchtitan_toml", "torchtitan_view"]


@dataclass(frozen=True)
class Emitted:
    """What ``emit`` wrote: the text, the configuration, and the lines that say where it
    differs from the plan (also on stderr)."""

    text: str
    configuration: Configuration
    differs: tuple[str, ...]


def planned(conf: Configuration, gpus: int, model: TransformerModel | None = None) -> dict:
    """The plan itself in the round trip's words (sizes, layout, schedule, recomputation per
    stage or the modules recomputed, and with ``model`` the MoE dispatcher it prices)."""
    from pipetab.hardware.layout import Layout

    layout = Layout.parse(conf.layout) if conf.layout and conf.shape.stages > 1 else None
    layers = layout.layers if layout else ()
    return {**sizes_of(conf, gpus), "layout": layout.megatron() if layout else "",
            "schedule": conf.schedule if conf.shape.stages > 1 else "1f1b",
            "chunks": layout.num_stages // conf.shape.stages if layout else 1,
            "recompute": planned_recompute(conf, layers, model), "dispatcher": dispatcher_of(conf, model)}


def recheck(space: PlanSpace, conf: Configuration, shape) -> tuple[bool, float, float]:
    """Whether ``conf``'s schedule on ``shape`` (what a framework runs instead of the plan's
    shape) fits, its peak bytes on the fullest GPU and its step time, by the plan's model."""
    from ..bounds import Bounds

    run = Bounds(space).run(conf.schedule, dict(conf.options), shape)
    if run is None:
        raise ValueError(f"{conf.label}: no run of it on {shape.label}")
    costs = run.costs
    peaks = [p + a for p, a in zip(costs.persistent, run.peaks)]
    fits = all(c is None or p <= c + 1e-9 for p, c in zip(peaks, costs.capacity))
    return fits, max(peaks), run.makespan


def _fitting(result: Plan, force: bool) -> list[Configuration]:
    fits = [c for c in result.evaluated if c.fits]
    if fits:
        return fits
    if not result.configurations:
        raise ValueError("--emit: the plan found no configuration")
    best = result.configurations[0]
    if not force:
        raise ValueError(f"--emit: no configuration fits the GPU memory (the closest, {best.label} "
                         f"{best.shape.label}, needs {best.peak_memory_bytes / 2**30:.1f} of "
                         f"{best.capacity_bytes / 2**30:.1f} GiB); give --force to write it anyway")
    return list(result.configurations)


def _megatron_row(result: Plan, space: PlanSpace, fits: list[Configuration]) -> Configuration | None:
    """The best row Megatron runs: among those simulated, else from a plan of Megatron's
    schedules only (the first plan's time bounds may have pruned every such row)."""
    runnable = [c for c in fits if c.schedule in MEGATRON_SCHEDULES and c.source != "cpsat"]
    if runnable:
        return runnable[0]
    from dataclasses import replace

    from ..search import plan

    again = plan(replace(space, schedules=MEGATRON_SCHEDULES, cpsat_shapes=0))
    rows = [c for c in again.evaluated if c.fits]
    return rows[0] if rows else None


def _choose(result: Plan, space: PlanSpace, framework: str, force: bool) -> tuple[Configuration, list[str]]:
    """The configuration to write and the substitution line, if any."""
    fits = _fitting(result, force)
    best = fits[0]
    if not framework.startswith("megatron") or (best.schedule in MEGATRON_SCHEDULES and best.source != "cpsat"):
        return best, []
    row = _megatron_row(result, space, fits)
    if row is None:
        raise ValueError(f"--emit {framework}: no configuration that fits runs a schedule Megatron-LM runs "
                         f"({', '.join(MEGATRON_SCHEDULES)}); the best is {best.label}")
    cost = 100 * (row.step_time_s / best.step_time_s - 1)
    return row, [f"the best configuration, {best.label} {best.shape.label} ({best.step_time_s:.4g} s per step), "
                 f"is not a schedule Megatron-LM runs: substituted its best row it runs, {row.label} "
                 f"{row.shape.label} ({row.step_time_s:.4g} s per step, {cost:+.1f} %)"]


def _unfit_header(conf: Configuration) -> tuple[str, ...]:
    if conf.fits:
        return ()
    return (f"# DOES NOT FIT: peak {conf.peak_memory_bytes / 2**30:.1f} GiB per GPU > usable "
            f"{conf.capacity_bytes / 2**30:.1f} GiB (written with --force)",)


def _recheck_torchtitan(space: PlanSpace, conf: Configuration, notes: Notes, force: bool) -> None:
    """ZeRO-1/2 run as FSDP by torchtitan: its memory by the plan's model, refused unless it fits."""
    s = conf.shape
    if s.zero not in (1, 2) or s.dp < 2:
        return
    fits, peak, step = recheck(space, conf, s.replace(zero=3, reshard_after_forward=False))
    notes.differ(f"what torchtitan runs (FSDP, reshard never) needs {peak / 2**30:.1f} GiB per GPU and "
                 f"{step:.4g} s per step by pipetab's model (planned {conf.peak_memory_bytes / 2**30:.1f} GiB, "
                 f"{conf.step_time_s:.4g} s)")
    if not fits and not force:
        raise ValueError(f"--emit torchtitan: what torchtitan runs of {conf.label} {s.label} (FSDP for the planned "
                         f"ZeRO-{s.zero}) needs {peak / 2**30:.1f} GiB per GPU and does not fit; give --force to "
                         "write it anyway")


def emit(result: Plan, space: PlanSpace, framework: str, csv_path: str = "", force: bool = False,
         no_substitute: bool = False, version: str = "") -> Emitted:
    """The best configuration of ``result`` in ``framework``'s form (``FORMATS``; module
    docstring) for ``version`` (``target``). ``ValueError`` with one line: an unknown
    format or version, nothing fits (without ``force``), no row the framework runs, a model
    or schedule it cannot take, a difference refused by ``no_substitute``."""
    framework, _ = target(framework, version)
    conf, swapped = _choose(result, space, framework, force)
    notes = Notes()
    for line in swapped:
        notes.differ(line)
    header = _unfit_header(conf)
    gpus, per_node = space.num_gpus, space.gpus_per_node
    if framework == "megatron":
        text = megatron_text(conf, space.model, gpus, notes, per_node, header)
    elif framework == "megatron-bridge":
        text = bridge_text(conf, space.model, gpus, notes, per_node, header)
    else:
        _recheck_torchtitan(space, conf, notes, force)
        if framework == "torchtitan":
            text = torchtitan_command(conf, space.model.name, gpus, csv_path, notes, per_node, header)
        else:
            text = torchtitan_toml(conf, space.model.name, gpus, csv_path, notes, header)
    if no_substitute and notes.differs:
        raise ValueError(f"--no-substitute: the {framework} configuration would differ from the plan: "
                         f"{notes.differs[0]}")
    return Emitted(text, conf, tuple(notes.differs))


def torch_csv(conf: Configuration, schedule) -> str:
    """The compute-only CSV of ``schedule`` (the configuration's run, one pipeline)."""
    from pipetab.schedules.formats import to_torch_csv
    from pipetab.schedules.table import layout

    if schedule.num_pipelines != 1:
        raise ValueError(f"{conf.label} runs two pipelines: torch's CSV holds one")
    return to_torch_csv(layout(schedule))
