"""Fit a system's compute and memory efficiencies to a profile of measured op times.

For every profiled op (F, B and W of each stage) the cost model gives its FLOPs ``F_i``,
memory traffic ``V_i``, tokens ``n`` and tensor-parallel collective time ``C_i`` on the
system. The op is compute-bound when ``F_i / (P e_c(n)) + L_c >= V_i / (BW e_m) + L_m``.
The fit is the ratio of sums over the compute-bound ops (least squares of the times
weighted by their size):

    e_c = sum F_i / (P * r(n_i))  /  sum (T_i - L_c - C_i)

with ``r(n)`` the system's efficiency curve shape (``Device.efficiency`` at ``e_c = 1``),
and likewise ``e_m = sum V_i / BW / sum (T_i - L_m - C_i)`` over the memory-bound ops,
alternating until the classification stops changing. With no memory-bound op ``e_m`` is
not identifiable and is kept. Efficiencies are capped at 1. The fitted efficiency of each
op kind alone is reported too (the Zero Bubble paper's profiles show W running at a lower
efficiency than F, which one efficiency cannot express).

Under the kernel model (``Device.sm_count > 0``) each op is its kernels (``hardware.parts``),
``T_i = A_i / e_c + V_i / e_m + K_i + C_i`` with ``A_i`` the compute-bound GEMMs' seconds at
efficiency 1, ``V_i`` the memory-bound kernels' bytes over the bandwidth, ``K_i`` launches and
flash attention; ``1/e_c`` and ``1/e_m`` are the least-squares solution of the relative
errors ``(T_i - model_i) / T_i`` over all ops, alternating with the classification.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Iterator

from .context import Context, recompute_of
from .costs import StageCost, StageSpec, stage_cost
from .model import TransformerModel, partition
from .parallel import Topology
from .profile import Profile, StageProfile, toml_value

if TYPE_CHECKING:
    from .system import Device, System


@dataclass(frozen=True)
class OpFit:
    """One op kind over all profiled stages: measured and fitted seconds in total, and the
    compute efficiency this kind alone would need."""

    kind: str
    measured_s: float
    fitted_s: float
    efficiency: float

    @property
    def error(self) -> float:
        """(fitted - measured) / measured."""
        return (self.fitted_s - self.measured_s) / self.measured_s


@dataclass(frozen=True)
class Calibration:
    """The fitted system and how well it reproduces the profile."""

    system: System
    compute_efficiency: float
    mem_efficiency: float
    mem_identified: bool
    ops: tuple[OpFit, ...]
    memory_bound_ops: int
    total_ops: int

    def as_dict(self) -> dict:
        return {
            "system": self.system.name,
            "compute_efficiency": self.compute_efficiency,
            "mem_efficiency": self.mem_efficiency,
            "mem_efficiency_fitted": self.mem_identified,
            "memory_bound_ops": self.memory_bound_ops,
            "ops": [{"kind": o.kind, "measured_s": o.measured_s, "fitted_s": o.fitted_s,
                     "error": o.error, "efficiency_alone": o.efficiency} for o in self.ops],
        }


def _layers(profile: Profile, model: TransformerModel, stages: int) -> list[int]:
    given = [profile.stage(d).layers for d in range(stages)]
    if all(n is not None for n in given):
        layers = [int(n or 0) for n in given]
        # the end stages' embedding and LM head may be counted as a layer each (the Zero
        # Bubble paper's profiles: interior stages of 3 layers, end stages one fewer)
        if sum(layers) > model.num_layers + 2 or max(layers) > model.num_layers:
            raise ValueError(f"profile {profile.name!r} gives stages of {sum(layers)} layers in all "
                             f"({', '.join(map(str, layers))}), more than the {model.num_layers} of model "
                             f"{model.name!r}; give the layers each profiled stage held")
        return layers
    if profile.uniform:
        raise ValueError(f"profile {profile.name!r} gives no 'layers': calibrate needs the layers of its stage")
    return list(partition([1.0] * stages, model.num_layers))


def calibrate(profile: Profile, model: TransformerModel, system: System, recompute: str = "none") -> Calibration:
    """Fit ``system``'s compute (and, where identifiable, memory) efficiency to
    ``profile`` for ``model`` (module docstring); the profile's ``microbatch_size``,
    ``tp`` and ``dp`` give the op sizes."""
    if profile.microbatch_size is None:
        raise ValueError(f"profile {profile.name!r} gives no 'microbatch_size': calibrate needs it")
    profile.check_matches(model, None, system.device.peak_flops)
    if profile.seq_len is not None:
        model = replace(model, seq_len=profile.seq_len)
    stages = profile.num_stages or 1
    # the profiled run's split, as pipetab modelled it before contexts had defaults
    ctx = Context(tp=profile.tp, dp=profile.dp, sequence_parallel=False, zero=0,
                  microbatch_size=profile.microbatch_size, seq_len=model.seq_len,
                  recompute=recompute_of(recompute))
    layout = Topology(system, ctx, max(stages, 1))
    tokens = profile.microbatch_size * model.seq_len
    split = profile.split_backward
    if system.device.kernels:
        return _calibrate_kernels(profile, model, system, ctx, layout)
    ops = _roofline_ops(profile, model, system, ctx, layout)
    dev = system.device
    shape = replace(dev, compute_efficiency=1.0).efficiency(tokens)
    e_c, e_m, bound = _fit_roofline(ops, dev, tokens, shape)
    _check_efficiency(profile, system, "compute", e_c)
    _check_efficiency(profile, system, "memory", e_m)
    e_c, e_m = min(e_c, 1.0), min(e_m, 1.0)
    fitted_dev = replace(dev, compute_efficiency=e_c, mem_efficiency=e_m)
    kinds = []
    for kind in ("F", "B", "W") if split else ("F", "B"):
        mine = [o for o in ops if o[0] == kind]
        measured_s = sum(o[1] for o in mine)
        fitted_s = sum(fitted_dev.compute_time(f, v, tokens) + c for _, _, f, v, c in mine)
        alone = (sum(f for _, _, f, _, _ in mine) / (dev.peak_flops * shape)
                 / max(sum(t - dev.compute_latency_s - c for _, t, _, _, c in mine), 1e-300))
        _check_efficiency(profile, system, f"{kind} ops' compute", alone)
        kinds.append(OpFit(kind, measured_s, fitted_s, alone))
    fitted_system = replace(system, device=fitted_dev, name=f"{system.name}_calibrated",
                            summary=f"{system.summary} (efficiencies fitted to profile {profile.name})")
    return Calibration(fitted_system, e_c, e_m, any(bound), tuple(kinds), sum(bound), len(ops))


def _profiled_stages(profile: Profile, model: TransformerModel, system: System, ctx: Context,
                     layout: Topology) -> Iterator[tuple[StageSpec, StageCost, StageProfile]]:
    """Each profiled stage: what it holds, its modelled costs on device ``d`` of ``layout``
    and its measured times."""
    stages = profile.num_stages or 1
    for d, layers in enumerate(_layers(profile, model, stages)):
        ends = not profile.uniform
        spec = StageSpec(layers, ends and d == 0, ends and d == stages - 1, 0, profile.split_backward)
        cost = stage_cost(model, system.device, ctx, layers, first=spec.first, last=spec.last,
                          split_backward=spec.split_backward, tp_link=layout.tp_link(d))
        yield spec, cost, profile.stage(d)


RooflineOp = tuple[str, float, float, float, float]
"""A profiled op for the roofline fit: (kind, measured seconds, FLOPs, traffic, collective seconds)."""


def _roofline_ops(profile: Profile, model: TransformerModel, system: System, ctx: Context,
                  layout: Topology) -> list[RooflineOp]:
    """The profile's ops with the FLOPs, traffic and tensor-parallel seconds of the stages
    it measured (``stage_cost``)."""
    ops = []
    for _, cost, measured in _profiled_stages(profile, model, system, ctx, layout):
        ops.append(("F", measured.forward_s, cost.flops_forward, cost.traffic_forward, cost.tp_comm_forward_s))
        ops.append(("B", measured.backward_s, cost.flops_backward, cost.traffic_backward, cost.tp_comm_backward_s))
        if measured.weight_s is not None:  # split backward (the same on every stage)
            ops.append(("W", measured.weight_s, cost.flops_weight, cost.traffic_weight, 0.0))
    return ops


def _fit_roofline(ops: list[RooflineOp], dev: Device, tokens: int, shape: float) -> tuple[float, float, list[bool]]:
    """(compute efficiency, memory efficiency, which ops are memory-bound): each op on the
    side of the roofline the fitted device puts it, each side's efficiency from its ops'
    summed work over their summed seconds, until the sides stop changing (``shape``: the
    device's efficiency curve at ``tokens``, at compute efficiency 1)."""
    e_c, e_m = dev.compute_efficiency, dev.mem_efficiency
    bound: list[bool] = []
    for _ in range(20):
        fitted = replace(dev, compute_efficiency=min(e_c, 1.0), mem_efficiency=min(e_m, 1.0))
        now = [v / fitted.effective_mem_bandwidth + dev.mem_latency_s
               > f / (dev.peak_flops * fitted.efficiency(tokens)) + dev.compute_latency_s
               for _, _, f, v, _ in ops]
        if now == bound:
            break
        bound = now
        compute = [(t, f, c) for (_, t, f, _, c), m in zip(ops, bound) if not m]
        memory = [(t, v, c) for (_, t, _, v, c), m in zip(ops, bound) if m]
        if compute:
            e_c = (sum(f for _, f, _ in compute) / (dev.peak_flops * shape)
                   / max(sum(t - dev.compute_latency_s - c for t, _, c in compute), 1e-300))
        if memory:
            e_m = (sum(v for _, v, _ in memory) / dev.mem_bandwidth
                   / max(sum(t - dev.mem_latency_s - c for t, _, c in memory), 1e-300))
    return e_c, e_m, bound


def _check_efficiency(profile: Profile, system: System, what: str, value: float) -> None:
    """A fitted efficiency above 1 means the profile's ops ran faster than the GPU's peak
    (or its memory bandwidth) allows: no such GPU could have produced it."""
    if not value <= 1.0 + 1e-9:
        raise ValueError(f"profile {profile.name!r} runs faster than {system.name!r} can: its {what} efficiency "
                         f"would be {value:.3g} (at most 1 is possible at the GPU's peak); check the profile's "
                         "time_unit, microbatch size, layers and model, or the system's GPU")


def system_to_toml(system: System, note: str = "") -> str:
    """The TOML text of ``system`` (``loaders.system_from_file`` reads it back)."""
    lines = [f"# {line}" for line in note.splitlines()] if note else []
    lines.append(f"summary = {toml_value(system.summary or system.name)}")
    if system.num_devices is not None:
        lines.append(f"num_devices = {system.num_devices}")
    if system.devices_per_node is not None:
        lines.append(f"devices_per_node = {system.devices_per_node}")
    lines += ["", "[device]"]
    d: Device = system.device
    for key in ("peak_flops", "compute_efficiency", "compute_latency_s", "mem_bandwidth",
                "mem_efficiency", "mem_latency_s", "memory_bytes", "reserved_bytes",
                "efficiency_half_tokens", "fp8_peak_flops", "attention_efficiency", "fp8_compute_efficiency",
                "run_overhead", "p2p_efficiency"):
        lines.append(f"{key} = {toml_value(float(getattr(d, key)))}")
    if d.kernels:
        lines += [f"sm_count = {d.sm_count}", f"tile_m = {d.tile_m}", f"tile_n = {d.tile_n}",
                  f"collective_sms = {d.collective_sms}"]
    for key in ("attention_backend", "ep_kernels"):
        if getattr(d, key):
            lines.append(f"{key} = {toml_value(getattr(d, key))}")
    links = [("link", system.default_link)]
    if system.intra_node_link is not None:
        links.append(("intra_node_link", system.intra_node_link))
    for name, link in links:
        lines += ["", f"[{name}]", f"bandwidth = {toml_value(float(link.bandwidth))}",
                  f"latency_s = {toml_value(float(link.latency_s))}"]
    for (a, b), link in system.links:
        lines += ["", "[[links]]", f"src = {a}", f"dst = {b}",
                  f"bandwidth = {toml_value(float(link.bandwidth))}",
                  f"latency_s = {toml_value(float(link.latency_s))}"]
    return "\n".join(lines) + "\n"


def _solve(rows: list[tuple[float, float, float, float]], x: float, z: float) -> tuple[float, float]:
    """Least squares of ``(y - a*x - v*z) / t`` over ``rows`` of ``(y, a, v, t)`` for ``x``
    and ``z`` (one of them kept when its column is zero)."""
    saa = sum((a / t) ** 2 for _, a, _, t in rows)
    svv = sum((v / t) ** 2 for _, _, v, t in rows)
    sav = sum(a * v / t**2 for _, a, v, t in rows)
    sya = sum(y * a / t**2 for y, a, _, t in rows)
    syv = sum(y * v / t**2 for y, _, v, t in rows)
    det = saa * svv - sav * sav
    if saa > 0 and svv > 0 and det > 1e-12 * saa * svv:
        return (sya * svv - syv * sav) / det, (syv * saa - sya * sav) / det
    if saa > 0:
        return (sya - sav * z) / saa, z
    return x, (syv - sav * x) / svv if svv > 0 else z


def _calibrate_kernels(profile: Profile, model: TransformerModel, system: System, ctx: Context,
                       layout: Topology) -> Calibration:
    """The kernel model's fit (module docstring)."""
    from pipetab.schedules.ops import Kind

    from .parts import stage_parts

    split = profile.split_backward
    ops = []  # (kind, measured, parts, collective)
    for spec, cost, measured in _profiled_stages(profile, model, system, ctx, layout):
        times = [(Kind.F, measured.forward_s, cost.tp_comm_forward_s),
                 (Kind.B, measured.backward_s, cost.tp_comm_backward_s)]
        if measured.weight_s is not None:
            times.append((Kind.W, measured.weight_s, 0.0))
        for kind, t, comm in times:
            parts = stage_parts(model, ctx, spec.layers, first=spec.first, last=spec.last, first_layer=0, kind=kind,
                                split_backward=split)
            ops.append((kind.name, t, parts, comm))
    dev = system.device
    e_c, e_m, raw, mem_identified = fit_kernel_ops(ops, dev)
    _check_efficiency(profile, system, "compute", raw[0])
    if mem_identified:
        _check_efficiency(profile, system, "memory", raw[1])
    fitted_dev = replace(dev, compute_efficiency=e_c, mem_efficiency=e_m)
    kinds = []
    for name in ("F", "B", "W") if split else ("F", "B"):
        mine = [o for o in ops if o[0] == name]
        fitted_s = sum(sum(p.time(fitted_dev) * n for p, n in parts) + comm for _, _, parts, comm in mine)
        kinds.append(OpFit(name, sum(o[1] for o in mine), fitted_s, e_c))
    bound = sum(1 for _, _, parts, _ in ops for p, _ in parts if p.terms(fitted_dev)[1] > 0)
    fitted_system = replace(system, device=fitted_dev, name=f"{system.name}_calibrated",
                            summary=f"{system.summary} (efficiencies fitted to profile {profile.name})")
    return Calibration(fitted_system, e_c, e_m, mem_identified and bound > 0, tuple(kinds), bound, len(ops))


KernelOp = tuple[str, float, list, float]
"""A measured op for the kernel model's fit: (kind, measured seconds, its parts with counts
(``parts.stage_parts``), tensor-parallel collective seconds)."""


def fit_kernel_ops(ops: list[KernelOp], dev: Device) -> tuple[float, float, tuple[float, float], bool]:
    """The kernel model's least-squares fit of ``ops`` (module docstring), starting from
    ``dev``'s efficiencies: (compute, memory efficiency, both before the cap at 1, whether
    the memory efficiency was identified)."""
    e_c, e_m = dev.compute_efficiency, dev.mem_efficiency
    raw, mem_identified = (e_c, e_m), False
    for _ in range(30):
        now = replace(dev, compute_efficiency=e_c, mem_efficiency=e_m)
        rows = []
        for _, t, parts, comm in ops:
            terms = [tuple(n * x for x in part.terms(now)) for part, n in parts]
            a, v, fixed = (sum(col) for col in zip(*terms)) if terms else (0.0, 0.0, 0.0)
            rows.append((t - fixed - comm, a, v, t))
        x, z = _solve(rows, 1 / e_c, 1 / e_m)
        # a memory coefficient the profile cannot identify (<= 0) keeps the preset's, as the roofline fit does
        mem_identified = z > 0
        raw = (1 / max(x, 1e-9), 1 / z if mem_identified else dev.mem_efficiency)
        new = (min(raw[0], 1.0), min(raw[1], 1.0))
        if abs(new[0] - e_c) < 1e-9 and abs(new[1] - e_m) < 1e-9:
            break
        e_c, e_m = new
    return e_c, e_m, raw, mem_identified
