"""``pipetab view --open``: the page is written whether or not a browser opens it."""

import webbrowser

from pipetab.cli import main


def test_view_open_without_a_browser_is_not_a_failure(capsys, tmp_path, monkeypatch):
    """No browser on the machine: the page is written, a note says where, exit 0 (not 2)."""
    opened = []
    monkeypatch.setattr(webbrowser, "open", lambda uri: opened.append(uri) or False)
    page = tmp_path / "v.html"
    code = main(["view", "1f1b", "--stages", "2", "--microbatches", "4", "--output", str(page), "--open"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert page.stat().st_size > 1000 and opened == [page.resolve().as_uri()]
    assert f"open {page} yourself" in out and err == ""
