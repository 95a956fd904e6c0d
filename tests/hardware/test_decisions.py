"""The context decisions declared once (``hardware.decisions``): every ``Context`` field has
one declaration, and the command lines and ``plan``'s ``ContextSpace`` are made from them."""

from __future__ import annotations

from dataclasses import fields

import pytest

from pipetab.cli import main
from pipetab.hardware.context import Context
from pipetab.hardware.decisions import DECISION, DECISIONS, PLAN_DECISIONS, ContextSpace, Enumerate, decisions_for


def test_every_context_field_is_declared_once():
    """One declaration per field of ``Context``, no more."""
    names = [d.name for d in DECISIONS]
    assert len(names) == len(set(names))
    assert set(names) == {f.name for f in fields(Context)}


def test_the_context_space_holds_what_plan_enumerates():
    """``ContextSpace``'s fields are the ``space`` names of the decisions ``plan`` takes."""
    assert {f.name for f in fields(ContextSpace)} == {d.space for d in PLAN_DECISIONS}
    assert DECISION["microbatch_size"].space == "microbatch_sizes"
    assert {d.name for d in DECISIONS if d.plan is Enumerate.DERIVED} == {"global_batch", "seq_len", "layout",
                                                                          "recompute_layers", "recompute_modules",
                                                                          "activation_precision"}


@pytest.mark.parametrize("command", ["evaluate", "view", "search", "bound", "plan"])
def test_every_declared_option_is_on_its_command(capsys, command):
    """``pipetab COMMAND --help`` lists the flag of each decision it takes."""
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = capsys.readouterr().out
    flags = [d.plan_flag if command == "plan" and d.plan_flag else d.flag for d in decisions_for(command)]
    assert flags and all(f"{flag} " in text or f"{flag}\n" in text for flag in flags)


def test_the_resolved_context_derives_concrete_switches():
    """``zero`` and ``sequence_parallel`` are never None once a ``Context`` exists."""
    assert (Context().zero, Context().sequence_parallel) == (0, False)
    assert (Context(tp=8, dp=2).zero, Context(tp=8, dp=2).sequence_parallel) == (1, True)
    assert Context(tp=8, dp=2, zero=None).replace(dp=1, zero=None).zero == 0


def test_sizes_of_a_context_resolved_for_a_step():
    """``sizes``: microbatch size, global batch, sequence and microbatches, all known;
    ``stages``: the pipeline depth."""
    ctx = Context(pp=4, dp=2, microbatch_size=2, global_batch=64, seq_len=1024)
    assert tuple(ctx.sizes) == (2, 64, 1024, 16) and ctx.stages == 4
    with pytest.raises(ValueError, match="not resolved for a step: microbatch_size not known"):
        _ = Context(global_batch=8, seq_len=16).sizes
    with pytest.raises(ValueError, match="no pipeline depth"):
        _ = Context().stages


def test_the_context_space_checks_its_candidates():
    """Candidates are checked as their decision says (the messages of ``plan``'s space)."""
    with pytest.raises(ValueError, match="ep must be an integer >= 1, got 0"):
        ContextSpace(ep=(2, 0))
    with pytest.raises(ValueError, match="recompute must be among none, selective, full, got 'some'"):
        ContextSpace(recompute=("some",))
    with pytest.raises(ValueError, match="cp comm must be one of p2p, allgather"):
        ContextSpace(cp_comm="ring")
    assert ContextSpace().zeros(1) == (0,) and ContextSpace().zeros(4) == (1, 3)
    assert ContextSpace(zero=2).zeros(4) == (2,)


def test_the_declared_megatron_names_are_megatron_arguments():
    """Each declared Megatron-LM name is an argument of its training script (the list made
    from Megatron's source, ``tests/data/megatron_arguments.txt``)."""
    from pathlib import Path

    arguments = set((Path(__file__).parents[1] / "data" / "megatron_arguments.txt").read_text().split())
    declared = [d.megatron for d in DECISIONS if d.megatron]
    assert len(declared) >= 14 and set(declared) <= arguments


def test_a_decision_s_default_is_the_context_s():
    """Defaults are declared on ``Context`` only: a decision reads its field's."""
    assert (DECISION["tp"].default, DECISION["routing_imbalance"].default, DECISION["recompute"].default) == (
        1, 1.0, "none")
    assert DECISION["zero"].default is None and DECISION["sequence_parallel"].default is None  # derived


@pytest.mark.parametrize("decision", DECISIONS, ids=lambda d: d.name)
def test_each_example_is_allowed_and_not_the_default(decision):
    """The tests of every decision (sweep keys, stage-cost caching) take its example."""
    values = decision.example if decision.sweep_list else [decision.example]
    assert isinstance(values, list) and values
    for value in values:
        assert value != decision.default
        if decision.kind in (int, float, bool, str):
            decision.check(value, among=decision.sweep_list)
