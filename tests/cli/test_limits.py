"""Size guards: requests beyond the documented limits (schedules.limits, docs/limits.md) are
refused with one line and exit code 2 before anything is generated or laid out."""

import pytest

from pipetab.cli import main
from pipetab.schedules import limits, registry


@pytest.fixture
def nothing_generated(monkeypatch):
    """Make every generator fail loudly: a refusal must come before generation."""
    def boom(*args, **kwargs):
        raise AssertionError("generated although the request is beyond the limits")

    for name, spec in registry.REGISTRY.items():
        monkeypatch.setitem(registry.REGISTRY, name, spec.__class__(**{**spec.__dict__, "generator": boom}))


def _refused(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.count("\n") == 1, err
    return err


@pytest.mark.parametrize("argv, message", [
    (("table", "1f1b", "-S", "4", "-B", "1000000000"), "8,000,000,000 ops"),
    (("table", "1f1b", "-S", "4", "-B", str(limits.MAX_OPS // 8 + 1)), f"at most {limits.MAX_OPS:,}"),
    (("table", "1f1b", "-S", "100000", "-B", "8"), "stages must be at most 1024 devices, got 100000"),
    (("table", "1f1b", "-S", str(limits.MAX_DEVICES + 1), "-B", "1"), "at most 1024 devices"),
    (("table", "zbv", "-S", "128", "-B", str(limits.MAX_OPS // (6 * 128) + 1)), "ops"),
    (("table", "1f1b", "-S", "128", "-B", str(limits.MAX_GRID_CELLS // 256 + 1)), "use the CSV or JSON form"),
    (("evaluate", "1f1b", "-S", "64", "-B", "1024", "--system", "mid_nw_mid_cp", "--model", "paper_gpt"),
     "global batch 512 of model 'paper_gpt' cannot be split into 1024"),
])
def test_beyond_the_limits_is_one_line_before_any_work(capsys, nothing_generated, argv, message):
    assert message in _refused(capsys, *argv)


def test_the_limit_itself_is_accepted():
    assert registry.num_ops("1f1b", 4, limits.MAX_OPS // 8) == limits.MAX_OPS
    registry.check_request("1f1b", 4, limits.MAX_OPS // 8)
    registry.check_request("1f1b", limits.MAX_DEVICES, 1)


def test_ops_count_is_what_the_generators_make():
    for name, S, B, opts in [("gpipe", 4, 3, {}), ("1f1b", 4, 3, {}), ("zb-h1", 4, 3, {}), ("chimera", 4, 8, {}),
                             ("chimera-fd", 4, 8, {}), ("chimera-asym", 4, 8, {"split": (1, 2)}),
                             ("hanayo", 4, 8, {"waves": 2}), ("interleaved", 4, 8, {"chunks": 3}),
                             ("zbv", 4, 3, {}), ("dualpipev", 4, 8, {})]:
        assert registry.num_ops(name, S, B, **opts) == registry.generate(name, S, B, **opts).num_ops


def test_grids_and_pictures_beyond_their_limits_are_refused(capsys):
    err = _refused(capsys, "table", "1f1b", "-S", "4", "-B", "8", "--forward-slots", "10000000")
    assert "too many to draw as a grid" in err
    assert main(["table", "1f1b", "-S", "4", "-B", "8", "--forward-slots", "10000000", "--format", "csv"]) == 0
    capsys.readouterr()
    pytest.importorskip("matplotlib")
    err = _refused(capsys, "table", "1f1b", "-S", "64", "-B", "4096", "--format", "csv", "--plot", "x.png")
    assert "too many to draw" in err


def test_table_and_evaluate_import_no_solver_dataframe_or_plotting(tmp_path):
    """Whole-process time of ``table`` and ``evaluate`` is start-up and imports: they load
    neither OR-Tools nor pandas nor matplotlib unless asked (CP-SAT, a plot)."""
    import subprocess
    import sys

    code = (
        "import sys; from pipetab.cli import main;"
        "main(['table', '1f1b', '-S', '4', '-B', '8', '--format', 'json']);"
        "main(['evaluate', '1f1b', '-S', '4', '-B', '8', '--system', 'mid_nw_mid_cp', '--trace', sys.argv[1]]);"
        "print(' '.join(sorted({m.split('.')[0] for m in sys.modules} & {'ortools', 'pandas', 'matplotlib'})),"
        " file=sys.stderr)"
    )
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "t.json")], capture_output=True, text=True,
                         check=True)
    assert out.stderr.strip() == ""


def test_huge_numbers_in_table_files_are_refused_or_named_without_huge_arrays():
    from pipetab.schedules import formats
    from pipetab.schedules.validate import TableError, validate

    head = "device,start,duration,kind,pipeline,stage,microbatch\n"
    with pytest.raises(formats.FormatError, match=r"microbatch must be at most 1099511627776"):
        formats.from_csv(head + f"0,0,1,F,0,0,{2**41}\n")
    table = formats.from_csv(head + f"0,0,1,F,0,0,{2**40}\n0,1,1,B,0,{2**40},0\n")
    with pytest.raises(TableError, match="microbatch 1 has no ops"):
        validate(table)
