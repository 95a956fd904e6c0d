"""Level 1: closed-form quantities of known schedules, as their authors (or the references
in ``shared/reference/schedules.md``) give them. ``None`` where no closed form exists."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Formula:
    """Closed-form level-1 numbers of one schedule instance.

    ``peak_activations[d]`` and ``weight_copies[d]`` are in units of one stage holding
    1/num_devices of the model (activations of one microbatch, resp. weights).
    """

    bubble_ratio: float | None
    bubble_source: str
    peak_activations: tuple[float, ...] | None
    weight_copies: tuple[float, ...]

    def as_dict(self) -> dict:
        return {
            "bubble_ratio": self.bubble_ratio,
            "bubble_source": self.bubble_source,
            "peak_activations": None if self.peak_activations is None else list(self.peak_activations),
            "weight_copies": list(self.weight_copies),
        }


def gpipe(stages: int, microbatches: int) -> Formula:
    return Formula(
        (stages - 1) / (microbatches + stages - 1),
        "(S-1)/(B+S-1), Huang et al. (GPipe, NeurIPS'19)",
        (float(microbatches),) * stages,
        (1.0,) * stages,
    )


def one_f_one_b(stages: int, microbatches: int) -> Formula:
    return Formula(
        (stages - 1) / (microbatches + stages - 1),
        "(S-1)/(B+S-1), Narayanan et al. (Megatron, SC'21)",
        tuple(float(min(stages - d, microbatches)) for d in range(stages)),
        (1.0,) * stages,
    )


def chimera(stages: int, microbatches: int) -> Formula:
    half = stages // 2
    # each direction runs 1F1B over S/2 microbatches per basic unit: the down stage d
    # holds min(S-d, S/2), the up stage S-1-d holds min(d+1, S/2) (Li & Hoefler, SC'21).
    peaks = tuple(float(min(stages - d, half) + min(d + 1, half)) for d in range(stages))
    return Formula(
        (stages - 2) / (2 * microbatches + stages - 2),
        "(S-2)/(2B+S-2), Li & Hoefler (Chimera, SC'21); exact only when F and B take equal time",
        peaks,
        (2.0,) * stages,
    )


def hanayo(stages: int, microbatches: int, waves: int = 1) -> Formula:
    # S*A on every device holds only once B >= 2S-1; below that device d is short of
    # 2S-1-d-B chunk activations of A/(2W) each (at B = S: S=4, W=1 gives [2.5, 3, 3.5, 4]).
    # Measured on pipetab's Hanayo tables for S <= 16, W <= 4, S <= B <= 64; None for B < S.
    peaks = (
        tuple(
            stages - max(0, 2 * stages - 1 - d - microbatches) / (2 * waves)
            for d in range(stages)
        )
        if microbatches >= stages
        else None
    )
    return Formula(
        (stages - 1) / (2 * waves * microbatches + stages - 1),
        "(S-1)/(2WB+S-1), reconstructed for W waves (pipetab reference [R]); "
        "exact when F and B take equal time and B is a multiple of S",
        peaks,
        (1.0,) * stages,
    )


def chimera_asym(stages: int, microbatches: int, split: tuple[int, int] = (1, 2)) -> Formula:
    return Formula(
        None,
        "no closed form published for the asymmetric Chimera-style placement",
        None,
        (2.0,) * stages,
    )
