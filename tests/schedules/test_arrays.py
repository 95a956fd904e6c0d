"""The array core against plain per-op references (tests/reference_core.py): generators,
layout (both kernels), table metrics, the validator's messages; and the object face
(orders, entries, replace, equality) of the array-backed values."""

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reference_core import (
    KERNELS,
    cases,
    kernel,
    ref_interleaved_orders,
    ref_one_f_one_b_orders,
    ref_run,
    ref_schedule_message,
    ref_table_metrics,
    ref_validate_message,
    ref_zb_h1_orders,
)

from pipetab.schedules import evaluate, registry
from pipetab.schedules.arrays import OpArrays, Orders
from pipetab.schedules.generators import chimera as chimera_gen
from pipetab.schedules.metrics import table_metrics
from pipetab.schedules.ops import B, F, Kind, Op
from pipetab.schedules.schedule import Placement, Schedule
from pipetab.schedules.table import PlacedOp, SlotDurations, Table, layout, whole
from pipetab.schedules.validate import TableError, validate


def test_linear_family_and_interleaved_match_object_generators():
    for S in range(2, 9):
        for B_ in range(1, 20):
            assert registry.generate("1f1b", S, B_).orders == ref_one_f_one_b_orders(S, B_)
            assert registry.generate("gpipe", S, B_).orders == ref_one_f_one_b_orders(S, B_, warmup=B_)
            assert registry.generate("zb-h1", S, B_).orders == ref_zb_h1_orders(S, B_)
        for v in (2, 3, 4):
            for u in (1, 2, 3):
                got = registry.generate("interleaved", S, S * u, chunks=v).orders
                assert got == ref_interleaved_orders(S, S * u, v)


@pytest.mark.parametrize("per", [1, 2])
def test_chimera_tiling_matches_its_step_rule(per):
    for S in range(2, 13, 2):
        for units in range(1, 6):
            B_ = per * S * units
            assert chimera_gen._orders_arrays(S, B_, per) == chimera_gen._orders(S, B_, per)


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(schedule=cases(), F_=st.integers(1, 3), K=st.integers(1, 4), W_=st.integers(1, 2),
       fraction=st.sampled_from([1.0, 0.5, 0.0, 0.3]), mode=st.sampled_from(KERNELS), stretch=st.integers(1, 4))
def test_layout_and_metrics_equal_the_reference(schedule, F_, K, W_, fraction, mode, stretch):
    slots = SlotDurations(F_, K, W_)
    with kernel(mode, stretch):
        table = layout(schedule, slots)
    start, end, _ = ref_run(schedule, lambda op: slots.of(schedule, op), lambda q, o, x: 0)
    assert {e.op: (e.start, e.end) for e in table.entries} == {op: (start[op], end[op]) for op in start}
    assert [e.op for e in table.entries] == sorted(start, key=lambda op: (schedule.device_of(op), start[op]))
    validate(table, schedule)
    m = table_metrics(table, schedule, weight_memory=fraction)
    busy, peak_c, peak_s = ref_table_metrics(table, schedule, fraction)
    assert m.busy_slots == tuple(b * table.tick_slots for b in busy)
    assert list(m.peak_activations) == [whole(x) for x in peak_c] and list(m.peak_activation_share) == peak_s
    assert m.makespan_ticks == max(end.values())


def _mutations(table: Table, data) -> list[PlacedOp]:
    entries = list(table.entries)
    i = data.draw(st.integers(0, len(entries) - 1))
    e = entries[i]
    how = data.draw(st.sampled_from(["drop", "copy", "device", "start", "duration", "microbatch", "kind"]))
    if how == "drop":
        del entries[i]
    elif how == "copy":
        entries.append(e._replace(start=e.start + data.draw(st.integers(0, 5))))
    elif how == "device":
        entries[i] = e._replace(device=data.draw(st.integers(0, table.num_devices)))
    elif how == "start":
        entries[i] = e._replace(start=max(0, e.start + data.draw(st.integers(-3, 3))))
    elif how == "duration":
        entries[i] = e._replace(duration=data.draw(st.integers(0, 3)))
    elif how == "microbatch":
        entries[i] = e._replace(op=e.op._replace(microbatch=e.op.microbatch + data.draw(st.integers(1, 3))))
    else:
        entries[i] = e._replace(op=e.op._replace(kind=data.draw(st.sampled_from(list(Kind)))))
    return entries


@settings(max_examples=150, deadline=None)
@given(schedule=cases(max_stages=6, max_microbatches=12), data=st.data())
def test_validator_names_the_same_first_problem_as_the_reference(schedule, data):
    table = layout(schedule)
    bad = Table(table.num_devices, _mutations(table, data), table.name)
    want = ref_validate_message(bad)
    if want is None:
        validate(bad)
    else:
        with pytest.raises(TableError) as info:
            validate(bad)
        assert str(info.value) == want


@pytest.mark.parametrize("mode", KERNELS)
def test_deadlock_is_named_by_both_kernels(mode):
    devices = 12
    placement = Placement((tuple(range(devices)),), devices)
    orders = [(F(0, d), B(0, d)) for d in range(devices)]
    orders[0] = (B(0, 0), F(0, 0))
    bad = Schedule("bad", placement, (0,), orders)
    with kernel(mode), pytest.raises(evaluate.DeadlockError, match="device 0 waits at B0s0 for B0s1"):
        layout(bad)


def test_object_and_array_construction_agree():
    schedule = registry.generate("chimera", 4, 8)
    again = Schedule(schedule.name, schedule.placement, schedule.microbatch2pipeline,
                     tuple(tuple(o) for o in schedule.orders), schedule.stage_work, schedule.split_backward,
                     schedule.params)
    assert again == schedule and hash(again) == hash(schedule)
    assert isinstance(schedule.orders, Orders) and schedule.orders == again.orders.tuple()
    assert replace(schedule, name="mine").orders == schedule.orders
    assert [op for order in schedule.orders for op in order] == schedule.ops.to_ops()
    assert schedule.ops.names() == [str(op) for op in schedule.ops.to_ops()]
    assert OpArrays.from_ops(schedule.ops.to_ops()).equals(schedule.ops)


@settings(max_examples=150, deadline=None)
@given(schedule=cases(max_stages=6, max_microbatches=12), data=st.data())
def test_schedule_checks_name_the_same_first_problem_as_the_reference(schedule, data):
    orders = [list(o) for o in schedule.orders]
    d = data.draw(st.integers(0, len(orders) - 1))
    i = data.draw(st.integers(0, len(orders[d]) - 1))
    op = orders[d][i]
    how = data.draw(st.sampled_from(["drop", "copy", "move", "microbatch", "kind", "stage", "pipeline"]))
    if how == "drop":
        del orders[d][i]
    elif how == "copy":
        orders[data.draw(st.integers(0, len(orders) - 1))].append(op)
    elif how == "move":
        orders[(d + 1) % len(orders)].insert(0, orders[d].pop(i))
    else:
        field = {"microbatch": "microbatch", "stage": "stage", "pipeline": "pipeline"}.get(how)
        orders[d][i] = op._replace(kind=data.draw(st.sampled_from(list(Kind)))) if how == "kind" else \
            op._replace(**{field: getattr(op, field) + data.draw(st.integers(-1, 3))})
    args = (schedule.name, schedule.placement, schedule.microbatch2pipeline, orders)
    want = ref_schedule_message(*args, schedule.split_backward)
    if want is None:
        Schedule(*args, schedule.stage_work, schedule.split_backward)
    else:
        with pytest.raises(ValueError) as info:
            Schedule(*args, schedule.stage_work, schedule.split_backward)
        assert str(info.value) == want


def test_schedule_checks_name_the_op():
    placement = Placement(((0, 1),), 2)
    with pytest.raises(ValueError, match="op F0s1 is ordered on device 0 but placed on device 1"):
        Schedule("x", placement, (0,), ((F(0, 0), F(0, 1), B(0, 0)), (B(0, 1),)))
    with pytest.raises(ValueError, match="op F0s0 appears twice"):
        Schedule("x", placement, (0,), ((F(0, 0), F(0, 0), B(0, 0)), (F(0, 1), B(0, 1))))
    with pytest.raises(ValueError, match=r"op B0s1 is missing from schedule 'x' \(1 missing\)"):
        Schedule("x", placement, (0,), ((F(0, 0), B(0, 0)), (F(0, 1),)))
    with pytest.raises(ValueError, match="op F5s0 on device 0 is not part of schedule"):
        Schedule("x", placement, (0,), ((F(0, 0), F(5, 0), B(0, 0)), (F(0, 1), B(0, 1))))
    with pytest.raises(ValueError, match="op W0s0 on device 0 is not part of schedule"):
        Schedule("x", placement, (0,), ((F(0, 0), B(0, 0), Op(Kind.W, 0, 0, 0)), (F(0, 1), B(0, 1))))


def test_table_keeps_its_face():
    table = layout(registry.generate("1f1b", 3, 4))
    again = Table(table.num_devices, reversed(table.entries), table.name, table.tick_slots)
    assert again == table and again.entries == table.entries and hash(again) == hash(table)
    assert replace(table, name="x").entries == table.entries and replace(table, name="x").name == "x"
    assert table.entries[:2] == tuple(table.entries)[:2] and list(table.entries) == list(table.entries.tuple())
    assert table.device_entries(1) == [e for e in table.entries if e.device == 1]
    assert table.by_op[F(2, 1)].device == 1
    assert np.array_equal(table.end, table.start + table.duration)
