"""A sweep killed with ``kill -9`` leaves no pool workers behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.procs import gone, wait_for_children

pytestmark = pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc to find child processes")

SCRIPT = textwrap.dedent("""
    import sys
    from pipetab.sweep import ResultStore, make_executor, parse_config, run_sweep
    config = parse_config({"grid": {"schedules": ["gpipe", "1f1b", "hanayo"], "stages": [4, 8],
                                    "microbatches": [64, 128, 256, 512], "systems": ["mid_nw_mid_cp"]}})
    with ResultStore(sys.argv[1]) as store:
        run_sweep(config, store, make_executor("local", 2), progress=False)
""")


def test_pool_workers_exit_when_the_sweep_is_killed(tmp_path):
    parent = subprocess.Popen([sys.executable, "-c", SCRIPT, str(tmp_path / "k.sqlite")])
    try:
        workers = wait_for_children(parent, 2, within=60)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        left = gone(workers, within=10)
        assert not left, f"pool workers {left} outlived their killed parent"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
