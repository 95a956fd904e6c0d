"""Measured op times: a *profile* of one pipeline shape, read from a TOML file.

Most practitioners have a profile of one training step, not a roofline: per pipeline
stage the time of a forward (T_F), a backward (T_B, the input gradient when the backward
is split), a weight gradient (T_W), one message to the next stage (T_comm) and the
activation memory of one microbatch — the form of the Zero Bubble paper's Table 6.
``solver.pricing.profile_costs`` turns a profile into the ``Costs`` every level and search
uses; ``calibrate`` fits a system's efficiencies to it.

File format::

    summary = "one line"                # required
    source = "where the numbers come from"
    time_unit = "ms"                    # "s", "ms" or "us" (default "s")
    stages = 8                          # pipeline devices profiled (omit: any number, [default] only)
    microbatch_size = 6                 # sequences per microbatch (needed by calibrate and plan)
    microbatches = 24                   # microbatches of the profiled step (informational)
    tp = 1                              # GPUs per stage (tensor parallel) and replicas (data
    dp = 1                              # parallel) of the profiled run (default 1 each)
    memory_bytes = 80e9                 # device memory (omit: memory not checked)
    # what was measured (each optional; pipetab refuses a run that contradicts them):
    model = "llama3_8b"                 # the model profiled (a preset or model file's name)
    num_layers = 32                     # its shape: layers and hidden size (checked against --model)
    hidden = 4096
    seq_len = 8192                      # tokens per sequence
    gpu = "H100"                        # the GPU, and its peak FLOP/s (checked against --system / --gpu)
    peak_flops = 989e12
    recompute = "none"                  # activation recomputation of the profiled run
    [default]                           # every stage, unless its [[stage]] entry says otherwise
    forward = 18.5                      # T_F of one microbatch on a stage holding 1/stages of the model
    backward = 18.1                     # T_B (the full backward when there is no weight)
    weight = 9.3                        # T_W (omit: the profile has no split backward)
    message = 0.6                       # one message between this stage and the next
    activation_bytes = 1.2e9            # M of one microbatch (omit: 0)
    weight_memory_bytes = 1.1e9         # M_W, the part held until W (omit: all of M)
    persistent_bytes = 20e9             # weights, gradients, optimizer state (omit: 0)
    tail = 5.0                          # optimizer step and gradient reduction after the last op
    layers = 3                          # layers of the stage (for calibrate)
    [[stage]]                           # optional, ``stages`` entries, same keys as [default]

Every problem raises one ``ValueError`` naming the file and the key. Times must span at
most ``MAX_TIME_SPAN`` (the longest time over the shortest op's): wider, integer ticks
of the shortest op cannot count the longest (CP-SAT's domains would overflow), and no
real step is that uneven.

``Profile.check_matches`` refuses a model, sequence length or GPU that contradicts what the
profile records; ``check_possible`` refuses a profile whose ops run faster than the
model's FLOPs allow at the GPU's peak (an MFU above 100 %).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from pathlib import Path

from pipetab.schedules.limits import MAX_DEVICES, SIZE_LIMITS, check_at_most
from pipetab.schedules.text import toml_string

from .loaders import _File, _parse

TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6}
MAX_TIME_SPAN = 1e6  # longest time / shortest op (F, B or W) of a profile
PEAK_TOLERANCE = 0.01  # a GPU's peak within 1 % of the profile's is the same GPU
RECOMPUTES = ("none", "selective", "full")

_STAGE_KEYS: dict[str, type] = {k: float for k in ("forward", "backward", "weight", "message", "activation_bytes",
                                                   "weight_memory_bytes", "persistent_bytes", "tail")}
_STAGE_KEYS["layers"] = int
_TOP_KEYS = {"source": str, "time_unit": str, "stages": int, "microbatch_size": int,
             "microbatches": int, "tp": int, "dp": int, "memory_bytes": float,
             "default": dict, "stage": list, "model": str, "num_layers": int, "hidden": int, "seq_len": int,
             "gpu": str, "peak_flops": float, "recompute": str}


# the entry of ``schedules.limits.SIZE_LIMITS`` bounding each integer of a profile
_LIMITS = {"num_layers": "layers", "hidden": "hidden", "seq_len": "seq_len", "microbatch_size": "microbatch_size",
           "microbatches": "global_batch", "tp": "tp", "dp": "gpus"}


def _finite_at_least(value: object, least: float) -> bool:
    """Whether ``value`` is an int or float (no bool), finite and at least ``least``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value) and value >= least
    except OverflowError:  # an int beyond a float
        return False


def _shown(value: object) -> str:
    """``value`` for a message: a huge integer by its size, not its 10,000 digits."""
    if isinstance(value, int) and value.bit_length() >= 128:
        return f"a number of {value.bit_length()} bits"
    return repr(value)


@dataclass(frozen=True)
class StageProfile:
    """Measured costs of one stage holding ``1/num_stages`` of the model, in seconds and
    bytes; ``weight_s`` None when the backward is not split."""

    forward_s: float
    backward_s: float
    weight_s: float | None = None
    message_s: float = 0.0
    activation_bytes: float = 0.0
    weight_memory_bytes: float | None = None
    persistent_bytes: float = 0.0
    tail_s: float = 0.0
    layers: int | None = None

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None:
                continue
            if not _finite_at_least(value, 0):
                raise ValueError(f"{f.name} must be a finite number >= 0, got {_shown(value)}")
        if self.layers is not None:
            check_at_most("layers", self.layers, "layers")
        for what in ("forward_s", "backward_s"):
            if getattr(self, what) <= 0:
                raise ValueError(f"{what} must be > 0, got {getattr(self, what)!r}")
        if self.weight_s is not None and self.weight_s <= 0:
            raise ValueError(f"weight_s must be > 0, got {self.weight_s!r}")
        if self.weight_memory_bytes is not None and self.weight_memory_bytes > self.activation_bytes:
            raise ValueError("weight_memory_bytes must not exceed activation_bytes")

    @property
    def split_backward(self) -> bool:
        return self.weight_s is not None


@dataclass(frozen=True)
class Profile:
    """A profile: ``stages`` (one per pipeline device, or one entry that applies to any
    number of devices when ``uniform``), the profiled microbatch size, parallel degrees and
    device memory."""

    name: str
    stages: tuple[StageProfile, ...]
    uniform: bool = False
    summary: str = ""
    source: str = ""
    microbatch_size: int | None = None
    microbatches: int | None = None
    tp: int = 1
    dp: int = 1
    memory_bytes: float | None = None
    model: str | None = None
    num_layers: int | None = None
    hidden: int | None = None
    seq_len: int | None = None
    gpu: str | None = None
    peak_flops: float | None = None
    recompute: str | None = None

    def __post_init__(self) -> None:
        if not self.stages:
            raise ValueError("a profile needs at least one stage")
        for key, limit in _LIMITS.items():
            value = getattr(self, key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"{key} must be an integer >= 1, got {_shown(value)}")
            if value is not None:
                check_at_most(key, value, limit)
        if self.peak_flops is not None and not (math.isfinite(self.peak_flops) and 0 < self.peak_flops <= 1e18):
            raise ValueError(f"peak_flops must be a number of FLOP/s > 0 and <= 1e18, got {self.peak_flops!r}")
        if self.recompute is not None and self.recompute not in RECOMPUTES:
            raise ValueError(f"recompute must be one of {', '.join(RECOMPUTES)}, got {self.recompute!r}")
        ops = [t for st in self.stages for t in (st.forward_s, st.backward_s, st.weight_s) if t]
        longest = max(t for st in self.stages for t in (*ops, st.message_s, st.tail_s))
        if longest > MAX_TIME_SPAN * min(ops):
            raise ValueError(f"times span {longest:.3g} s to the shortest op's {min(ops):.3g} s, more than a factor of "
                             f"{MAX_TIME_SPAN:.0e} (integer ticks of the shortest cannot count the longest); "
                             "check the time_unit and the values")
        if self.uniform and len(self.stages) != 1:
            raise ValueError("a uniform profile has exactly one stage entry")
        if len({s.split_backward for s in self.stages}) > 1:
            raise ValueError("either every stage of a profile has a weight time or none has")

    @property
    def split_backward(self) -> bool:
        return self.stages[0].split_backward

    @property
    def num_stages(self) -> int | None:
        """Pipeline devices profiled (None: a uniform profile fits any number)."""
        return None if self.uniform else len(self.stages)

    def stage(self, device: int) -> StageProfile:
        """The profile of pipeline device ``device``."""
        if self.uniform:
            return self.stages[0]
        if not 0 <= device < len(self.stages):
            raise ValueError(f"profile {self.name!r} has {len(self.stages)} stages, device {device} is not one")
        return self.stages[device]

    @property
    def gpu_label(self) -> str:
        """``A100 (312 TFLOP/s peak)``: the GPU the profile records."""
        peak = "" if self.peak_flops is None else f"{self.peak_flops / 1e12:g} TFLOP/s peak"
        if self.gpu and peak:
            return f"{self.gpu} ({peak})"
        return self.gpu or peak or "an unrecorded GPU"

    def check_matches(self, model=None, seq_len: int | None = None, peak_flops: float | None = None,
                      model_flag: str = "--model", seq_flag: str = "--seq", gpu_flag: str = "--system") -> None:
        """``ValueError`` naming both values when ``model`` (a ``TransformerModel``),
        ``seq_len`` or a GPU of ``peak_flops`` contradicts what the profile records."""
        if model is not None:
            if self.model is not None and self.model != model.name and (self.num_layers, self.hidden) == (None, None):
                raise ValueError(f"profile {self.name!r} measured model {self.model!r}, not {model_flag} "
                                 f"{model.name!r}; give the model the profile was taken on")
            for key in ("num_layers", "hidden"):
                mine, theirs = getattr(self, key), getattr(model, key)
                if mine is not None and mine != theirs:
                    raise ValueError(f"profile {self.name!r} measured a model with {key} {mine}, but {model_flag} "
                                     f"{model.name!r} has {key} {theirs}; give the model the profile was taken on")
        if seq_len is not None and self.seq_len is not None and seq_len != self.seq_len:
            raise ValueError(f"profile {self.name!r} measured sequences of {self.seq_len} tokens, not {seq_flag} "
                             f"{seq_len}; give the profile's sequence length")
        if (peak_flops is not None and self.peak_flops is not None
                and abs(peak_flops - self.peak_flops) > PEAK_TOLERANCE * self.peak_flops):
            raise ValueError(f"profile {self.name!r} was measured on {self.gpu_label}, but {gpu_flag} has a GPU of "
                             f"{peak_flops / 1e12:g} TFLOP/s peak; give the GPU the profile was taken on")

    def step_seconds(self, stages: int) -> float:
        """The busy time of one microbatch's forward and backward through ``stages``
        pipeline devices (each stage's F + B + W)."""
        return sum(st.forward_s + st.backward_s + (st.weight_s or 0.0)
                   for st in (self.stage(d) for d in range(stages)))

    def check_devices(self, count: int) -> None:
        """``ValueError`` unless the profile describes ``count`` pipeline devices."""
        if not self.uniform and count != len(self.stages):
            raise ValueError(
                f"profile {self.name!r} describes {len(self.stages)} pipeline devices, the schedule has {count}"
            )


def _stage(f: _File, table: dict, defaults: dict, scale: float) -> StageProfile:
    values = {**defaults, **table}
    for key in ("forward", "backward"):
        if key not in values:
            raise f.fail(f"missing key '{f.key(key)}' (in [default] or the stage)")
    kw = {"forward_s": values["forward"] * scale, "backward_s": values["backward"] * scale,
          "message_s": values.get("message", 0.0) * scale, "tail_s": values.get("tail", 0.0) * scale,
          "activation_bytes": values.get("activation_bytes", 0.0),
          "persistent_bytes": values.get("persistent_bytes", 0.0)}
    if "weight" in values:
        kw["weight_s"] = values["weight"] * scale
    if "weight_memory_bytes" in values:
        kw["weight_memory_bytes"] = values["weight_memory_bytes"]
    if "layers" in values:
        kw["layers"] = values["layers"]
    return f.build(StageProfile, **kw)


def profile_from_file(path: str | Path) -> Profile:
    """Read a profile TOML file (format in the module docstring)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"profile file {path} does not exist")
    f = _File(path, _parse(path))
    f.check_keys({"summary": str}, _TOP_KEYS)
    unit = f.table.get("time_unit", "s")
    if unit not in TIME_UNITS:
        raise f.fail(f"key 'time_unit' must be one of {', '.join(TIME_UNITS)}, got {unit!r}")
    scale = TIME_UNITS[unit]
    defaults: dict = {}
    if "default" in f.table:
        d = f.sub("default")
        d.check_keys({}, _STAGE_KEYS)
        defaults = d.table
    entries = f.table.get("stage", [])
    count = f.table.get("stages")
    if entries and count is not None and count != len(entries):
        raise f.fail(f"key 'stages' is {count} but {len(entries)} [[stage]] entries are given")
    if count is not None and not 1 <= count <= MAX_DEVICES:
        raise f.fail(f"key 'stages' must be from 1 to {MAX_DEVICES} (see docs/limits.md), got {_shown(count)}")
    stages = []
    for i, entry in enumerate(entries):
        e = _File(path, entry, f"stage[{i}].")
        e.check_keys({}, _STAGE_KEYS)
        stages.append(_stage(e, entry, defaults, scale))
    if not entries:
        if not defaults:
            raise f.fail("missing [default] or [[stage]] entries")
        one = _stage(f.sub("default"), {}, defaults, scale)
        stages = [one] * count if count is not None else [one]
    for key in ("microbatch_size", "microbatches", "tp", "dp"):
        if key in f.table and f.table[key] < 1:
            raise f.fail(f"key '{key}' must be >= 1, got {f.table[key]}")
        if key in f.table and f.table[key] > SIZE_LIMITS[_LIMITS[key]]:
            raise f.fail(f"key '{key}' must be at most {SIZE_LIMITS[_LIMITS[key]]:,} (see docs/limits.md), "
                         f"got {_shown(f.table[key])}")
    memory = f.table.get("memory_bytes")
    if memory is not None and not (math.isfinite(memory) and memory > 0):
        raise f.fail(f"key 'memory_bytes' must be a finite number > 0, got {memory!r}")
    return f.build(
        Profile, name=path.stem, stages=tuple(stages), uniform=count is None and not entries,
        summary=f.table["summary"], source=f.table.get("source", ""),
        microbatch_size=f.table.get("microbatch_size"), microbatches=f.table.get("microbatches"),
        tp=f.table.get("tp", 1), dp=f.table.get("dp", 1), memory_bytes=memory,
        **{k: f.table.get(k) for k in ("model", "num_layers", "hidden", "seq_len", "gpu", "peak_flops", "recompute")},
    )


def check_possible(profile: Profile, model, peak_flops: float, stages: int, where: str = "") -> None:
    """``ValueError`` when ``profile``'s ops run ``model``'s FLOPs faster than ``peak_flops``
    per GPU allows (its microbatch through ``stages`` devices of ``profile.tp`` GPUs each):
    no GPU of that peak could have produced it (its MFU would exceed 100 %)."""
    from .layer import model_flops_per_sequence

    if profile.microbatch_size is None:
        return
    flops = model_flops_per_sequence(model) * profile.microbatch_size
    least = flops / (profile.tp * peak_flops)
    busy = profile.step_seconds(stages)
    if busy < least * (1 - 1e-9):
        raise ValueError(
            f"profile {profile.name!r} is faster than any GPU of {peak_flops / 1e12:g} TFLOP/s peak{where} could run "
            f"model {model.name!r}: one microbatch of {profile.microbatch_size} x {model.seq_len} tokens takes "
            f"{busy:.4g} s of forward and backward on its {stages} stages x TP {profile.tp}, but its "
            f"{flops:.3g} FLOPs need at least {least:.4g} s at peak (MFU {100 * least / busy:.0f} %); "
            "check the profile's model, sequence length, microbatch size, time_unit and GPU")


def load_profile(name_or_path: str | Path | Profile) -> Profile:
    """A profile file by path (a ``Profile`` passes through)."""
    if isinstance(name_or_path, Profile):
        return name_or_path
    return profile_from_file(name_or_path)


# ---- writing ------------------------------------------------------------------------------
def toml_value(value) -> str:
    """A TOML literal of a string, bool, int or float (floats in full precision)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    return toml_string(value)


def profile_to_toml(profile: Profile, time_unit: str = "s") -> str:
    """The TOML text of ``profile`` (``profile_from_file`` reads it back exactly)."""
    scale = TIME_UNITS[time_unit]
    lines = [f"summary = {toml_value(profile.summary or profile.name)}"]
    if profile.source:
        lines.append(f"source = {toml_value(profile.source)}")
    lines.append(f"time_unit = {toml_value(time_unit)}")
    if not profile.uniform:
        lines.append(f"stages = {len(profile.stages)}")
    for key in ("microbatch_size", "microbatches", "tp", "dp", "memory_bytes", "model", "num_layers", "hidden",
                "seq_len", "gpu", "peak_flops", "recompute"):
        value = getattr(profile, key)
        if value is not None:
            lines.append(f"{key} = {toml_value(value)}")

    def body(stage: StageProfile) -> list[str]:
        out = [f"forward = {toml_value(stage.forward_s / scale)}",
               f"backward = {toml_value(stage.backward_s / scale)}"]
        if stage.weight_s is not None:
            out.append(f"weight = {toml_value(stage.weight_s / scale)}")
        out += [f"message = {toml_value(stage.message_s / scale)}",
                f"activation_bytes = {toml_value(float(stage.activation_bytes))}"]
        if stage.weight_memory_bytes is not None:
            out.append(f"weight_memory_bytes = {toml_value(float(stage.weight_memory_bytes))}")
        out += [f"persistent_bytes = {toml_value(float(stage.persistent_bytes))}",
                f"tail = {toml_value(stage.tail_s / scale)}"]
        if stage.layers is not None:
            out.append(f"layers = {stage.layers}")
        return out

    if profile.uniform:
        lines += ["", "[default]", *body(profile.stages[0])]
    else:
        for stage in profile.stages:
            lines += ["", "[[stage]]", *body(stage)]
    return "\n".join(lines) + "\n"
