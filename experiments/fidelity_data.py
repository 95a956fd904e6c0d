"""Published measured runs that ``bench_fidelity`` predicts (issue 27), as data.

* Megatron-LM SC'21 (Narayanan et al., arXiv 2104.04473) Table 1, weak scaling on Selene
  (DGX A100 80GB): model, TP, PP, GPUs, batch, achieved TFLOP/s per GPU by the paper's
  eq. (3), which counts the recomputed forward; microbatch sizes and interleaving from
  NVIDIA's ``examples/academic_paper_scripts/sc21/run_table_1.sh`` (shared/reference/
  measured-runs.md).
* Korthikanti et al. 2022 (arXiv 2205.05198, MLSys 2023), Tables 3-5: the 22B-1T GPT
  models (TP 8, PP 1-64, A100 80GB), iteration times with full recomputation and with
  sequence parallelism plus selective recomputation ("present work"), and the 22B model's
  per-layer forward and backward times. [T] transcribed by this session from its reading
  of the paper; not yet checked against the PDF (shared/reference/measured-runs.md asks
  for the tables; the session had no copy at hand). The microbatch sizes are not in the
  tables: [I] 4 sequences for 22B (its batch of 4 in one microbatch), 1 for the others.
* Llama 3 (Dubey et al. 2024, arXiv 2407.21783) Table 4: Llama 3 405B on H100s at 8,192
  and 16,384 GPUs (TP 8, PP 16, 16M tokens of 8,192 per step), 430 and 400 TFLOP/s per
  GPU, trained on 8K sequences "without activation checkpointing". The pipeline schedule is
  interleaved 1F1B; its chunk count is not published ([I] 4).
"""

from __future__ import annotations

from typing import NamedTuple

MEGATRON_REF = "Narayanan et al., SC'21 (arXiv 2104.04473), Table 1"
KORTHIKANTI_REF = "Korthikanti et al. 2022 (arXiv 2205.05198), Tables 3-5 [T]"
LLAMA3_REF = "Dubey et al. 2024 (arXiv 2407.21783), Table 4"


class MegatronRow(NamedTuple):
    name: str
    layers: int
    hidden: int
    heads: int
    tp: int
    pp: int
    gpus: int
    batch: int
    microbatch: int
    chunks: int  # interleaved chunks per device (1: plain 1F1B)
    tflops: float


# Table 1 rows with pipeline parallelism (sequence 2048, vocabulary 51,200, fp16, full recomputation)
MEGATRON = (
    MegatronRow("39.1B", 48, 8192, 64, 8, 2, 512, 1536, 4, 1, 138),
    MegatronRow("76.1B", 60, 10240, 80, 8, 4, 1024, 1792, 2, 3, 140),
    MegatronRow("145.6B", 80, 12288, 96, 8, 8, 1536, 2304, 2, 2, 148),
    MegatronRow("310.1B", 96, 16384, 128, 8, 16, 1920, 2160, 1, 2, 155),
    MegatronRow("529.6B", 105, 20480, 128, 8, 35, 2520, 2520, 1, 3, 163),
    MegatronRow("1008B", 128, 25600, 160, 8, 64, 3072, 3072, 1, 1, 163),
)


class KorthikantiRow(NamedTuple):
    name: str
    layers: int
    hidden: int
    heads: int
    tp: int
    pp: int
    batch: int
    microbatch: int
    full_s: float  # iteration time with full recomputation
    present_s: float  # sequence parallelism + selective recomputation


KORTHIKANTI = (
    KorthikantiRow("22B", 48, 6144, 64, 8, 1, 4, 4, 1.42, 1.10),
    KorthikantiRow("175B", 96, 12288, 96, 8, 8, 64, 1, 18.13, 13.75),
    KorthikantiRow("530B", 105, 20480, 128, 8, 35, 280, 1, 49.05, 37.83),
    KorthikantiRow("1T", 128, 25600, 160, 8, 64, 512, 1, 94.42, 71.49),
)

# Table 4 of the paper: one transformer layer of the 22B model, forward and backward (ms)
KORTHIKANTI_LAYER = {  # (sequence parallel, recompute) -> (forward, backward)
    (False, "none"): (7.7, 11.9),
    (True, "none"): (7.2, 11.8),
    (False, "full"): (7.7, 19.5),
    (False, "selective"): (7.7, 13.2),
    (True, "selective"): (7.2, 13.1),
}


class LlamaRow(NamedTuple):
    gpus: int
    dp: int
    sequences_per_pipeline: int
    tflops: float


LLAMA3 = (LlamaRow(8192, 64, 32, 430), LlamaRow(16384, 128, 16, 400))
LLAMA3_CHUNKS = 4  # [I] interleaved chunks per device (not published)
LLAMA3_RECOMPUTE = "none"  # the paper: 8K sequences "without activation checkpointing"
