"""Sweep configurations: a TOML file -> a validated ``SweepConfig`` -> ``Configuration`` values.

File format (every key optional unless marked)::

    name = "fig4"                           # default: the file's stem
    description = "one line"

    [grid]                                  # required
    schedules = ["gpipe", "1f1b", "chimera", "hanayo"]  # required, registry names
    stages = [4, 8]                         # required, integers >= 2
    microbatches = [8, 16, 32]              # required, integers >= 1
    systems = ["mid_nw_mid_cp"]             # presets or TOML paths (not in mode "table")
    models = ["paper_gpt"]                  # presets or TOML paths (default ["paper_gpt"])
    profiles = ["step.toml"]                # instead of systems x models: measured op times
    caps = ["device"]                       # per-device memory caps, see ``parse_cap``
    [grid.options]                          # schedule options, each a list of values
    hanayo = { waves = [1, 2] }
    chimera-asym = { split = ["1:2"] }
    [grid.cluster]                          # with systems: the real-cluster context (docs/sweeps.md)
    gpus = 32                               #   GPUs of the cluster: S = gpus / (tp x dp), grid.stages
                                            #   left out (without gpus: grid.stages as given)
    tp = [4, 8]                             #   tensor-parallel degrees to cross (default [1])
    dp = [1]                                #   data-parallel degrees to cross (default [1])
    sequence_parallel = true                #   as 'pipetab plan' (default true; with tp > 1)
    zero = 1                                #   ZeRO stage with dp > 1 (default 1; 3: FSDP)
    cp = [1, 2]                             #   context-parallel degrees to cross (S = gpus /
                                            #   (tp x cp x dp)); cp_comm = "p2p" | "allgather"
    layout = "E|(t*8|)*4L"                  #   Megatron layout string (its stages: grid.stages)
    reshard_after_forward = true            #   with zero = 3 (default true)
    ep = [1, 8]                             #   MoE models: expert-parallel degrees to cross, and
    etp = [1]                               #   expert tensor-parallel ones (default: not set, 1);
    dispatch_precision = "fp8"              #   the other context decisions, one value each
    routing_imbalance = 1.2                 #   (gemm_precision, node_limit, recompute_layers):
                                            #   every decision of hardware.decisions.DECISIONS
    overlap = true                          #   overlap the DP reduction (default true)
    overlap_p2p = false                     #   pipeline sends block their sender (default true)
    global_batch = 1024                     #   sequences per step (default: the model's); the
    microbatch_size = 1                     #   microbatch is global_batch / (dp x B), or fixed
    seq = 8192                              #   tokens per sequence (default: the model's)
    [grid.search]                           # search / bound only: CP-SAT settings to cross
    time_limit = [5.0, 30.0]                #   (any of time_limit, workers, tick_s, ticks_per_op;
    ticks_per_op = [10, 20]                 #   each overrides the [run] value)

    [run]
    mode = "simulate"                       # "table" | "simulate" | "search" | "bound"
    recompute = "none"                      # "none" | "selective" | "full"
    contention = false
    exposed_comm = true                     # simulate: also the exposed-communication time
    forward_slots = 1                       # table level: slots of a forward
    backward_slots = 2                      # table level: slots of a backward
    time_limit = 10.0                       # search / bound: CP-SAT seconds per configuration
    deterministic_time = 5.0                # search / bound: CP-SAT deterministic seconds (reproducible
                                            #   results: the wall-clock limit must not be reached first)
    workers = 2                             # search / bound: CP-SAT workers
    tick_s = 0.01                           # search / bound: tick in seconds, or
    ticks_per_op = 20                       #   tick = shortest op / ticks_per_op (default 20)

    [output]
    db = "results/pipetab.sqlite"           # results store (relative to the working dir)
    export = "results/fig4.csv"             # written after the run (.csv or .parquet)

Anything else -- an unknown key, an unknown schedule, system or model, an empty list, a
value of the wrong type -- raises ``ConfigError`` (a ``ValueError``) with one sentence naming
the key, before any configuration runs.

Expansion (``expand``) crosses schedules x options x stages x microbatches x models x
systems (or profiles) x the [grid.cluster] degrees x caps (x the [grid.search] settings).
Combinations that cannot exist are *skipped*, not errors, and returned separately with the
reason: outside a schedule's regime (``registry.generate`` refuses them, e.g. Chimera with B
not a multiple of S), or, with hardware, B not dividing the model's global batch, or tp x dp
not dividing [grid.cluster] gpus.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path

from pipetab.files import safe_name
from pipetab.hardware.context import Recompute
from pipetab.hardware.decisions import DECISIONS
from pipetab.schedules import registry
from pipetab.solver.costs import SEARCH_TICKS_PER_OP

MODES = ("table", "simulate", "search", "bound")
MAX_CONFIGURATIONS = 1_000_000  # one sweep's grid, before anything is expanded
RECOMPUTE = tuple(str(r) for r in Recompute)
KEY_VERSION = 2  # bump when the meaning of a configuration key or its row changes

_TOP = {"name", "description", "grid", "run", "output"}
_GRID = {"schedules", "stages", "microbatches", "systems", "models", "profiles", "caps", "options", "search",
         "cluster"}
# [grid.cluster]: the cluster's GPUs and every context decision whose sweep key is there
# (``hardware.decisions``); the degrees in lists crossed, the others one value each
_CLUSTER_DECISIONS = {d.sweep_key: d for d in DECISIONS if d.sweep.startswith("grid.cluster.")}
_CLUSTER = {"gpus", *_CLUSTER_DECISIONS}
_CROSSED = tuple(k for k, d in _CLUSTER_DECISIONS.items() if d.sweep_list)  # tp, dp, ep, etp, cp
_COUNTS = ("gpus", *(k for k, d in _CLUSTER_DECISIONS.items() if d.kind is int and not (d.sweep_list or d.choices)))
_CHOICES = tuple(k for k, d in _CLUSTER_DECISIONS.items() if (d.choices and k != "zero") or d.kind is float)
_SEARCH = ("time_limit", "workers", "tick_s", "ticks_per_op")
_RUN = {
    "mode", "recompute", "contention", "exposed_comm", "forward_slots", "backward_slots",
    "time_limit", "deterministic_time", "workers", "tick_s", "ticks_per_op",
}
_OUTPUT = {"db", "export"}


class ConfigError(ValueError):
    """A malformed sweep configuration (one sentence, naming the key)."""


# ---- values ------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunSettings:
    """How every configuration of a sweep is evaluated (see the module docstring)."""

    mode: str = "simulate"
    recompute: str = "none"
    contention: bool = False
    exposed_comm: bool = True
    forward_slots: int = 1
    backward_slots: int = 2
    time_limit: float = 10.0
    deterministic_time: float | None = None
    workers: int = 2
    tick_s: float | None = None
    ticks_per_op: int = SEARCH_TICKS_PER_OP

    @property
    def uses_hardware(self) -> bool:
        return self.mode != "table"

    @property
    def uses_cpsat(self) -> bool:
        return self.mode in ("search", "bound")

    def key_fields(self) -> dict:
        """The settings that decide a result (others do not enter the configuration key)."""
        out: dict[str, object] = {"mode": self.mode, "slots": [self.forward_slots, self.backward_slots]}
        if self.uses_hardware:
            out.update(recompute=self.recompute, contention=self.contention)
        if self.mode == "simulate":
            out["exposed_comm"] = self.exposed_comm
        if self.uses_cpsat:
            out.update(time_limit=self.time_limit, workers=self.workers,
                       **({"deterministic_time": self.deterministic_time} if self.deterministic_time else {}),
                       tick_s=self.tick_s, ticks_per_op=None if self.tick_s else self.ticks_per_op)
        return out


@dataclass(frozen=True)
class Configuration:
    """One point of a sweep: everything that decides its row. ``options`` are the
    schedule's options as sorted (name, value) pairs; ``system`` / ``model`` are None in
    mode "table" or with a ``profile`` (a profile file, its digest in ``digests``); ``cap``
    is canonical cap text (see ``parse_cap``); ``digests`` pin the content of the system
    and model files, so editing a preset gives new keys; ``cluster``: the [grid.cluster]
    context as sorted (name, value) pairs (empty without it)."""

    def cluster_dict(self) -> dict:
        return dict(self.cluster)

    schedule: str
    stages: int
    microbatches: int
    options: tuple[tuple[str, object], ...]
    system: str | None
    model: str | None
    cap: str
    run: RunSettings
    digests: tuple[str, str] = ("", "")
    profile: str | None = None
    cluster: tuple[tuple[str, object], ...] = ()

    def options_dict(self) -> dict:
        return dict(self.options)

    @property
    def options_text(self) -> str:
        return " ".join(f"{k}={_plain(v)}" for k, v in self.options)

    def canonical(self) -> dict:
        return {
            "v": KEY_VERSION,
            "schedule": self.schedule,
            "stages": self.stages,
            "microbatches": self.microbatches,
            "options": {k: _plain(v) for k, v in self.options},
            "system": self.system,
            "model": self.model,
            "cap": self.cap if self.run.uses_hardware else None,
            "digests": list(self.digests),
            "run": self.run.key_fields(),
            # only when used, so the keys of sweeps without them stay what they were
            **({"profile": self.profile} if self.profile else {}),
            **({"cluster": dict(self.cluster)} if self.cluster else {}),
        }

    @cached_property
    def key(self) -> str:
        """A stable hash of ``canonical()`` (same configuration, same key, on any machine).
        It does not include pipetab's version: after changing pipetab's code, start a fresh
        results store (each row still records the version that produced it)."""
        text = json.dumps(self.canonical(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:24]

    @property
    def instance(self) -> tuple:
        """Configurations sharing this share one generated schedule and table."""
        return (self.schedule, self.stages, self.microbatches, self.options, self.run.forward_slots,
                self.run.backward_slots)

    @property
    def simulation_key(self) -> tuple:
        """Configurations sharing this differ at most in their memory cap, which does not
        change the simulation (CP-SAT runs are never shared)."""
        if self.run.uses_cpsat:
            return (self.key,)
        return (self.instance, self.system, self.model, self.digests, self.run, self.profile, self.cluster)

    def label(self) -> str:
        parts = [self.schedule, f"S={self.stages}", f"B={self.microbatches}"]
        if self.options:
            parts.append(self.options_text)
        if self.system:
            parts.append(self.system)
        if self.model and self.model != "paper_gpt":
            parts.append(self.model)
        if self.profile:
            parts.append(f"profile={self.profile}")
        if self.cluster:
            c = self.cluster_dict()
            parts.append(f"TP{c['tp']}" + (f" CP{c['cp']}" if c.get("cp", 1) > 1 else "") + f" DP{c['dp']}"
                         + (f" EP{c['ep']}" if c.get("ep", 1) > 1 else "")
                         + (f" ETP{c['etp']}" if c.get("etp", 1) > 1 else ""))
        if self.run.uses_hardware and self.cap != "device":
            parts.append(f"cap={self.cap}")
        if self.run.uses_cpsat:
            tick = f"tick={self.run.tick_s:g}s" if self.run.tick_s else f"ticks/op={self.run.ticks_per_op}"
            det = f" det={self.run.deterministic_time:g}s" if self.run.deterministic_time else ""
            parts.append(f"limit={self.run.time_limit:g}s{det} workers={self.run.workers} {tick}")
        return " ".join(parts)


@dataclass(frozen=True)
class SweepConfig:
    """A parsed, validated sweep file."""

    name: str
    grid: dict
    run: RunSettings
    db: str | None = None
    export: str | None = None
    description: str = ""
    source: str = ""
    _digests: dict = field(default_factory=dict, compare=False, repr=False)
    _raw: dict = field(default_factory=dict, compare=False, repr=False)

    def with_grid(self, **changes) -> "SweepConfig":
        """The same sweep over a changed grid (values as in the file; re-validated), e.g. a
        quick version: ``config.with_grid(microbatches=[8, 16])``."""
        return _validated(self.name, {**self._raw, **changes}, self.run, self.db, self.export,
                          self.description, self.source)

    def with_run(self, **changes) -> "SweepConfig":
        """The same sweep with changed run settings (re-validated)."""
        run = _parse_run(_merge_run(self.run, changes))
        return _validated(self.name, self._raw, run, self.db, self.export, self.description, self.source)

    def digests_for(self, system: str | None, model: str | None, profile: str | None) -> tuple[str, str]:
        """The content digests a configuration pins: (system or profile file, model file);
        "" for a name the sweep file does not use."""
        return (self._digests.get(("system", system), "") or self._digests.get(("profile", profile), ""),
                self._digests.get(("model", model), ""))

    @property
    def runs(self) -> list[RunSettings]:
        """The run settings crossed with the grid: ``run`` with each ``[grid.search]`` combination."""
        return self.grid.get("runs") or [self.run]


@dataclass(frozen=True)
class Skipped:
    """A combination that cannot exist: outside its schedule's regime (``kind`` "regime"),
    B not dividing the global batch (``kind`` "batch"), or a [grid.cluster] split leaving
    no pipeline (``kind`` "cluster")."""

    configuration: Configuration
    reason: str
    kind: str = "regime"


# ---- caps ----------------------------------------------------------------------------------


def parse_cap(value: object) -> str:
    """Canonical text of a memory cap:

    * ``"device"``: the system's own device memory (default);
    * ``"none"``: unlimited;
    * a number ``X`` (or ``"XGB"``): X * 1e9 bytes per device in total (persistent +
      activations);
    * ``"Kact"`` (K a positive integer): the device's persistent memory plus K activations
      of the largest stage -- e.g. ``"8act"`` is what 1F1B needs at S = 8.
    """
    if isinstance(value, bool):
        raise ConfigError(f"grid.caps: {value!r} is not a cap (use 'device', 'none', a number of GB or 'Kact')")
    if isinstance(value, (int, float)):
        if not value > 0:
            raise ConfigError(f"grid.caps: a cap in GB must be > 0, got {value!r}")
        return f"{float(value):g}GB"
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ("device", "none"):
            return text
        if text.endswith("act") and text[:-3].isdigit() and int(text[:-3]) >= 1:
            return f"{int(text[:-3])}act"
        if text.endswith("gb"):
            try:
                gb = float(text[:-2])
            except ValueError:
                gb = -1.0
            if gb > 0:
                return f"{gb:g}GB"
    raise ConfigError(
        f"grid.caps: {value!r} is not a cap (use 'device', 'none', a number of GB or 'Kact', e.g. '8act')"
    )


def cap_bytes(cap: str, device_memory: float, persistent: float, max_activation: float) -> float | None:
    """The per-device memory limit in bytes that ``cap`` (canonical text) means."""
    if cap == "none":
        return None
    if cap == "device":
        return float(device_memory)
    if cap.endswith("GB"):
        return float(cap[:-2]) * 1e9
    if cap.endswith("act"):
        return persistent + int(cap[:-3]) * max_activation
    raise ValueError(f"unknown cap {cap!r}")


# ---- parsing ----------------------------------------------------------------------------


def load_config(path: str | Path) -> SweepConfig:
    """Read and validate a sweep file; ``ConfigError`` with one sentence otherwise."""
    from pipetab.hardware.loaders import parse_toml

    path = Path(path)
    try:
        doc = parse_toml(path, "sweep config")
    except ValueError as exc:
        raise ConfigError(exc.args[0]) from None
    try:
        return parse_config(doc, name=path.stem, source=str(path))
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def parse_config(doc: dict, name: str = "sweep", source: str = "") -> SweepConfig:
    """Validate a parsed TOML document (a dict) into a ``SweepConfig``."""
    _keys(doc, _TOP, "the file")
    if "grid" not in doc:
        raise ConfigError("missing table [grid]")
    name = _str(doc.get("name", name), "name")
    try:
        safe_name(name, "name")  # the store's default file is results/<name>.sqlite
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    description = _str(doc.get("description", ""), "description")
    grid_doc = _table(doc["grid"], "grid")
    _keys(grid_doc, _GRID, "[grid]")
    run = _parse_run(_table(doc.get("run", {}), "run"))
    out = _table(doc.get("output", {}), "output")
    _keys(out, _OUTPUT, "[output]")
    db = _str(out["db"], "output.db") if "db" in out else None
    export = _str(out["export"], "output.export") if "export" in out else None
    if export is not None:
        _export_suffix(export, "output.export")
    cluster_gpus = isinstance(grid_doc.get("cluster"), dict) and "gpus" in grid_doc["cluster"]
    for req in ("schedules", "microbatches") if cluster_gpus else ("schedules", "stages", "microbatches"):
        if req not in grid_doc:
            raise ConfigError(f"grid.{req} is required")
    return _validated(name, dict(grid_doc), run, db, export, description, source)


def _validated(name, grid_doc, run, db, export, description, source) -> SweepConfig:
    grid: dict = {}
    grid["schedules"] = _list(grid_doc.get("schedules"), "grid.schedules", str)
    for s in grid["schedules"]:
        _spec(s, "grid.schedules")
    cluster = _parse_cluster(grid_doc["cluster"], run) if "cluster" in grid_doc else None
    if cluster is not None and "gpus" in cluster:
        if "stages" in grid_doc:
            raise ConfigError("grid.stages follows from grid.cluster.gpus / (tp x dp): leave grid.stages out "
                              "(or leave out gpus)")
        grid["gpus"] = cluster.pop("gpus")
    else:
        grid["stages"] = _list(grid_doc.get("stages"), "grid.stages", int)
        for s in grid["stages"]:
            if s < 2:
                raise ConfigError(f"grid.stages: stages must be integers >= 2, got {s}")
    grid["microbatches"] = _list(grid_doc.get("microbatches"), "grid.microbatches", int)
    for b in grid["microbatches"]:
        if b < 1:
            raise ConfigError(f"grid.microbatches: microbatches must be integers >= 1, got {b}")
    digests: dict = {}
    if run.uses_hardware and "profiles" in grid_doc:
        for key in ("systems", "models", "cluster"):
            if key in grid_doc:
                raise ConfigError(f"grid.profiles and grid.{key} exclude each other: a profile's measured "
                                  "times fix the system, model and parallel context")
        if run.recompute != "none":
            raise ConfigError("run.recompute does not apply to grid.profiles (a profile's measured times fix it)")
        grid["profiles"] = _list(grid_doc["profiles"], "grid.profiles", str)
        grid["caps"] = [parse_cap(c) for c in _list(grid_doc.get("caps", ["device"]), "grid.caps", (str, int, float))]
        for p in grid["profiles"]:
            digests[("profile", p)] = _digest("profile", p)
    elif run.uses_hardware:
        if "systems" not in grid_doc:
            raise ConfigError(f"grid.systems is required in mode {run.mode!r} (or grid.profiles)")
        grid["systems"] = _list(grid_doc["systems"], "grid.systems", str)
        grid["models"] = _list(grid_doc.get("models", ["paper_gpt"]), "grid.models", str)
        grid["caps"] = [parse_cap(c) for c in _list(grid_doc.get("caps", ["device"]), "grid.caps", (str, int, float))]
        for s in grid["systems"]:
            digests[("system", s)] = _digest("system", s)
        for m in grid["models"]:
            digests[("model", m)] = _digest("model", m)
        if cluster is not None:
            grid["cluster"] = cluster
    else:
        for key in ("systems", "models", "profiles", "caps", "cluster"):
            if key in grid_doc:
                raise ConfigError(f"grid.{key} is not used in mode 'table' (the table level has no hardware)")
    grid["options"] = _parse_options(grid_doc.get("options", {}), grid["schedules"])
    if "search" in grid_doc:
        grid["runs"] = _parse_search(grid_doc["search"], run)
    for key in ("schedules", "stages", "microbatches", "systems", "models", "profiles", "caps"):
        if key in grid and len(set(map(str, grid[key]))) != len(grid[key]):
            raise ConfigError(f"grid.{key} lists a value twice")
    config = SweepConfig(name, grid, run, db, export, description, source, digests, dict(grid_doc))
    size = grid_size(config)
    if size > MAX_CONFIGURATIONS:
        raise ConfigError(f"the grid crosses to {size:,} configurations, more than the {MAX_CONFIGURATIONS:,} one "
                          "sweep runs; split it into several sweeps or shorten its lists")
    return config


def grid_size(config: SweepConfig) -> int:
    """How many configurations (run or skipped) ``expand`` would produce, counted without
    expanding."""
    g = config.grid
    sources = len(g.get("profiles", ())) or len(g.get("models") or [None]) * len(g.get("systems") or [None])
    per = len(cluster_settings(g)) * (len(g["stages"]) if "gpus" not in g else 1)
    per *= len(g["microbatches"]) * sources * len(g.get("caps") or ["device"]) * len(config.runs)
    return sum(len(option_sets(config, name)) for name in g["schedules"]) * per


def _parse_cluster(doc: object, run: RunSettings) -> dict:
    """``[grid.cluster]``: lists of the degrees (``_CROSSED``), the rest single values
    (module docstring)."""
    doc = _table(doc, "grid.cluster")
    if not run.uses_hardware:
        raise ConfigError("grid.cluster is not used in mode 'table' (the table level has no hardware)")
    _keys(doc, _CLUSTER, "[grid.cluster]")
    out: dict = {}
    for key in _CROSSED:
        if key not in ("tp", "dp") and key not in doc:
            continue  # left out of the configurations' keys unless given (their keys stay as before)
        out[key] = _list(doc.get(key, [1]), f"grid.cluster.{key}", int)
        if any(v < 1 for v in out[key]) or len(set(out[key])) != len(out[key]):
            raise ConfigError(f"grid.cluster.{key} must list different integers >= 1, got {out[key]!r}")
        top = _CLUSTER_DECISIONS[key].maximum
        if top is not None and max(out[key]) > top:
            raise ConfigError(f"grid.cluster.{key} must be at most {top:,}, got {max(out[key])}")
    for key in _COUNTS:  # gpus, global_batch, microbatch_size, seq, node_limit
        if key in doc:
            v = doc[key]
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ConfigError(f"grid.cluster.{key} must be an integer >= 1, got {v!r}")
            out[key] = v
    if "global_batch" in out and "microbatch_size" in out:
        raise ConfigError("grid.cluster.global_batch and grid.cluster.microbatch_size exclude each other: the "
                          "global batch is dp x microbatches x microbatch_size")
    for key, default in (("sequence_parallel", True), ("overlap", True)):
        v = doc.get(key, default)
        if not isinstance(v, bool):
            raise ConfigError(f"grid.cluster.{key} must be true or false, got {v!r}")
        out[key] = v
    zero = doc.get("zero", 1)
    if zero not in (0, 1, 2, 3) or isinstance(zero, bool):
        raise ConfigError(f"grid.cluster.zero must be 0, 1, 2 or 3, got {zero!r}")
    out["zero"] = zero
    out.update(_parse_cluster_extras(doc))
    return out


def _parse_cluster_extras(doc: dict) -> dict:
    """The choices, ``routing_imbalance``, ``layout``, ``recompute_layers`` and
    ``reshard_after_forward`` of ``[grid.cluster]``, when given."""
    from pipetab.hardware.layout import Layout

    out: dict = {}
    for key in _CHOICES:  # dispatch_precision, routing_imbalance, gemm_precision, cp_comm
        if key in doc:
            try:
                _CLUSTER_DECISIONS[key].check(doc[key])
            except ValueError as exc:
                raise ConfigError(str(exc).replace(_CLUSTER_DECISIONS[key].label, f"grid.cluster.{key}", 1)) from None
            out[key] = doc[key]
    if "layout" in doc:
        try:
            out["layout"] = Layout.parse(doc["layout"]).megatron()
        except ValueError as exc:
            raise ConfigError(f"grid.cluster.layout: {exc}") from None
    if "recompute_layers" in doc:
        counts = _list(doc["recompute_layers"], "grid.cluster.recompute_layers", int)
        if any(v < 0 for v in counts):
            raise ConfigError(f"grid.cluster.recompute_layers must list integers >= 0 (one per stage), got {counts!r}")
        out["recompute_layers"] = tuple(counts)
    if "recompute_modules" in doc:
        from pipetab.hardware.context import recompute_modules_of

        try:
            out["recompute_modules"] = recompute_modules_of(_list(doc["recompute_modules"],
                                                                  "grid.cluster.recompute_modules", str))
        except ValueError as exc:
            raise ConfigError(str(exc).replace("recompute modules", "grid.cluster.recompute_modules", 1)) from None
    if "overlap_p2p" in doc:
        if not isinstance(doc["overlap_p2p"], bool):
            raise ConfigError(f"grid.cluster.overlap_p2p must be true or false, got {doc['overlap_p2p']!r}")
        out["overlap_p2p"] = doc["overlap_p2p"]
    if "reshard_after_forward" in doc:
        if not isinstance(doc["reshard_after_forward"], bool) or doc.get("zero") != 3:
            raise ConfigError("grid.cluster.reshard_after_forward must be true or false, with zero = 3")
        out["reshard_after_forward"] = doc["reshard_after_forward"]
    return out


def cluster_settings(grid: dict) -> list[tuple[tuple[str, object], ...]]:
    """One ``Configuration.cluster`` per (tp, dp) of ``[grid.cluster]`` (``[()]`` without
    it): ZeRO only with dp > 1 and sequence parallelism only with tp > 1, as ``plan``."""
    c = grid.get("cluster")
    if c is None:
        return [()]
    crossed = [k for k in _CROSSED if k in c]
    out = []
    for values in itertools.product(*(c[k] for k in crossed)):
        d = {k: v for k, v in c.items() if k not in _CROSSED}
        d.update(zip(crossed, values))
        tp, replicas = d["tp"], d["dp"] * d.get("cp", 1)
        d.update(sequence_parallel=c["sequence_parallel"] and tp > 1, zero=c["zero"] if replicas > 1 else 0)
        if "cp_comm" in d and d.get("cp", 1) == 1:
            del d["cp_comm"]
        out.append(tuple(sorted(d.items())))
    return out


def _merge_run(run: RunSettings, changes: dict) -> dict:
    """The settings of ``run`` as a [run] table, with ``changes`` applied."""
    current = {k: getattr(run, k) for k in _RUN if getattr(run, k) is not None}
    if "tick_s" in changes or run.tick_s is not None:
        current.pop("ticks_per_op", None)
    if "ticks_per_op" in changes:
        current.pop("tick_s", None)
    return {**current, **changes}


def _parse_search(doc: object, run: RunSettings) -> list[RunSettings]:
    """``[grid.search]``: lists of CP-SAT settings crossed into run variants."""
    doc = _table(doc, "grid.search")
    if not run.uses_cpsat:
        raise ConfigError(f"grid.search is only used in modes 'search' and 'bound', not {run.mode!r}")
    for key in doc:
        if key not in _SEARCH:
            raise ConfigError(f"unknown key {key!r} in [grid.search] (allowed: {', '.join(_SEARCH)})")
    names = [k for k in _SEARCH if k in doc]
    lists = [_list(doc[k], f"grid.search.{k}", (int, float)) for k in names]
    runs = []
    for combo in itertools.product(*lists):
        try:
            runs.append(_parse_run(_merge_run(run, dict(zip(names, combo)))))
        except ConfigError as exc:
            raise ConfigError(f"grid.search: {exc}") from None
    return runs


def _parse_run(doc: dict) -> RunSettings:
    _keys(doc, _RUN, "[run]")
    kw: dict = {}
    if "mode" in doc:
        kw["mode"] = _choice(doc["mode"], "run.mode", MODES)
    if "recompute" in doc:
        kw["recompute"] = _choice(doc["recompute"], "run.recompute", RECOMPUTE)
    for key in ("contention", "exposed_comm"):
        if key in doc:
            if not isinstance(doc[key], bool):
                raise ConfigError(f"run.{key} must be true or false, got {doc[key]!r}")
            kw[key] = doc[key]
    for key in ("forward_slots", "backward_slots", "workers", "ticks_per_op"):
        if key in doc:
            v = doc[key]
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ConfigError(f"run.{key} must be an integer >= 1, got {v!r}")
            kw[key] = v
    for key in ("time_limit", "deterministic_time", "tick_s"):
        if key in doc:
            v = doc[key]
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not v > 0:
                raise ConfigError(f"run.{key} must be a number > 0 (seconds), got {v!r}")
            kw[key] = float(v)
    if "tick_s" in doc and "ticks_per_op" in doc:
        raise ConfigError("run.tick_s and run.ticks_per_op exclude each other; give one")
    return RunSettings(**kw)


def _spec(name: str, where: str):
    """The registry entry of ``name``; ``ConfigError`` naming ``where`` otherwise."""
    try:
        return registry.spec(name)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _parse_options(doc: object, schedules: list[str]) -> dict[str, dict[str, list]]:
    doc = _table(doc, "grid.options")
    out: dict[str, dict[str, list]] = {}
    for name, opts in doc.items():
        _spec(name, "grid.options")
        if name not in schedules:
            raise ConfigError(f"grid.options.{name}: schedule {name!r} is not in grid.schedules")
        opts = _table(opts, f"grid.options.{name}")
        known = {o.name: o for o in _spec(name, "grid.options").options}
        out[name] = {}
        for key, values in opts.items():
            if key not in known:
                allowed = ", ".join(known) or "none"
                raise ConfigError(
                    f"grid.options.{name}: schedule {name!r} takes no option {key!r} (options: {allowed})"
                )
            values = _list(values, f"grid.options.{name}.{key}", (str, int))
            parsed = []
            for v in values:
                try:
                    parsed.append(known[key].parse(v) if isinstance(v, str) else v)
                except ValueError as exc:
                    raise ConfigError(f"grid.options.{name}.{key}: {exc}") from None
            out[name][key] = parsed
    return out


# ---- expansion ---------------------------------------------------------------------------


def option_sets(config: SweepConfig, schedule: str) -> list[tuple[tuple[str, object], ...]]:
    """Every combination of the options of ``schedule`` (sorted name/value pairs): the
    values given in ``grid.options``, the registry default for the others -- so a config
    that names the default value and one that omits it give the same key."""
    given = {o.name: [o.default] for o in registry.spec(schedule).options}
    given.update(config.grid["options"].get(schedule, {}))
    names = sorted(given)
    return [tuple(zip(names, combo)) for combo in itertools.product(*(given[n] for n in names))]


def expand(config: SweepConfig, check_regime: bool = True) -> tuple[list[Configuration], list[Skipped]]:
    """The configurations of a sweep in grid order, and the combinations skipped because
    they lie outside their schedule's regime (with the generator's reason) or B does not
    divide the model's global batch. ``check_regime=False`` leaves the regime to whoever
    evaluates the configurations (generating a schedule is what checks it)."""
    g = config.grid
    sources = [(None, None, p) for p in g.get("profiles", ())] or [
        (system, model, None) for model in g.get("models") or [None] for system in g.get("systems") or [None]]
    caps = g.get("caps") or ["device"]
    clusters = cluster_settings(g)
    todo, skipped = [], []
    for name in g["schedules"]:
        for opts in option_sets(config, name):
            for cluster in clusters:
                c_ = dict(cluster)
                for S in _stages(g, c_):
                    for B in g["microbatches"]:
                        regime = (_regime_error(name, S, B, opts, c_.get("layout")) if check_regime and S >= 2
                                  else _cluster_error(g, c_) if S < 2 else None)
                        for system, model, profile in sources:
                            batch = None if regime or model is None else _batch_error(model, B, cluster)
                            digests = config.digests_for(system, model, profile)
                            for cap in caps:
                                for run in config.runs:
                                    c = Configuration(name, S, B, opts, system, model, cap, run, digests,
                                                      profile, cluster)
                                    if regime:
                                        skipped.append(Skipped(c, regime, "cluster" if S < 2 else "regime"))
                                    elif batch:
                                        skipped.append(Skipped(c, batch, "batch"))
                                    else:
                                        todo.append(c)
    return todo, skipped


def _stages(grid: dict, cluster: dict) -> list[int]:
    """grid.stages, or the one S that [grid.cluster] gpus leaves for tp x dp (0 when
    tp x dp does not divide it, 1 when it leaves one stage: skipped)."""
    if "gpus" not in grid:
        return grid["stages"]
    tp_dp = cluster["tp"] * cluster["dp"] * cluster.get("cp", 1)
    return [grid["gpus"] // tp_dp if grid["gpus"] % tp_dp == 0 else 0]


def _cluster_error(grid: dict, cluster: dict) -> str:
    cp = f" x cp {cluster['cp']}" if "cp" in cluster else ""
    return (f"tp {cluster['tp']}{cp} x dp {cluster['dp']} leaves no pipeline of at least 2 stages on "
            f"grid.cluster.gpus {grid['gpus']}")


@lru_cache(maxsize=4096)
def _regime_error(name: str, stages: int, microbatches: int, options: tuple, layout: str | None = None) -> str | None:
    from pipetab.hardware.layout import Layout

    try:
        sched = registry.generate(name, stages, microbatches, **dict(options))
        if layout is not None:
            want = Layout.parse(layout).num_stages
            if want != sched.num_stages(0):
                return f"grid.cluster.layout has {want} stages, {name} with S={stages} has {sched.num_stages(0)}"
    except ValueError as exc:
        return str(exc.args[0] if exc.args else exc)
    return None


@lru_cache(maxsize=64)
def _batch_error(model: str, microbatches: int, cluster: tuple = ()) -> str | None:
    from pipetab import hardware

    c = dict(cluster)
    ctx = hardware.Context(dp=c.get("dp", 1), tp=c.get("tp", 1), global_batch=c.get("global_batch"),
                           microbatch_size=c.get("microbatch_size"),
                           **{k: c[k] for k in ("sequence_parallel", "zero") if c.get(k) is not None})
    try:
        ctx.resolved(hardware.load_model(model), microbatches)
        if "layout" in c:
            hardware.Layout.parse(c["layout"]).check(hardware.load_model(model))
    except ValueError as exc:
        return str(exc)
    return None


# ---- helpers ----------------------------------------------------------------------------


def _digest(kind: str, name: str) -> str:
    from pipetab import hardware
    from pipetab.hardware.profile import load_profile
    loaders = {"system": hardware.load_system, "model": hardware.load_model, "profile": load_profile}
    try:
        obj = loaders[kind](name)
    except ValueError as exc:
        raise ConfigError(f"grid.{kind}s: {exc.args[0] if exc.args else exc}") from None
    return hashlib.sha256(repr(obj).encode()).hexdigest()[:12]


def _plain(v):
    if isinstance(v, tuple):
        return ":".join(map(str, v))
    return v


def _keys(doc: dict, allowed: set, where: str) -> None:
    for key in doc:
        if key not in allowed:
            raise ConfigError(f"unknown key {key!r} in {where} (allowed: {', '.join(sorted(allowed))})")


def _table(value: object, key: str) -> dict:
    if not isinstance(value, dict):
        raise ConfigError(f"{key} must be a table, got {value!r}")
    return value


def _str(value: object, key: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{key} must be a string, got {value!r}")
    return value


def _choice(value: object, key: str, allowed: tuple) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise ConfigError(f"{key} must be one of {', '.join(allowed)}, got {value!r}")
    return value


def _list(value: object, key: str, kind) -> list:
    if not isinstance(value, list):
        raise ConfigError(f"{key} must be a list, got {value!r}")
    if not value:
        raise ConfigError(f"{key} is empty: the grid would have no configurations")
    for v in value:
        if not isinstance(v, kind) or isinstance(v, bool):
            what = {int: "integers", str: "strings"}.get(kind, "values of the right type")
            raise ConfigError(f"{key} must list {what}, got {v!r}")
    return list(value)


def _export_suffix(path: str, key: str) -> str:
    suffix = Path(path).suffix.lower()
    if suffix not in (".csv", ".parquet"):
        raise ConfigError(f"{key} must end in .csv or .parquet, got {path!r}")
    return suffix
