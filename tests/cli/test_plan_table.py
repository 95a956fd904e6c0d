"""``pipetab plan``'s table as a person reads it: no two ranked rows alike, and on a terminal
of 80, 100 or 120 columns every value whole (columns left out or labels wrapped instead)."""

from dataclasses import replace

import pytest
from rich.console import Console

from pipetab.cli.plan_cmd import _rows, numeric_columns
from pipetab.console import rich_table
from pipetab.plan import plan, plan_question


@pytest.fixture(scope="module")
def llama_plan():
    """Llama 3 8B on 8 H100, batch 64: PP = 1 rows of every schedule compete with pipelines."""
    return plan(plan_question("llama3_8b", 1, 8, 64, "H100", 8192, top=10, cpsat_shapes=0))


def rendered(head, rows, drop, wrap, width: int) -> tuple[str, list[str]]:
    console = Console(width=width, force_terminal=True, record=True, highlight=False)
    t, left_out = rich_table(head, rows, numeric_columns(head), width, drop, wrap, console=console)
    console.print(t)
    return console.export_text(), left_out


def test_no_two_ranked_rows_print_alike(llama_plan):
    """Every row differs from every other in a printed value; one stage is one run whatever
    the schedule (1F1B and GPipe at PP = 1 are both gradient accumulation): once per shape."""
    _, rows, _, _ = _rows(llama_plan)
    assert len(rows) == len(llama_plan.configurations) >= 5
    assert len({r[1:] for r in rows}) == len(rows)
    single = [c.shape.even for c in llama_plan.configurations if c.shape.pp == 1]
    assert single and len(set(single)) == len(single)


def test_rows_alike_but_for_a_decision_name_it(llama_plan):
    """Two rows that differ only in sequence parallelism get an ``also`` column saying so."""
    a = next(c for c in llama_plan.configurations if c.shape.tp > 1)
    b = replace(a, shape=a.shape.replace(sequence_parallel=not a.shape.sequence_parallel))
    head, rows, _, _ = _rows(replace(llama_plan, configurations=(a, b)))
    assert head[-1] == "also" and rows[0][-1] != rows[1][-1]
    assert {rows[0][-1], rows[1][-1]} == {"sequence_parallel=True", "sequence_parallel=False"}
    assert len({r[1:] for r in rows}) == 2


WIDE_HEAD = ("#", "schedule", "PPxTPxCPxDP", "EP", "ZeRO", "b x m", "recompute", "step (s)", "tokens/s", "MFU",
             "MFU causal", "peak GiB", "fits")
WIDE_ROWS = [
    ("1", "interleaved(chunks=4)", "16x2x1x8", "8x2", "1", "1 x 512", "selective", "13.36", "1,234,567", "45.4%",
     "40.1%", "73.3", "yes"),
    ("2", "dualpipe(overlap=False)", "2x4x2x256", "256", "3", "16 x 30", "layers 4*3,2", "18.52", "999,999",
     "47.2%", "41.0%", "163.6", "NO"),
    ("10", "interleaved-zb(chunks=2)", "8x8x1x256", "64", "1", "1 x 1920", "full", "281.4", "29,807", "45.3%",
     "40.0%", "75.2", "yes"),
]


@pytest.mark.parametrize("width", [80, 100, 120])
@pytest.mark.parametrize("case", ["plan", "wide"])
def test_terminal_table_cuts_no_value(llama_plan, width, case):
    """At 80, 100 and 120 columns: no line wider than the terminal, no ellipsis, every
    value of a number column whole on its row's line, every word of a label whole."""
    if case == "plan":
        head, rows, drop, wrap = _rows(llama_plan)
    else:
        head, rows, drop, wrap = WIDE_HEAD, WIDE_ROWS, [8, 12], {1, 6}
    text, left_out = rendered(head, rows, drop, wrap, width)
    lines = text.rstrip("\n").split("\n")
    assert all(len(line) <= width for line in lines)
    assert "…" not in text
    shown = [i for i, h in enumerate(head) if h not in left_out]
    assert set(left_out) <= {head[i] for i in drop}
    for r in rows:
        line = next(x for x in lines if x.split() and x.split()[0] == r[0] and r[2] in x.split())
        for i in shown:
            if i in wrap:
                for word in r[i].replace("(", " ").replace(",", " ").split():
                    assert word in text, (width, r[i])
            else:
                assert f" {r[i]}" in f" {line}", (width, head[i], r[i], line)
    if width >= 120 and case == "plan":
        assert not left_out


def test_piped_plan_output_has_the_causal_mfu_column(llama_plan):
    """At 8192 tokens attention is over a fifth of Llama 3 8B's FLOPs: both MFUs are columns,
    the causal one the frameworks' times the factor of the note."""
    head = _rows(llama_plan)[0]
    assert "MFU causal" in head
    c = llama_plan.configurations[0]
    assert 0 < c.mfu_causal < c.mfu
    note = next(n for n in llama_plan.notes if "MFU causal" in n)
    factor = float(note.rsplit("times ", 1)[1].rstrip(")"))
    assert c.mfu_causal / c.mfu == pytest.approx(factor, abs=0.005)


def test_one_usable_memory_figure_across_commands(llama_plan):
    """Plan's usable memory is the GPU's less its reserve, and the ``--memory-cap`` it
    names for ``search`` and ``bound`` parses back to that figure (to the 0.05 GiB shown)."""
    import re

    from pipetab.cli.plan_cmd import _memory_line
    from pipetab.cli.solve_cmd import parse_bytes
    from pipetab.plan import cluster

    device = cluster("H100", 1, 8).device
    line = _memory_line(llama_plan)
    usable = llama_plan.configurations[0].capacity_bytes
    assert usable == int(device.memory_bytes - device.reserved_bytes)
    cap = re.search(r"--memory-cap (\S+)\)", line)[1]
    assert abs(parse_bytes(cap) - usable) <= 0.05 * 2**30
    assert f"usable GPU memory {usable / 2**30:.1f} GiB" in line
