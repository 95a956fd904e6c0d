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


def chimera_fd(stages: int, microbatches: int) -> Formula:
    half = stages // 2
    # forward doubling keeps S more activations in flight on every device than plain
    # Chimera (each pipeline warms up with pairs): 3S/2 + 1 + min(d, S-1-d), i.e. 2S on the
    # middle devices; D=4, N=8: [7, 8, 8, 7] (reference §4(c) [V]). Measured on pipetab's
    # tables for S <= 16, up to 5 units, any slot lengths F, K <= 9.
    peaks = tuple(float(3 * half + 1 + min(d, stages - 1 - d)) for d in range(stages))
    return Formula(
        (stages - 2) / (2 * microbatches + stages - 2),
        "(S-2)/(2B+S-2), Li & Hoefler (Chimera, SC'21); with forward doubling the table equals "
        "it whenever T_F <= T_B <= 2 T_F, for one unit (B = 2S) also up to T_B = 3 T_F "
        "(pipetab, measured S <= 16, B <= 8S, slots F <= 3, K <= 9)",
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


def interleaved(stages: int, microbatches: int, chunks: int = 2, overlap: bool = False) -> Formula:
    # ``overlap`` (the steady-state pairs as blocks) leaves the table unchanged without
    # communication (pipetab, measured for S <= 8, v <= 4, B <= 32 at F = 1, K = 1 and 2)
    # device d peaks at min(w_d + 1, vB) chunk activations of A/v, w_d = (v-1)S + 2(S-1-d)
    # the warm-up (reference §3(c) [V]); the min binds only at B = S, for d < (S-1)/2.
    v = chunks
    return Formula(
        (stages - 1) / (v * microbatches + stages - 1),
        "(S-1)/(vB+S-1), Narayanan et al. (Megatron, SC'21: bubble fraction (1/v)(p-1)/m); "
        "equal to the table's for any chunk-op slot lengths when B is a multiple of S "
        "(pipetab, measured S <= 12, v <= 4, B <= 48)",
        tuple(
            min((v - 1) * stages + 2 * (stages - 1 - d) + 1, v * microbatches) / v
            for d in range(stages)
        ),
        (1.0,) * stages,
    )


def zb_h1(stages: int, microbatches: int) -> Formula:
    # Convention: F = B = W = 1 slot (B the input gradient). Busy 3B slots per device.
    S, n = stages, microbatches
    if n >= S:
        ratio = (S - 1) / (3 * n + S - 1)
        source = (
            "(S-1)/(3B+S-1): ZB's (p-1)(T_F+T_B-T_W) idle time per device (Qi et al., "
            "ICLR'24) at T_F = T_B = T_W = 1 slot; exact for B >= S"
        )
    else:
        ratio = 1 - 3 * n / (2 * n + 2 * S - 1)
        source = (
            "1 - 3B/(2B+2S-1) at T_F = T_B = T_W = 1 slot: with B < S the makespan is 1F1B's "
            "2(B+S-1) plus the last W (pipetab, measured for S <= 16, B <= 64)"
        )
    # p * M_B on every device (ZB paper); with B < S at most B are ever live.
    return Formula(ratio, source, zb_h1_peak_activations(S, n), (1.0,) * S)


def zb_h2(stages: int, microbatches: int) -> Formula:
    # Convention: F = B = W = 1 slot (B the input gradient). Busy 3B slots per device.
    S, n = stages, microbatches
    if n >= 2 * S - 1:
        makespan = 3 * n + S - 1
        source = (
            "(S-1)/(3B+S-1): ZB-H2 has ZB's (p-1)(T_F+T_B-2T_W) idle time per device span "
            "(Qi et al., ICLR'24, Table 2), zero at T_F = T_B = T_W = 1 slot; pipetab's global "
            "convention keeps the staggered start of S-1 slots; exact for B >= 2S-1"
        )
    else:
        makespan = 2 * S + 1 + (5 * (n - 1)) // 2
        source = (
            "1 - 3B/(2S+1+floor(5(B-1)/2)) at T_F = T_B = T_W = 1 slot: with B < 2S-1 the "
            "warm-up cannot fill the pipeline (pipetab, measured for S <= 16, B <= 64)"
        )
    return Formula(1 - 3 * n / makespan, source, zb_h2_peak_activations(S, n), (1.0,) * S)


def zb_h1_peak_activations(stages: int, microbatches: int, weight_memory: float = 1.0) -> tuple[float, ...]:
    """Peak live activations per device of ZB-H1 when a B keeps the fraction
    ``weight_memory`` = M_W / M of its activation until its W: u + f * min(d, B - u) with
    u = min(S - d, B) — for B >= S the paper's (p - i + 1) M_B + (i - 1) M_W (worker i = d + 1,
    Qi et al., Section 2.3). A device's live memory depends only on its own order, so this
    holds for any op durations."""
    S, n, f = stages, microbatches, weight_memory
    return tuple(_peak(min(S - d, n), d, n, f) for d in range(S))


def zb_h2_peak_activations(stages: int, microbatches: int, weight_memory: float = 1.0) -> tuple[float, ...]:
    """Peak live activations per device of ZB-H2 (see ``zb_h1_peak_activations``):
    w + f * min(2d, B - w) with w = min(2(S-1-d)+1, B) — for B >= 2S-1 the paper's
    (2p - 2i + 1) M_B + (2i - 2) M_W (worker i = d + 1, Qi et al., Section 2.3)."""
    S, n, f = stages, microbatches, weight_memory
    return tuple(_peak(min(2 * (S - 1 - d) + 1, n), 2 * d, n, f) for d in range(S))


def _peak(before_first_b: int, delayed_w: int, microbatches: int, fraction: float) -> float:
    """Peak of a device that runs ``before_first_b`` forwards before its first backward, then
    one forward per backward, and holds the weight part of its first ``delayed_w`` backwards
    until later: each of those adds ``fraction`` to the level reached before the first B."""
    return before_first_b + fraction * min(delayed_w, microbatches - before_first_b)


def zbv(stages: int, microbatches: int) -> Formula:
    # Convention: F = B = W = 1 slot per chunk op. Busy 6B slots per device.
    S, n = stages, microbatches
    if 2 * n >= 3 * S - 1:
        ratio = (S - 1) / (6 * n + S - 1)
        source = (
            "(S-1)/(6B+S-1): ZB-V is zero-bubble in ZB's per-device-span convention (Qi et al.; "
            "sail-sg README) at T_F = T_B = T_W per chunk; the global convention keeps the "
            "staggered start of S-1 chunk slots (reference §7(d) [V]); exact for 2B >= 3S-1"
        )
    else:
        ratio = 1 - 6 * n / (4 * n + 4 * S - 2)
        source = (
            "1 - 6B/(4B+4S-2) at T_F = T_B = T_W = 1 slot per chunk: for 2B < 3S-1 the "
            "makespan of the B_eff = max(B, 2S-1) construction with ops of missing "
            "microbatches dropped is 4B+4S-2 (pipetab, measured for S <= 16, B <= 64)"
        )
    # p * M_B on every device once B >= 2S-1 (reference §7(c)); in chunk activations of
    # A/2 device d peaks at min(2S, 2B, B+1+d) (pipetab, measured for S <= 16, B <= 64).
    peaks = tuple(min(2 * S, 2 * n, n + 1 + d) / 2 for d in range(S))
    return Formula(ratio, source, peaks, (1.0,) * S)


def dualpipev(stages: int, microbatches: int, overlap: bool = True) -> Formula:
    # DeepSeek's units are one of the PP = 2S stages (1/(2S) of the model); pipetab's are
    # 1/S of the model. "Parameter 2x" = two such stages = 1.0 here; "activation PP+1" =
    # 2S+1 chunk activations = (2S+1)/2 here (measured on every device, S <= 16, B <= 64).
    S, n = stages, microbatches
    if overlap:
        ratio, source = (S - 1) / (3 * n + S - 1), (
            "(S-1)/(3B+S-1): DeepSeek's (PP/2-1)(F&B+B-3W) idle per device (deepseek-ai/DualPipe "
            "README, PP = 2S) with F = W = 1, full B = 2, F&B = 3 slots (no overlap gain without "
            "communication)")
    else:
        ratio, source = (S - 1) / (6 * n + S - 1), (
            "(S-1)/(6B+S-1): the same orders with the pairs run one op after the other (torch's "
            "runtime without an overlap callback), F = B = W = 1 slot per chunk op (pipetab, "
            "measured for S <= 16, B <= 64)")
    return Formula(ratio, source, ((2 * S + 1) / 2,) * S, (1.0,) * S)


def dualpipe(stages: int, microbatches: int, overlap: bool = True) -> Formula:
    # Units: a stage is 1/S of the model (one per device per direction); two weight copies
    # per device, PP+1 = S+1 live stage activations per device (DeepSeek's table).
    S, n = stages, microbatches
    if overlap:
        ratio, source = (S - 2) / (3 * n + S - 2), (
            "(S-2)/(3B+S-2): DeepSeek's (PP/2-1)(F&B+B-3W) idle per device (deepseek-ai/DualPipe "
            "README, PP = S) with F = W = 1, full B = 2, F&B = 3 slots, over 3B busy slots")
    else:
        ratio, source = (S / 2 - 1) / (3 * n + S / 2 - 1), (
            "(S/2-1)/(3B+S/2-1): the same orders with the pairs run one op after the other, "
            "F = B = W = 1 slot (pipetab, measured for even S <= 16, B <= 64)")
    return Formula(ratio, source, (float(S + 1),) * S, (2.0,) * S)


def looped_bfs(stages: int, microbatches: int, chunks: int = 2) -> Formula:
    # breadth-first: each device's forwards run chunk by chunk, so every microbatch's
    # activation of every chunk is live when the first backward starts (v*B chunk
    # activations of A/v each: B stage units), as GPipe's
    return Formula(
        None,
        "no closed form taken here (Lamy-Poirier, arXiv 2211.05953, gives it for its own cost model)",
        (float(microbatches),) * stages,
        (1.0,) * stages,
    )


def interleaved_zb(stages: int, microbatches: int, chunks: int = 2) -> Formula:
    return Formula(
        None,
        "no closed form published for ZB-1P on looped stages (torch ScheduleInterleavedZeroBubble)",
        None,
        (1.0,) * stages,
    )


def v_half(stages: int, microbatches: int) -> Formula:
    return Formula(
        None,
        "about half of 1F1B's bubble (S-1)/(B+S-1) at T_F=T_B=T_W (Qi et al., NeurIPS'24; not exact)",
        None,
        (1.0,) * stages,
    )


def v_min(stages: int, microbatches: int) -> Formula:
    return Formula(
        None,
        "about 2/3 of 1F1B's bubble plus O(S) at T_F=T_B=T_W (Qi et al., NeurIPS'24; not exact)",
        None,
        (1.0,) * stages,
    )

