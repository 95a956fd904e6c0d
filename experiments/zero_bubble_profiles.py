"""Write the Zero Bubble paper's profiled op times (its Table 6) as pipetab profiles.

Source: Qi, Wan, Huang, Lin, "Zero Bubble (Almost) Pipeline Parallelism", ICLR 2024, Table 6
(arXiv 2401.10241, Table 9): T_F, T_B, T_W and T_comm in milliseconds per microbatch on an
interior stage, recorded in ZB-2p runs on A100 SXM 80GB GPUs, pure pipeline parallelism
(shared/reference/zero-bubble.md). The models are the paper's Table 3
(``hardware/presets/models/zb_*.toml``). Activation, M_W and persistent bytes are not in the
paper: they are computed with pipetab's memory model for the interior stage ([I]).

Run ``python -m experiments.zero_bubble_profiles`` to rewrite ``experiments/profiles/``.
"""

from __future__ import annotations

from pathlib import Path

from experiments.zero_bubble_data import MODELS, PROFILES
from pipetab.hardware.context import Context
from pipetab.hardware.layer import (
    activation_bytes_per_layer,
    stage_params_per_gpu,
    weight_memory_bytes_per_layer,
)
from pipetab.hardware.loaders import load_model

OUT = Path(__file__).resolve().parent / "profiles"



def preset_name(model: str) -> str:
    """pipetab's preset of a Table 3 model: ``1.5B`` -> ``zb_1p5b``."""
    return "zb_" + model.lower().replace(".", "p")


def profile_text(model_name: str, gpus: int, mb: int, layers: int, m: int, times) -> str:
    model = load_model(model_name)
    t_f, t_b, t_w, t_comm = times
    ctx = Context(microbatch_size=mb)
    act = layers * activation_bytes_per_layer(model, ctx)
    part = layers * weight_memory_bytes_per_layer(model, ctx)
    persistent = stage_params_per_gpu(model, layers, False, False) * model.bytes_per_param_state
    size = model_name.split("_")[1].replace("p", ".").upper()
    return f"""\
# The Zero Bubble paper's profiled op times: {size} model, {gpus} GPUs, {m} microbatches of {mb}.
# Source: Qi et al., "Zero Bubble (Almost) Pipeline Parallelism", ICLR 2024, Table 6 (arXiv 2401.10241,
# Table 9), recorded in ZB-2p runs on A100 SXM 80GB, pure pipeline parallelism; ms per microbatch on an
# interior stage. [P] the paper, [I] pipetab's memory model for model {model_name} (not in the paper).
# Written by: python -m experiments.zero_bubble_profiles
summary = "Zero Bubble paper Table 6: {size}, p={gpus}, m={m}, microbatch {mb} (A100)"
source = "Qi et al., ICLR 2024, Table 6 (T_F, T_B, T_W, T_comm of ZB-2p runs)"
time_unit = "ms"                # [P] milliseconds (shared/reference/zero-bubble.md, section 3)
stages = {gpus}                     # [P] pipeline stages = GPUs (Table 3)
microbatch_size = {mb}              # [P] Table 3
microbatches = {m}                 # [P] Table 3 / Table 6 row
memory_bytes = 80e9             # [P] A100 SXM 80G
model = "{model_name}"             # [P] the model of Table 3 (pipetab's preset of it)
seq_len = {model.seq_len}                  # [P] Table 3
gpu = "A100"                    # [P] A100 SXM 80G
peak_flops = 312e12             # [P] A100 dense bf16 peak

[default]                       # every stage: the paper profiles an interior stage
forward = {t_f}                # [P] T_F
backward = {t_b}               # [P] T_B (input gradient)
weight = {t_w}                 # [P] T_W (weight gradient)
message = {t_comm}                # [P] T_comm, one message between neighbouring stages
layers = {layers}                      # [P] interior stages hold {layers} layers (end stages one fewer)
activation_bytes = {float(act)!r}    # [I] M of one microbatch, classic attention, no recomputation
weight_memory_bytes = {float(part)!r}    # [I] M_W, the inputs and output gradients of the weight GEMMs
persistent_bytes = {float(persistent)!r}    # [I] {layers} layers x 18 bytes per parameter (no ZeRO)
"""


def main() -> int:
    OUT.mkdir(exist_ok=True)
    for row in PROFILES:
        model = MODELS[row.model]
        name = preset_name(row.model)
        # interior stages hold a whole number of layers: the count the authors divide into chunks
        path = OUT / f"{name}_p{model.pipelines}_m{row.microbatches}.toml"
        path.write_text(profile_text(name, model.pipelines, model.microbatch_size, model.chunks,
                                     row.microbatches, (row.t_f, row.t_b, row.t_w, row.t_comm)))
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
