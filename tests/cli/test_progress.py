"""Progress of long commands: a live line on a terminal whose clock ticks through a phase,
nothing at all when stderr is piped or with ``--quiet``."""

import io
import time

import pytest

from pipetab.cli import main
from pipetab.console import Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_live_line_ticks_through_a_phase_and_shows_its_budget():
    """One ``update`` and 1.3 s of silence: the line is redrawn with a later time, and the
    phase's budget is shown beside how much of it has gone."""
    stream = Terminal()
    with Progress("search", stream=stream) as progress:
        progress("CP-SAT searching 96 ops", budget_s=3)
        time.sleep(1.3)
    text = stream.getvalue()
    times = [float(x.split("]")[0].removesuffix(" s")) for x in text.split("search [")[1:]]
    assert len(times) >= 2 and max(times) >= 1.0 > min(times)
    assert "of 3 s)" in text and "CP-SAT searching 96 ops" in text


@pytest.mark.parametrize("stream, quiet", [(io.StringIO(), False), (Terminal(), True)])
def test_nothing_when_piped_or_quiet(stream, quiet):
    with Progress("plan", quiet=quiet, stream=stream) as progress:
        progress("simulating")
    assert stream.getvalue() == ""


@pytest.mark.parametrize("argv", [
    ["search", "-S", "4", "-B", "8", "--time-limit", "1"],
    ["bound", "-S", "4", "-B", "8", "--time-limit", "1"],
    ["search", "-S", "4", "-B", "8", "--time-limit", "1", "--quiet"],
])
def test_search_and_bound_add_nothing_when_piped(capsys, argv):
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert err == "" and "lower bound" in out


def test_a_piped_sweep_prints_no_progress(tmp_path, capsys):
    """Without ``--quiet`` but piped: the summary on stdout, nothing on stderr."""
    cfg = tmp_path / "tiny.toml"
    cfg.write_text('name = "tiny"\n[grid]\nschedules = ["1f1b", "gpipe"]\nstages = [2]\nmicrobatches = [4]\n'
                   'systems = ["mid_nw_mid_cp"]\n')
    assert main(["sweep", str(cfg), "--db", str(tmp_path / "t.sqlite"), "--workers", "1"]) == 0
    out, err = capsys.readouterr()
    assert "tiny" in out and err == ""
