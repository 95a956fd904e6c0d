"""How close ``plan``'s winner is: a lower bound of the step time of every configuration in
the searched space, and how much faster than #1 the best of them could be.

The searched space: every candidate (a registry schedule, with its variants, on a shape of
the even layout), the refinements tried on the best (uneven layouts, per-stage
recomputation), and, on each shape CP-SAT searched, every order of that shape's placement
and backward split. A lower bound of each configuration in it that may fit the memory:

* a simulated candidate or refinement: its simulated step time (exact);
* a candidate the search never took out of its queue (``cannot beat those shown``): the
  bound it waits with (``Bounds.shape_time``, ``Bounds.cheap``, ``Bounds.quick`` or its exact step), which
  is at least the ``top``-th best step, so at least #1's;
* an order on a shape CP-SAT searched: CP-SAT's proven lower bound there, under the
  assumptions it names;
* a candidate pruned by memory, or whose exact memory does not fit, or that does not exist
  (outside its schedule's regime): not a configuration that can run.

``gap = 1 - least / #1's step``: no configuration in the space is more than ``gap``
faster (in step time) than #1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pipetab.hardware.context import Context

# what every bound of the certificate assumes (the cost model is the simulator's)
ASSUMES = ("op times and messages as the simulator prices them (the same costs for every candidate)",
           "memory by the exact per-device peak of each run, or a lower bound of it for candidates never run")


@dataclass(frozen=True)
class Certificate:
    """No configuration of the searched space (module docstring) is more than ``gap``
    (a fraction) faster than #1: ``least_s`` is the least lower bound of a step time in
    it, set by ``basis``; ``assumes``: what those bounds take as given. ``gap`` is 0 unless
    a bound below #1's step exists (CP-SAT's, on a shape it searched): the text then states
    that nothing in the space is faster than #1 and, where they exist, how close the
    candidates never simulated came (``unsimulated_s``: the least bound among them, at
    least #1's step by the search's stopping rule) and how many CP-SAT bounds are at or
    above #1's step (``cpsat_above``)."""

    gap: float
    least_s: float
    best_s: float
    basis: str
    assumes: tuple[str, ...]
    unsimulated_s: float | None = None
    cpsat_above: int = 0

    def text(self) -> str:
        if self.gap > 0:
            pct = f"{100 * self.gap:.2f}" if self.gap >= 5e-5 else "0.01"
            parts = [f"no configuration in the searched space is more than {pct} % faster than #1 "
                     f"(every step time in it is at least {self.least_s:.6g} s, #1's {self.best_s:.6g} s; "
                     f"least bound: {self.basis})"]
        else:
            parts = [f"no configuration in the searched space is faster than #1 ({self.best_s:.6g} s): every other "
                     "was simulated, or a lower bound of its step is at least #1's"]
        if self.unsimulated_s is not None:
            parts.append(f"the closest never simulated is bounded at {self.unsimulated_s:.6g} s, "
                         f"{100 * (self.unsimulated_s / self.best_s - 1):.2f} % slower")
        if self.cpsat_above:
            parts.append(f"CP-SAT's lower bound is at least #1's step on {self.cpsat_above} of the shapes it "
                         "searched")
        return "; ".join(parts)

    def as_dict(self) -> dict:
        return {"gap": self.gap, "least_step_s": self.least_s, "best_step_s": self.best_s, "basis": self.basis,
                "assumes": list(self.assumes), "least_unsimulated_s": self.unsimulated_s,
                "cpsat_bounds_at_or_above_best": self.cpsat_above}


def certify(shown: Sequence, simulated: Sequence, least_pruned: float,
            cpsat: list[tuple[Context, float | None, tuple[str, ...]]]) -> Certificate | None:
    """The certificate of a plan whose ranked rows are ``shown`` (``Configuration``
    values; None when none fits):
    ``simulated`` every configuration simulated that fits, ``least_pruned`` the least bound
    of the candidates never taken out of the search's queue (inf: none), ``cpsat`` each
    searched shape with CP-SAT's lower bound (None: no bound) and its assumptions.
    #1 is the fastest simulated configuration that fits and the search stops only when
    every bound left reaches #1's step or more, so only a CP-SAT bound can be lower:
    those terms set ``gap``; the others are kept as what they show (``Certificate``)."""
    if not shown or not shown[0].fits:
        return None
    best = shown[0].step_time_s
    fastest = min((c.step_time_s for c in simulated if c.fits), default=best)
    terms: list[tuple[float, str]] = []
    # the search's invariants (docstring above); were one broken, the certificate still counts it
    if fastest < best:
        terms.append((fastest, "a simulated configuration faster than #1 (the ranking's order broken)"))
    if least_pruned < best:
        terms.append((least_pruned, "the least bound of a candidate never simulated (below #1's step)"))
    assumes = list(ASSUMES)
    above = 0
    for shape, lb, assumptions in cpsat:
        if lb is None:
            assumes.append(f"CP-SAT proved no bound on {shape.label}: orders on it other than the registry "
                           "schedules' are outside the searched space")
            continue
        if lb < best:
            techniques = " ".join(t.removeprefix("recompute=") for t in shape.memory_techniques)
            terms.append((lb, f"CP-SAT's lower bound of the orders on {shape.label} recompute "
                              f"{techniques or shape.recompute}"))  # as CP-SAT's own line names the shape
        else:
            above += 1
        if assumptions:
            assumes.append(f"CP-SAT's bound on {shape.label}: {', '.join(assumptions)}")
    least, basis = min(terms, key=lambda t: t[0], default=(best, "#1's own simulated step"))
    return Certificate(max(0.0, 1 - least / best), least, best, basis, tuple(assumes),
                       None if least_pruned == float("inf") else least_pruned, above)
