"""Where a sweep's tasks run.

* ``local`` (default): a ``concurrent.futures`` process pool on this machine -- nothing to
  set up; with one worker the tasks run in this process.
* ``dask``: a Dask cluster. With no scheduler address a ``LocalCluster`` is started (and
  stopped) for the run; with an address (``tcp://host:8786``, or a cluster made by
  dask-jobqueue on Slurm) the tasks go to that cluster's workers, which need pipetab
  installed. Dask is an optional extra: ``pip install 'pipetab[dask]'``.

An executor is a context manager with ``run(fn, tasks)``, which yields ``(index, result)``
pairs as tasks finish (in any order). Leaving the context early (an interrupt) cancels what
has not started. Local pool workers exit by themselves when the process that started them
dies (even by ``kill -9``), so a killed sweep leaves no orphans.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import threading
import time
from typing import TYPE_CHECKING, Callable, Iterator, Sequence

if TYPE_CHECKING:
    from concurrent.futures import ProcessPoolExecutor

    from distributed import Client

EXECUTORS = ("local", "dask")


def default_workers() -> int:
    return max(1, os.cpu_count() or 1)


class SerialExecutor:
    """Tasks one after the other in this process."""

    name = "serial"

    def __init__(self) -> None:
        self.workers = 1

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None

    def run(self, fn: Callable, tasks: Sequence) -> Iterator[tuple[int, object]]:
        for i, t in enumerate(tasks):
            yield i, fn(t)


PARENT_POLL_S = 0.5


def exit_with_parent(parent: int) -> None:
    """Pool-worker initializer: a daemon thread ends this process once ``parent`` is gone
    (this process is then re-parented, so its parent id changes)."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os._exit(1)

    threading.Thread(target=watch, name="pipetab-parent-watch", daemon=True).start()


def _pool_context():
    """Fork where the platform has it: workers start at once with this process's modules
    imported (no per-worker import of numpy, OR-Tools, pipetab)."""
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods else None)


class LocalExecutor:
    """A process pool of ``workers`` processes (``concurrent.futures``) that exit with
    their parent."""

    name = "local"

    def __init__(self, workers: int | None = None) -> None:
        self.workers = workers or default_workers()
        self._pool: ProcessPoolExecutor | None = None

    def __enter__(self):
        from concurrent.futures import ProcessPoolExecutor

        self._depth = getattr(self, "_depth", 0) + 1
        if self._pool is None:
            self._pool = ProcessPoolExecutor(max_workers=self.workers, mp_context=_pool_context(),
                                             initializer=exit_with_parent, initargs=(os.getpid(),))
        return self

    def __exit__(self, *exc) -> None:
        self._depth -= 1
        if self._depth == 0 and self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def run(self, fn: Callable, tasks: Sequence) -> Iterator[tuple[int, object]]:
        from concurrent.futures import as_completed

        if self._pool is None:
            raise RuntimeError("run a LocalExecutor inside its with-block")
        futures = {self._pool.submit(fn, t): i for i, t in enumerate(tasks)}
        try:
            for f in as_completed(futures):
                yield futures[f], f.result()
        finally:
            for f in futures:
                f.cancel()


@contextlib.contextmanager
def _sigint_ignored(active: bool = True):
    """Worker processes started inside inherit SIGINT ignored: a terminal's Ctrl-C, sent to
    the whole process group, reaches only this process, which closes the cluster in order
    (Dask's workers would each print a traceback)."""
    if not active or threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


class DaskExecutor:
    """Tasks on a Dask cluster: ``scheduler`` address, or a fresh ``LocalCluster`` of
    ``workers`` single-threaded worker processes (``processes=False``: threads, for tests)."""

    name = "dask"

    def __init__(self, scheduler: str | None = None, workers: int | None = None, processes: bool = True) -> None:
        try:
            import distributed  # noqa: F401
        except ImportError:
            raise ValueError(
                "--executor dask needs dask.distributed: pip install 'pipetab[dask]'"
            ) from None
        self.scheduler = scheduler
        self.workers = workers or default_workers()
        self.processes = processes
        self._cluster = None
        self._client: Client | None = None

    def __enter__(self):
        from distributed import Client, LocalCluster

        self._depth = getattr(self, "_depth", 0) + 1
        if self._client is not None:
            return self
        if self.scheduler:
            try:
                self._client = Client(self.scheduler, timeout="20s")
            except (OSError, TimeoutError, ValueError) as exc:
                raise ValueError(f"cannot reach the Dask scheduler at {self.scheduler!r}: {exc}") from None
            info = self._client.scheduler_info()
            self.workers = max(1, sum(w.get("nthreads", 1) for w in info.get("workers", {}).values()))
        else:
            # worker processes talk TCP on loopback; in-process workers use Dask's inproc transport
            where = {"host": "127.0.0.1"} if self.processes else {}
            with _sigint_ignored(self.processes):
                self._cluster = LocalCluster(
                    n_workers=self.workers, threads_per_worker=1, processes=self.processes,
                    dashboard_address=None, silence_logs=logging.ERROR, **where,
                )
            self._client = Client(self._cluster)
        return self

    def __exit__(self, *exc) -> None:
        self._depth -= 1
        if self._depth > 0:
            return
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None

    def run(self, fn: Callable, tasks: Sequence) -> Iterator[tuple[int, object]]:
        from distributed import as_completed

        client = self._client
        if client is None:
            raise RuntimeError("run a DaskExecutor inside its with-block")
        futures = client.map(fn, list(tasks), pure=False)
        index = {f.key: i for i, f in enumerate(futures)}
        try:
            for f, result in as_completed(futures, with_results=True):
                yield index[f.key], result
        finally:
            client.cancel(futures)


def make_executor(kind: str = "local", workers: int | None = None, scheduler: str | None = None):
    """The executor ``kind`` ("local" or "dask"); ``ValueError`` with one sentence when it
    cannot be made (unknown kind, Dask missing, scheduler given without Dask)."""
    if kind not in EXECUTORS:
        raise ValueError(f"executor must be one of {', '.join(EXECUTORS)}, got {kind!r}")
    if workers is not None and (not isinstance(workers, int) or workers < 1):
        raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
    if kind == "local":
        if scheduler:
            raise ValueError("--scheduler needs --executor dask")
        return SerialExecutor() if workers == 1 else LocalExecutor(workers)
    return DaskExecutor(scheduler, workers)
