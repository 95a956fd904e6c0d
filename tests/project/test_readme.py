"""The README's examples run, and print what the README shows.

Generic over whatever README.md holds:

* every ```` ```python ```` block runs without error (in a fresh namespace);
* every ```` ```console ```` block is a transcript: each ``$ pipetab ...`` line is run (in
  this process, in a scratch folder that sees the repository's ``experiments``), must exit 0,
  and must print exactly the lines that follow it up to the next ``$`` (trailing spaces
  ignored) -- unless the command ends with ``# output not compared`` (times, solver logs),
  followed by the date the output shown was taken;
* other fences (plain ```` ``` ````, ``sh``) are prose and are not run.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from pipetab.cli import main

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
NOT_COMPARED = "# output not compared"


def blocks(kind: str) -> list[tuple[int, str]]:
    """(line number, text) of each fenced block of ``kind``."""
    text = README.read_text(encoding="utf-8")
    out = []
    for m in re.finditer(rf"^```{kind}[ \t]*\n(.*?)^```", text, re.S | re.M):
        out.append((text.count("\n", 0, m.start()) + 1, m.group(1)))
    return out


def transcript(text: str) -> list[tuple[str, list[str] | None]]:
    """(command, expected lines or None when not compared) of a console block."""
    steps: list[tuple[str, list[str] | None]] = []
    for line in text.splitlines():
        if line.startswith("$ "):
            command = line[2:].strip()
            compared = NOT_COMPARED not in command  # "# output not compared[, taken DATE]"
            steps.append((command.split(NOT_COMPARED)[0].strip(), [] if compared else None))
        elif steps and steps[-1][1] is not None:
            steps[-1][1].append(line.rstrip())
    for _, expected in steps:
        while expected and expected[-1] == "":
            expected.pop()
    return steps


CONSOLE = [(n, cmd, exp) for n, text in blocks("console") for cmd, exp in transcript(text)]
PYTHON = blocks("python")


def test_the_readme_has_examples_to_run():
    assert PYTHON and CONSOLE, "README.md marks no ```python or ```console examples"


@pytest.mark.parametrize("line, block", PYTHON, ids=[f"README.md:{n}" for n, _ in PYTHON])
def test_python_example_runs(line, block, capsys):
    exec(compile("\n" * line + block, str(README), "exec"), {})


@pytest.mark.slow
@pytest.mark.parametrize("line, command, expected", CONSOLE, ids=[f"README.md:{n}:{c[:40]}" for n, c, _ in CONSOLE])
def test_console_example_prints_what_the_readme_shows(line, command, expected, tmp_path, monkeypatch):
    argv = shlex.split(command)
    assert argv[0] == "pipetab", f"README.md:{line}: console examples run pipetab commands, got {command!r}"
    (tmp_path / "experiments").symlink_to(ROOT / "experiments")
    monkeypatch.chdir(tmp_path)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv[1:])
    assert code == 0, f"README.md:{line}: {command} exited {code}: {err.getvalue()}"
    if expected is not None:
        got = [x.rstrip() for x in out.getvalue().rstrip("\n").splitlines()]
        assert got == expected, f"README.md:{line}: {command}"
