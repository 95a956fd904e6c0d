"""Search and bound at once (``CpSatConfig.race``; by default only where a device holds
several stages, ``modes._races``): on a fixed placement with an incumbent, one thread
keeps improving the incumbent (``phases.improve_upper``) while the other proves lower
bounds by horizon tightening (``phases.tighten_horizon``), each on its share of the
workers. They share one ``SearchState``: a schedule either finds stops a tightening
probe it makes moot, and both stop once the bound meets the makespan.

Why it was the default until CP-SAT's shared tree search was tried for the probes: with
CP-SAT's portfolio a solve of this model does not use a second worker well. On linear
S=16, B=64, cap 16, C=1 (2 cores) a one-worker probe proved "no schedule ends by 367" in
29-77 s next to a one-worker search, about as fast as the 2-worker portfolio alone
(30-48 s); at once, the search reached 371 against a proven 368 (0.81%) in 7 of 10 runs
of two versions and 6 of 8 of the last. The shared tree search proves the same probe on
2 workers in 14-39 s, so where every device holds one stage ``phases.bound_then_search``
now gives all workers to the tightening first and then to the search (README, "Bound,
then search").
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait

from pipetab.schedules.schedule import Placement

from .config import CpSatConfig
from .phases import PROBING_OFF, SearchState, all_worker_searches, improve_upper, tighten_horizon
from .problem import Problem

# the search thread restarts a solve without a better schedule for this share of the
# race (the no-LP search's improvements on the S=16 target came 1-30 s apart)
SEARCH_STALL_FRACTION = 0.25
# below this many seconds left, a search on all workers would not get past presolve
HANDOVER_MIN_S = 2.0


def race(problem: Problem, placement: Placement, config: CpSatConfig, state: SearchState,
         deadline: float, details: dict) -> None:
    """Search and tighten at once until ``deadline`` or until the bound meets the
    makespan; improves ``state`` in place. The search gets half of the workers (at least
    one) with presolve probing off (as in the upper phase), the tightening the rest. A
    search solve that finds nothing better for ``SEARCH_STALL_FRACTION`` of the time
    restarts with the next seed from the first incumbent (the justified start), not from
    the incumbent it stalled at. When the tightening ends early (its next probe predicted
    to need more than the time left), the search restarts from the incumbent on all
    workers (``all_worker_searches``: on 2 workers one full search and CP-SAT's LNS).
    Rows go to ``details["upper_phase"]`` and ``details["horizon_tightening"]``; an error
    in one thread (or an interrupt of the caller) stops the other and is raised."""
    search_workers = max(1, config.workers // 2)
    # CP-SAT's own Ctrl-C handler, installed and restored by each solve, is not safe
    # with solves in two threads (a Ctrl-C killed the process); without it Ctrl-C
    # reaches Python's handler in the waiting caller, which stops both solves
    config = config.replace(extra_params=config.extra_params + (("catch_sigint_signal", False),))
    search = config.replace(workers=search_workers, extra_params=PROBING_OFF + config.extra_params)
    bounding = config.replace(workers=config.workers - search_workers)
    handover = state.stop_with_done(threading.Event())
    details["race"] = {"search_workers": search_workers, "bound_workers": bounding.workers}

    def search_thread() -> None:
        improve_upper(problem, placement, (search,), state, deadline, details, SEARCH_STALL_FRACTION,
                      concurrent=True, stop=handover, restart_from_start=True)
        rows = details.pop("upper_phase")
        # all workers only once the tightening has ended (not when the restarts stop
        # for lack of time while a probe still runs: that would oversubscribe the cores)
        if handover.is_set() and not state.done.is_set() and deadline - time.perf_counter() >= HANDOVER_MIN_S:
            details["race"]["handover_s"] = round(deadline - time.perf_counter(), 3)
            improve_upper(problem, placement, all_worker_searches(config), state, deadline, details,
                          concurrent=True)
            rows += details["upper_phase"]
        details["upper_phase"] = rows

    def bound_thread() -> None:
        try:
            tighten_horizon(problem, placement, bounding, state, deadline, details, (), concurrent=True)
        finally:
            handover.set()

    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="pipetab-race") as pool:
        futures = [pool.submit(search_thread), pool.submit(bound_thread)]
        try:
            finished, _ = wait(futures, return_when=FIRST_EXCEPTION)
        except BaseException:  # e.g. Ctrl-C: stop both solves rather than wait for the deadline
            state.abort()
            raise
        if any(f.exception() is not None for f in finished):
            state.abort()  # stops the other thread's solve
        for f in futures:
            f.result()
