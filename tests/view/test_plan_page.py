"""``pipetab plan --html``'s data: rows a person can tell apart (no browser needed)."""

from pipetab.plan import plan, plan_question
from pipetab.view.plan_page import plan_data

SHOWN_WHERE_THEY_DIFFER = ("cp", "ep", "zero", "sp", "layers", "mfu_causal")
ALWAYS = ("schedule", "pp", "tp", "dp", "mb", "micro", "recompute", "step", "tokens", "mfu", "peak", "free",
          "fits", "source")


def test_page_rows_differ_in_a_column_the_page_shows():
    """Every row of the page's table differs from every other in a column the page shows
    (the optional columns are shown where rows differ in them, as ``plan.js`` does), and a
    shape of one stage appears once: GPipe and 1F1B on one stage are the same run."""
    result = plan(plan_question("llama3_8b", 1, 8, 64, "H100", 8192, top=10, cpsat_shapes=0))
    data, _ = plan_data(result)
    rows = data["rows"]
    assert len(rows) >= 10
    shown = list(ALWAYS) + [k for k in SHOWN_WHERE_THEY_DIFFER if len({str(r[k]) for r in rows}) > 1]
    assert "zero" in shown and "layers" in shown  # ZeRO 1 and 3, uneven layouts of refinements
    printed = [tuple(str(r[k]) for k in shown) for r in rows]
    assert len(set(printed)) == len(printed)
    single = [(r["tp"], r["dp"], r["zero"], r["mb"], r["recompute"]) for r in rows if r["pp"] == 1]
    assert single and len(set(single)) == len(single)


def test_page_carries_the_certificate():
    """The page states the plan's certificate as the terminal does."""
    result = plan(plan_question("llama3_8b", 1, 8, 64, "H100", 8192, top=5, cpsat_shapes=0))
    data, _ = plan_data(result)
    assert result.certificate is not None
    assert data["certificate"]["text"] == result.certificate.text()
    assert "no configuration in the searched space is more than 0.00 % faster than #1" in data["certificate"]["text"]
