"""Forked worker processes for plan's CP-SAT searches: one process per job, at most
``workers`` at a time, each ending with plan however plan ends.

Why not ``concurrent.futures``: its pool runs a manager thread, and a Ctrl-C that lands
while that thread starts, or while the pool shuts down, leaves tracebacks or ends the
interpreter by the signal. Here there is no thread: a job is a forked process and a pipe.
Workers ignore SIGINT (a terminal's Ctrl-C goes to the whole process group; plan alone
handles it and terminates them); they exit on their own once plan is gone (SIGTERM, SIGKILL:
``sweep.executors.exit_with_parent``).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from typing import Any, Callable


def _run(conn, parent: int, fn: Callable, args: tuple) -> None:
    from pipetab.sweep.executors import exit_with_parent

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    exit_with_parent(parent)
    try:
        conn.send((True, fn(*args)))
    except BaseException as exc:
        conn.send((False, exc))
    finally:
        conn.close()


class Job:
    """One call of ``fn(*args)`` in a worker; ``result()`` waits for it (and re-raises its
    exception)."""

    def __init__(self, workers: Workers, fn: Callable, args: tuple) -> None:
        self.workers, self.fn, self.args = workers, fn, args
        self.proc: Any = None
        self.conn: Any = None
        self.ends: tuple = ()  # both ends of the pipe, kept: a connection collected mid-run
        self.done = False      # runs its __del__, where a Ctrl-C would be swallowed

    def start(self) -> None:
        ctx = multiprocessing.get_context("fork")
        here, there = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_run, args=(there, os.getpid(), self.fn, self.args), daemon=True)
        # forked with SIGINT blocked: a Ctrl-C during the fork reaches plan, not the new worker
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            proc.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
        there.close()
        self.proc, self.conn, self.ends = proc, here, (here, there)

    def result(self, timeout: float | None = None):
        """The job's value; ``TimeoutError`` (the worker terminated) when it has not
        answered within ``timeout`` seconds of this call."""
        if self.proc is None:
            self.start()
        if timeout is not None and not self.conn.poll(max(0.0, timeout)):
            self.proc.terminate()
            self.proc.join()
            self.done = True
            self.workers.fill()
            raise TimeoutError(f"no answer within {timeout:.1f} s")
        try:
            ok, value = self.conn.recv()
        except EOFError:
            raise RuntimeError(f"a CP-SAT worker ended without an answer (exit {self.proc.exitcode})") from None
        self.proc.join()
        self.done = True
        self.workers.fill()
        if not ok:
            raise value
        return value


class Workers:
    """At most ``workers`` jobs running at once (``submit`` starts one when there is room,
    ``Job.result`` starts the next when one ends); ``close`` terminates what still runs."""

    def __init__(self, workers: int) -> None:
        self.workers = max(1, workers)
        self.jobs: list[Job] = []

    def submit(self, fn: Callable, *args) -> Job:
        job = Job(self, fn, args)
        self.jobs.append(job)
        self.fill()
        return job

    def fill(self) -> None:
        running = sum(1 for j in self.jobs if j.proc is not None and not j.done)
        for job in self.jobs:
            if running >= self.workers:
                break
            if job.proc is None:
                job.start()
                running += 1

    def close(self) -> None:
        for job in self.jobs:
            if job.proc is not None and job.proc.is_alive():
                job.proc.terminate()
        for job in self.jobs:
            if job.proc is not None:
                job.proc.join()
                job.conn.close()
