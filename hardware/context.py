"""``Context``: every parallel and batching decision of one run, in one validated value.

A pipeline *device* is what runs one stage's ops: on a real cluster ``tp x cp`` GPUs (a
tensor-parallel group for each of ``cp`` context-parallel ranks, which split every sequence:
``hardware.cp``), the whole pipeline replicated ``dp`` ways for data parallelism (with ZeRO
stage ``zero`` sharding the optimizer state over the ``dp x cp`` GPUs holding the same
weights, the gradients too at stage 2, and the weights at stage 3: ``hardware.zero3``). Every front end
(the CLI's commands, sweeps, ``plan``) parses its options into a ``Context``; the cost
formulas (``hardware.layer``, ``hardware.costs``) take it. Defaults are derived here and
nowhere else:

* ``sequence_parallel``: on whenever ``tp > 1`` (Korthikanti et al. 2022);
* ``zero``: 1 (Megatron's distributed optimizer) whenever ``dp x cp > 1``, else 0;
* ``seq_len`` and ``global_batch``: the model's (``resolved``);
* ``microbatch_size``: ``global_batch / (dp x microbatches)``; given instead, the global
  batch is ``dp x microbatches x microbatch_size`` (``resolved``).

Expert parallelism (mixture-of-experts models; Megatron-Core's "MoE parallel folding"):
the ``tp x cp x dp`` GPUs of a pipeline stage are regrouped for the expert layers into ``etp``
(expert tensor parallelism) ``x ep`` (expert parallelism) ``x edp`` (expert data
parallelism, ``edp = tp * cp * dp / (ep * etp)``), ``etp`` fastest in the rank order. Each GPU
holds ``num_experts / ep`` experts split ``etp`` ways; tokens reach them by an all-to-all
(dispatch, and combine back) over the EP group (``hardware.moe``) in
``dispatch_precision``; expert gradients are reduced, and with ZeRO their optimizer state
sharded, over the ``edp`` ranks holding the same experts. ``routing_imbalance`` (busiest
rank's tokens / mean, >= 1) scales expert compute and all-to-all; ``node_limit`` routes
each token to experts on at most that many nodes (DeepSeek-V3's node-limited routing, 4).

Layers per stage: ``layout`` (``hardware.layout``: any number per stage, zero included,
embedding and head + loss explicit; None: the schedule's ``stage_work`` split evenly) and
``recompute_layers`` (per stage in pipeline order, how many of its layers recompute in
full, Megatron's ``--recompute-num-layers`` with the block method; the others follow
``recompute``).

Options that cannot apply are refused: sequence parallelism without tensor parallelism,
ZeRO without data or context parallelism, expert options on a dense model, a context-parallel
size not dividing the sequence into ``2 cp`` chunks (``check``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from pipetab.schedules.checks import check_count

from .layout import Layout, layout_of

MAX_IMBALANCE = 1024  # routing imbalance: the busiest EP rank's tokens / the mean is at most the EP degree

if TYPE_CHECKING:
    from .model import TransformerModel


class Recompute(StrEnum):
    """Activation recomputation: none, ``selective`` (the attention core; Korthikanti et
    al. 2022) or ``full`` (each layer's forward, keeping only its input)."""

    NONE = "none"
    SELECTIVE = "selective"
    FULL = "full"


ZERO_STAGES = (0, 1, 2, 3)


class CpComm(StrEnum):
    """How context-parallel ranks exchange keys and values (Megatron's ``--cp-comm-type``):
    ``p2p`` (a ring of point-to-point sends overlapped with attention) or ``allgather``
    (Llama 3: gathered before attention, not overlapped)."""

    P2P = "p2p"
    ALLGATHER = "allgather"


E = TypeVar("E", bound=StrEnum)


def _choice(kind: type[E], value: object, what: str) -> E:
    """``value`` as a member of the string enum ``kind``; ``ValueError`` naming ``what``
    and the choices otherwise."""
    if isinstance(value, str):  # a member is a str too
        try:
            return kind(value)
        except ValueError:
            pass
    raise ValueError(f"{what} must be one of {', '.join(kind)}, got {value!r}")


def cp_comm_of(value: object) -> CpComm:
    """``value`` as a ``CpComm``; ``ValueError`` naming the choices otherwise."""
    return _choice(CpComm, value, "cp comm")


class Precision(StrEnum):
    """Element format of the expert-parallel dispatch: ``bf16`` (2 bytes) or ``fp8`` (1
    byte plus a scale per 128 elements, as DeepSeek-V3 dispatches)."""

    BF16 = "bf16"
    FP8 = "fp8"

    @property
    def bytes_per_element(self) -> float:
        return 2.0 if self is Precision.BF16 else 1.0 + 4 / 128


def precision_of(value: object, what: str = "dispatch precision") -> Precision:
    """``value`` as a ``Precision``; ``ValueError`` naming ``what`` and the choices otherwise."""
    return _choice(Precision, value, what)


# Megatron-LM's ``--recompute-modules`` (with ``--recompute-granularity selective``): what
# each drops and recomputes is ``hardware.activations``'s table
RECOMPUTE_MODULES = ("core_attn", "layernorm", "mla_up_proj", "mlp", "moe", "moe_act", "shared_experts")


def recompute_modules_of(value: object) -> tuple[str, ...]:
    """``value`` (names, or one comma-separated string) as a sorted tuple of distinct
    ``RECOMPUTE_MODULES``; ``ValueError`` naming the allowed ones otherwise."""
    items = [v for v in value.split(",") if v] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or any(v not in RECOMPUTE_MODULES for v in items):
        raise ValueError(f"recompute modules must be among {', '.join(RECOMPUTE_MODULES)}, got {value!r}")
    return tuple(sorted(set(items), key=RECOMPUTE_MODULES.index))


def recompute_of(value: object) -> Recompute:
    """``value`` as a ``Recompute``; ``ValueError`` naming the choices otherwise."""
    return _choice(Recompute, value, "recompute")


# the default of a field ``Context`` derives (``sequence_parallel``, ``zero``): after
# construction the field holds the derived value, so it is typed as that value's type
DERIVED: Any = None


class Sizes(NamedTuple):
    """The batch sizes of a ``Context`` resolved for a step (``Context.sizes``), each known."""

    microbatch_size: int
    global_batch: int
    seq_len: int
    microbatches: int


@dataclass(frozen=True)
class Context:
    """The parallel and batching context of a run (module docstring): ``pp`` pipeline
    devices (None: as many as the schedule has), ``tp x cp`` GPUs per device, ``dp``
    replicas, ``sequence_parallel``, ZeRO stage ``zero`` (``reshard_after_forward`` at
    stage 3), ``overlap`` of the data-parallel reduction with the last backward,
    ``microbatch_size`` and ``global_batch`` in sequences, ``seq_len`` in tokens,
    ``recompute``, ``cp_comm``, ``layout``, ``recompute_layers``, ``gemm_precision`` (bf16,
    or fp8 GEMMs at the GPU's fp8 peak: ``hardware.kernels``), ``overlap_p2p`` (False: each
    pipeline send blocks its sender's compute, as Megatron-LM runs its send/receive pairs
    without ``--overlap-p2p-communication``; ``hardware.pipeline``), the memory techniques
    (``recompute_modules``, ``activation_precision``, ``offload_activations``: the share of
    each stage's saved activations moved to host memory and back). ``Context()`` is one GPU
    per stage and one replica."""

    tp: int = 1
    dp: int = 1
    pp: int | None = None
    sequence_parallel: bool = DERIVED
    zero: int = DERIVED
    overlap: bool = True
    microbatch_size: int | None = None
    global_batch: int | None = None
    seq_len: int | None = None
    recompute: Recompute = Recompute.NONE
    ep: int = 1
    etp: int = 1
    dispatch_precision: Precision = Precision.BF16
    routing_imbalance: float = 1.0
    node_limit: int | None = None
    gemm_precision: Precision = Precision.BF16
    cp: int = 1
    cp_comm: CpComm = CpComm.P2P
    reshard_after_forward: bool = True
    layout: Layout | None = None
    recompute_layers: tuple[int, ...] | None = None
    recompute_modules: tuple[str, ...] = ()
    activation_precision: Precision = Precision.BF16
    overlap_p2p: bool = True
    offload_activations: float = 0.0

    def __post_init__(self) -> None:
        for what in ("tp", "dp", "ep", "etp", "cp"):
            check_count(what, getattr(self, what))
        object.__setattr__(self, "cp_comm", cp_comm_of(self.cp_comm))
        object.__setattr__(self, "layout", layout_of(self.layout))
        if self.recompute_layers is not None:
            object.__setattr__(self, "recompute_layers", tuple(self.recompute_layers))
            for n in self.recompute_layers:
                check_count("recompute layers", n, 0)
        if self.node_limit is not None:
            check_count("node_limit", self.node_limit)
        imbalance = self.routing_imbalance
        if isinstance(imbalance, bool) or not isinstance(imbalance, (int, float)) or \
                not 1 <= imbalance <= MAX_IMBALANCE:
            raise ValueError(f"routing_imbalance must be a number from 1 to {MAX_IMBALANCE} (busiest rank's tokens "
                             f"/ mean: at most the EP degree), got {imbalance!r}")
        if (self.tp * self.cp * self.dp) % (self.ep * self.etp):
            what = f"tp x cp x dp ({self.tp} x {self.cp} x {self.dp})" if self.cp > 1 else \
                f"tp x dp ({self.tp} x {self.dp})"
            raise ValueError(f"ep x etp ({self.ep} x {self.etp}) must divide {what}, the GPUs of one pipeline stage")
        object.__setattr__(self, "dispatch_precision", precision_of(self.dispatch_precision))
        object.__setattr__(self, "gemm_precision", precision_of(self.gemm_precision, "gemm precision"))
        if self.pp is not None:
            check_count("pp", self.pp)
        for what in ("microbatch_size", "global_batch", "seq_len"):
            if getattr(self, what) is not None:
                check_count(what.replace("_", " "), getattr(self, what))
        if self.sequence_parallel is None:
            object.__setattr__(self, "sequence_parallel", self.tp > 1)
        if self.zero is None:
            object.__setattr__(self, "zero", 1 if self.replicas > 1 else 0)
        for what in ("sequence_parallel", "overlap", "reshard_after_forward", "overlap_p2p"):
            if not isinstance(getattr(self, what), bool):
                raise ValueError(f"{what} must be true or false, got {getattr(self, what)!r}")
        if self.zero not in ZERO_STAGES or isinstance(self.zero, bool):
            raise ValueError(f"zero must be one of 0, 1, 2, 3, got {self.zero!r}")
        if self.sequence_parallel and self.tp == 1:
            raise ValueError("sequence parallelism applies with tp > 1 only")
        if self.zero and self.replicas == 1:
            raise ValueError(f"ZeRO stage {self.zero} applies with dp > 1 (or cp > 1) only")
        object.__setattr__(self, "recompute", recompute_of(self.recompute))
        self._check_memory_techniques()

    def _check_memory_techniques(self) -> None:
        """Recompute modules, FP8 activation caching and activation offload (``offload_activations``:
        the share of each stage's saved activations copied to host memory after its forward and
        back before its backward, on a copy stream: ``solver.offload``), refused where they do
        not apply."""
        object.__setattr__(self, "recompute_modules", recompute_modules_of(self.recompute_modules))
        if self.recompute_modules and self.recompute is Recompute.FULL:
            raise ValueError("recompute modules apply with selective or no recomputation, not with full")
        object.__setattr__(self, "activation_precision", precision_of(self.activation_precision,
                                                                      "activation precision"))
        if self.activation_precision is Precision.FP8 and self.gemm_precision is not Precision.FP8:
            raise ValueError("activation precision fp8 (GEMM inputs cached in fp8) applies with gemm precision "
                             "fp8 only")
        f = self.offload_activations
        if isinstance(f, bool) or not isinstance(f, (int, float)) or not 0 <= f <= 1:
            raise ValueError(f"offload activations must be a fraction from 0 to 1 (of each stage's saved "
                             f"activations), got {f!r}")
        object.__setattr__(self, "offload_activations", float(f))

    @property
    def memory_techniques(self) -> tuple[str, ...]:
        """The memory techniques this context uses, as a ranking row names them:
        ``recompute=full``, ``recompute=core_attn+layernorm``, ``fp8-cache``, ``ZeRO-2``..."""
        out = []
        if self.recompute is Recompute.FULL:
            out.append("recompute=full")
        modules = self.recompute_modules + (("core_attn",) if self.recompute is Recompute.SELECTIVE
                                            and "core_attn" not in self.recompute_modules else ())
        if modules:
            out.append("recompute=" + "+".join(sorted(modules, key=RECOMPUTE_MODULES.index)))
        if self.recompute_layers and any(self.recompute_layers):
            out.append("recompute-layers=" + ",".join(map(str, self.recompute_layers)))
        if self.activation_precision is Precision.FP8:
            out.append("fp8-cache")
        if self.offload_activations:
            out.append(f"offload={self.offload_activations:g}")
        return tuple(out)

    def replace(self, **changes) -> "Context":
        """A copy with ``changes``; derived defaults (``None``) are derived again."""
        return replace(self, **changes)

    @property
    def even(self) -> "Context":
        """This run on the even split: no layout, no per-stage recomputation (what the
        refinements of one shape share)."""
        return self.replace(layout=None, recompute_layers=None)

    # ---- batch ------------------------------------------------------------------------
    @property
    def edp(self) -> int:
        """Expert data-parallel degree: replicas of each expert, ``tp * cp * dp / (ep * etp)``."""
        return self.tp * self.cp * self.dp // (self.ep * self.etp)

    @property
    def replicas(self) -> int:
        """GPUs holding the same dense weights: ``dp x cp`` (context-parallel ranks hold the
        same layers; Megatron reduces and shards over the data-parallel group with CP)."""
        return self.dp * self.cp

    @property
    def expert_parallel(self) -> bool:
        """Whether any expert option departs from its default."""
        return (self.ep, self.etp, self.dispatch_precision, self.routing_imbalance,
                self.node_limit) != (1, 1, Precision.BF16, 1.0, None)

    @property
    def sizes(self) -> Sizes:
        """``microbatch_size``, ``global_batch``, ``seq_len`` and the microbatches of a context
        resolved for a step (``resolved``); ``ValueError`` naming what is not known otherwise."""
        b, gb, seq = self.microbatch_size, self.global_batch, self.seq_len
        if b is None or gb is None or seq is None:
            unknown = [k for k, v in (("microbatch_size", b), ("global_batch", gb), ("seq_len", seq)) if v is None]
            raise ValueError(f"context {self.label} is not resolved for a step: {', '.join(unknown)} not known")
        return Sizes(b, gb, seq, gb // (self.dp * b))

    @property
    def stages(self) -> int:
        """``pp`` where it is known (a shape of ``plan``); ``ValueError`` otherwise."""
        if self.pp is None:
            raise ValueError(f"context {self.label} has no pipeline depth (pp) yet")
        return self.pp

    @property
    def microbatches(self) -> int | None:
        """Microbatches per replica, ``global_batch / (dp x microbatch_size)`` (None until
        both are known)."""
        if self.global_batch is None or self.microbatch_size is None:
            return None
        return self.global_batch // (self.dp * self.microbatch_size)

    def resolved(self, model: TransformerModel, microbatches: int) -> "Context":
        """This context for a step of ``microbatches`` microbatches per replica of ``model``:
        ``seq_len``, ``global_batch`` and ``microbatch_size`` all known (module docstring);
        ``ValueError`` when they disagree or the batch does not split evenly."""
        check_count("microbatches", microbatches)
        seq = self.seq_len or model.seq_len
        per_step = self.dp * microbatches
        b, gb = self.microbatch_size, self.global_batch
        if b is None:
            gb = gb or model.global_batch
            if gb % per_step:
                raise ValueError(f"global batch {gb} of model {model.name!r} cannot be split into "
                                 f"{per_step} equal microbatches")
            b = gb // per_step
        elif gb is None:
            gb = per_step * b
        elif gb != per_step * b:
            raise ValueError(f"global batch {gb} must be dp x microbatches x microbatch size = "
                             f"{self.dp} x {microbatches} x {b} = {per_step * b}")
        return replace(self, seq_len=seq, global_batch=gb, microbatch_size=b)

    def apply(self, model: TransformerModel) -> TransformerModel:
        """``model`` with this context's sequence length and global batch (when set)."""
        seq_len = model.seq_len if self.seq_len is None else self.seq_len
        global_batch = model.global_batch if self.global_batch is None else self.global_batch
        if (seq_len, global_batch) == (model.seq_len, model.global_batch):
            return model
        return replace(model, seq_len=seq_len, global_batch=global_batch)

    # ---- tensor parallelism --------------------------------------------------------------
    def check(self, model: TransformerModel) -> None:
        """``ValueError`` unless ``tp`` splits the model's heads and MLP evenly, ``cp`` its
        sequence and the expert options and layout fit the model (module docstring)."""
        self.check_experts(model)
        self.check_sequence(model)
        t = self.tp
        ffn, kv_heads = model.ffn_hidden or 0, model.kv_heads or model.heads  # derived by the model: never None
        if model.heads % t or ffn % t:
            raise ValueError(
                f"tp {t} must divide the heads ({model.heads}) and the MLP size "
                f"({model.ffn_hidden}) of model {model.name!r}"
            )
        if kv_heads % t and t % kv_heads:
            raise ValueError(
                f"tp {t} and the kv_heads ({model.kv_heads}) of model {model.name!r} must "
                "divide one another"
            )

    def check_sequence(self, model: TransformerModel) -> None:
        """``ValueError`` unless ``cp`` splits the sequence into ``2 cp`` equal chunks (the
        causal load balancing of ``hardware.cp``) and the layout splits ``model``."""
        seq = self.seq_len or model.seq_len
        if self.cp > 1 and seq % (2 * self.cp):
            raise ValueError(f"cp {self.cp} must split the sequence of {seq} tokens into 2 x cp = {2 * self.cp} "
                             "equal chunks (causal load balancing)")
        if self.layout is not None:
            self.layout.check(model)

    def check_experts(self, model: TransformerModel) -> None:
        """``ValueError`` unless the expert options apply to ``model`` and divide it."""
        if not model.moe:
            if self.expert_parallel:
                raise ValueError(f"ep, etp, dispatch precision, routing imbalance and node limit apply to "
                                 f"mixture-of-experts models only; {model.name!r} is dense")
            return
        if model.num_experts % self.ep:
            raise ValueError(f"ep {self.ep} must divide the {model.num_experts} experts of model {model.name!r}")
        if (model.expert_ffn_hidden or 0) % self.etp:  # a mixture-of-experts model has it
            raise ValueError(f"etp {self.etp} must divide the expert MLP size ({model.expert_ffn_hidden}) "
                             f"of model {model.name!r}")
        if self.tp > 1 and not self.sequence_parallel:
            raise ValueError("mixture-of-experts layers with tp > 1 need sequence parallelism (as Megatron-Core)")

    # ---- data parallelism and ZeRO ---------------------------------------------------------
    def persistent_bytes(self, model: TransformerModel, params: int, expert_params: int = 0) -> int:
        """Weights, gradients and optimizer state of ``params`` parameters on one GPU
        (``expert_params`` of them routed-expert weights), sharded by ZeRO among the
        ``dp x cp`` replicas (the ``edp`` replicas for expert weights; rounded up): the
        optimizer state from stage 1, the gradients from 2, the weights at 3 (whose
        gathered working copy is ``hardware.zero3``'s)."""
        dense = params - expert_params
        return self._persistent(model, dense, self.replicas) + self._persistent(model, expert_params, self.edp)

    def _persistent(self, model: TransformerModel, params: int, replicas: int) -> int:
        zero = self.zero
        grad_shards = replicas if zero >= 2 else 1
        state_shards = replicas if zero >= 1 else 1
        weights = params * model.bytes_per_param_compute
        return ((math.ceil(weights / replicas) if zero >= 3 else weights)
                + math.ceil(params * model.bytes_per_grad / grad_shards)
                + math.ceil(params * model.bytes_per_optimizer_state / state_shards))

    def updated_params(self, params: int, expert_params: int = 0) -> int:
        """Parameters whose optimizer step one GPU runs (its ZeRO shards)."""
        if not self.zero:
            return params
        return math.ceil((params - expert_params) / self.replicas) + math.ceil(expert_params / self.edp)

    # ---- labels --------------------------------------------------------------------------
    @property
    def parallel_label(self) -> str:
        """``TP8 DP2 SP ZeRO-1``: the parallel split within a pipeline device and across
        replicas (``CP2`` after the TP when context-parallel)."""
        parts = [f"TP{self.tp}", *([f"CP{self.cp}"] if self.cp > 1 else []), f"DP{self.dp}"]
        if self.sequence_parallel:
            parts.append("SP")
        if self.ep > 1 or self.etp > 1:
            parts.append(f"EP{self.ep}" + (f" ETP{self.etp}" if self.etp > 1 else ""))
        if self.zero:
            parts.append(f"ZeRO-{self.zero}")
        return " ".join(parts)

    @property
    def label(self) -> str:
        """``PP2 TP8 DP2 b=1`` (``ZeRO-3`` and the like where ZeRO is not stage 1): the
        shape of the run (what is known of it)."""
        parts = ([f"PP{self.pp}"] if self.pp else []) + [f"TP{self.tp}", *([f"CP{self.cp}"] if self.cp > 1 else []),
                                                          f"DP{self.dp}"]
        if self.ep > 1 or self.etp > 1:
            parts.append(f"EP{self.ep}" + (f" ETP{self.etp}" if self.etp > 1 else ""))
        if self.zero != 1:  # ZeRO-1 is the default every shape assumes
            parts.append(f"ZeRO-{self.zero}")
        if self.microbatch_size is not None:
            parts.append(f"b={self.microbatch_size}")
        return " ".join(parts)

    def as_dict(self) -> dict:
        """Plain data (JSON, sweep rows): every field, enums as their strings, the layout as
        Megatron's string, tuples as lists (``recompute_modules`` comma-separated)."""
        out: dict = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, StrEnum):
                value = str(value)
            elif isinstance(value, Layout):
                value = value.megatron()
            elif f.name == "recompute_modules":
                value = ",".join(value)
            elif isinstance(value, tuple):
                value = list(value)
            out[f.name] = value
        return {"pp": out.pop("pp"), **out}  # the pipeline first, as sweep rows have it
