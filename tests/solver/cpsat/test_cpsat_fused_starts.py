"""Split-backward registry schedules fused into a whole backward (``schedules.rewrite.fused_backward``):
valid whole-backward schedules of the same F and B orders, no more memory than the split
schedule, offered as starts after the greedy ones; on V under a cap of S activations with
messages they beat every other start (issue 28: ZB-V fused 1431 slots against 1503)."""

import pytest

from pipetab.schedules import registry
from pipetab.schedules.ops import Kind
from pipetab.schedules.rewrite import fused_backward
from pipetab.solver.cpsat import idealized_problem
from pipetab.solver.cpsat.heuristics.starts import registry_schedules
from pipetab.solver.cpsat.model.bounds import makespan_lower_bound
from pipetab.solver.cpsat.model.oracle import evaluate_known


@pytest.mark.parametrize("name", ["zbv", "zb-h1", "dualpipev"])
def test_fused_keeps_the_orders_and_frees_no_later(name):
    split = registry.generate(name, 4, 8)
    fused = fused_backward(split)
    assert not fused.split_backward and fused.name == f"{name} (W fused into B)"
    for a, b in zip(split.orders, fused.orders):
        assert [op for op in a if op.kind is not Kind.W] == list(b)
    placement = "v" if name != "zb-h1" else "linear"
    opts = dict(forward=1, backward=2, weight=1, comm=1)
    whole = idealized_problem(4, 8, placement, **opts)
    parted = idealized_problem(4, 8, placement, split_backward=True, **opts)
    ev_whole, ev_split = evaluate_known(whole, fused), evaluate_known(parted, split)
    assert ev_whole.fits and ev_whole.makespan is not None
    assert all(a <= b + 1e-9 for a, b in zip(ev_whole.memory.peaks, ev_split.memory.peaks))


def test_whole_schedules_are_left_as_they_are(one_f_one_b_4_8):
    s = one_f_one_b_4_8
    assert fused_backward(s) is s


def test_registry_offers_them_last_and_only_for_a_whole_backward():
    whole = idealized_problem(8, 32, "v", forward=3, backward=6, comm=1, activation_cap=8)
    names = [s.name for s in registry_schedules(whole, whole.fixed_placement)]
    assert "zbv (W fused into B)" in names and not any("fused" in n for n in names[:names.index("hanayo") + 1])
    assert not any("fused" in s.name for s in registry_schedules(whole, whole.fixed_placement, fused=False))
    assert all("fused" in s.name for s in registry_schedules(whole, whole.fixed_placement, fused=True))
    split = idealized_problem(8, 32, "v", split_backward=True, activation_cap=8)
    assert not any("fused" in s.name for s in registry_schedules(split, split.fixed_placement))


def test_v_under_a_tight_cap_with_messages():
    """V, S=8, B=32, F=3, B+W=6 (ticks of half slots), a message of 1 slot (2 ticks), cap
    8: ZB-V with W fused into B fits and takes 744 ticks against the analytic 723."""
    problem = idealized_problem(8, 32, "v", forward=3, backward=6, comm=1, activation_cap=8)
    s = next(s for s in registry_schedules(problem, problem.fixed_placement, fused=True) if s.name.startswith("zbv"))
    ev = evaluate_known(problem, s)
    assert ev.fits and ev.makespan == 744
    assert makespan_lower_bound(problem, problem.fixed_placement)[0] == 723


def test_generation_time_grows_with_the_devices(monkeypatch):
    """A generator whose time grows as devices^2 x microbatches on a fake clock: the
    prediction for 64 devices scales the 8-device line by the growth from 8 to 16 devices
    (x 2 per doubling), where the line alone would predict 8 times too little."""
    from types import SimpleNamespace

    from pipetab.solver.cpsat.heuristics import starts

    clock = [0.0]

    def generate(name, d, b, **opts):
        clock[0] += d * d * b * 1e-4

    monkeypatch.setattr(registry, "generate", generate)
    monkeypatch.setattr(starts, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    cells = 64 * 256
    line = starts._generation_time("fake", {}, (1024, 8192), cells)
    assert line == pytest.approx(8 * cells * 1e-4)  # 8 devices: d x cells
    assert starts._generation_time("fake", {}, (1024, 8192), cells, 64) == pytest.approx(64 * cells * 1e-4)
