"""Activation offload on a copy stream in the simulator (issue 40, item 3)."""

import math
from dataclasses import replace

import numpy as np
import pytest

from pipetab.hardware.loaders import load_system
from pipetab.schedules import registry
from pipetab.schedules.ops import B, F, Kind
from pipetab.schedules.schedule import Placement, Schedule
from pipetab.schedules.table import SlotDurations
from pipetab.solver.costs import Costs, Links
from pipetab.solver.offload import D2H, H2D, CopyRates, Offload, _Engine, host_fits, offload_optimizer, simulate_offload
from pipetab.solver.pricing import slot_costs
from pipetab.solver.simulate import simulate

FAST = CopyRates(math.inf, math.inf)


def _one_stage(num_mb: int = 3) -> tuple[Schedule, Costs]:
    """One device, one stage, GPipe order F0 F1 F2 B2 B1 B0; F 1 s, B 2 s, activation 1."""
    orders = (tuple(F(m, 0) for m in range(num_mb)) + tuple(B(m, 0) for m in reversed(range(num_mb))),)
    schedule = Schedule("hand", Placement(((0,),), 1), (0,) * num_mb, orders)
    costs = Costs(unit="s", op_time={(Kind.F, 0, 0): 1.0, (Kind.B, 0, 0): 2.0}, message_bytes={},
                  links=Links(), activation={(0, 0): 1.0}, persistent=(0.0,), capacity=(None,))
    return schedule, costs


def test_copies_on_the_copy_stream_and_memory_freed_between_them():
    """Hand-worked: F0 [0,1] F1 [1,2] F2 [2,3] B2 [3,5] B1 [5,7] B0 [7,9]; m0 offloaded at
    1 unit/s: D2H [1,2] (issued at F0's end), H2D [5,6] (prefetched at B1's start); B0 does
    not wait. Device memory: 1 at 0, 2 at 1, 1 at 2 (D2H end) +1 (F2) = 2, B2's end 1, H2D
    2, B1's end 1, B0's end 0 -- peak 2 where plain GPipe holds 3."""
    schedule, costs = _one_stage()
    sim = simulate_offload(schedule, costs, Offload(CopyRates(1.0, 1.0), {(0, 0, 0): 1.0}))
    got = sorted((c.key, c.direction, c.device, c.start, c.end) for c in sim.copies)
    assert got == [((0, 0, 0), D2H, 0, 1.0, 2.0), ((0, 0, 0), H2D, 0, 5.0, 6.0)]
    assert sim.makespan == 9.0 == simulate(schedule, costs).makespan
    assert sim.memory_timeline(0) == [(0.0, 0.0), (0.0, 1.0), (1.0, 2.0), (2.0, 1.0), (2.0, 2.0),
                                      (5.0, 1.0), (5.0, 2.0), (7.0, 1.0), (9.0, 0.0)]
    assert sim.peak_activation == (2.0,) and simulate(schedule, costs).peak_activation == (3.0,)
    assert sim.host_peaks() == (1.0,)  # from the D2H's start (1) to the H2D's end (6)


def test_slow_link_exposure_is_hand_worked():
    """At 0.25 units/s a copy takes 4 s: D2H [1,5], H2D prefetched at B1's start 5 ->
    [5,9]; B0 would start at 7, waits to 9: the step is 11, exposure 5 + 4 - 7 = 2."""
    schedule, costs = _one_stage()
    sim = simulate_offload(schedule, costs, Offload(CopyRates(0.25, 0.25), {(0, 0, 0): 1.0}))
    assert sim.start[B(0, 0)] == 9.0 and sim.makespan == 11.0
    assert sim.exposed_offload == 2.0
    # prefetched two ops ahead (at B2's start, 3; the D2H ends at 5): H2D [5,9] still, same exposure
    two = simulate_offload(schedule, costs, Offload(CopyRates(0.25, 0.25), {(0, 0, 0): 1.0}, prefetch=2))
    assert two.exposed_offload == 2.0
    # half the activation: D2H [1,3], H2D at B1's start [5,7]: no exposure; F2 allocates at 2,
    # before the D2H ends, so the peak stays 3
    half = simulate_offload(schedule, costs, Offload(CopyRates(0.25, 0.25), {(0, 0, 0): 0.5}))
    assert half.exposed_offload == 0.0 and half.peak_activation == (3.0,)
    assert [(c.start, c.end) for c in half.copies] == [(1.0, 3.0), (5.0, 7.0)]


def test_both_directions_share_the_duplex_rate():
    """Rates 1 each way alone, 1 in total both ways: D2H k1 (1 unit) [0,1]; at 1 the H2D of
    k1 (1 unit) and the D2H of k2 (2 units) run at 0.5 each: the H2D ends at 3, k2 has 1
    unit left and runs alone at 1: ends at 4."""
    engine = _Engine(CopyRates(1.0, 1.0, 1.0))
    engine.d2h((0, 0, 1), 1.0, 0.0)
    engine.h2d((0, 0, 1), 0.0, 1.0)
    engine.d2h((0, 0, 2), 2.0, 1.0)
    down, up = engine.replay()
    assert down == [[0.0, 1.0], [1.0, 4.0]] and up == [[1.0, 3.0]]
    assert CopyRates(54.8, 52.7, 96.0).shared(True) == (48.0, 48.0)
    assert CopyRates(54.8, 30.0, 96.0).shared(True) == (54.8, 30.0)


@pytest.mark.parametrize("name,S,mb", [("1f1b", 4, 8), ("gpipe", 4, 8), ("interleaved", 4, 8), ("zb-h1", 4, 8)])
def test_infinitely_fast_link_costs_nothing(name, S, mb):
    """Every activation offloaded over an infinitely fast link: every op at simulate's
    times (with messages of 1 slot between devices); with no activation offloaded, too."""
    schedule = registry.generate(name, S, mb)
    costs = slot_costs(schedule, SlotDurations(1, 2), comm_slots=1)
    plain = simulate(schedule, costs)
    for offload in (Offload.every(schedule, FAST), Offload(CopyRates(1.0, 1.0))):
        sim = simulate_offload(schedule, costs, offload)
        assert np.array_equal(sim.start_times, plain.start_times)
        assert np.array_equal(sim.end_times, plain.end_times)
        assert sim.makespan == plain.makespan and sim.exposed_offload == 0
    every = simulate_offload(schedule, costs, Offload.every(schedule, FAST))
    assert all(a <= b for a, b in zip(every.peak_activation, plain.peak_activation))
    assert len(every.copies) == 2 * len(schedule.stage_keys) * mb


def test_recompute_frees_after_the_forward_and_lengthens_the_backward():
    """m0 recomputed: F0 [0,1] F1 [1,2] F2 [2,3] B2 [3,5] B1 [5,7] B0 [7,10] (F + B);
    memory 1, 0 at F0's end, 1, 2 at F2's start, 1 at B2's end, 0 at B1's end and 1 again at
    B0's start, 0 at its end: peak 2."""
    schedule, costs = _one_stage()
    sim = simulate_offload(schedule, costs, Offload(FAST, recompute=frozenset({(0, 0, 0)})))
    assert (sim.start[B(0, 0)], sim.end[B(0, 0)], sim.makespan) == (7.0, 10.0, 10.0)
    assert sim.memory_timeline(0) == [(0.0, 0.0), (0.0, 1.0), (1.0, 0.0), (1.0, 1.0), (2.0, 2.0),
                                      (5.0, 1.0), (7.0, 0.0), (7.0, 1.0), (10.0, 0.0)]
    with pytest.raises(ValueError, match="either offloaded or recomputed"):
        Offload(FAST, {(0, 0, 0): 1.0}, recompute=frozenset({(0, 0, 0)}))


def test_offload_refuses_what_it_does_not_model():
    schedule, costs = _one_stage()
    with pytest.raises(ValueError, match="prefetch"):
        Offload(FAST, prefetch=0)
    with pytest.raises(ValueError, match="fraction"):
        Offload(FAST, {(0, 0, 0): 1.5})
    with pytest.raises(ValueError, match="copy rate d2h"):
        CopyRates(0.0, 1.0)
    with pytest.raises(ValueError, match="contention"):
        simulate_offload(schedule, replace(costs, contention=True), Offload(FAST))


def test_host_link_preset_and_optimizer_offload():
    """DGX H100's host link (measured PCIe Gen5 x16); optimizer state off the GPU, the step
    at the host's rate: 1e9 params, 2e9 B of gradients at 54.8e9 B/s, 1e9 / 2e9 params/s,
    2e9 B of weights at 52.7e9 B/s."""
    link = load_system("dgx_h100_ib").host_link
    assert (link.d2h, link.h2d, link.duplex, link.host_memory_bytes) == (54.8e9, 52.7e9, 96e9, 2e12)
    link = replace(link, adam_params_per_s=2e9)
    schedule, costs = _one_stage()
    costs = replace(costs, persistent=(20e9,))
    off = offload_optimizer(costs, (12e9,), (1e9,), link)
    assert off.persistent == (8e9,)
    assert off.optimizer_time[0] == pytest.approx(2e9 / 54.8e9 + 0.5 + 2e9 / 52.7e9)
    sim = simulate_offload(schedule, off, Offload(CopyRates(1.0, 1.0), {(0, 0, 0): 1.0}))
    assert sim.makespan == pytest.approx(9.0 + off.optimizer_time[0])
    assert host_fits(sim, link, 8, (12e9,)) and not host_fits(sim, replace(link, host_memory_bytes=1e10), 8, (12e9,))
    with pytest.raises(ValueError, match="adam_params_per_s"):
        offload_optimizer(costs, (1.0,), (1.0,), replace(link, adam_params_per_s=0.0))


def test_copy_rates_in_the_costs_units():
    """Bytes/s as they are on costs in seconds, x tick_s bytes per tick on quantized costs;
    idealized slot costs have no bytes per second and are refused."""
    link = load_system("dgx_h100_ib").host_link
    _, costs = _one_stage()
    assert CopyRates.of(link, costs) == CopyRates(54.8e9, 52.7e9, 96e9)
    ticks = CopyRates.of(link, costs.quantized(0.5))
    assert (ticks.d2h, ticks.h2d, ticks.duplex) == (27.4e9, 26.35e9, 48e9)
    schedule = registry.generate("1f1b", 2, 2)
    with pytest.raises(ValueError, match="costs in slots"):
        CopyRates.of(link, slot_costs(schedule))


def test_a_prefetch_issued_before_its_forward_brings_the_whole_activation_back():
    """1F1B, S=2, B=3, every activation offloaded, prefetch 1: on the last stage (F0 B0 F1
    B1 F2 B2) each backward's H2D is issued at the start of its own forward, before that
    forward's D2H exists. Each H2D still carries the activation (1 unit, as its D2H), and
    the device's memory never goes below zero (it had: the H2D copied 0 units back, -3)."""
    schedule = registry.generate("1f1b", 2, 3)
    sim = simulate_offload(schedule, slot_costs(schedule), Offload.every(schedule, CopyRates(1.0, 1.0)))
    sizes = {(c.key, c.direction): c.size for c in sim.copies}
    assert len(sizes) == 12 and set(sizes.values()) == {1.0}
    assert all(sizes[(key, H2D)] == sizes[(key, D2H)] for key, _ in sizes)
    for d in range(2):
        assert min(level for _, level in sim.memory_timeline(d)) >= 0
