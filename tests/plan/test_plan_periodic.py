"""Periodic extrapolation: the step time and the peak memory of a run of m microbatches
from four shorter instances equal the full simulation's, for every registry generator (and
its plan variants) on a grid of (S, B), on hardware costs whose stages differ (embedding,
head, an uneven layout)."""

from dataclasses import replace
from functools import lru_cache

import pytest

from pipetab.hardware.context import Context
from pipetab.hardware.loaders import load_model
from pipetab.plan.periodic import activation_peaks, periodic_run, sample_sizes
from pipetab.plan.space import MOE_VARIANTS, VARIANTS
from pipetab.schedules import registry
from pipetab.solver.pricing import hardware_costs
from pipetab.solver.simulate import simulate

MODEL = replace(load_model("llama3_8b"), num_layers=48, seq_len=2048)
MOE = replace(load_model("mixtral_8x7b"), num_layers=48, seq_len=1024)


def variants():
    out = []
    for name in registry.REGISTRY:
        for opts in VARIANTS.get(name, ({},)) + MOE_VARIANTS.get(name, ()):
            out.append((name, opts))
    return out


@lru_cache(maxsize=None)
def _gen(name, S, m, opts):
    try:
        return registry.generate(name, S, m, **dict(opts))
    except ValueError:
        return None


@pytest.mark.slow
@pytest.mark.parametrize("name, opts", variants(), ids=lambda v: str(v))
@pytest.mark.parametrize("S", [2, 3, 4, 6])
def test_extrapolation_equals_full_simulation(name, opts, S):
    model = MOE if "overlap" in opts else MODEL
    ctx = Context(tp=2, dp=2, ep=2 if model.moe else 1, microbatch_size=1)
    key = tuple(sorted(opts.items()))
    checked = 0
    for m in (6 * S, 8 * S + 2, 12 * S, 24 * S, 24 * S + 4):
        full = _gen(name, S, m, key)
        if full is None:
            continue

        def costs_of(s):
            return hardware_costs(s, "dgx_h100_ib", model, ctx.replace(global_batch=None))

        run = periodic_run(lambda n: _gen(name, S, n, key), costs_of, m, simulate)
        costs = costs_of(full)
        truth = simulate(full, costs)
        assert run.makespan == pytest.approx(truth.makespan, rel=1e-9), (name, opts, S, m, run.extrapolated)
        assert run.peaks == pytest.approx(activation_peaks(full, costs), rel=1e-9, abs=1.0)
        checked += run.extrapolated
    if _gen(name, S, 24 * S + 4, key) or _gen(name, S, 24 * S, key):
        assert checked, f"{name} {opts} S={S}: never extrapolated"


def test_sample_sizes_align_with_the_run():
    # periods 1, 2, S = 4, 2S, 4S: m0 >= 2S + p and m - m0 a multiple of p
    assert sample_sizes(100, 4) == [[9, 10, 11, 12], [10, 12, 14, 16], [12, 16, 20, 24], [20, 28, 36, 44],
                                    [36, 52, 68, 84]]
    assert sample_sizes(96, 4)[2] == [12, 16, 20, 24]  # multiples of S for a generator that needs them
    assert sample_sizes(12, 4) == []  # too short to gain anything
