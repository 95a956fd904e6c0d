"""The README's Python example runs and prints the numbers the README states."""

import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_python_api_example_runs():
    text = README.read_text()
    block = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block, "README.md", "exec"), {})
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("0.157") and lines[1].startswith("0.272")  # 3/19 and 3/11
    assert len(lines) == 3


def test_readme_names_the_two_commands():
    text = README.read_text()
    assert "make demo" in text and "make test" in text
