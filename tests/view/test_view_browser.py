"""``pipetab view`` in a real headless browser (Debian's chromium driven by Playwright):
the page loads without console errors, draws every op, a hover names the op under the
pointer, the wheel zooms, and a B=1024 page stays usable. Skipped, with the reason in the
summary, where the browser or Playwright is missing (``.ci/run`` installs both)."""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

import pytest

from pipetab.cli import main

CHROMIUM = os.environ.get("PIPETAB_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]

sync_api = pytest.importorskip("playwright.sync_api", reason="browser tests skipped: Playwright is not installed "
                               "(pip install -e '.[dev]')")
if not Path(CHROMIUM).exists():
    pytest.skip(f"browser tests skipped: no chromium at {CHROMIUM} (apt-get install chromium)", allow_module_level=True)


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    with sync_api.sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")), executable_path=CHROMIUM, args=ARGS,
            headless=True, viewport={"width": 1400, "height": 1000})
        yield context
        context.close()


def open_page(browser, path: Path):
    """The page at ``path``, loaded and drawn, with every console error and page error
    collected in ``page.problems``."""
    page = browser.new_page()
    page.problems = []
    page.on("console", lambda m: m.type in ("error", "warning") and page.problems.append(f"{m.type}: {m.text}"))
    page.on("pageerror", lambda e: page.problems.append(f"page error: {e}"))
    page.on("request", lambda r: not r.url.startswith("file:") and page.problems.append(f"request: {r.url}"))
    page.goto(path.resolve().as_uri())
    page.wait_for_selector("body[data-ready='1']", timeout=60_000)
    return page


def write(tmp_path, *argv) -> Path:
    out = tmp_path / "view.html"
    assert main(["view", *argv, "-o", str(out)]) == 0
    return out


def canvas_geometry(canvas) -> dict:
    d = canvas.evaluate("c => ({...c.dataset})")
    box = canvas.bounding_box()
    return {"x": box["x"], "y": box["y"], **{k: float(v) for k, v in d.items()}}


def point_of(g: dict, device: int, start: float, end: float) -> tuple[float, float]:
    """Where the op of ``device`` from ``start`` to ``end`` is drawn (its middle)."""
    x = g["x"] + g["left"] + ((start + end) / 2 - g["t0"]) / (g["t1"] - g["t0"]) * (g["right"] - g["left"])
    y = g["y"] + g["top"] + (device + 0.5) * g["rowHeight"]
    return x, y


def hover_text(page, x: float, y: float) -> str:
    page.mouse.move(x, y)
    page.wait_for_selector("#tip:not([hidden])", timeout=5_000)
    return page.inner_text("#tip")


def test_page_loads_draws_every_op_and_hover_names_the_op(browser, tmp_path):
    from pipetab.schedules.registry import generate

    page = open_page(browser, write(tmp_path, "1f1b", "zbv", "-S", "4", "-B", "8", "--system", "mid_nw_mid_cp",
                                    "--model", "paper_gpt"))
    assert page.problems == []
    counts = {"1f1b": 4 * 8 * 2, "zbv": 4 * 8 * 2 * 3}
    for i, name in enumerate(counts):
        panel = page.locator(f"#schedule-{i}")
        assert name in panel.locator("h2").inner_text()
        for kind in ("table", "timeline"):
            assert int(panel.locator(f"canvas.{kind}").get_attribute("data-drawn")) == counts[name]
        assert len(generate(name, 4, 8).orders[0]) * 4 == counts[name]
    # hover the backward of microbatch 5 on stage 2 of 1F1B in the simulated timeline
    from pipetab.solver.levels import evaluate_levels
    from pipetab.solver.pricing import hardware_costs

    lv = evaluate_levels("1f1b", 4, 8)
    lv = lv.simulated(hardware_costs(lv.schedule, "mid_nw_mid_cp", "paper_gpt"))
    op = next(o for o in lv.simulation.start if (o.kind.value, o.stage, o.microbatch) == ("B", 2, 5))
    timeline = page.locator("#schedule-0 canvas.timeline")
    x, y = point_of(canvas_geometry(timeline), 2, lv.simulation.start[op], lv.simulation.end[op])
    text = hover_text(page, x, y)
    assert "B · microbatch 5 · stage 2" in text and "on device 2" in text
    cell = lv.table.by_op[op]
    assert f"table: slots {cell.start}\u2013{cell.end}" in text  # the viewer writes an en dash
    # and the same op in the table
    table = page.locator("#schedule-0 canvas.table")
    x, y = point_of(canvas_geometry(table), 2, cell.start, cell.end)
    assert "B · microbatch 5 · stage 2" in hover_text(page, x, y)
    assert page.problems == []


def test_wheel_zooms_and_hover_stays_right(browser, tmp_path):
    page = open_page(browser, write(tmp_path, "gpipe", "-S", "4", "-B", "32"))
    table = page.locator("#schedule-0 canvas.table")
    before = canvas_geometry(table)
    assert before["drawn"] == 4 * 32 * 2
    box = table.bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.3, box["y"] + 20)
    for _ in range(5):
        page.mouse.wheel(0, -300)
    page.wait_for_function(f"document.querySelector('#schedule-0 canvas.table').dataset.t1 - "
                           f"document.querySelector('#schedule-0 canvas.table').dataset.t0 < "
                           f"{before['t1'] - before['t0']} / 4")
    after = canvas_geometry(table)
    assert 0 < after["drawn"] < before["drawn"]  # only what is in the window is drawn
    # GPipe's forward of microbatch m on stage s runs in slot s + m: find one in the window
    s = 1
    m = next(m for m in range(32) if after["t0"] <= s + m and s + m + 1 <= after["t1"])
    text = hover_text(page, *point_of(after, s, s + m, s + m + 1))
    assert f"F · microbatch {m} · stage {s}" in text
    page.dblclick("#schedule-0 canvas.table")  # reset
    page.wait_for_function("document.querySelector('#schedule-0 canvas.table').dataset.t0 == 0")
    assert page.problems == []


def test_a_long_run_stays_usable(browser, tmp_path):
    t0 = time.perf_counter()
    page = open_page(browser, write(tmp_path, "1f1b", "-S", "16", "-B", "1024"))
    timeline = page.locator("canvas.table")
    assert int(timeline.get_attribute("data-drawn")) == 16 * 1024 * 2
    box = timeline.bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + 30)
    started = time.perf_counter()
    for _ in range(12):
        page.mouse.wheel(0, -400)
    page.wait_for_function("(() => { const c = document.querySelector('canvas.table'); "
                           "return c.dataset.drawn < 2000; })()", timeout=30_000)
    zoom_s = time.perf_counter() - started
    g = canvas_geometry(timeline)
    text = hover_text(page, g["x"] + (g["left"] + g["right"]) / 2, g["y"] + g["top"] + 0.5 * g["rowHeight"])
    assert re.search(r"[FB] · microbatch \d+ · stage 0", text) and "on device 0" in text
    assert page.problems == []
    assert zoom_s < 20, f"twelve zoom steps took {zoom_s:.1f} s"
    assert time.perf_counter() - t0 < 120
