"""Child processes of a test's subprocess, read from /proc (Linux): shared by the tests
that kill a command and check that its workers end with it."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import subprocess


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid``."""
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
    """Whether ``pid`` runs (a zombie does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_for_children(parent: subprocess.Popen, count: int, within: float = 120) -> list[int]:
    """The children of ``parent`` once there are ``count`` (asserted within ``within`` s)."""
    deadline = time.monotonic() + within
    kids: list[int] = []
    while len(kids) < count and time.monotonic() < deadline and parent.poll() is None:
        time.sleep(0.05)
        kids = children(parent.pid)
    assert len(kids) >= count, f"the command never started {count} worker processes"
    return kids


def gone(pids: list[int], within: float = 20) -> list[int]:
    """Wait (up to ``within`` s) for ``pids`` to end; the ones still alive, killed."""
    deadline = time.monotonic() + within
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [p for p in pids if alive(p)]
    for p in left:  # do not leave them running when the test fails
        os.kill(p, signal.SIGKILL)
    return left
