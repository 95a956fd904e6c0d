"""Options of ``pipetab search`` / ``bound`` that apply to some placement families only:
one line on stderr, exit code 2 (the rules ask the families' traits)."""

import pytest

from pipetab.cli import main
from pipetab.schedules.limits import MAX_DEVICES


@pytest.mark.parametrize("argv, line", [
    (["search", "-S", "4", "-B", "8", "--placement", "bidirectional", "--format", "torch-csv"],
     "--format torch-csv holds one pipeline; --placement bidirectional and --pipelines 2 have two"),
    (["search", "-S", "4", "-B", "8", "--placement", "free", "--pipelines", "2", "--format", "torch-csv"],
     "--format torch-csv holds one pipeline; --placement bidirectional and --pipelines 2 have two"),
    (["bound", "-S", "4", "-B", "8", "--placement", "v", "--pipelines", "2"],
     "--devices and --pipelines apply to --placement free only"),
    (["search", "-S", "4", "-B", "8", "--placement", "v", "--layers", "16"],
     "--partition and --layers apply to --placement linear or bidirectional"),
    (["search", "-S", "4", "-B", "8", "--placement", "interleaved", "--partition", "free", "--layers", "16"],
     "--partition and --layers apply to --placement linear or bidirectional"),
    (["bound", "-S", "2", "-B", "2", "--placement", "interleaved", "--chunks", str(MAX_DEVICES + 1)],
     f"--chunks must be at most {MAX_DEVICES}, got {MAX_DEVICES + 1}"),
    (["bound", "-S", "2", "-B", "2", "--placement", "wave", "--waves", str(MAX_DEVICES + 1)],
     f"--waves must be at most {MAX_DEVICES}, got {MAX_DEVICES + 1}"),
    (["search", "-S", "4", "-B", "4", "--placement", "linear", "--waves", "2"],
     "--waves applies to --placement wave only"),
    (["search", "-S", "4", "-B", "4", "--placement", "wave", "--chunks", "3"],
     "--chunks applies to --placement interleaved only"),
])
def test_refused(capsys, argv, line):
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and line in err and err.count("\n") == 1


def test_size_of_a_wave_placement_counts_its_stages(capsys):
    """Wave with W=3 on 4 devices has 24 stages: 2 x 24 ops per microbatch are counted
    against the size limit (2**23 ops; the message names the stages per device)."""
    code = main(["bound", "-S", "4", "-B", "200000", "--placement", "wave", "--waves", "3"])
    _, err = capsys.readouterr()
    assert code == 2 and "with 6 stages per device" in err
