"""The validator names what is wrong; text, CSV, JSON and torch-CSV forms round-trip."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reference_core import cases

from pipetab.schedules import formats, registry
from pipetab.schedules.ops import Kind, Op
from pipetab.schedules.table import PlacedOp, SlotDurations, Table, layout
from pipetab.schedules.validate import TableError, schedule_from_table, validate


def _two_stage_table(entries):
    return Table(2, tuple(PlacedOp(Op.parse(o), d, s, n) for o, d, s, n in entries))


GOOD = [("F0s0", 0, 0, 1), ("F0s1", 1, 1, 1), ("B0s1", 1, 2, 2), ("B0s0", 0, 4, 2)]


def test_op_text_round_trip():
    for op in [Op(Kind.F, 0, 2, 3), Op(Kind.B, 1, 0, 12), Op(Kind.W, 0, 15, 0)]:
        assert Op.parse(str(op)) == op
    assert str(Op(Kind.B, 1, 2, 3)) == "B3p1s2"
    with pytest.raises(ValueError, match="malformed"):
        Op.parse("X1s1")


def test_valid_hand_table():
    validate(_two_stage_table(GOOD))


@pytest.mark.parametrize(
    "entries, message",
    [
        (GOOD[:-1], r"op B0s0 is missing \(expected on device 0\)"),
        ([*GOOD, ("F0s0", 0, 7, 1)], r"op F0s0 appears twice \(again on device 0 at slot 7\)"),
        ([("F0s0", 0, 0, 1), ("F0s1", 1, 1, 1), ("B0s1", 1, 2, 2), ("B0s0", 0, 3, 2)],
         r"op B0s0 on device 0 starts at slot 3 before its dependency B0s1 ends at slot 4"),
        ([("F0s0", 0, 0, 1), ("F0s1", 1, 0, 1), ("B0s1", 1, 2, 2), ("B0s0", 0, 4, 2)],
         r"op F0s1 on device 1 starts at slot 0 before its dependency F0s0 ends at slot 1"),
        ([*GOOD, ("F1s0", 0, 5, 1), ("F1s1", 1, 6, 1), ("B1s1", 1, 7, 2), ("B1s0", 0, 9, 2)],
         r"device 0 runs B0s0 and F1s0 in slot 5"),
        ([("F0s0", 0, 0, 1), ("F0s1", 1, 1, 1), ("B0s1", 1, 2, 2), ("B0s0", 1, 4, 2)],
         r"stage 0 of pipeline 0 runs on devices 0 and 1"),
    ],
)
def test_validator_names_the_problem(entries, message):
    with pytest.raises(TableError, match=message):
        validate(_two_stage_table(entries))


def test_validator_checks_against_schedule():
    schedule = registry.generate("1f1b", 2, 1)
    table = _two_stage_table(GOOD)
    validate(table, schedule)
    other = registry.generate("1f1b", 2, 2)
    with pytest.raises(TableError, match="does not match schedule"):
        validate(table, other)


def test_schedule_from_table_round_trip():
    schedule = registry.generate("1f1b", 4, 6)
    table = layout(schedule, SlotDurations(1, 2))
    back = schedule_from_table(table)
    assert back.orders == schedule.orders
    assert layout(back, SlotDurations(1, 2)).entries == table.entries


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(schedule=cases(max_stages=16, max_microbatches=64), F=st.integers(1, 3), K=st.integers(1, 4))
def test_formats_round_trip(schedule, F, K):
    table = layout(schedule, SlotDurations(F, K))
    validate(table, schedule)
    assert formats.from_text(formats.to_text(table)).entries == table.entries
    assert formats.from_csv(formats.to_csv(table)).entries == table.entries
    assert formats.from_json(formats.to_json(table)).entries == table.entries
    if schedule.num_pipelines == 1:
        # torch's form keeps only the order; laying it out again gives the same table
        assert formats.from_torch_csv(formats.to_torch_csv(table), slots=SlotDurations(F, K)).entries == table.entries
    else:
        with pytest.raises(ValueError, match="torch CSV holds one pipeline"):
            formats.to_torch_csv(table)


def test_json_schema_exact_keys():
    schedule = registry.generate("gpipe", 2, 2)
    doc = json.loads(formats.to_json(layout(schedule), schedule="gpipe", stages=2))
    assert set(doc) == {"schedule", "stages", "microbatches", "devices", "makespan_slots", "tick_slots", "bubble_ratio",
                        "ops"}
    assert set(doc["ops"][0]) == {"device", "start", "duration", "kind", "pipeline", "stage", "microbatch"}
    assert doc["makespan_slots"] == 9 and doc["bubble_ratio"] == pytest.approx(1 / 3)


@pytest.mark.parametrize(
    "reader, text, message",
    [
        (formats.from_json, "{not json", "JSON table is malformed"),
        (formats.from_json, '{"ops": [{"device": 0}]}', "missing field 'start'"),
        (formats.from_csv, "device,start\n0,0\n", "CSV table must have the header"),
        (formats.from_csv, "device,start,duration,kind,pipeline,stage,microbatch\n0,0,1,X,0,0,0\n",
         "kind must be F, B or W"),
        (formats.from_csv, "device,start,duration,kind,pipeline,stage,microbatch\n0,0,0,F,0,0,0\n",
         "duration must be >= 1"),
        (formats.from_text, "dev0 | F0s0 Q1\n", "dev0, slot 1: op 'Q1' is malformed"),
        (formats.from_torch_csv, "0F0,xx\n", "action 'xx' is not like '2F0'"),
    ],
)
def test_malformed_files(reader, text, message):
    with pytest.raises(ValueError, match=message):
        reader(text)
