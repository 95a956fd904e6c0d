"""Sweep configs: parsing, validation (one clear line, before any work), expansion, keys."""

from __future__ import annotations

import pytest

from pipetab.cli import main
from pipetab.sweep import ConfigError, expand, load_config, parse_config
from pipetab.sweep.config import parse_cap

GOOD = """
name = "small"
[grid]
schedules = ["gpipe", "chimera", "hanayo"]
stages = [4, 6]
microbatches = [4, 8]
systems = ["mid_nw_mid_cp"]
[run]
mode = "simulate"
"""


def write(tmp_path, text, name="cfg.toml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_expand_counts_and_skips(tmp_path):
    config = load_config(write(tmp_path, GOOD))
    todo, skipped = expand(config)
    # gpipe: 2 S x 2 B = 4; chimera: (4,4), (4,8) valid, S=6 with B in {4,8} not a multiple of 6
    # -> 2 valid, 2 skipped; hanayo (B a multiple of S): (4,4), (4,8) valid, S=6 skipped
    assert len(todo) == 8 and len(skipped) == 4
    assert {s.configuration.schedule for s in skipped} == {"chimera", "hanayo"}
    assert all(s.reason for s in skipped)
    keys = [c.key for c in todo]
    assert len(set(keys)) == len(keys)


def test_keys_are_stable_and_defaults_fill_in(tmp_path):
    a = expand(load_config(write(tmp_path, GOOD, "a.toml")))[0]
    doc = {"grid": {"schedules": ["hanayo"], "stages": [4], "microbatches": [8], "systems": ["mid_nw_mid_cp"]}}
    with_default = {"grid": {**doc["grid"], "options": {"hanayo": {"waves": [1]}}}}
    k1 = expand(parse_config(doc))[0][0]
    k2 = expand(parse_config(with_default))[0][0]
    assert k1.key == k2.key and k1.options == (("waves", 1),)
    assert [c.key for c in a] == [c.key for c in expand(load_config(write(tmp_path, GOOD, "c.toml")))[0]]
    # what decides the result changes the key; what does not, does not
    table = parse_config({"grid": {k: v for k, v in doc["grid"].items() if k != "systems"}, "run": {"mode": "table"}})
    assert expand(table)[0][0].key != k1.key
    limit = parse_config({**doc, "run": {"time_limit": 99.0}})
    assert expand(limit)[0][0].key == k1.key  # time limit does not matter in simulate mode


@pytest.mark.parametrize("text, fragment", [
    ('[grid]\nschedules=["gpipe"]\nstages=[4]\nmicrobatches=[8]\nsystems=["mid_nw_mid_cp"]\ncolour="red"',
     "unknown key 'colour' in [grid]"),
    ('bogus = 1\n[grid]\nschedules=["gpipe"]\nstages=[4]\nmicrobatches=[8]\nsystems=["mid_nw_mid_cp"]',
     "unknown key 'bogus'"),
    ('[grid]\nschedules=["gpipe"]\nstages=[4]\nmicrobatches=[8]\nsystems=["mid_nw_mid_cp"]\n[run]\nmood="x"',
     "unknown key 'mood' in [run]"),
    ('[grid]\nschedules=["zigzag"]\nstages=[4]\nmicrobatches=[8]\nsystems=["mid_nw_mid_cp"]',
     "unknown schedule 'zigzag'"),
    ('[grid]\nschedules=["gpipe"]\nstages=[4]\nmicrobatches=[8]\nsystems=["moon_base"]', "unknown system 'moon_base'"),
    ('[grid]\nschedules=["gpipe"]\nstages=[4]\nmicrobatches=[8]\nsystems=["mid_nw_mid_cp"]\nmodels=["gpt9"]',
     "unknown model 'gpt9'"),
    ('[grid]\nschedules=["gpipe"]\nstages=[]\nmicrobatches=[8]\nsystems=["mid_nw_mid_cp"]', "grid.stages is empty"),
    ('[grid]\nschedules=[]\nstages=[4]\nmicrobatches=[8]\nsystems=["mid_nw_mid_cp"]', "grid.schedules is empty"),
    ('[grid]\nschedules=["gpipe"]\nstages=["4"]\nmicrobatches=[8]\nsystems=["mid_nw_mid_cp"]',
     "grid.stages must list integers"),
    ('[grid]\nschedules=["gpipe"]\nstages=[4]\nmicrobatches=8\nsystems=["mid_nw_mid_cp"]',
     "grid.microbatches must be a list"),
    ('[grid]\nschedules=["gpipe"]\nstages=[1]\nmicrobatches=[8]\nsystems=["mid_nw_mid_cp"]', "integers >= 2"),
    ('[grid]\nschedules=["gpipe"]\nstages=[4]\nmicrobatches=[8]', "grid.systems is required"),
    ('[grid]\nschedules=["gpipe"]\nstages=[4]\nmicrobatches=[8]\nsystems=["mid_nw_mid_cp"]\n[run]\nmode="fast"',
     "run.mode must be one of"),
    ('[grid]\nschedules=["gpipe"]\nstages=[4]\nmicrobatches=[8]\nsystems=["mid_nw_mid_cp"]\n[run]\ntime_limit=-1',
     "run.time_limit must be a number > 0"),
    ('[grid]\nschedules=["gpipe"]\nstages=[4]\nmicrobatches=[8]\nsystems=["mid_nw_mid_cp"]\n[run]\nmode="search"\n'
     'deterministic_time=0', "run.deterministic_time must be a number > 0"),
    ('[grid]\nschedules=["gpipe"]\nstages=[4]\nmicrobatches=[8]\nsystems=["mid_nw_mid_cp"]\ncaps=["lots"]',
     "grid.caps"),
    ('[grid]\nschedules=["hanayo"]\nstages=[4]\nmicrobatches=[8]\nsystems=["mid_nw_mid_cp"]\n'
     '[grid.options]\nhanayo={colour=[1]}', "takes no option 'colour'"),
    ('[grid]\nschedules=["gpipe"]\nstages=[4]\nmicrobatches=[8]\nsystems=["mid_nw_mid_cp"]\n'
     '[grid.options]\nhanayo={waves=[1]}', "not in grid.schedules"),
    ('[grid]\nschedules=["gpipe"]\nstages=[4]\nmicrobatches=[8]\nsystems=["mid_nw_mid_cp"]\n[run]\nmode="table"',
     "not used in mode 'table'"),
    ('[grid]\nschedules=["gpipe"]\nstages=[4, 4]\nmicrobatches=[8]\nsystems=["mid_nw_mid_cp"]', "lists a value twice"),
    ("[grid\nschedules=", "not valid TOML"),
    ('[run]\nmode="simulate"', "missing table [grid]"),
])
def test_malformed_configs_are_rejected_with_one_line(tmp_path, text, fragment):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    msg = str(err.value)
    assert fragment in msg and "\n" not in msg and str(path) in msg


def test_cli_rejects_before_any_work(tmp_path, capsys):
    path = write(tmp_path,
                 '[grid]\nschedules=["gpipe", "nope"]\nstages=[4]\nmicrobatches=[8]\nsystems=["mid_nw_mid_cp"]')
    db = tmp_path / "never.sqlite"
    code = main(["sweep", str(path), "--db", str(db)])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "unknown schedule 'nope'" in err
    assert not db.exists()  # nothing was started
    code = main(["sweep", str(tmp_path / "missing.toml")])
    assert code == 2 and "does not exist" in capsys.readouterr().err
    good = write(tmp_path, GOOD, "good.toml")
    assert main(["sweep", str(good), "--db", str(db), "--export", "x.xlsx"]) == 2
    assert main(["sweep", str(good), "--db", str(db), "--scheduler", "tcp://127.0.0.1:1"]) == 2
    assert not db.exists()


def test_caps():
    assert parse_cap("device") == "device" and parse_cap("NONE") == "none"
    assert parse_cap(80) == "80GB" and parse_cap("80GB") == "80GB" and parse_cap("8act") == "8act"
    for bad in ("0act", -1, True, "big", "xGB"):
        with pytest.raises(ConfigError):
            parse_cap(bad)


def test_search_settings_are_a_grid_dimension():
    doc = {"grid": {"schedules": ["1f1b"], "stages": [4], "microbatches": [4], "systems": ["mid_nw_mid_cp"],
                    "search": {"time_limit": [1, 5], "ticks_per_op": [10, 20]}},
           "run": {"mode": "search", "workers": 1}}
    todo, _ = expand(parse_config(doc))
    assert len(todo) == 4 and len({c.key for c in todo}) == 4
    assert {(c.run.time_limit, c.run.ticks_per_op, c.run.workers) for c in todo} == {
        (1.0, 10, 1), (1.0, 20, 1), (5.0, 10, 1), (5.0, 20, 1)}
    assert "limit=5s workers=1 ticks/op=20" in todo[-1].label()
    for bad, fragment in (({"run": {"mode": "simulate"}}, "only used in modes"),
                          ({"grid": {**doc["grid"], "search": {"ticks_per_op": [1.5]}}},
                           "grid.search: run.ticks_per_op"),
                          ({"grid": {**doc["grid"], "search": {"seed": [1]}}},
                           r"unknown key 'seed' in \[grid.search\]")):
        with pytest.raises(ConfigError, match=fragment):
            parse_config({**doc, **bad})
