"""The torch CSV both ways: files written by PyTorch's own schedule classes (made by
``experiments/torch_schedules.py``, kept in ``tests/data/torch``) are read and validated,
equal pipetab's generators of the same schedules op for op, and their stage -> rank layout
is the one torchtitan builds from the schedule's name; a full backward ``B`` mixed with
``I``/``W`` reads as an ``I`` followed by its ``W``; pipetab's own CSVs read back equal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipetab.cli import main
from pipetab.schedules import formats, registry
from pipetab.schedules.ops import Kind, Op
from pipetab.schedules.table import layout
from pipetab.schedules.validate import schedule_from_table, validate

DATA = Path(__file__).resolve().parents[1] / "data" / "torch"


def read(name: str):
    table = formats.from_torch_csv((DATA / f"{name}.csv").read_text(), name)
    validate(table)
    return table, schedule_from_table(table)


@pytest.mark.parametrize("name, ours, options, style, titan", [
    ("gpipe_r4_m8", "gpipe", {}, "loop", "1F1B"),
    ("interleaved1f1b_r4_v2_m8", "interleaved", {"chunks": 2}, "loop", "Interleaved1F1B"),
    ("zbv_r4_m8", "zbv", {}, "v", "ZBVZeroBubble"),
])
def test_torchs_schedules_equal_pipetabs_op_for_op(name, ours, options, style, titan):
    _, sched = read(name)
    mine = registry.generate(ours, 4, 8, **options)
    assert sched.placement.stage2device == mine.placement.stage2device
    assert sched.orders == mine.orders
    layout = formats.torch_layout(sched)
    assert layout["style"] == style and layout["warning"] is None
    assert layout["torchtitan"]["parallelism.pipeline_parallel_schedule"] == titan
    assert layout["torchtitan"]["parallelism.pipeline_parallel_degree"] == 4


@pytest.mark.parametrize("name, microbatches", [("dualpipev_r4_m8", 8), ("dualpipev_r4_m10", 10)])
def test_torchs_dualpipev_equals_pipetabs_with_its_pairs(name, microbatches):
    """torch 2.13's ScheduleDualPipeV: the same order as pipetab's (DeepSeek's step loop),
    its OVERLAP_F_B actions pipetab's overlapped pairs, its full backwards B with their W,
    and laid out the same table op for op."""
    table, sched = read(name)
    mine = registry.generate("dualpipev", 4, microbatches)
    assert sched.placement.stage2device == mine.placement.stage2device
    assert sched.orders == mine.orders
    assert set(sched.blocks) == set(mine.blocks)
    assert table.entries == layout(mine).entries
    back = schedule_from_table(formats.from_torch_csv(formats.to_torch_csv(table), name))  # pipetab's own CSV
    assert back.orders == mine.orders and set(back.blocks) == set(mine.blocks)


@pytest.mark.parametrize("name, ranks, stages", [("interleavedzb_r4_v2_m8", 4, 8), ("loopedbfs_r2_v2_m4", 2, 4)])
def test_torchs_other_schedules_are_read(name, ranks, stages):
    table, sched = read(name)
    assert table.num_devices == ranks and sched.num_stages() == stages
    assert formats.torch_layout(sched)["style"] == "loop"
    # every op of every stage and microbatch once
    kinds = 3 if sched.split_backward else 2
    assert len({op for o in sched.orders for op in o}) == sched.num_ops == kinds * stages * sched.num_microbatches


def test_a_full_backward_mixed_with_i_and_w_is_an_i_then_its_w():
    """torch's ZB-V with microbatch 7's I and W as one B (torch's loader accepts it): the
    same ops as ZB-V, each such B followed at once by its W on the same rank."""
    _, mixed = read("zbv_mixed_b_r4_m8")
    _, plain = read("zbv_r4_m8")
    assert mixed.split_backward and {op for o in mixed.orders for op in o} == {op for o in plain.orders for op in o}
    for order in mixed.orders:
        for i, op in enumerate(order):
            if op.kind is Kind.B and op.microbatch == 7:
                assert order[i + 1] == Op(Kind.W, 0, op.stage, 7)


def test_torchs_1f1b_dump_is_refused_for_its_shifted_microbatches():
    """torch 2.13's Schedule1F1B writes its last rank's forwards as microbatches 1..8
    (``3F1`` .. ``3F8``): not a schedule of 8 microbatches -- pipetab names the first op
    missing rather than read something else."""
    with pytest.raises(ValueError, match="op F0s3 is missing"):
        read("1f1b_r4_m8")


def test_actions_that_compute_nothing_are_skipped():
    text = "0F0,0B0,0REDUCE_GRAD,0UNSHARD\n1RECV_F0,1F0,1B0,1SEND_B0,1RESHARD\n"
    sched = schedule_from_table(formats.from_torch_csv(text, "t"))
    assert sched.orders == ((Op(Kind.F, 0, 0, 0), Op(Kind.B, 0, 0, 0)), (Op(Kind.F, 0, 1, 0), Op(Kind.B, 0, 1, 0)))


@pytest.mark.parametrize("name, S, B, options", [("zbv", 4, 8, {}), ("interleaved", 4, 8, {"chunks": 3}),
                                                 ("zb-h2", 4, 8, {}), ("dualpipev", 4, 8, {})])
def test_pipetabs_csv_reads_back_equal(name, S, B, options):
    from pipetab.schedules.table import layout

    sched = registry.generate(name, S, B, **options)
    back = schedule_from_table(formats.from_torch_csv(formats.to_torch_csv(layout(sched)), name))
    assert back.orders == sched.orders and back.placement.stage2device == sched.placement.stage2device


def test_a_wave_placement_has_no_torchtitan_layout():
    sched = registry.generate("hanayo", 4, 8, waves=2)
    lay = formats.torch_layout(sched)
    assert lay["style"] is None and "no torchtitan layout" in lay["warning"] and lay["torchtitan"] is None
    assert lay["rank_stages"][0] == [s for s, d in enumerate(sched.placement.stage2device[0]) if d == 0]


def test_evaluate_and_plan_write_torch_csv_with_the_layout_on_stderr(capsys, tmp_path):
    assert main(["evaluate", "zbv", "-S", "4", "-B", "8", "--format", "torch-csv"]) == 0
    out, err = capsys.readouterr()
    sched = schedule_from_table(formats.from_torch_csv(out, "zbv"))
    assert sched.orders == registry.generate("zbv", 4, 8).orders
    assert "stage -> rank (v): rank 0: stages 0, 7" in err and "pipeline_parallel_schedule ZBVZeroBubble" in err
    assert main(["evaluate", "hanayo", "-S", "4", "-B", "8", "--waves", "2", "--format", "torch-csv"]) == 0
    assert "warning: no torchtitan layout" in capsys.readouterr().err
    plan = ["plan", "--model", "tiny_gpt", "--nodes", "1", "--gpus-per-node", "4", "--global-batch", "16",
            "--cpsat-shapes", "0", "--schedules", "1f1b,zbv,interleaved"]
    assert main([*plan, "--format", "json"]) == 0
    best = json.loads(capsys.readouterr().out)["configurations"][0]
    assert main([*plan, "--format", "torch-csv"]) == 0
    out, err = capsys.readouterr()
    sched = schedule_from_table(formats.from_torch_csv(out, "winner"))
    opts = best["options"]
    assert sched.orders == registry.generate(best["schedule"], best["pp"], best["microbatches"], **opts).orders
    assert "winner:" in err and "torchtitan:" in err
    assert main(["evaluate", "chimera", "-S", "4", "-B", "8", "--format", "torch-csv"]) == 2
    assert "one pipeline" in capsys.readouterr().err
