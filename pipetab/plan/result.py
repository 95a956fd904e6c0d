"""What ``plan`` returns: ranked ``Configuration`` values in a ``Plan``."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from pipetab.hardware.layer import attention_flops_share, model_flops_per_sequence
from pipetab.hardware.moe import ep_span

from .space import PlanSpace, schedule_label

if TYPE_CHECKING:
    from pipetab.hardware.context import Context
    from pipetab.hardware.model import TransformerModel
    from pipetab.plan.certificate import Certificate
    from pipetab.schedules.schedule import Schedule
    from pipetab.solver.levels import Levels


@dataclass(frozen=True)
class Configuration:
    """One ranked candidate: a schedule (``source`` ``registry`` or ``cpsat``) on a shape
    (a resolved ``Context``), its simulated step time, throughput, MFU and peak memory per
    GPU against the usable capacity. ``profiled``: op times from a profile, which fixes
    the recomputation. ``sample_microbatches``: the step time and memory were extrapolated
    from instances of at most that many microbatches (``periodic``), on which ``levels``
    were evaluated."""

    schedule: str
    options: tuple[tuple[str, object], ...]
    shape: Context
    step_time_s: float
    tokens_per_s: float
    mfu: float
    peak_memory_bytes: int
    capacity_bytes: int
    fits: bool
    idle_ratio: float
    source: str = "registry"
    profiled: bool = False
    a2a_s: float = 0.0
    a2a_hidden_s: float = 0.0
    ep_links: str = ""
    sample_microbatches: int | None = None
    layout: str = ""
    attention_share: float = 0.0  # of the model FLOPs MFU counts: the attention core, unmasked
    levels: Levels | None = field(default=None, compare=False, repr=False)
    searched: Schedule | None = field(default=None, compare=False, repr=False)

    def full_schedule(self) -> Schedule:
        """The schedule of the whole step: CP-SAT's, or the registry's at the shape's
        microbatches (``levels`` may hold a shorter run the step was extrapolated from)."""
        if self.searched is not None:
            return self.searched
        from pipetab.schedules import registry

        return registry.generate(self.schedule, self.shape.stages, self.shape.sizes.microbatches,
                                 **dict(self.options))

    @property
    def mfu_causal(self) -> float:
        """MFU with causal attention counted as half its unmasked FLOPs (what the model
        computes with a causal mask; ``mfu`` counts it unmasked, as Megatron-LM and
        torchtitan do)."""
        return self.mfu * (1 - self.attention_share / 2)

    @property
    def headroom_bytes(self) -> int:
        return self.capacity_bytes - self.peak_memory_bytes

    @property
    def label(self) -> str:
        return schedule_label(self.schedule, dict(self.options))

    @property
    def recompute_label(self) -> str:
        if self.profiled:
            return "profiled"
        if self.shape.recompute_layers is not None:
            return "layers " + runs(self.shape.recompute_layers)
        techniques = [t.removeprefix("recompute=") for t in self.shape.memory_techniques]
        return " ".join(techniques) if techniques else str(self.shape.recompute)

    @property
    def techniques(self) -> tuple[str, ...]:
        """The memory techniques of the configuration (``Context.memory_techniques``, and
        ``ZeRO-2``): what ``plan`` added to a shape that did not fit without them, or the
        recomputation the space enumerates or pins."""
        return self.shape.memory_techniques + (("ZeRO-2",) if self.shape.zero == 2 else ())

    @property
    def layers_per_stage(self) -> tuple[int, ...]:
        """Transformer layers of each stage of a pipeline, in pipeline order."""
        from pipetab.hardware.layout import Layout

        return Layout.parse(self.layout).layers if self.layout else ()

    def as_dict(self) -> dict:
        s = self.shape
        return {
            "schedule": self.schedule, "options": {k: v for k, v in self.options}, "source": self.source,
            "pp": s.pp, "tp": s.tp, "dp": s.dp, "ep": s.ep, "etp": s.etp, "microbatch_size": s.microbatch_size,
            "microbatches": s.microbatches, "recompute": self.recompute_label,
            "step_time_s": self.step_time_s, "tokens_per_s": self.tokens_per_s, "mfu": self.mfu,
            "mfu_causal": self.mfu_causal, "peak_memory_bytes": self.peak_memory_bytes,
            "capacity_bytes": self.capacity_bytes,
            "headroom_bytes": self.headroom_bytes, "fits": self.fits, "idle_ratio": self.idle_ratio,
            "all_to_all_s": self.a2a_s, "all_to_all_hidden_s": self.a2a_hidden_s, "all_to_all_links": self.ep_links,
            "cp": s.cp, "cp_comm": str(s.cp_comm), "zero": s.zero, "layout": self.layout,
            "layers_per_stage": list(self.layers_per_stage),
            "recompute_layers": None if s.recompute_layers is None else list(s.recompute_layers),
            "recompute_modules": list(s.recompute_modules), "activation_precision": str(s.activation_precision),
            "offload_activations": s.offload_activations, "techniques": list(self.techniques),
        }


@dataclass(frozen=True)
class Plan:
    """The ranked configurations (fitting ones first, each group by step time) and what
    the search did: candidates enumerated, pruned by the memory and time bounds, simulated
    (``refined`` of them refinements of the best, beyond the candidates), and CP-SAT's
    notes."""

    configurations: tuple[Configuration, ...]
    candidates: int
    pruned_memory: int
    pruned_time: int
    simulated: int
    cpsat_notes: tuple[str, ...]
    runtime_s: float
    question: dict
    evaluated: tuple[Configuration, ...] = ()  # every simulated candidate, ranked (for plots)
    notes: tuple[str, ...] = ()  # what the space left out and why, what plan added
    refined: int = 0  # of ``simulated``: uneven layouts and per-stage recomputation of the best, not candidates
    certificate: Certificate | None = None  # how much faster than #1 anything in the space could be

    @property
    def unbuilt(self) -> int:
        """Candidates never built: their schedule does not exist for that number of stages
        and microbatches (the others were pruned or simulated)."""
        return self.candidates - self.pruned_memory - self.pruned_time - (self.simulated - self.refined)

    def as_dict(self) -> dict:
        return {
            **self.question,
            "candidates": self.candidates, "pruned_by_memory_bound": self.pruned_memory,
            "pruned_by_time_bound": self.pruned_time, "simulated": self.simulated, "refinements": self.refined,
            "cpsat": list(self.cpsat_notes), "notes": list(self.notes), "runtime_s": round(self.runtime_s, 3),
            "configurations": self._configurations_with_band(),
            "band": {"relative": fidelity_band(), "source": "pipetab/plan/fidelity_band.toml",
                     "meaning": "step times +-relative: the development set's error, each source left out "
                                "of the fit (90th percentile, docs/fidelity.md)"},
            "certificate": None if self.certificate is None else self.certificate.as_dict(),
        }

    def _configurations_with_band(self) -> list[dict]:
        """Each configuration's dict with its band (low and high seconds) and whether its step
        time is indistinguishable from #1's, as the terminal marks it ``~``."""
        b, tied = fidelity_band(), indistinguishable(self.configurations)
        return [{**c.as_dict(), "step_time_low_s": c.step_time_s * (1 - b), "step_time_high_s": c.step_time_s * (1 + b),
                 "indistinguishable_from_first": t} for c, t in zip(self.configurations, tied)]


def configuration(space: PlanSpace, name: str, opts: dict, shape: Context, sched: Schedule, costs,
                   step: float, acts: list[float], searched: Schedule | None = None,
                   capacity: float | None = None, profiled: bool = False, scale: float = 1.0) -> Configuration:
    """A ranked candidate from its simulated step time and its peak activations per device
    (``order_peaks``: the simulator's memory definition); busy time from the op durations
    (``scale`` microbatches of the run per microbatch of ``sched`` when it is a shorter
    instance of the run)."""
    model, system = space.model, space.system
    peak = max(p + a for p, a in zip(costs.persistent, acts))
    fits = all(c is None or p + a <= c + 1e-9 for p, a, c in zip(costs.persistent, acts, costs.capacity))
    per_pipeline = [scale * sched.microbatch2pipeline.count(p) for p in range(sched.num_pipelines)]
    busy = sum(n * costs.op_time[(kind, p, s)] for (kind, p, s) in costs.op_time
               for n in (per_pipeline[p],)) + sum(costs.optimizer_time)
    tokens = space.global_batch * model.seq_len
    flops = model_flops_per_sequence(model) * space.global_batch
    mfu = flops / (step * space.num_gpus * system.device.peak_flops)
    if not mfu <= 1 + 1e-9:
        raise ValueError(f"{schedule_label(name, opts)} on {shape.label} would run at MFU {100 * mfu:.0f} %: "
                         f"a step of {step:.4g} s is shorter than the {flops:.3g} FLOPs of model {model.name!r} "
                         f"take at the peak of {space.num_gpus} GPUs ({system.device.peak_flops / 1e12:g} TFLOP/s "
                         "each); the op times (a profile?) are not of this model, sequence length or GPU")
    a2a, hidden = (scale * x for x in all_to_all_summary(sched, costs))
    links = ep_span(system, shape) if model.moe else ""
    return Configuration(
        name, tuple(sorted(opts.items())), shape, step, tokens / step, mfu,
        round(peak), int(capacity or system.device.usable_memory_bytes), fits,
        1 - busy / (sched.num_devices * step), "registry" if searched is None else "cpsat",
        profiled=profiled, searched=searched, a2a_s=a2a, a2a_hidden_s=hidden, ep_links=links,
        layout=layout_text(model, shape, sched), attention_share=attention_flops_share(model))


def runs(values) -> str:
    """``4*30,3*2``: runs of equal values."""
    out: list[list] = []
    for v in values:
        if out and out[-1][0] == v:
            out[-1][1] += 1
        else:
            out.append([v, 1])
    return ",".join(f"{v}*{n}" if n > 1 else str(v) for v, n in out)


def layout_text(model: TransformerModel, shape: Context, sched: Schedule) -> str:
    """The Megatron layout string of ``sched``'s first pipeline on ``shape``: its layout,
    else the even split of its stage work ("" when the stages outnumber the layers)."""
    from pipetab.hardware.layout import Layout

    if shape.layout is not None:
        return shape.layout.megatron()
    try:
        return Layout.even(model.num_layers, sched.stage_work[0], mtp=model.mtp_layers).megatron()
    except ValueError:
        return ""


def all_to_all_summary(sched: Schedule, costs) -> tuple[float, float]:
    """(seconds of expert-parallel all-to-all in one step, seconds of it hidden under other
    ops by the schedule's blocks) on the device with the most all-to-all (``Costs.chains``:
    an op's communication segments; a block hides its ops' sum less its time)."""
    if not costs.chains:
        return 0.0, 0.0
    comm = {key: sum(s for c, s in segs if c) for key, segs in costs.chains.items()}
    total = [0.0] * sched.num_devices
    for d, order in enumerate(sched.orders):
        total[d] = sum(comm.get((op.kind, op.pipeline, op.stage), 0.0) for op in order)
    hidden = [0.0] * sched.num_devices
    for block in sched.blocks:
        d = sched.device_of(block[0])
        hidden[d] += sum(costs.duration(op) for op in block) - costs.block_time(block)
    d = max(range(sched.num_devices), key=lambda i: total[i])
    return total[d], min(hidden[d], total[d])


def rank(configs) -> list[Configuration]:
    return sorted(configs, key=lambda c: (not c.fits, c.step_time_s, c.schedule))


_BAND = Path(__file__).with_name("fidelity_band.toml")


@lru_cache(maxsize=1)
def fidelity_band() -> float:
    """The relative error band of a step time (0.119 for +-11.9 %): the development set's
    leave-one-source-out error (``pipetab/plan/fidelity_band.toml``, written by
    ``python -m experiments.fidelity_band`` from refits without each source)."""
    with _BAND.open("rb") as f:
        return float(tomllib.load(f)["band_pct"]) / 100


def indistinguishable(configs, band: float | None = None) -> list[bool]:
    """Per ranked configuration, whether its step time differs from #1's by less than the
    band (``t_i <= t_1 * (1 + band)``, both fitting or both not); #1 is False."""
    b = fidelity_band() if band is None else band
    if not configs:
        return []
    first = configs[0].step_time_s
    return [i > 0 and c.fits == configs[0].fits and c.step_time_s <= first * (1 + b)
            for i, c in enumerate(configs)]
