"""A sweep killed with ``kill -9`` leaves no pool workers behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc to find child processes")

SCRIPT = textwrap.dedent("""
    import sys
    from pipetab.sweep import ResultStore, make_executor, parse_config, run_sweep
    config = parse_config({"grid": {"schedules": ["gpipe", "1f1b", "hanayo"], "stages": [4, 8],
                                    "microbatches": [64, 128, 256, 512], "systems": ["mid_nw_mid_cp"]}})
    with ResultStore(sys.argv[1]) as store:
        run_sweep(config, store, make_executor("local", 2), progress=False)
""")


def children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry.name))
    return out


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_pool_workers_exit_when_the_sweep_is_killed(tmp_path):
    parent = subprocess.Popen([sys.executable, "-c", SCRIPT, str(tmp_path / "k.sqlite")])
    try:
        deadline = time.monotonic() + 60
        workers: list[int] = []
        while len(workers) < 2 and time.monotonic() < deadline and parent.poll() is None:
            time.sleep(0.05)
            workers = children(parent.pid)
        assert len(workers) >= 2, "the sweep never started its two pool workers"
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 10
        while any(alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = [w for w in workers if alive(w)]
        for w in left:  # do not leave them running if the test fails
            os.kill(w, signal.SIGKILL)
        assert not left, f"pool workers {left} outlived their killed parent"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
