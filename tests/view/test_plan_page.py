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
    """The page states the plan's certificate as the terminal does: without CP-SAT nothing
    in the space beats #1 (the page's first row), and the candidates never simulated are
    bounded at or above it, by as much as the text says."""
    result = plan(plan_question("llama3_8b", 1, 8, 64, "H100", 8192, top=5, cpsat_shapes=0))
    data, _ = plan_data(result)
    cert = result.certificate
    assert cert is not None and cert.gap == 0
    assert data["certificate"]["text"] == cert.text()
    best = result.configurations[0].step_time_s
    assert cert.best_s == best == min(c.step_time_s for c in result.evaluated if c.fits)
    assert data["certificate"]["text"].startswith(f"no configuration in the searched space is faster than #1 "
                                                  f"({best:.6g} s)")
    assert result.pruned_time > 0 and cert.unsimulated_s is not None and cert.unsimulated_s >= best
    assert f"bounded at {cert.unsimulated_s:.6g} s, {100 * (cert.unsimulated_s / best - 1):.2f} % slower" in \
        data["certificate"]["text"]
