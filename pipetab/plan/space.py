"""The question ``plan`` answers: a model, a cluster and a global batch (``PlanSpace``), and
the shapes it enumerates: each a resolved ``hardware.Context`` (a (PP, TP, CP, DP) split,
PP = 1 included; for a mixture-of-experts model an (EP, ETP) regrouping of each stage's
GPUs; ZeRO 1 or 3; microbatch size and count, recomputation, and the space's switches).

Context parallelism is enumerated for long sequences (``CP_FROM_TOKENS`` and more: every
power of two dividing the GPUs left by TP that leaves each rank ``CP_MIN_TOKENS``);
``pp``, ``tp``, ``cp``, ``dp`` and ``ep`` pin their dimension to the values given.
``notes`` says which dimensions were not considered and why."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from pipetab.hardware.context import Context, Recompute, cp_comm_of, precision_of, recompute_of
from pipetab.hardware.decisions import ContextSpace
from pipetab.hardware.layer import attention_flops_share
from pipetab.hardware.loaders import load_model, load_system
from pipetab.hardware.system import System
from pipetab.schedules import registry
from pipetab.schedules.checks import check_count

if TYPE_CHECKING:
    from pipetab.hardware.model import TransformerModel
    from pipetab.schedules.schedule import Schedule

GPUS = {"H100": "dgx_h100_ib", "A100": "a100_cluster"}
# registry schedules with more than their default options
VARIANTS: dict[str, tuple[dict, ...]] = {
    "interleaved": ({"chunks": 2}, {"chunks": 4}),
    "hanayo": ({"waves": 1}, {"waves": 2}),
}
# for mixture-of-experts models: the schedules that overlap the all-to-all, with and without
MOE_VARIANTS: dict[str, tuple[dict, ...]] = {
    "interleaved": tuple({"chunks": v, "overlap": o} for v in (2, 4) for o in (True, False)),
    "dualpipe": ({"overlap": True}, {"overlap": False}),
    "dualpipev": ({"overlap": True}, {"overlap": False}),
}
# registry schedules left out of the default search: their generator (the authors' greedy)
# takes time growing with stages^2 x microbatches (``ScheduleSpec.slow_generator``); give them with ``schedules``
NOT_BY_DEFAULT = tuple(n for n, spec in registry.REGISTRY.items() if spec.slow_generator)
MAX_TOKENS_PER_MICROBATCH = 32768  # default microbatch sizes: powers of two up to this many tokens
CP_FROM_TOKENS = 16384  # context parallelism is tried for sequences of at least this many tokens
CP_MIN_TOKENS = 4096  # ... down to this many tokens per context-parallel rank


def schedule_label(name: str, options: dict) -> str:
    """``interleaved(chunks=4)``, ``chimera-asym(split=1:2)``, ``1f1b``,
    ``dualpipe(overlap=False)`` (``overlap`` only where it is not the schedule's default)."""
    def text(v):
        return ":".join(map(str, v)) if isinstance(v, tuple) else str(v)

    defaults = {o.name: o.default for o in registry.spec(name).options} if name in registry.REGISTRY else {}
    shown = {k: v for k, v in options.items() if not (k == "overlap" and defaults.get(k) == v)}
    opts = ",".join(f"{k}={text(v)}" for k, v in sorted(shown.items()))
    return f"{name}({opts})" if opts else name


def cluster(gpu_or_system: str | System, nodes: int, gpus_per_node: int) -> System:
    """``nodes`` nodes of ``gpus_per_node`` GPUs: the device, intra-node and inter-node links
    of a GPU name (``GPUS``), a system preset or file, and its ``fabric`` (as many NICs per GPU);
    ``num_devices = nodes x gpus_per_node``."""
    check_count("nodes", nodes)
    check_count("gpus per node", gpus_per_node)
    if isinstance(gpu_or_system, str) and gpu_or_system.upper() in GPUS:
        gpu_or_system = GPUS[gpu_or_system.upper()]
    base = load_system(gpu_or_system)
    intra = base.intra_node_link or base.default_link
    fabric = base.fabric
    if fabric is not None and base.devices_per_node != gpus_per_node:  # as many NICs per GPU as the preset
        fabric = replace(fabric, nics_per_node=max(1, fabric.nics_per_node * gpus_per_node
                                                   // (base.devices_per_node or gpus_per_node)))
    return System(f"{nodes}x{gpus_per_node} {base.name}", base.device, base.default_link,
                  nodes * gpus_per_node, (), gpus_per_node, intra, base.summary, host_link=base.host_link,
                  fabric=fabric)


@dataclass(frozen=True)
class PlanSpace(ContextSpace):
    """The question: ``model`` with ``global_batch`` sequences per step on ``system`` (a
    ``cluster``), the context to search (``hardware.ContextSpace``'s fields, given by
    keyword) and ``plan``'s own knobs. Empty tuples mean the defaults: microbatch sizes
    powers of two up to ``MAX_TOKENS_PER_MICROBATCH`` tokens, every recompute option
    (``selective`` only with classic attention), every registry schedule. ``refine``: try
    uneven layouts and per-stage recomputation on the best (``refine``)."""

    model: TransformerModel
    system: System
    global_batch: int
    schedules: tuple[str, ...] = ()
    top: int = 10
    cpsat_shapes: int = 2
    cpsat_time_s: float = 3.0
    refine: bool = True

    def __post_init__(self) -> None:
        check_count("global batch", self.global_batch)
        check_count("top", self.top)
        super().__post_init__()
        fp8 = precision_of(self.gemm_precision, "gemm precision") == "fp8"
        if fp8 and not (self.system.device.kernels and self.system.device.fp8_peak_flops):
            raise ValueError(f"gemm precision fp8 needs a system priced by its kernels with an fp8 peak; "
                             f"{self.system.name!r} has none")
        if not self.model.moe and self.expert_parallel:
            raise ValueError(f"ep, etp, dispatch precision, routing imbalance and node limit apply to "
                             f"mixture-of-experts models only; {self.model.name!r} is dense")
        for e in self.ep:
            if self.model.num_experts % e:
                raise ValueError(f"ep {e} must divide the {self.model.num_experts} experts of {self.model.name!r}")
            if self.system.num_devices is not None and self.system.num_devices % e:
                raise ValueError(f"--ep {e} must divide the cluster's {self.system.num_devices} GPUs (ep x etp "
                                 "divides the GPUs of a pipeline stage)")
        for t in self.etp:
            if (self.model.expert_ffn_hidden or 0) % t:
                raise ValueError(f"--etp {t} must divide the expert MLP size ({self.model.expert_ffn_hidden}) of "
                                 f"{self.model.name!r}")
        if self.system.num_devices is None or self.system.devices_per_node is None:
            raise ValueError("plan needs a cluster with a number of GPUs and GPUs per node (use plan.cluster)")
        for name in self.schedules:
            registry.spec(name)
        self._check_pins()
        no_cp = self.cp == (1,) or (not self.cp and self.model.seq_len < CP_FROM_TOKENS)
        if not self.reshard_after_forward and self.zero is not None and self.zero != 3:
            raise ValueError(f"--no-reshard-after-forward applies with ZeRO-3 only, and --zero {self.zero} is pinned")
        if self.cp_comm != "p2p" and no_cp:
            raise ValueError("--cp-comm applies with context parallelism only: " +
                             ("--cp 1 is pinned" if self.cp else f"CP is not tried on sequences of "
                              f"{self.model.seq_len} tokens (from {CP_FROM_TOKENS}); give --cp"))
        if self.zero is not None and self.dp == (1,) and no_cp:
            raise ValueError("--zero applies with --dp > 1 or --cp > 1 only: --dp 1 leaves no replicas, and CP "
                             + ("is pinned to 1" if self.cp else f"is not tried on sequences of {self.model.seq_len} "
                                f"tokens (from {CP_FROM_TOKENS})"))
        if self.offload_activations and self.system.host_link is None:
            raise ValueError(f"--offload-activations needs a system with a host link (a [host_link] table); "
                             f"{self.system.name!r} has none")
        if not (isinstance(self.cpsat_shapes, int) and self.cpsat_shapes >= 0):
            raise ValueError(f"cpsat shapes must be an integer >= 0, got {self.cpsat_shapes!r}")
        if not (math.isfinite(self.cpsat_time_s) and self.cpsat_time_s > 0):
            raise ValueError(f"cpsat time must be a number of seconds > 0, got {self.cpsat_time_s!r}")

    def _check_pins(self) -> None:
        """``ValueError`` naming the pin when a pinned degree cannot split the cluster."""
        n, per_node = self.num_gpus, self.gpus_per_node
        for what in ("pp", "tp", "cp", "dp"):  # each an integer >= 1 (ContextSpace)
            for v in getattr(self, what):
                if n % v:
                    raise ValueError(f"--{what} {v} must divide the cluster's {n} GPUs")
        for v in self.tp:
            if per_node % v:
                raise ValueError(f"--tp {v} must divide the {per_node} GPUs of a node (TP stays inside a node)")
        pinned = [(w, getattr(self, w)[0]) for w in ("pp", "tp", "cp", "dp") if len(getattr(self, w)) == 1]
        product = math.prod(v for _, v in pinned)
        if 1 < len(pinned) < 4 and n % product:  # all four: they must make the cluster (below)
            raise ValueError(f"{' x '.join(f'--{w} {v}' for w, v in pinned)} = {product} GPUs must divide the "
                             f"cluster's {n}")
        if all(len(getattr(self, w)) == 1 for w in ("pp", "tp", "cp", "dp")):
            total = self.pp[0] * self.tp[0] * self.cp[0] * self.dp[0]
            if total != n:
                raise ValueError(f"--pp {self.pp[0]} x --tp {self.tp[0]} x --cp {self.cp[0]} x --dp {self.dp[0]} = "
                                 f"{total} GPUs, the cluster has {n}")
        for v in self.cp:
            if self.model.seq_len % (2 * v):
                raise ValueError(f"--cp {v} must split the sequence of {self.model.seq_len} tokens into 2 x cp = "
                                 f"{2 * v} equal chunks")
        for v in self.pp:
            if v > self.model.num_layers:
                raise ValueError(f"--pp {v} is more stages than the {self.model.num_layers} layers of "
                                 f"{self.model.name!r}")

    @property
    def num_gpus(self) -> int:
        """GPUs of the cluster."""
        return _known(self.system.num_devices)

    @property
    def gpus_per_node(self) -> int:
        """GPUs of one node."""
        return _known(self.system.devices_per_node)

    def cps(self, tp: int) -> tuple[int, ...]:
        """Context-parallel degrees with tensor parallelism ``tp``: the pinned ones, else 1
        and, for sequences of ``CP_FROM_TOKENS`` tokens or more, every power of two
        dividing the GPUs left by TP that leaves ``CP_MIN_TOKENS`` tokens per rank."""
        if self.cp:
            return self.cp
        seq, left = self.model.seq_len, self.num_gpus // tp
        out, c = [1], 2
        while seq >= CP_FROM_TOKENS and left % c == 0 and seq % (2 * c) == 0 and seq // c >= CP_MIN_TOKENS:
            out.append(c)
            c *= 2
        return tuple(out)

    def notes(self) -> tuple[str, ...]:
        """What the space leaves out and why (``plan`` prints them)."""
        m, out = self.model, []
        share = attention_flops_share(m)
        if share >= 0.2:
            out.append(f"MFU counts attention unmasked (Megatron-LM's and torchtitan's convention): at {m.seq_len} "
                       f"tokens attention is {share:.0%} of the model FLOPs; 'MFU causal' counts causal attention "
                       f"as half (every MFU times {1 - share / 2:.2f})")
        for what in ("pp", "tp", "cp", "dp"):
            if getattr(self, what):
                out.append(f"{what.upper()} pinned to {', '.join(map(str, getattr(self, what)))}")
        if self.cp == (1,) and m.seq_len >= CP_FROM_TOKENS:
            out.append(f"CP pinned to 1: each GPU runs whole sequences of {m.seq_len} tokens")
        elif not self.cp and m.seq_len < CP_FROM_TOKENS:
            out.append(f"CP not considered: sequences of {m.seq_len} tokens (tried from {CP_FROM_TOKENS})")
        if not m.moe:
            out.append("EP not considered: dense model")
        elif self.ep == (1,):
            out.append("EP pinned to 1: every GPU holds every expert")
        if m.moe and not self.etp:
            out.append("ETP 1 only (give --etp to try more)")
        if self.zero is not None:
            out.append(f"ZeRO pinned to {self.zero}")
        if not self.schedules:
            out.append(f"{' and '.join(NOT_BY_DEFAULT)} not considered: their generator's time grows with "
                       "stages^2 x microbatches (give --schedules to try them)")
        free = [t for t, on in (("ZeRO-2", self.zero is None), ("FP8 caching of GEMM inputs",
                                                                self.gemm_precision == "fp8")) if on]
        if self.offloads():
            free.append(f"activation offload of {' then '.join(f'{f:g}' for f in self.offloads())} of each "
                        "activation over the host link (beside the recompute modules: the faster step wins)")
        elif self.offload_activations is not None:
            out.append(f"activation offload pinned to {self.offload_activations:g} of each activation")
        out.append("memory techniques where no schedule of a shape fits without them, cheapest first: "
                   + ", ".join(free) + (", then " if free else "")
                   + f"recompute modules one by one (those of {', '.join(MODULE_LADDER)} the model has)")
        out.append("layouts: even split; uneven ones (end stages lighter) and per-stage recomputation tried on "
                   "the 3 best" if self.refine else "layouts: even split only")
        return tuple(out)

    def offloads(self) -> tuple[float, ...]:
        """The shares of each activation the rescue ladder offloads (``OFFLOAD_LADDER``): none
        when the space pins one (``offload_activations``) or the system has no host link."""
        return OFFLOAD_LADDER if self.offload_activations is None and self.system.host_link is not None else ()

    def sizes(self) -> tuple[int, ...]:
        if self.microbatch_sizes:
            return self.microbatch_sizes
        out, b = [], 1
        while b * self.model.seq_len <= MAX_TOKENS_PER_MICROBATCH and b <= self.global_batch:
            out.append(b)
            b *= 2
        return tuple(out) or (1,)

    def recomputes(self) -> tuple[str, ...]:
        if self.recompute:
            return self.recompute
        return tuple(r for r in Recompute if not (r is Recompute.SELECTIVE and self.model.attention == "flash"))

    def variants(self) -> list[tuple[str, dict]]:
        """(schedule, options) pairs: each registry schedule with its default options, or the
        ``VARIANTS`` listed for it (``MOE_VARIANTS`` first for a mixture-of-experts model:
        each overlapping schedule with and without its overlap)."""
        names = self.schedules or tuple(n for n in registry.REGISTRY if n not in NOT_BY_DEFAULT)
        table = {**VARIANTS, **MOE_VARIANTS} if self.model.moe else VARIANTS
        out = []
        for n in names:
            defaults = {o.name: o.default for o in registry.spec(n).options}
            out += [(n, {**defaults, **o}) for o in table.get(n, ({},))]
        return out

    def expert_splits(self, tp: int, dp: int, cp: int = 1) -> list[tuple[int, int]]:
        """(ep, etp) regroupings of a stage's ``tp x cp x dp`` GPUs for the experts: ``ep``
        dividing the expert count (the given ones, else every such divisor), ``etp`` 1 (or
        the given ones) dividing ``tp`` and the expert MLP; (1, 1) for a dense model."""
        m = self.model
        if not m.moe:
            return [(1, 1)]
        eps = self.ep or tuple(_divisors(m.num_experts))
        etps = self.etp or (1,)
        return [(e, t) for e in eps for t in etps
                if (tp * cp * dp) % (e * t) == 0 and tp % t == 0 and (m.expert_ffn_hidden or 0) % t == 0]


def _known(count: int | None) -> int:
    """A cluster's count (``PlanSpace`` refuses a system without it)."""
    if count is None:
        raise ValueError("plan needs a cluster with a number of GPUs and GPUs per node (use plan.cluster)")
    return count


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def shape(space: PlanSpace, pp: int, tp: int, dp: int, microbatch_size: int, recompute: str,
          ep: int = 1, etp: int = 1, cp: int = 1, zero: int | None = None) -> Context:
    """The resolved context of one shape of ``space`` (its switches applied where they
    apply: sequence parallelism with TP > 1, ZeRO and overlap with DP x CP > 1, the expert
    options with a mixture-of-experts model); ``zero`` None: the space's (or its default)."""
    zero = space.zeros(dp * cp)[0] if zero is None else zero
    ctx = Context(tp=tp, dp=dp, pp=pp, cp=cp, sequence_parallel=tp > 1 and space.sequence_parallel,
                  zero=zero if dp * cp > 1 else 0, overlap=space.overlap, overlap_p2p=space.overlap_p2p,
                  microbatch_size=microbatch_size,
                  global_batch=space.global_batch, seq_len=space.model.seq_len, recompute=recompute_of(recompute),
                  cp_comm=cp_comm_of(space.cp_comm if cp > 1 else "p2p"),
                  reshard_after_forward=space.reshard_after_forward if zero == 3 else True,
                  gemm_precision=precision_of(space.gemm_precision, "gemm precision"),
                  offload_activations=space.offload_activations or 0.0)
    if not space.model.moe:
        return ctx
    return ctx.replace(ep=ep, etp=etp, dispatch_precision=precision_of(space.dispatch_precision),
                       routing_imbalance=space.routing_imbalance, node_limit=space.node_limit)


def _splits(space: PlanSpace) -> list[tuple[int, int, int, int]]:
    """Every (pp, tp, cp, dp) of the cluster: TP inside a node dividing the model, the pins
    (``PlanSpace``), PP at most the layers (PP = 1 included)."""
    model, per_node, n = space.model, space.gpus_per_node, space.num_gpus
    out = []
    for tp in space.tp or _divisors(per_node):
        try:
            Context(tp=tp, sequence_parallel=tp > 1 and space.sequence_parallel).check(model)
        except ValueError:
            continue
        for cp in space.cps(tp):
            if n % (tp * cp):
                continue
            for pp in _divisors(n // (tp * cp)):
                dp = n // (tp * cp * pp)
                if pp <= model.num_layers and (not space.pp or pp in space.pp) and (not space.dp or dp in space.dp):
                    out.append((pp, tp, cp, dp))
    return out


def shapes(space: PlanSpace) -> list[Context]:
    """Every (pp, tp, cp, dp) split (``_splits``), every (ep, etp) regrouping for the
    experts (``PlanSpace.expert_splits``), ZeRO 1 and 3 with replicas (``zeros``), and
    every microbatch size and recompute option the global batch allows."""
    out = []
    for pp, tp, cp, dp in _splits(space):
        for ep, etp in space.expert_splits(tp, dp, cp):
            for zero in space.zeros(dp * cp):
                for b in space.sizes():
                    if space.global_batch % (dp * b):
                        continue
                    for rc in space.recomputes():
                        out.append(shape(space, pp, tp, dp, b, rc, ep, etp, cp, zero))
    return out


# recompute modules in the order plan adds them where a shape does not fit: the cheapest
# recomputation per byte freed first (norms are memory-bound passes; MLA's up-projections
# and the experts' activation small GEMMs or elementwise work; then the attention core, the
# shared experts, a dense MLP and a whole MoE block)
MODULE_LADDER = ("layernorm", "mla_up_proj", "moe_act", "core_attn", "shared_experts", "mlp", "moe")
# shares of each activation plan offloads to host memory where a shape does not fit otherwise
# (after the free techniques; each enters beside the first recompute rung, since offload costs
# no compute but the copies the stream cannot hide, which each candidate's simulation counts)
OFFLOAD_LADDER = (0.5, 1.0)


def rescues(space: PlanSpace, shape: Context) -> list[Context]:
    """The memory techniques ``plan`` tries, cheapest first, on a shape none of whose
    schedules fits without them (``search``): ZeRO-2 in place of ZeRO-1 and FP8 caching of
    the GEMM inputs (with fp8 GEMMs), free in step time, alone and together; then both with
    activation offload of each share of ``OFFLOAD_LADDER`` (``PlanSpace.offloads``: on a
    system with a host link, unless the space pins it); then both with the recompute modules
    of ``MODULE_LADDER`` added one by one (those the model has). Only from a shape with no
    recomputation and no technique of its own; ZeRO, the recomputation and the offload the
    space pins are kept."""
    m = space.model
    if shape.recompute is not Recompute.NONE or shape.replace(offload_activations=0.0).memory_techniques:
        return []
    free: list[dict] = []
    if shape.zero == 1 and space.zero is None:
        free.append({"zero": 2})
    if shape.gemm_precision == "fp8":
        free.append({"activation_precision": "fp8"})
    rungs = free + ([{**free[0], **free[1]}] if len(free) == 2 else [])
    both = {k: v for r in free for k, v in r.items()}
    rungs += [{**both, "offload_activations": f} for f in space.offloads()]
    has = {"mla_up_proj": m.mla, "moe_act": m.moe, "shared_experts": m.moe and m.shared_experts > 0,
           "mlp": m.num_layers > m.moe_layers_in(0, m.num_layers), "moe": m.moe}
    modules: list[str] = []
    for name in MODULE_LADDER:
        if has.get(name, True):
            modules.append(name)
            rungs.append({**both, "recompute_modules": tuple(modules)})
    return [shape.replace(**r) for r in rungs]


def costs_of(space: PlanSpace, sched: Schedule, shape: Context):
    """``hardware_costs`` of ``sched`` on ``shape`` (its context)."""
    from pipetab.solver.pricing import hardware_costs

    return hardware_costs(sched, space.system, space.model, shape)


def plan_question(model: str | TransformerModel, nodes: int, gpus_per_node: int, global_batch: int,
                  gpu: str = "H100", seq_len: int | None = None, **options) -> PlanSpace:
    """A ``PlanSpace`` from plain arguments: model preset or file, cluster size, GPU name or
    system, global batch in sequences, optional sequence length; ``options`` are the other
    ``PlanSpace`` fields."""
    m = load_model(model)
    if seq_len is not None:
        check_count("sequence length", seq_len)
        m = replace(m, seq_len=seq_len)
    return PlanSpace(m, cluster(gpu, nodes, gpus_per_node), global_batch, **options)
