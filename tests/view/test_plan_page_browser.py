"""``pipetab plan --html`` in a real headless browser: the page loads without console
errors or network requests, the ranked table has one row per simulated configuration and
sorts, a hover on a Pareto point names its shape, the winner's and runner-up's panels draw
every op, and text from a user's file cannot break the page."""

from __future__ import annotations

import json
from pathlib import Path

from pipetab.cli import main
from tests.view.test_view_browser import browser, open_page  # noqa: F401 (the fixture)

PLAN = ["plan", "--nodes", "1", "--gpus-per-node", "8", "--global-batch", "64", "--quiet", "--cpsat-shapes", "0",
        "--top", "5"]


def plan_page(tmp_path: Path, capsys, model: str = "tiny_gpt") -> tuple[Path, dict]:
    page = tmp_path / "plan.html"
    assert main([*PLAN, "--model", model, "--html", str(page), "--format", "json"]) == 0
    return page, json.loads(capsys.readouterr().out)


def test_plan_page_rows_sorting_hover_and_panels(browser, tmp_path, capsys):  # noqa: F811
    from pipetab.plan import plan, plan_question
    from pipetab.view.plan_page import one_run_per_shape

    path, doc = plan_page(tmp_path, capsys)
    page = open_page(browser, path)
    assert page.problems == []
    # one row per simulated configuration (a shape of one stage once), the shown ones first and in plan's order
    result = plan(plan_question("tiny_gpt", 1, 8, 64, cpsat_shapes=0, top=5))
    evaluated = one_run_per_shape(list(result.evaluated))
    rows = page.locator("#ranked tbody tr")
    assert rows.count() == len(evaluated) >= len(doc["configurations"]) == 5
    first = rows.nth(0).locator("td")
    best = doc["configurations"][0]
    assert first.nth(1).inner_text() == result.configurations[0].label
    assert [first.nth(i).inner_text() for i in (2, 3, 4)] == [str(best["pp"]), str(best["tp"]), str(best["dp"])]
    # sorting by peak memory puts the least memory first
    page.click("#ranked th[data-key='peak']")
    keys = [th.get_attribute("data-key") for th in page.locator("#ranked th").all()]
    peaks = [float(t) for t in page.locator(f"#ranked tbody tr td:nth-child({keys.index('peak') + 1})")
             .all_inner_texts()]
    assert peaks == sorted(peaks) and len(peaks) == rows.count()
    # the winner's point names its shape on hover
    winner = result.configurations[0]
    want = f"{winner.label} {winner.shape.label} recompute {winner.recompute_label}"
    point = page.locator("#pareto circle[data-rank='1']")
    assert point.count() == 1 and point.get_attribute("data-shape") == want
    point.hover()
    page.wait_for_selector("#tip:not([hidden])", timeout=5_000)
    assert want in page.inner_text("#tip")
    assert page.locator("#pareto circle").count() == len(evaluated)
    # the winner's and runner-up's panels: every op drawn in table and timeline, a memory legend
    for i, conf in enumerate(result.configurations[:2]):
        panel = page.locator(f"#schedule-{i}")
        assert ("winner" if i == 0 else "runner-up") in panel.locator("h2").inner_text()
        ops = conf.levels.schedule.num_ops
        for kind in ("table", "timeline"):
            assert int(panel.locator(f"canvas.{kind}").get_attribute("data-drawn")) == ops
        assert panel.locator(".memory-legend span").count() >= 2
        assert "simulation" in panel.locator("table.levels").inner_text()  # the three levels
    text = page.inner_text("body")
    # the plan's own notes of what its space left out, and what no plan models
    assert "What plan did not consider" in text and "EP not considered: dense model" in text
    assert "FP8 activation caching" in text
    assert "outside their schedule's regime (the schedule does not exist" in text
    assert page.problems == []


def test_a_hostile_model_name_cannot_break_the_page(browser, tmp_path, capsys):  # noqa: F811
    """A model file's name is the model's name: ``<!--<script>`` in a script element would
    swallow the page's code (a file name cannot hold the ``/`` of ``</script>``; the view's
    page test feeds that through a title)."""
    root = Path(__file__).resolve().parents[2]
    hostile = tmp_path / "x<!--<script>&amp;.toml"
    hostile.write_text((root / "hardware/presets/models/tiny_gpt.toml").read_text())
    path, _ = plan_page(tmp_path, capsys, str(hostile))
    page = open_page(browser, path)
    assert page.problems == []
    assert "x<!--<script>&amp;" in page.inner_text("h1")
    assert page.locator("#ranked tbody tr").count() > 0
    assert int(page.locator("#schedule-0 canvas.table").get_attribute("data-drawn")) > 0
