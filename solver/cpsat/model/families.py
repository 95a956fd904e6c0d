"""Constraint families of the CP-SAT model, one function each, and ``FAMILIES``, their one
table: when each applies, its labels in ``CpSatModel.applied``, its ``ablate`` name (None:
always on) and the assumption it adds to a bound (none: each is without loss of generality).
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from pipetab.schedules.ops import Kind, Op

from .bounds import activation_scale
from .objectives import objective
from .precedences import add_makespan, add_no_overlap, add_order_chains, add_order_literals, add_precedences
from .variables import Variables, lifetime_min

if TYPE_CHECKING:
    from ortools.sat.python import cp_model

    from ..params import CpSatConfig
    from ..problem import Problem


# ---- memory ------------------------------------------------------------------------------------
def add_memory(model: cp_model.CpModel, v: Variables, fifo: bool = False) -> list[str]:
    """Activation (p, s, m) is live from its F's start to its B's end (split backward: M - M_W
    to B's end, M_W to W's end; ``Problem.lifetimes``): one cumulative per capped device.
    Under ``fifo`` a stage's live activations are consecutive microbatches, so the windows of
    ``Problem.window_shifts`` are precedences, and on a one-stage device with exact windows
    they replace the cumulative. Under the memory objective every device's lifetimes are also
    held by a cumulative of capacity ``v.peak``. Returns the forms used."""
    problem, peak = v.problem, v.peak
    caps = [problem.cap(d) for d in range(problem.num_devices)]
    if all(c is None for c in caps) and peak is None:
        return []
    forms: list[str] = []
    exact: set[int] = set()
    if fifo and v.placement is not None:
        exact = _add_fifo_memory_precedences(model, v)
        if exact:
            forms.append("memory as FIFO precedences")
    scale = activation_scale(problem)
    skip = set() if peak is not None else {d for d, c in enumerate(caps) if c is None} | exact
    per_device = _lifetimes(model, v, skip, scale)
    for d, cap_d in enumerate(caps):
        if not per_device[d]:
            continue
        ivs, dem = zip(*per_device[d])
        if peak is not None:
            model.add_cumulative(list(ivs), list(dem), peak)
        if cap_d is None or d in exact:
            continue
        cap = math.floor(cap_d * scale + 1e-9)
        if cap < 0:
            model.add_bool_or([])  # negative capacity: nothing fits
            continue
        model.add_cumulative(list(ivs), list(dem), cap)
        if "cumulative" not in forms:
            forms.append("cumulative")
    if peak is not None and "cumulative" not in forms:
        forms.append("cumulative")
    return forms


def _lifetimes(model: cp_model.CpModel, v: Variables, skip: set[int], scale: float) -> dict[int, list]:
    """Each activation part's lifetime interval and scaled demand, per device (optional
    intervals on every device under free placement), except on the devices in ``skip``."""
    problem, D = v.problem, v.problem.num_devices
    act = problem.costs.activation
    per_device: dict[int, list[tuple[object, int]]] = defaultdict(list)
    lmin = {(p, s, kind): lifetime_min(problem, v.placement, p, s, kind)
            for p, s in problem.stages for kind, _ in problem.lifetimes(p, s)}
    for m, p in enumerate(problem.microbatch2pipeline):
        for s in range(problem.num_stages[p]):
            v.check()
            d = v.placement.device(p, s) if v.placement is not None else None
            if act[(p, s)] <= 0 or d in skip:
                continue  # no cumulative on this device: no lifetime needed
            f = v.index[Op(Kind.F, p, s, m)]
            for kind, part in problem.lifetimes(p, s):
                r = v.index[Op(kind, p, s, m)]
                name = f"life_{kind.value}p{p}s{s}m{m}"
                lo = lmin[(p, s, kind)]  # above the horizon: the other constraints make it infeasible
                size = model.new_int_var(lo, max(lo, v.horizon), name)
                v.lifetime_size[(p, s, m, kind)] = size
                demand = round(part * scale)
                if d is not None:
                    per_device[d].append((model.new_interval_var(v.start[f], size, v.end(r), name), demand))
                    continue
                for d2 in range(D):
                    iv = model.new_optional_interval_var(v.start[f], size, v.end(r), v.x[(p, s)][d2], f"{name}_d{d2}")
                    per_device[d2].append((iv, demand))
    return per_device


def _add_fifo_memory_precedences(model: cp_model.CpModel, v: Variables) -> set[int]:
    """Under FIFO, the memory windows of ``Problem.memory_windows`` for each stage with the
    capacity of its device. Returns the devices holding one stage whose windows are exact."""
    problem = v.problem
    exact: set[int] = set()
    assert v.placement is not None  # FAMILIES: fixed placement only
    for d in range(problem.num_devices):
        keys = v.placement.stages_on(d)
        cap = problem.cap(d)
        if cap is None:
            continue
        for p, s in keys:
            shifts, is_exact = problem.window_shifts(p, s, cap)
            pairs, _ = problem.memory_windows(p, s, cap)
            for release, forward in pairs:
                v.check()
                model.add(v.start[v.index[forward]] >= v.end(v.index[release]))
            for kind, k in shifts:
                v.chain_shift[((kind, p, s), (Kind.F, p, s))] = k
            if len(keys) == 1 and is_exact:
                exact.add(d)
    return exact


# ---- symmetry and restrictions -------------------------------------------------------------
def add_symmetry_break(model: cp_model.CpModel, v: Variables) -> None:
    """Microbatches of one pipeline are identical, so relabelling them is a symmetry: fix
    their stage-0 forwards (all on one device) to start in microbatch order. Safe."""
    problem = v.problem
    for p, mbs in problem.pipeline_microbatches.items():
        for a, b in itertools.pairwise(mbs):
            ia = v.index[Op(Kind.F, p, 0, a)]
            ib = v.index[Op(Kind.F, p, 0, b)]
            model.add(v.start[ib] >= v.end(ia))


def add_fifo(model: cp_model.CpModel, v: Variables) -> None:
    """Every stage runs each kind of op (F, B, W) of a pipeline's microbatches in microbatch
    order — WITHOUT LOSS OF GENERALITY: relabelling the k-th op by start time as microbatch k
    keeps every time, lag and memory profile (docs/cpsat.md gives the argument), so FIFO bounds
    are bounds (``tests/solver/cpsat/test_cpsat_fifo.py``: equal optima on random instances)."""
    problem = v.problem
    for p, mbs in problem.pipeline_microbatches.items():
        for s in range(problem.num_stages[p]):
            for k in problem.kinds:
                for a, b in itertools.pairwise(mbs):
                    v.check()
                    ia = v.index[Op(k, p, s, a)]
                    ib = v.index[Op(k, p, s, b)]
                    model.add(v.start[ib] >= v.end(ia))


def add_device_symmetry(model: cp_model.CpModel, v: Variables) -> bool:
    """Free placement on identical devices with uniform links: stage 0 of pipeline 0 on device
    0, and device d > 0 used only if an earlier stage uses d-1 (value precedence). Whether it applied."""
    problem = v.problem
    if v.placement is not None or not devices_identical(problem):
        return False
    D = problem.num_devices
    keys = list(problem.stages)
    model.add(v.x[keys[0]][0] == 1)
    for k in range(1, len(keys)):
        for d in range(1, D):
            earlier = [v.x[keys[j]][d - 1] for j in range(k)]
            model.add_bool_or(earlier).only_enforce_if(v.x[keys[k]][d])
    return True


def devices_identical(problem: Problem) -> bool:
    """Whether all devices (caps, memory, optimizer) and links are alike: labels interchangeable."""
    c, D = problem.costs, problem.num_devices
    return (c.links.uniform and len(set(c.capacity)) <= 1 and len(set(c.persistent)) <= 1
            and len({problem.optimizer(d) for d in range(D)}) <= 1)


def add_last_stage_glue(model: cp_model.CpModel, v: Variables) -> bool:
    """Dominance (needs FIFO): on a device holding only a pipeline's last stage (whole
    backward), B(k) starts when F(k) ends. In a FIFO schedule, for the first k whose B does not
    follow its F only forwards sit between them; running B(k) first (the earliest-release
    order of one machine) keeps the block's end, ends B(k) — the only op with a successor off
    the device — earlier, and starts the forwards later (less memory). Whether it applied."""
    problem = v.problem
    if problem.split_backward or v.placement is None or v.pair_lits:
        return False  # with overlapped pairs the exchange argument does not hold
    applied = False
    for p, mbs in problem.pipeline_microbatches.items():
        last = problem.num_stages[p] - 1
        d = v.placement.device(p, last)
        if v.placement.stages_on(d) != [(p, last)]:
            continue
        for j, m in enumerate(mbs):
            f = v.index[Op(Kind.F, p, last, m)]
            b = v.index[Op(Kind.B, p, last, m)]
            model.add(v.start[b] == v.start[f] + v.dur[f])
            if j + 1 < len(mbs):
                # F(k+1) starts after F(k) ends (FIFO), when B(k) starts, so after B(k) ends
                nxt = v.index[Op(Kind.F, p, last, mbs[j + 1])]
                model.add(v.start[nxt] >= v.end(b))
        v.chain_shift[((Kind.B, p, last), (Kind.F, p, last))] = 1
        applied = True
    return applied


# ---- redundant cuts ---------------------------------------------------------------------------
def add_memory_chain(model: cp_model.CpModel, v: Variables) -> bool:
    """Pigeonhole cut (needs the stage-0 symmetry break): if k stage-0 activations exceed the
    cap, one of microbatches j..j+k-2 has ended its ``Problem.chain_release`` op when j+k-1
    starts, so F(j+k-1) starts at least that least stage-0 lifetime after F(j)."""
    problem = v.problem
    D = problem.num_devices
    applied = False
    for p, mbs in problem.pipeline_microbatches.items():
        if v.placement is not None:
            cap = problem.cap(v.placement.device(p, 0))
        else:
            caps = [problem.cap(d) for d in range(D)]
            cap = None if any(c is None for c in caps) else max(caps)
        fit = problem.activations_fit(cap, p, 0)
        if fit is None:
            continue
        k = fit + 1
        if k < 2 or k > len(mbs):
            continue
        L = lifetime_min(problem, v.placement, p, 0, problem.chain_release(p, 0))
        for j in range(len(mbs) - k + 1):
            ia = v.index[Op(Kind.F, p, 0, mbs[j])]
            ib = v.index[Op(Kind.F, p, 0, mbs[j + k - 1])]
            model.add(v.start[ib] >= v.start[ia] + L)
        applied = True
    return applied


def add_total_work(model: cp_model.CpModel, v: Variables) -> None:
    """Free placement: D * makespan >= all op durations + all optimizer times."""
    problem = v.problem
    D = problem.num_devices
    total = sum(v.dur) + sum(problem.optimizer(d) for d in range(D))
    model.add(D * v.makespan >= total)


# ---- the table -------------------------------------------------------------------------------
@dataclass
class Build:
    """What one model's families share: the model, its variables, the config, fixed ``orders``
    (evaluate mode) or None, whether FIFO holds, the order-literal devices, ``mirror`` pairs."""

    model: cp_model.CpModel
    v: Variables
    config: CpSatConfig
    orders: object = None
    fifo: bool = False
    mirror: list | None = None
    covered: frozenset[int] = field(default_factory=frozenset)

    @property
    def free_order(self) -> bool:
        return self.orders is None


@dataclass(frozen=True)
class Family:
    """One constraint family: ``add(build)`` returns the labels it applied."""

    name: str
    switch: str | None
    applies: Callable[[Build], bool]
    add: Callable[[Build], list[str]]
    assumption: str = ""


def _order_literals(b: Build) -> list[str]:
    b.covered = add_order_literals(b.model, b.v, b.config.model.order_literal_limit)
    return ["order literals"] if b.covered else []


def _no_overlap(b: Build) -> list[str]:
    redundant = b.config.uses("redundant")
    add_no_overlap(b.model, b.v, makespan_intervals=redundant, skip=b.covered)
    return ["interval makespan"] if redundant and len(b.covered) < b.v.problem.num_devices else []


def _mirror(b: Build) -> list[str]:
    for x, y in b.mirror or ():
        b.model.add(b.v.op_start(x) == b.v.op_start(y))
    return ["mirror (a restriction)"]


def _objective(b: Build) -> list[str]:
    objective(b.v.problem).constrain(b.model, b.v, b.orders, b.fifo)
    return []


def _label(label: str, applied: bool) -> list[str]:
    return [label] if applied else []


FIFO_ASSUMPTION = (
    "every stage runs a pipeline's microbatches in one order (FIFO) — without loss of "
    "generality for identical microbatches: relabelling the k-th op of each kind on each "
    "stage as microbatch k keeps every time, dependency and memory profile")

# in the order they are added; ``CpSatModel`` adds each that applies and is not ablated
FAMILIES: tuple[Family, ...] = (
    Family("precedence", None, lambda b: True, lambda b: add_precedences(b.model, b.v) or []),
    Family("fixed order", None, lambda b: not b.free_order,
           lambda b: add_order_chains(b.model, b.v, b.orders) or ["order fixed"]),
    # a fixed order's memory does not depend on timing: the evaluator's prefix sums decide it
    Family("memory", None, lambda b: b.free_order or b.v.peak is not None,
           lambda b: add_memory(b.model, b.v, fifo=b.fifo)),
    Family("fifo", "fifo", lambda b: b.fifo, lambda b: add_fifo(b.model, b.v) or ["fifo"], FIFO_ASSUMPTION),
    Family("dominance", "dominance", lambda b: b.fifo,
           lambda b: _label("last-stage glue", add_last_stage_glue(b.model, b.v))),
    Family("symmetry break", "symmetry_break", lambda b: b.free_order and not b.fifo,
           lambda b: add_symmetry_break(b.model, b.v) or ["symmetry break"],
           "stage-0 forwards start in microbatch order (relabelling symmetry, without loss of generality)"),
    # order literals say "one ends before the other starts", which a pair's two ops break
    Family("order literals", "order_literals", lambda b: b.fifo and b.v.placement is not None and not b.v.pair_lits,
           _order_literals),
    Family("no-overlap", None, lambda b: b.free_order, _no_overlap),
    Family("memory chain", "redundant",
           lambda b: b.free_order and (b.fifo or b.config.uses("symmetry_break")),
           lambda b: _label("memory chain", add_memory_chain(b.model, b.v))),
    Family("device symmetry", "device_symmetry", lambda b: b.free_order and b.v.placement is None,
           lambda b: _label("device symmetry", add_device_symmetry(b.model, b.v)),
           "device relabelling symmetry (identical devices, uniform links; without loss of generality)"),
    Family("total work", "redundant", lambda b: b.free_order and b.v.placement is None,
           lambda b: add_total_work(b.model, b.v) or []),
    Family("makespan", None, lambda b: True, lambda b: add_makespan(b.model, b.v, b.orders, fifo=b.fifo) or []),
    Family("objective", None, lambda b: True, _objective),
    Family("mirror", None, lambda b: bool(b.mirror), _mirror),
)


def assumptions_of(applied) -> list[str]:
    """The assumptions the families behind the ``applied`` labels add to a bound."""
    labels = set(applied)
    by_label = {"fifo": FAMILIES[3], "symmetry break": FAMILIES[5], "device symmetry": FAMILIES[9]}
    return [f.assumption for label, f in by_label.items() if label in labels]
