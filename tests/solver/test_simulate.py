"""Level-3 simulator: hand-computed examples, agreement with the table and the execution graph."""

import math
from dataclasses import replace

import pytest

from pipetab.schedules import registry
from pipetab.schedules.evaluate import DeadlockError, asap
from pipetab.schedules.metrics import table_metrics
from pipetab.schedules.ops import B, F, Kind
from pipetab.schedules.schedule import Placement, Schedule
from pipetab.schedules.table import SlotDurations, layout
from pipetab.solver.costs import Costs, Links, ReplicaGroup
from pipetab.solver.graph import critical_path, execution_graph
from pipetab.solver.pricing import slot_costs
from pipetab.solver.simulate import simulate

CASES = [("gpipe", 4, 8, {}), ("1f1b", 4, 8, {}), ("1f1b", 8, 3, {}), ("chimera", 4, 8, {}),
         ("chimera", 8, 16, {}), ("hanayo", 4, 4, {"waves": 1}), ("hanayo", 4, 8, {"waves": 2}),
         ("chimera-asym", 4, 8, {"split": (1, 2)}), ("chimera-fd", 4, 8, {}), ("chimera-fd", 8, 32, {})]


@pytest.mark.parametrize("name,S,B_,opts", CASES)
@pytest.mark.parametrize("slots", [SlotDurations(1, 1), SlotDurations(1, 2), SlotDurations(2, 3)])
def test_zero_comm_simulation_reproduces_table(name, S, B_, opts, slots):
    schedule = registry.generate(name, S, B_, **opts)
    table = layout(schedule, slots)
    sim = simulate(schedule, slot_costs(schedule, slots))
    m = table_metrics(table, schedule)
    assert sim.makespan == m.makespan_ticks
    assert sim.idle_ratio == pytest.approx(m.bubble_ratio)
    for op, e in table.by_op.items():
        assert (sim.start[op], sim.end[op]) == (e.start, e.end)
    assert list(sim.peak_activation) == list(m.peak_activations)


@pytest.mark.parametrize("name,S,B_,opts", CASES)
@pytest.mark.parametrize("comm", [1, 3])
def test_simulator_equals_graph_longest_path_and_evaluator(name, S, B_, opts, comm):
    schedule = registry.generate(name, S, B_, **opts)
    costs = slot_costs(schedule, SlotDurations(1, 2), comm_slots=comm)
    sim = simulate(schedule, costs)
    length, path = critical_path(execution_graph(schedule, costs))
    assert sim.makespan == length
    # a message of comm slots in table ticks of tick_slots slots each, rounded half up as op
    # times are (chimera-asym's 2/3-slot ticks: 1 slot is 1.5 ticks, priced 2; 3 slots 5)
    hop = math.floor(comm / SlotDurations.tick_slots(schedule) + 0.5)
    timing = asap(schedule, costs.duration, lambda q, o, crosses: hop if crosses else 0)
    assert timing.makespan == sim.makespan
    g = execution_graph(schedule, costs)
    assert sum(g.nodes[n]["duration"] for n in path) == length  # the path is the critical one


def _two_stage_gpipe():
    placement = Placement(((0, 1),), 2)
    orders = ((F(0, 0), F(1, 0), B(0, 0), B(1, 0)), (F(0, 1), F(1, 1), B(0, 1), B(1, 1)))
    return Schedule("hand", placement, (0, 0), orders)


def _hand_costs(**kw):
    op_time = {(Kind.F, 0, s): 1.0 for s in (0, 1)} | {(Kind.B, 0, s): 2.0 for s in (0, 1)}
    base = Costs(
        unit="s", op_time=op_time,
        message_bytes={(k, 0, s): 100.0 for k in (Kind.F, Kind.B) for s in (0, 1)},
        links=Links(latency=0.5, bandwidth=100.0),
        activation={(0, 0): 10.0, (0, 1): 20.0}, persistent=(1000.0, 1000.0), capacity=(1030.0, 1030.0),
        optimizer_time=(0.25, 0.25),
    )
    return replace(base, **kw)


def test_hand_two_stage_example():
    # message 100 B at 100 B/s + 0.5 s latency = 1.5 s.
    # dev0: F0 [0,1], F1 [1,2].  dev1: F0 arrives 1+1.5=2.5 -> [2.5,3.5]; F1 arrives 3.5 -> [3.5,4.5];
    # B0 [4.5,6.5], B1 [6.5,8.5].  dev0: B0 arrives 6.5+1.5=8 -> [8,10]; B1 arrives 10 -> [10,12].
    # optimizer 0.25 after each device's last op: T_sim = 12.25.
    sim = simulate(_two_stage_gpipe(), _hand_costs())
    assert sim.start[B(0, 0)] == 8.0 and sim.end[B(1, 0)] == 12.0 and sim.start[F(1, 1)] == 3.5
    assert sim.makespan == 12.25
    assert sim.busy == (6.25, 6.25)
    assert sim.idle_ratio == pytest.approx(1 - 12.5 / (2 * 12.25))
    got = sorted((str(t.op), t.src, t.dst, t.start, t.end) for t in sim.transfers)
    assert got == [("B0s1", 1, 0, 6.5, 8.0), ("B1s1", 1, 0, 8.5, 10.0),
                   ("F0s0", 0, 1, 1.0, 2.5), ("F1s0", 0, 1, 2.0, 3.5)]
    # exposed communication: without messages the same orders end at 1+1+... = 9 + 0.25
    assert sim.exposed_comm == pytest.approx(12.25 - 9.25)
    # memory: dev0 holds both stage-0 activations (10 B each) at once; dev1 both of 20 B
    assert sim.peak_activation == (20.0, 40.0)
    assert sim.peak_memory == (1020.0, 1040.0)
    assert sim.fits_memory == (True, False)


def test_hand_two_stage_with_contention():
    # one transfer per directed link at a time: F1's activation waits until F0's arrives at
    # 2.5, arrives at 4.0; F1s1 [4,5], B0s1 [5,7], B1s1 [7,9]; gradients 7->8.5 and 9->10.5;
    # B0s0 [8.5,10.5], B1s0 [10.5,12.5]; + optimizer 0.25.
    sim = simulate(_two_stage_gpipe(), _hand_costs(contention=True))
    assert sim.start[F(1, 1)] == 4.0
    assert sim.end[B(1, 0)] == 12.5
    assert sim.makespan == 12.75
    assert sorted((str(t.op), t.start, t.end) for t in sim.transfers)[2:] == [("F0s0", 1.0, 2.5), ("F1s0", 2.5, 4.0)]


def test_allreduce_of_replicated_stages_delays_the_step():
    costs = _hand_costs(replica_groups=(ReplicaGroup(((0, 0), (0, 1)), 5.0),))
    sim = simulate(_two_stage_gpipe(), costs)
    # all-reduce starts when the last backward of both members ended (12) and ends at 17
    assert sim.allreduces[0][1:] == (12.0, 17.0)
    assert sim.makespan == 17.25


def test_deadlock_names_devices_and_ops():
    placement = Placement(((0, 1),), 2)
    bad = Schedule("bad", placement, (0,), ((B(0, 0), F(0, 0)), (F(0, 1), B(0, 1))))
    for contention in (False, True):
        with pytest.raises(DeadlockError) as info:
            simulate(bad, replace(slot_costs(bad), contention=contention))
        msg = str(info.value)
        assert "device 0 waits at B0s0 for B0s1 (device 1)" in msg
        assert "device 1 waits at F0s1 for F0s0 (device 0)" in msg
    with pytest.raises(DeadlockError):
        asap(bad, lambda op: 1)


def test_ops_frame():
    sim = simulate(_two_stage_gpipe(), _hand_costs())
    df = sim.ops_frame()
    assert list(df.columns) == ["device", "kind", "pipeline", "stage", "microbatch", "start", "end"]
    assert len(df) == 8 and df["end"].max() == 12.0


# ---- with hardware costs -----------------------------------------------------------------

from pipetab.solver.pricing import hardware_costs  # noqa: E402


@pytest.mark.parametrize("name,S,B_,opts", [c for c in CASES if c[0] != "chimera-asym" and 64 % c[2] == 0])
def test_peak_activation_bytes_are_count_times_stage_size(name, S, B_, opts):
    schedule = registry.generate(name, S, B_, **opts)
    costs = hardware_costs(schedule, "mid_nw_mid_cp", "tiny_gpt")
    sim = simulate(schedule, costs)
    counts = table_metrics(layout(schedule), schedule).peak_activations
    sizes = set(costs.activation.values())
    assert len(sizes) == 1  # equal stages: every activation has the same size
    size = sizes.pop()
    assert list(sim.peak_activation) == [c * size for c in counts]


def test_chimera_doubles_persistent_memory_and_waits_for_allreduce():
    one = registry.generate("1f1b", 4, 8)
    chim = registry.generate("chimera", 4, 8)
    c1 = hardware_costs(one, "slow_nw_mid_cp", "tiny_gpt")
    cc = hardware_costs(chim, "slow_nw_mid_cp", "tiny_gpt")
    # tiny_gpt: embedding on stage 0 and LM head on the last stage; Chimera's device d holds
    # down stage d and up stage S-1-d, so its weights equal 1F1B's stage d plus stage S-1-d.
    assert [cc.persistent[d] for d in range(4)] == [c1.persistent[d] + c1.persistent[3 - d] for d in range(4)]
    assert sum(cc.persistent) == 2 * sum(c1.persistent)
    assert len(cc.replica_groups) >= 4 and all(g.allreduce_time > 0 for g in cc.replica_groups)
    sim = simulate(chim, cc)
    no_ar = simulate(chim, replace(cc, replica_groups=()))
    assert sim.makespan > no_ar.makespan
    last_ar_end = max(e for _, _, e in sim.allreduces)
    assert sim.makespan >= last_ar_end + min(cc.optimizer_time)


def test_quantized_costs_bracket_the_real_makespan():
    schedule = registry.generate("chimera", 4, 8)
    real = hardware_costs(schedule, "slow_nw_mid_cp", "tiny_gpt")
    tick = min(real.op_time.values()) / 7
    up = simulate(schedule, real.quantized(tick, "up")).makespan * tick
    down = simulate(schedule, real.quantized(tick, "down")).makespan * tick
    exact = simulate(schedule, real).makespan
    assert down <= exact <= up
    assert up - down <= 0.2 * exact
    with pytest.raises(ValueError, match="rounding must be"):
        real.quantized(tick, "sideways")
