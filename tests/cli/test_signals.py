"""Ending a command from outside: plan's CP-SAT workers end with it (SIGTERM, SIGKILL),
Ctrl-C ends plan and a Dask sweep quietly -- one line, no traceback -- with what the sweep
finished kept in its store."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.procs import gone, wait_for_children

pytestmark = pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc to find child processes")

# the installed ``pipetab`` command: its console script calls pipetab.cli.main and exits with its code
PIPETAB = [sys.executable, "-c", "import sys; from pipetab.cli import main; sys.exit(main())"]
# tiny_gpt plans in about a second; CP-SAT then searches its two best shapes for 60 s in two workers
PLAN = [*PIPETAB, "plan", "--model", "tiny_gpt", "--nodes", "1", "--gpus-per-node", "8", "--global-batch", "64",
        "--cpsat-time", "60", "--quiet"]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_plans_workers_end_with_it(sig):
    parent = subprocess.Popen(PLAN, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        workers = wait_for_children(parent, 2)
        os.kill(parent.pid, sig)
        parent.wait(timeout=30)
        assert not gone(workers), "plan's CP-SAT workers outlived it"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


def interrupt(argv: list[str], ready, **kw) -> subprocess.CompletedProcess:
    """Run ``argv`` in its own process group, send the group SIGINT (a terminal's Ctrl-C)
    once ``ready(process)`` holds, and collect what it printed."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, **kw)
    try:
        ready(proc)
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def test_ctrl_c_ends_plan_quietly():
    done = interrupt(PLAN, lambda p: wait_for_children(p, 2))
    assert done.returncode == 130
    assert done.stderr.strip().splitlines() == ["pipetab plan: interrupted"], done.stderr


@pytest.mark.slow
def test_ctrl_c_ends_a_dask_sweep_quietly_keeping_what_it_finished(tmp_path):
    pytest.importorskip("distributed")
    config = tmp_path / "s.toml"
    config.write_text('[grid]\nschedules = ["gpipe", "1f1b", "hanayo", "zb-h1"]\nstages = [8, 16, 32]\n'
                      'microbatches = [256, 512, 1024, 2048, 4096]\nsystems = ["mid_nw_mid_cp"]\n'
                      'models = ["tiny_gpt"]\n[grid.cluster]\nglobal_batch = 4096\n')
    db = tmp_path / "s.sqlite"

    def some_rows(_proc):
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            time.sleep(0.2)
            try:
                if sqlite3.connect(db).execute("SELECT COUNT(*) FROM results").fetchone()[0] >= 2:
                    return
            except sqlite3.Error:
                continue
        raise AssertionError("the sweep stored no row in 120 s")

    done = interrupt([*PIPETAB, "sweep", str(config), "--executor", "dask",
                      "--workers", "2", "--db", str(db), "--quiet"], some_rows)
    assert done.returncode == 130
    assert "Traceback" not in done.stderr and "WARNING" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pipetab sweep: interrupted"), done.stderr
    kept = sqlite3.connect(db).execute("SELECT COUNT(*) FROM results").fetchone()[0]
    assert kept >= 2
