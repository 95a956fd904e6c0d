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

from pipetab.hardware.layer import (
    activation_bytes_per_layer,
    stage_params_per_gpu,
    weight_memory_bytes_per_layer,
)
from pipetab.hardware.loaders import load_model

OUT = Path(__file__).resolve().parent / "profiles"

# model, GPUs p, microbatch size b, interior layers per stage, then per m: T_F, T_B, T_W, T_comm (ms)
TABLE_6 = {
    ("zb_1p5b", 8, 6, 3): {24: (18.522, 18.086, 9.337, 0.601), 32: (18.513, 18.086, 9.331, 0.626),
                           64: (18.546, 18.097, 9.321, 0.762)},
    ("zb_6p2b", 8, 3, 4): {24: (29.718, 29.444, 19.927, 0.527), 32: (29.802, 29.428, 19.530, 0.577),
                           64: (29.935, 29.621, 19.388, 0.535)},
    ("zb_14p6b", 16, 1, 3): {48: (11.347, 11.248, 8.132, 0.377), 64: (11.307, 11.254, 8.101, 0.379),
                             128: (11.325, 11.308, 8.109, 0.378)},
    ("zb_28p3b", 32, 1, 2): {96: (10.419, 10.207, 7.715, 0.408), 128: (10.408, 10.204, 7.703, 0.408),
                             256: (10.402, 10.248, 7.698, 0.460)},
}


def profile_text(model_name: str, gpus: int, mb: int, layers: int, m: int, times) -> str:
    model = load_model(model_name)
    t_f, t_b, t_w, t_comm = times
    act = layers * activation_bytes_per_layer(model, mb)
    part = layers * weight_memory_bytes_per_layer(model, mb)
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
    for (model, gpus, mb, layers), rows in TABLE_6.items():
        for m, times in rows.items():
            path = OUT / f"{model}_p{gpus}_m{m}.toml"
            path.write_text(profile_text(model, gpus, mb, layers, m, times))
            print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
