"""The page ``pipetab view`` writes, read without a browser: self-contained, every op once,
times and memory equal to the levels it was made from."""

from __future__ import annotations

import json
import re

from pipetab.cli import main
from pipetab.schedules.table import SlotDurations
from pipetab.solver.levels import evaluate_levels
from pipetab.solver.pricing import hardware_costs
from pipetab.view import page_data, render_page


def embedded(text: str) -> dict:
    match = re.search(r'<script id="pipetab-data" type="application/json">(.*?)</script>', text, re.S)
    return json.loads(match.group(1))


def test_page_is_self_contained_and_holds_every_op(tmp_path, capsys):
    out = tmp_path / "v.html"
    assert main(["view", "1f1b", "zbv", "-S", "4", "-B", "8", "--system", "mid_nw_mid_cp", "-o", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out
    text = out.read_text(encoding="utf-8")
    assert not re.search(r"https?://|src=|href=|@import|url\(", text)  # no network, nothing fetched
    doc = embedded(text)
    assert [s["title"] for s in doc["schedules"]] == ["1f1b S=4 B=8 on mid_nw_mid_cp", "zbv S=4 B=8 on mid_nw_mid_cp"]
    assert [len(s["ops"]["kind"]) for s in doc["schedules"]] == [64, 4 * 8 * 2 * 3]  # zbv: 2 chunks x F, B, W
    assert doc["schedules"][0]["levels"]["schedule"] == "1f1b"


def test_page_data_equals_the_levels():
    lv = evaluate_levels("chimera", 4, 8, slots=SlotDurations(1, 2))
    lv = lv.simulated(hardware_costs(lv.schedule, "mid_nw_mid_cp", "paper_gpt"))
    d = page_data(lv)
    sim, ops = lv.simulation, d["ops"]
    assert d["levels"] == lv.as_dict() and d["time_unit"] == "s" and d["memory_unit"] == "bytes"
    cell = lv.table.by_op
    seen = set()
    columns = (ops["device"], ops["kind"], ops["pipeline"], ops["stage"], ops["microbatch"])
    for i, (dev, kind, p, s, m) in enumerate(zip(*columns)):
        op = next(o for o in sim.start if (o.kind.value, o.pipeline, o.stage, o.microbatch) == (kind, p, s, m))
        seen.add(op)
        assert lv.schedule.device_of(op) == dev
        assert abs(ops["start"][i] - sim.start[op]) < 1e-8 and abs(ops["end"][i] - sim.end[op]) < 1e-8
        assert (ops["table_start"][i], ops["table_end"][i]) == (cell[op].start, cell[op].end)
    assert len(seen) == len(sim.start)
    for dev in range(lv.schedule.num_devices):  # ops in device order, ascending within a device
        starts = [t for t, x in zip(ops["start"], ops["device"]) if x == dev]
        assert starts == sorted(starts)
        times, values = d["memory"][dev]
        assert max(values) - lv.simulation.costs.persistent[dev] == lv.simulation.peak_activation[dev]
        assert len(set(times)) == len(times)  # one value per time


def test_without_hardware_the_table_is_the_timeline():
    lv = evaluate_levels("interleaved", 4, 8, options={"chunks": 2})
    d = page_data(lv)
    assert d["time_unit"] == "slots" and d["memory_unit"] == "activations"
    assert d["ops"]["start"] == d["ops"]["table_start"] and d["ops"]["end"] == d["ops"]["table_end"]
    assert d["table_makespan"] == lv.table.makespan == d["makespan"]


def test_data_cannot_end_the_script_element():
    lv = evaluate_levels("1f1b", 2, 2)
    d = page_data(lv, title="</script><script>alert(1)</script>")
    text = render_page([d], title="<b>x</b>")
    assert text.count("</script>") == 2 and "<title>&lt;b&gt;x&lt;/b&gt;</title>" in text
    assert embedded(text)["schedules"][0]["title"] == "</script><script>alert(1)</script>"


def test_data_cannot_open_a_comment_or_tag_in_the_script_element():
    """``<!--<script>`` inside a script element would make the parser swallow the page's
    code (panels stop drawing): the data holds <, > and & only as JSON escapes."""
    lv = evaluate_levels("1f1b", 2, 2)
    d = page_data(lv, title="<!--<script>&amp;")
    text = render_page([d], title="<!--x")
    data = re.search(r'<script id="pipetab-data" type="application/json">(.*?)</script>', text, re.S).group(1)
    assert "<" not in data and ">" not in data and "&" not in data
    assert embedded(text)["schedules"][0]["title"] == "<!--<script>&amp;"


def test_titles_name_the_schedules_options(tmp_path, capsys):
    out = tmp_path / "v.html"
    assert main(["view", "interleaved", "hanayo", "-S", "4", "-B", "8", "-o", str(out)]) == 0
    capsys.readouterr()
    titles = [s["title"] for s in embedded(out.read_text())["schedules"]]
    assert titles[0].startswith("interleaved(chunks=2") and titles[1].startswith("hanayo(waves=1")
    from pipetab.plan.space import schedule_label
    from pipetab.schedules import registry

    for name, title in zip(("interleaved", "hanayo"), titles):  # every option, default or given
        label = schedule_label(name, {o.name: o.default for o in registry.spec(name).options})
        assert title == f"{label} S=4 B=8 (table slot costs)"
