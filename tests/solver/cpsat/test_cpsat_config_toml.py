"""``CpSatConfig.from_toml``: the documented way to set the phases' numbers from a file."""

import pytest

from pipetab.solver.cpsat import CpSatConfig


def test_top_level_and_part_tables_with_overrides(tmp_path):
    path = tmp_path / "cpsat.toml"
    path.write_text("time_limit_s = 7.5\nworkers = 1\n[start]\nshare = 0.2\nprobe = [2, 6]\n"
                    "[model]\norder_literal_limit = 1000\n", encoding="utf-8")
    config = CpSatConfig.from_toml(path, workers=3)
    assert config.time_limit_s == 7.5
    assert config.workers == 3                       # the override wins over the file
    assert config.start.share == 0.2
    assert config.start.probe == (2, 6)              # TOML lists become the dataclass's tuples
    assert config.start.builds_left == CpSatConfig().start.builds_left   # untouched default
    assert config.model.order_literal_limit == 1000


@pytest.mark.parametrize("text, named", [
    ("time_limt_s = 3\n", "time_limt_s"),
    ("[start]\nshares = 0.2\n", "shares"),
    ("start = 3\n", "start"),
])
def test_an_unknown_key_is_named(tmp_path, text, named):
    path = tmp_path / "cpsat.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=named):
        CpSatConfig.from_toml(path)
