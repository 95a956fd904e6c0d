"""Make the PyTorch profiler traces that ``tests/data/traces`` holds (issue 27).

A small decoder-style model (embedding, ``LAYERS`` blocks of LayerNorm, a GELU MLP and a
residual, a linear head and cross-entropy) split into ``2 * RANKS`` pipeline stages runs
one training step of ``MICROBATCHES`` microbatches under ``torch.distributed.pipelining``'s
ZBV zero-bubble schedule (two stages per rank in a V, split backward) on ``RANKS`` CPU
processes (gloo), with ``torch.profiler`` recording each rank; each rank's Chrome trace is
written gzipped as ``rank<r>.json.gz``. The schedule runtime marks every action with a
``PP:<stage><kind><microbatch>`` annotation (F forward, I input gradient, W weight gradient),
which ``pipetab profile`` reads. No GPU: the times are the CPU's.

Needs torch (``pip install torch``); the tests only read the traces it wrote.
Run: python -m experiments.make_cpu_trace [--out tests/data/traces]
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
from pathlib import Path

RANKS, LAYERS, HIDDEN, SEQ, VOCAB, BATCH, MICROBATCHES = 2, 8, 128, 64, 256, 16, 4
OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "traces"


def _stage_module(torch, stage: int, stages: int):
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm = nn.LayerNorm(HIDDEN)
            self.up, self.down = nn.Linear(HIDDEN, 4 * HIDDEN), nn.Linear(4 * HIDDEN, HIDDEN)

        def forward(self, x):
            return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))

    class Stage(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            per = LAYERS // stages
            self.embed = nn.Embedding(VOCAB, HIDDEN) if stage == 0 else None
            self.blocks = nn.Sequential(*[Block() for _ in range(per)])
            self.head = nn.Linear(HIDDEN, VOCAB) if stage == stages - 1 else None

        def forward(self, x):
            if self.embed is not None:
                x = self.embed(x)
            x = self.blocks(x)
            return self.head(x) if self.head is not None else x

    return Stage()


def _worker(rank: int, out: str) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.pipelining import PipelineStage, ScheduleZBVZeroBubble
    from torch.profiler import ProfilerActivity, profile

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29517")
    dist.init_process_group("gloo", rank=rank, world_size=RANKS)
    torch.manual_seed(0)
    stages = 2 * RANKS
    mine = (rank, stages - 1 - rank)  # the V: rank r holds stages r and 2R-1-r
    pipe = [PipelineStage(_stage_module(torch, s, stages), s, stages, torch.device("cpu")) for s in mine]

    def loss_fn(logits, target):
        return torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), target.reshape(-1))

    schedule = ScheduleZBVZeroBubble(pipe, MICROBATCHES, loss_fn=loss_fn)
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ))
    target = torch.randint(0, VOCAB, (BATCH, SEQ))
    schedule.step(tokens, target=target)  # warm-up step, not recorded
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        schedule.step(tokens, target=target)
    path = Path(out) / f"rank{rank}.json"
    prof.export_chrome_trace(str(path))
    with path.open("rb") as src, gzip.open(f"{path}.gz", "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)
    path.unlink()
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    import torch
    import torch.multiprocessing as mp

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args(argv)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    mp.spawn(_worker, args=(args.out,), nprocs=RANKS, join=True)
    print(f"wrote {RANKS} traces to {args.out} (torch {torch.__version__})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
