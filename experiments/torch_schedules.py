"""Torch's own pipeline schedules as CSV test data: ``tests/data/torch/*.csv``.

Each file is what ``torch.distributed.pipelining``'s schedule class writes with
``_dump_csv(format="compute_only")`` for a small shape (ranks x microbatches), built without
a process group from stand-in stages (each knows only its index, the number of stages and
its rank). The tests read every file with ``pipetab check``'s reader (formats.from_torch_csv)
and compare it with pipetab's generator of the same schedule where there is one.

Needs PyTorch (not a dependency of pipetab): ``pip install torch`` (the CPU wheel is enough),
then ``python -m experiments.torch_schedules``. torch's DualPipeV writes its overlapped
forward-backward pairs as ``(F;B)OVERLAP_F_B`` actions.
"""

from __future__ import annotations

import sys
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "torch"

# (file stem, schedule class name, ranks, stages per rank, microbatches, placement style)
CASES = [
    ("gpipe_r4_m8", "ScheduleGPipe", 4, 1, 8, "loop"),
    ("1f1b_r4_m8", "Schedule1F1B", 4, 1, 8, "loop"),
    ("interleaved1f1b_r4_v2_m8", "ScheduleInterleaved1F1B", 4, 2, 8, "loop"),
    ("loopedbfs_r2_v2_m4", "ScheduleLoopedBFS", 2, 2, 4, "loop"),
    ("interleavedzb_r4_v2_m8", "ScheduleInterleavedZeroBubble", 4, 2, 8, "loop"),
    ("zbv_r4_m8", "ScheduleZBVZeroBubble", 4, 2, 8, "v"),
    ("dualpipev_r4_m8", "ScheduleDualPipeV", 4, 2, 8, "v"),
    ("dualpipev_r4_m10", "ScheduleDualPipeV", 4, 2, 10, "v"),
]


class Stage:
    """What a schedule class asks of a stage when it only builds its order."""

    def __init__(self, index: int, num_stages: int, rank: int, ranks: int) -> None:
        self.stage_index, self.num_stages = index, num_stages
        self.group_rank, self.group_size = rank, ranks
        self.is_first, self.is_last = index == 0, index == num_stages - 1
        self.stage_index_to_group_rank: dict = {}
        self.submod = None
        self.has_backward = True
        self.dw_builder = None


def stages_of(rank: int, ranks: int, per: int, style: str) -> list[int]:
    if style == "v":
        return [rank, 2 * ranks - 1 - rank]
    return [rank + k * ranks for k in range(per)]


def dump(name: str, cls_name: str, ranks: int, per: int, microbatches: int, style: str) -> Path:
    from torch.distributed.pipelining import schedules

    cls = getattr(schedules, cls_name)
    num = ranks * per
    ids = stages_of(0, ranks, per, style)
    stages = [Stage(i, num, 0, ranks) for i in ids]
    single = issubclass(cls, schedules.PipelineScheduleSingle)
    sched = cls(stages[0] if single else stages, n_microbatches=microbatches)
    # single-stage classes keep no pipeline_order; _get_pipeline_order gives every rank's
    order = sched._get_pipeline_order() if single else sched.pipeline_order
    return write(OUT / f"{name}.csv", [["" if a is None else str(a) for a in order[r]] for r in range(ranks)])


def write(path: Path, rows: list[list[str]]) -> Path:
    import csv

    with path.open("w", newline="") as fh:
        csv.writer(fh).writerows(rows)
    return path


def mixed(source: Path, name: str, ranks: int, microbatches: int) -> Path:
    """``source`` (a split-backward schedule) with the last microbatch's I and W on every
    stage replaced by one full backward B where the I was -- the mix torch runs -- checked
    by torch's own loader (it validates the order and infers the stage -> rank mapping)."""
    import csv

    from torch.distributed.pipelining import schedules

    last = microbatches - 1
    rows = []
    for row in csv.reader(source.open(newline="")):
        out = []
        for cell in row:
            if cell.endswith(f"I{last}") and cell[:-len(f"I{last}")].isdigit():
                cell = cell.replace(f"I{last}", f"B{last}")
            elif cell.endswith(f"W{last}") and cell[:-len(f"W{last}")].isdigit():
                continue
            out.append(cell)
        rows.append(out)
    path = write(OUT / f"{name}.csv", rows)
    num = 2 * ranks
    runtime = schedules._PipelineScheduleRuntime([Stage(i, num, 0, ranks) for i in (0, num - 1)],  # noqa: SLF001
                                                 n_microbatches=microbatches)
    runtime._load_csv(str(path), format="compute_only")  # noqa: SLF001 (torch's own loader)
    return path


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    for case in CASES:
        try:
            print(dump(*case))
        except Exception as exc:  # a class this torch version lacks or builds differently
            print(f"{case[0]}: {type(exc).__name__}: {exc}", file=sys.stderr)
    print(mixed(OUT / "zbv_r4_m8.csv", "zbv_mixed_b_r4_m8", 4, 8))
    return 0


if __name__ == "__main__":
    sys.exit(main())
