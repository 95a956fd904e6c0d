"""Each decision of a run's ``Context`` declared once, with what every front end needs of it.

A ``Decision`` names one field of ``hardware.Context`` and says: its kind and range (or
choices), its help text, which commands take it and under which flag, when it applies,
how ``pipetab plan`` enumerates it (``Enumerate``), its key in a sweep file and its names
in Megatron-LM and torchtitan; its default is ``Context``'s (``DERIVED`` where ``Context``
derives it). ``DECISIONS`` lists them all,
in the order the command line reports them; from it are generated the real-cluster options
of ``evaluate``, ``view``, ``search`` and ``bound`` (``pipetab.cli.hardware_args``), those
of ``plan`` and the fields its ``ContextSpace`` enumerates, and the ``[grid.cluster]`` keys of
a sweep (``pipetab.sweep.config``). (The idea is Megatron-LM's ``ArgumentGroupFactory``,
which makes command-line options of a config dataclass's fields.)

``ContextSpace`` is the question a ``plan`` asks of the context: for each decision ``plan``
enumerates, the candidates to try (an empty tuple: every value that applies) or the one value
pinned; a ``Context`` is one resolved answer.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from pipetab.schedules.checks import check_count
from pipetab.schedules.limits import SIZE_LIMITS

from .context import MAX_IMBALANCE, Context, CpComm, Precision, Recompute, cp_comm_of, precision_of

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

# sizes of the real-cluster options (docs/limits.md): beyond them no cluster exists, and the
# arithmetic of a step would only hang or overflow
# the command line's caps: schedules.limits' one table of sizes, read wherever a size is
MAX_TP = SIZE_LIMITS["tp"]
MAX_GPUS = SIZE_LIMITS["gpus"]  # GPUs of one run (stages x tp x dp)
MAX_MICROBATCH_SIZE = SIZE_LIMITS["microbatch_size"]  # sequences
MAX_GLOBAL_BATCH = SIZE_LIMITS["global_batch"]  # sequences
MAX_SEQ = SIZE_LIMITS["seq_len"]  # tokens per sequence

_CONTEXT_DEFAULTS = {f.name: f.default for f in fields(Context)}
RUN_COMMANDS = frozenset({"evaluate", "view", "search", "bound"})  # one schedule, one context
ALL_COMMANDS = RUN_COMMANDS | {"plan"}


class Enumerate(StrEnum):
    """How ``plan`` takes a decision: ``candidates`` (a list to try; none given: every value
    that applies), ``choice`` (one value given, else the defaults ``plan`` tries), ``pinned``
    (one value for every shape), ``derived`` (follows from the others or from refinement,
    or is a memory technique ``plan`` chooses where a shape does not fit without it;
    not an option of ``plan``)."""

    CANDIDATES = "candidates"
    CHOICE = "choice"
    PINNED = "pinned"
    DERIVED = "derived"


@dataclass(frozen=True)
class Needs:
    """When a decision applies (given otherwise, it is refused): ``holds`` of the values of
    ``tp``, ``dp``, ``cp`` and ``zero`` (the last None when derived), ``text`` as an option
    says it (``--tp > 1``) and the parallelism it ``shapes``."""

    holds: Callable[[Mapping[str, Any]], bool]
    text: str
    shapes: str


@dataclass(frozen=True)
class Decision:
    """One context decision (module docstring). ``kind``: ``int``, ``float``, ``bool`` (a
    switch on by default: its flag turns it off), ``str`` (one of ``choices``), ``"layout"``
    or ``"counts"`` (per-stage integers). ``label``: how messages name it; ``dest``: its
    attribute on the parsed command line; ``plan_flag``/``space``: ``plan``'s flag and
    ``ContextSpace`` field ("": not ``plan``'s); ``sweep``: its key in a sweep file;
    ``megatron``: the argument of Megatron-LM's training script, ``torchtitan``: the
    ``section.field`` of torchtitan's configuration that ``pipetab.plan.emit`` writes (the
    releases it targets: ``tests/data/torchtitan_fields.txt``), None where the framework has
    none; ``needs``: when it applies; ``example``: a valid value other than the default, as a
    sweep file writes it (the tests of every decision use it: the sweep takes it, and a field
    ``hardware.costs`` does not read leaves a stage's costs unchanged by it)."""

    name: str
    kind: type | str
    help: str
    flag: str = ""
    label: str = ""
    dest: str = ""
    minimum: float | None = None
    maximum: int | None = None
    choices: tuple = ()
    commands: frozenset[str] = RUN_COMMANDS
    plan: Enumerate = Enumerate.DERIVED
    plan_flag: str = ""
    plan_help: str = ""
    space: str = ""
    sweep: str = ""
    sweep_list: bool = False
    megatron: str | None = None
    torchtitan: str | None = None
    needs: Needs | None = None
    example: object = None

    def __post_init__(self) -> None:
        defaults = {"label": self.name.replace("_", " "), "dest": self.name, "sweep": f"grid.cluster.{self.name}"}
        for key, value in defaults.items():
            if not getattr(self, key):
                object.__setattr__(self, key, value)
        if self.plan is not Enumerate.DERIVED:
            object.__setattr__(self, "commands", self.commands | {"plan"})
            object.__setattr__(self, "plan_flag", self.plan_flag or self.flag)
            object.__setattr__(self, "space", self.space or self.name)

    @property
    def default(self) -> object:
        """``Context``'s default (``DERIVED``, None: ``Context`` derives it)."""
        return _CONTEXT_DEFAULTS[self.name]

    @property
    def sweep_key(self) -> str:
        """The key's last part (``tp`` of ``grid.cluster.tp``)."""
        return self.sweep.rsplit(".", 1)[-1]

    def check(self, value: object, among: bool = False) -> None:
        """``ValueError`` unless ``value`` is one this decision allows (``label`` named;
        ``among``: a candidate of a list)."""
        if self.kind is int and not self.choices:
            check_count(self.label, value, int(self.minimum or 1))
            if self.maximum is not None and isinstance(value, int) and value > self.maximum:
                raise ValueError(f"{self.label} must be at most {self.maximum:,}, got {value!r}")
        elif self.kind is bool and not isinstance(value, bool):
            raise ValueError(f"{self.name} must be true or false, got {value!r}")
        elif self.choices and (isinstance(value, bool) or value not in self.choices):
            raise ValueError(f"{self.label} must be {'among' if among else 'one of'} "
                             f"{', '.join(map(str, self.choices))}, got {value!r}")
        elif self.kind is float and (isinstance(value, bool) or not isinstance(value, (int, float))
                                     or not (self.minimum or 0) <= value < float("inf")
                                     or (self.maximum is not None and value > self.maximum)):
            upper = "" if self.maximum is None else f" and <= {self.maximum:g}"
            raise ValueError(f"{self.label} must be a number >= {self.minimum:g}{upper}, got {value!r}")


def _degree(name: str, what: str, megatron: str | None, torchtitan: str | None, plan_help: str, **kw) -> Decision:
    return Decision(name, int, what, f"--{name}", plan=Enumerate.CANDIDATES, plan_help=plan_help,
                    sweep_list=True, megatron=megatron, torchtitan=torchtitan, **kw)


_SPLITS = "(default: every value that splits the cluster)"

DECISIONS: tuple[Decision, ...] = (
    _degree("tp", "tensor-parallel GPUs per schedule device (default 1)", "--tensor-model-parallel-size",
            "parallelism.tensor_parallel_degree", f"tensor-parallel GPUs to consider, e.g. 8 or 4,8 {_SPLITS}",
            maximum=MAX_TP, example=[2]),
    _degree("dp", "data-parallel replicas of the pipeline (default 1)", None,
            "parallelism.data_parallel_replicate_degree",
            f"data-parallel replicas to consider, e.g. 8 or 4,8 {_SPLITS}", maximum=MAX_GPUS, example=[4]),
    Decision("sequence_parallel", bool, "tensor parallelism without sequence parallelism (default: with, when "
             "TP > 1)", "--no-sequence-parallel", plan=Enumerate.PINNED,
             needs=Needs(lambda v: v["tp"] > 1, "--tp > 1", "tensor"),
             megatron="--sequence-parallel", torchtitan="parallelism.enable_sequence_parallel", example=False),
    Decision("zero", int, "ZeRO stage with data parallelism: 0 none, 1 optimizer state (default), 2 and gradients, "
             "3 and weights (FSDP)", "--zero", choices=(0, 1, 2, 3), plan=Enumerate.CHOICE,
             needs=Needs(lambda v: v["dp"] * v["cp"] > 1, "--dp > 1 or --cp > 1", "data"),
             megatron="--use-distributed-optimizer", torchtitan="parallelism.data_parallel_shard_degree", example=2),
    Decision("overlap", bool, "do not overlap the data-parallel gradient reduction with the last backward",
             "--no-overlap", plan=Enumerate.PINNED, megatron="--overlap-grad-reduce", example=False,
             needs=Needs(lambda v: v["dp"] > 1, "--dp > 1", "data")),
    Decision("overlap_p2p", bool, "pipeline sends block their sender until they are through, as Megatron-LM runs "
             "its send/receive pairs without --overlap-p2p-comm (default: a message only delays its receiver)",
             "--no-overlap-p2p", plan=Enumerate.PINNED, megatron="--overlap-p2p-comm", example=False),
    Decision("microbatch_size", int, "sequences per microbatch (default: global batch / (dp x microbatches))",
             "--microbatch-size", maximum=MAX_MICROBATCH_SIZE, plan=Enumerate.CANDIDATES,
             plan_flag="--microbatch-sizes", space="microbatch_sizes",
             plan_help="sequences per microbatch to try, e.g. 1,2,4 (default: powers of two up to 32768 tokens)",
             megatron="--micro-batch-size", torchtitan="parallelism.pipeline_parallel_microbatch_size", example=2),
    Decision("global_batch", int, "sequences per training step", "--global-batch", maximum=MAX_GLOBAL_BATCH,
             commands=ALL_COMMANDS, megatron="--global-batch-size", torchtitan="training.global_batch_size",
             example=32),
    Decision("seq_len", int, "tokens per sequence (default: the model's)", "--seq", label="sequence length",
             dest="seq", maximum=MAX_SEQ, commands=ALL_COMMANDS, sweep="grid.cluster.seq",
             megatron="--seq-length", torchtitan="training.seq_len", example=2048),
    _degree("ep", "expert parallelism (MoE models): GPUs of a stage sharing the experts (default 1)",
            "--expert-model-parallel-size", "parallelism.expert_parallel_degree",
            "expert-parallel sizes to try for a MoE model, e.g. 8,16 (default: every divisor of the expert count "
            "that divides a stage's GPUs)", example=[2]),
    _degree("etp", "expert tensor parallelism (MoE models): GPUs splitting each expert (default 1)",
            "--expert-tensor-parallel-size", None,
            "expert tensor-parallel sizes to try for a MoE model (default 1)", example=[2]),
    Decision("dispatch_precision", str, "element format of the expert-parallel dispatch (MoE models; default bf16)",
             "--dispatch", label="dispatch precision", choices=tuple(Precision),
             plan=Enumerate.PINNED, example="fp8"),
    Decision("routing_imbalance", float, "busiest EP rank's tokens / the mean, scaling expert compute and "
             "all-to-all (default 1.0; at most 1024, the EP degree at the most)", "--routing-imbalance", minimum=1.0,
             maximum=MAX_IMBALANCE, plan=Enumerate.PINNED, example=1.5),
    Decision("node_limit", int, "route each token to experts on at most this many nodes (DeepSeek-V3: 4; default "
             "none)", "--node-limit", plan=Enumerate.PINNED, example=1),
    Decision("gemm_precision", str, "GEMM precision: fp8 runs the GEMMs at the GPU's fp8 peak with their input "
             "casts (a system with sm_count and fp8_peak_flops; default bf16)", "--gemm-precision",
             choices=tuple(Precision), plan=Enumerate.PINNED,
             plan_help="GEMMs in bf16 (default) or fp8 at the GPU's fp8 peak (systems priced by their kernels)",
             megatron="--fp8-format", example="fp8"),
    _degree("cp", "context-parallel GPUs per tensor rank, splitting each sequence (default 1)",
            "--context-parallel-size", "parallelism.context_parallel_degree",
            f"context-parallel GPUs to consider, e.g. 8 or 4,8 {_SPLITS[:-1]}; CP only for sequences of 16384 "
            "tokens or more)", example=[2]),
    Decision("cp_comm", str, "context-parallel K/V exchange: p2p ring overlapped with attention (default) or "
             "allgather (Llama 3)", "--cp-comm", label="cp comm", choices=tuple(CpComm),
             plan=Enumerate.PINNED, megatron="--cp-comm-type", example="allgather",
             needs=Needs(lambda v: v["cp"] > 1, "--cp > 1", "context")),
    Decision("reshard_after_forward", bool, "with --zero 3: keep the gathered weights from F to B (FSDP's "
             "reshard_after_forward=False)", "--no-reshard-after-forward", plan=Enumerate.PINNED,
             torchtitan="parallelism.fsdp_reshard_after_forward", example=False,
             needs=Needs(lambda v: v["zero"] == 3, "--zero 3", "sharded data")),
    Decision("layout", "layout", "layers per stage as Megatron's pipeline_model_parallel_layout, e.g. "
             "'E|(t*8|)*4L' (E embedding, t layer, m MTP, L head and loss; default: even)", "--layout",
             megatron="--pipeline-model-parallel-layout", torchtitan="parallelism.module_fqns_per_model_part",
             example="E|(t*8|)*4L"),
    Decision("recompute_layers", "counts", "per stage, layers recomputed in full (Megatron's "
             "--recompute-num-layers), e.g. 4,2,0,0", "--recompute-layers", label="recompute layers",
             megatron="--recompute-num-layers", example=[1, 0, 0, 0]),
    Decision("recompute_modules", "modules", "modules recomputed in the backward, Megatron's --recompute-modules "
             "(comma-separated among core_attn, layernorm, mla_up_proj, mlp, moe, moe_act, shared_experts; "
             "plan chooses them where a shape does not fit otherwise)", "--recompute-modules",
             label="recompute modules", megatron="--recompute-modules", example=["moe_act"]),
    Decision("activation_precision", str, "precision GEMM inputs are kept in for the backward: fp8 caches them "
             "as Transformer Engine and DeepSeek-V3 do (with --gemm-precision fp8; default bf16; plan chooses it "
             "where a shape does not fit otherwise)", "--activation-precision", label="activation precision",
             choices=tuple(Precision), example="fp8"),
    Decision("offload_activations", float, "share of each stage's saved activations copied to host memory over "
             "the system's host link on a copy stream, after the forward and back before the backward (0 to 1; "
             "a system with a [host_link]; default 0): every activation's share in evaluate and view, those "
             "CP-SAT chooses in search and bound",
             "--offload-activations", label="offload activations", minimum=0.0, maximum=1,
             plan=Enumerate.PINNED, plan_help="share of each stage's saved activations every shape offloads to "
             "host memory, 0 to 1 (default: plan offloads where a shape fits only so, on a system with a host link)",
             megatron="--fine-grained-activation-offloading", example=0.5),
    # the schedule's devices (--stages of the run commands) and the recomputation (their
    # --recompute), declared by the commands beside the schedule and the model
    _degree("pp", "pipeline stages", "--pipeline-model-parallel-size", "parallelism.pipeline_parallel_degree",
            f"pipeline stages to consider, e.g. 8 or 4,8 {_SPLITS}", commands=frozenset(), sweep="grid.stages",
            example=[4]),
    Decision("recompute", str, "activation recomputation assumed for activation memory (default none)",
             "--recompute", choices=tuple(Recompute), commands=frozenset(),
             plan=Enumerate.CANDIDATES, plan_help="recomputation options to try, e.g. none,full (default: all "
             "that apply)", sweep="run.recompute", megatron="--recompute-granularity",
             torchtitan="activation_checkpoint.mode", example="full"),
)
DECISION = {d.name: d for d in DECISIONS}
# the real-cluster options of the run commands, in the order a refusal reports them
CLUSTER_DECISIONS = tuple(d for d in DECISIONS if d.commands & RUN_COMMANDS)
PLAN_DECISIONS = tuple(d for d in DECISIONS if d.plan is not Enumerate.DERIVED)


def decisions_for(command: str) -> tuple[Decision, ...]:
    """The decisions ``command`` takes as options, in ``DECISIONS`` order."""
    return tuple(d for d in DECISIONS if command in d.commands)


@dataclass(frozen=True, kw_only=True)
class ContextSpace:
    """The context ``plan`` searches (module docstring): for each ``candidates`` decision the
    values to try (``()``: every value that applies), for each ``choice`` the one value given
    (None: the defaults ``plan`` tries), for each ``pinned`` one the value of every shape.
    The fields are ``PLAN_DECISIONS``' ``space`` names (a test checks it); their values are
    checked here against the declarations, those that need the model and cluster by
    ``pipetab.plan.PlanSpace``."""

    microbatch_sizes: tuple[int, ...] = ()
    recompute: tuple[str, ...] = ()
    pp: tuple[int, ...] = ()
    tp: tuple[int, ...] = ()
    cp: tuple[int, ...] = ()
    dp: tuple[int, ...] = ()
    ep: tuple[int, ...] = ()
    etp: tuple[int, ...] = ()
    zero: int | None = None
    sequence_parallel: bool = True
    overlap: bool = True
    overlap_p2p: bool = True
    dispatch_precision: str = "bf16"
    routing_imbalance: float = 1.0
    node_limit: int | None = None
    gemm_precision: str = "bf16"
    cp_comm: str = "p2p"
    reshard_after_forward: bool = True
    offload_activations: float | None = None  # None: plan chooses where a shape does not fit otherwise

    def __post_init__(self) -> None:
        for d in PLAN_DECISIONS:
            if d.plan is Enumerate.CANDIDATES:
                for v in getattr(self, d.space):
                    d.check(v, among=True)
            elif d.plan is Enumerate.CHOICE and getattr(self, d.space) is not None:
                d.check(getattr(self, d.space))
        # the pinned ones as a Context checks them (and with its messages)
        Context(dispatch_precision=precision_of(self.dispatch_precision), routing_imbalance=self.routing_imbalance,
                node_limit=self.node_limit, cp_comm=cp_comm_of(self.cp_comm),
                reshard_after_forward=self.reshard_after_forward, offload_activations=self.offload_activations or 0.0)

    @property
    def expert_parallel(self) -> bool:
        """Whether an expert option is given or departs from its default."""
        return bool(self.ep or self.etp) or (self.dispatch_precision, self.routing_imbalance, self.node_limit) != (
            Precision.BF16, 1.0, None)

    def zeros(self, replicas: int) -> tuple[int, ...]:
        """ZeRO stages to try with ``replicas`` GPUs per weight: the given one, else the
        default (1) and 3; 0 (no ZeRO) without replicas."""
        if replicas == 1:
            return (0,)
        return (self.zero,) if self.zero is not None else (1, 3)
