"""DualPipe (bidirectional): per-device orders against an independent transcription of
DeepSeek's reference step loop, DeepSeek's published bubble and memory, the serial variant,
and errors.

``REFERENCE`` was written from ``deepseek-ai/DualPipe`` ``dualpipe/dualpipe.py``
(``DualPipe.step``, commit 3da1bbe) by a separate re-statement of its loop (compute order
only): ``Fd.m`` the forward of direction d's m-th microbatch, ``Bd.m`` a full backward,
``bd.m`` an input-gradient backward whose weight gradient ``Wd.m`` runs later,
``(F&B)`` an overlapped pair, ``[F;B]`` the pair the middle ranks run one after the other.
"""

from __future__ import annotations

import pytest

from pipetab.schedules import formulas, registry
from pipetab.schedules.generators.dualpipe import dualpipe
from pipetab.schedules.metrics import table_metrics
from pipetab.schedules.ops import Kind
from pipetab.schedules.table import SlotDurations, layout
from pipetab.schedules.validate import validate

REFERENCE = {
    (4, 8): [
        "F0.0 F0.1 F0.2 F1.0 b1.0 W1.0 F1.1 (F0.3&B1.1) (F1.2&B0.0) B1.2 (F1.3&B0.1) B1.3 b0.2 W0.2 b0.3 W0.3",
        "F0.0 F1.0 F0.1 F1.1 [F0.2;B1.0] (F1.2&B0.0) (F0.3&B1.1) (F1.3&B0.1) B1.2 B0.2 b1.3 b0.3 W1.3 W0.3",
        "F1.0 F0.0 F1.1 F0.1 [F1.2;B0.0] (F0.2&B1.0) (F1.3&B0.1) (F0.3&B1.1) B0.2 B1.2 b0.3 b1.3 W0.3 W1.3",
        "F1.0 F1.1 F1.2 F0.0 b0.0 W0.0 F0.1 (F1.3&B0.1) (F0.2&B1.0) B0.2 (F0.3&B1.1) B0.3 b1.2 W1.2 b1.3 W1.3",
    ],
    (8, 20): [
        "F0.0 F0.1 F0.2 F0.3 F0.4 F0.5 F0.6 F1.0 b1.0 W1.0 F1.1 b1.1 W1.1 F1.2 b1.2 W1.2 F1.3 (F0.7&B1.3) (F1.4&B0.0) (F0.8&B1.4) (F1.5&B0.1) (F0.9&B1.5) (F1.6&B0.2) B1.6 (F1.7&B0.3) B1.7 (F1.8&B0.4) B1.8 (F1.9&B0.5) B1.9 b0.6 W0.6 b0.7 W0.7 b0.8 W0.8 b0.9 W0.9",  # noqa: E501
        "F0.0 F0.1 F0.2 F0.3 F0.4 F1.0 F0.5 F1.1 b1.0 W1.0 F1.2 b1.1 W1.1 F1.3 (F0.6&B1.2) (F1.4&B0.0) (F0.7&B1.3) (F1.5&B0.1) (F0.8&B1.4) (F1.6&B0.2) (F0.9&B1.5) (F1.7&B0.3) B1.6 (F1.8&B0.4) B1.7 (F1.9&B0.5) B1.8 B0.6 b1.9 b0.7 W1.9 b0.8 W0.7 b0.9 W0.8 W0.9",  # noqa: E501
        "F0.0 F0.1 F0.2 F1.0 F0.3 F1.1 F0.4 F1.2 b1.0 W1.0 F1.3 (F0.5&B1.1) (F1.4&B0.0) (F0.6&B1.2) (F1.5&B0.1) (F0.7&B1.3) (F1.6&B0.2) (F0.8&B1.4) (F1.7&B0.3) (F0.9&B1.5) (F1.8&B0.4) B1.6 (F1.9&B0.5) B1.7 B0.6 B1.8 b0.7 b1.9 b0.8 W0.7 b0.9 W1.9 W0.8 W0.9",  # noqa: E501
        "F0.0 F1.0 F0.1 F1.1 F0.2 F1.2 F0.3 F1.3 [F0.4;B1.0] (F1.4&B0.0) (F0.5&B1.1) (F1.5&B0.1) (F0.6&B1.2) (F1.6&B0.2) (F0.7&B1.3) (F1.7&B0.3) (F0.8&B1.4) (F1.8&B0.4) (F0.9&B1.5) (F1.9&B0.5) B1.6 B0.6 B1.7 B0.7 b1.8 b0.8 b1.9 b0.9 W1.8 W0.8 W1.9 W0.9",  # noqa: E501
        "F1.0 F0.0 F1.1 F0.1 F1.2 F0.2 F1.3 F0.3 [F1.4;B0.0] (F0.4&B1.0) (F1.5&B0.1) (F0.5&B1.1) (F1.6&B0.2) (F0.6&B1.2) (F1.7&B0.3) (F0.7&B1.3) (F1.8&B0.4) (F0.8&B1.4) (F1.9&B0.5) (F0.9&B1.5) B0.6 B1.6 B0.7 B1.7 b0.8 b1.8 b0.9 b1.9 W0.8 W1.8 W0.9 W1.9",  # noqa: E501
        "F1.0 F1.1 F1.2 F0.0 F1.3 F0.1 F1.4 F0.2 b0.0 W0.0 F0.3 (F1.5&B0.1) (F0.4&B1.0) (F1.6&B0.2) (F0.5&B1.1) (F1.7&B0.3) (F0.6&B1.2) (F1.8&B0.4) (F0.7&B1.3) (F1.9&B0.5) (F0.8&B1.4) B0.6 (F0.9&B1.5) B0.7 B1.6 B0.8 b1.7 b0.9 b1.8 W1.7 b1.9 W0.9 W1.8 W1.9",  # noqa: E501
        "F1.0 F1.1 F1.2 F1.3 F1.4 F0.0 F1.5 F0.1 b0.0 W0.0 F0.2 b0.1 W0.1 F0.3 (F1.6&B0.2) (F0.4&B1.0) (F1.7&B0.3) (F0.5&B1.1) (F1.8&B0.4) (F0.6&B1.2) (F1.9&B0.5) (F0.7&B1.3) B0.6 (F0.8&B1.4) B0.7 (F0.9&B1.5) B0.8 B1.6 b0.9 b1.7 W0.9 b1.8 W1.7 b1.9 W1.8 W1.9",  # noqa: E501
        "F1.0 F1.1 F1.2 F1.3 F1.4 F1.5 F1.6 F0.0 b0.0 W0.0 F0.1 b0.1 W0.1 F0.2 b0.2 W0.2 F0.3 (F1.7&B0.3) (F0.4&B1.0) (F1.8&B0.4) (F0.5&B1.1) (F1.9&B0.5) (F0.6&B1.2) B0.6 (F0.7&B1.3) B0.7 (F0.8&B1.4) B0.8 (F0.9&B1.5) B0.9 b1.6 W1.6 b1.7 W1.7 b1.8 W1.8 b1.9 W1.9",  # noqa: E501
    ],
}


def notation(schedule, microbatches: int) -> list[str]:
    """Each device's order in the reference notation (module docstring)."""
    half = microbatches // 2
    in_block = {op: block for block in schedule.blocks for op in block}

    def name(op, letter=None):
        return f"{letter or op.kind.value}{op.pipeline}.{op.microbatch - half * op.pipeline}"

    rows = []
    for order in schedule.orders:
        out, i = [], 0
        while i < len(order):
            op = order[i]
            block = in_block.get(op, (op,))
            if op.kind is Kind.F and len(block) == 3:
                out.append(f"({name(block[0])}&{name(block[1])})")
            elif op.kind is Kind.B:
                out.append(name(op, "B" if len(block) == 2 else "b"))
            else:
                out.append(name(op))
            i += len(block)
        rows.append(" ".join(out))
    return rows


@pytest.mark.parametrize("devices, microbatches", sorted(REFERENCE))
def test_orders_equal_the_reference(devices, microbatches):
    want = [row.replace("[", "").replace(";", " ").replace("]", "") for row in REFERENCE[(devices, microbatches)]]
    assert notation(dualpipe(devices, microbatches), microbatches) == want


SHAPES = [(s, b) for s in (2, 4, 6, 8, 12, 16) for b in (2 * s, 2 * s + 2, 3 * s + 3 * (s % 2), 64) if b % 2 == 0]


@pytest.mark.parametrize("stages, microbatches", SHAPES)
@pytest.mark.parametrize("f, w", [(1, 1), (2, 1), (2, 2), (3, 1), (3, 2)])
def test_deepseek_bubble_and_memory(stages, microbatches, f, w):
    """DeepSeek's table (README; V3 report Table 2): (PP/2-1)(F&B+B-3W) idle per device,
    with F&B = F + B (no communication to hide), B the full backward, on its assumption of
    a forward as long as the input-gradient backward (F = B_in >= W); PP+1 live stage
    activations and two weight copies on every device."""
    schedule = dualpipe(stages, microbatches)
    table = layout(schedule, SlotDurations(f, f, w))
    validate(table, schedule)
    m = table_metrics(table, schedule)
    full_b = f + w
    assert m.idle_slots == ((stages // 2 - 1) * ((f + full_b) + full_b - 3 * w),) * stages
    assert m.peak_activations == (stages + 1,) * stages
    assert m.weight_copies == (2.0,) * stages
    if (f, w) == (1, 1):
        assert m.bubble_ratio == pytest.approx(formulas.dualpipe(stages, microbatches).bubble_ratio)


@pytest.mark.parametrize("stages, microbatches", SHAPES)
def test_serial_pairs(stages, microbatches):
    schedule = dualpipe(stages, microbatches, overlap=False)
    assert schedule.params["overlap"] is False and all(len(b) == 2 for b in schedule.blocks)
    table = layout(schedule, SlotDurations(1, 1, 1))
    validate(table, schedule)
    m = table_metrics(table, schedule)
    assert m.bubble_ratio == pytest.approx(formulas.dualpipe(stages, microbatches, overlap=False).bubble_ratio)
    assert m.peak_activations == (stages + 1,) * stages


def test_shape_and_registry():
    s = dualpipe(4, 8)
    assert s.placement.stage2device == ((0, 1, 2, 3), (3, 2, 1, 0))
    assert s.microbatch2pipeline == (0, 0, 0, 0, 1, 1, 1, 1)
    assert registry.generate("dualpipe", 4, 8) == s
    assert registry.generate("dualpipe", 4, 8, overlap=False).params["overlap"] is False


@pytest.mark.parametrize("stages, microbatches, message", [
    (3, 8, "stages must be even for dualpipe, got 3"),
    (4, 6, r"microbatches must be even and at least 2 x stages \(8\) for dualpipe, got 6"),
    (4, 9, r"microbatches must be even and at least 2 x stages \(8\) for dualpipe, got 9"),
])
def test_errors(stages, microbatches, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        dualpipe(stages, microbatches)
