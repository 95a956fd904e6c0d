"""The Zero Bubble paper's main experiment as data: its Tables 3, 4, 5 and 6.

Source: Qi, Wan, Huang, Lin, "Zero Bubble (Almost) Pipeline Parallelism", ICLR 2024
(https://openreview.net/forum?id=tuzTN0eIO5; arXiv 2401.10241). Table numbers are the ICLR
version's; the arXiv version adds ZB-V and renumbers the appendix tables (ICLR Table 6/7/8/9
= arXiv Table 9/10/11/12), so the profiled op times below are the arXiv version's Table 9.
The same numbers, with the authors' computation of Table 5 from Table 6, are in the
authors' repository sail-sg/zero-bubble-pipeline-parallelism, branch ``arxiv``,
``megatron/core/pipeline_parallel/efficiency.py`` (``iclr_bubble_rates``).

Units: Table 6's times are milliseconds per microbatch on one (interior) stage; Table 4's
throughput is samples per GPU per second, its memory GB per GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

REFERENCE = "Qi et al., Zero Bubble (Almost) Pipeline Parallelism, ICLR 2024 (arXiv 2401.10241)"


@dataclass(frozen=True)
class Model:
    """A row of Table 3. ``layers`` is the paper's count (the first and last stage hold one
    layer fewer); ``chunk_layers`` is the count the authors' Table 5 computation divides
    into chunks (``layers + 2``: every stage a whole number of layers), so 1F1B-I runs
    v = chunk_layers / pipelines chunks per device ("each transformer layer serves as a
    chunk")."""

    name: str
    layers: int
    heads: int
    hidden: int
    sequence: int
    pipelines: int
    microbatch_size: int
    microbatches: tuple[int, ...]
    chunk_layers: int

    @property
    def chunks(self) -> int:
        """Chunks per device of 1F1B-I (v)."""
        return self.chunk_layers // self.pipelines

    @property
    def weight_memory_fraction(self) -> float:
        """M_W / M_B of one transformer layer by the paper's Table 1: W keeps 32sbh of B's
        sb(34h + 5as) (with the attention heads a and sequence length s)."""
        h, a, s = self.hidden, self.heads, self.sequence
        return 32 * h / (34 * h + 5 * a * s)


# Table 3 — models and fixed settings
MODELS: dict[str, Model] = {
    m.name: m
    for m in (
        Model("1.5B", 22, 24, 2304, 1024, 8, 6, (24, 32, 64), 24),
        Model("6.2B", 30, 32, 4096, 1024, 8, 3, (24, 32, 64), 32),
        Model("14.6B", 46, 40, 5120, 1024, 16, 1, (48, 64, 128), 48),
        Model("28.3B", 62, 48, 6144, 1024, 32, 1, (96, 128, 256), 64),
    )
}


@dataclass(frozen=True)
class Profile:
    """A row of Table 6: profiled times (ms) of one microbatch's F, B (input gradient), W
    (weight gradient) on one stage and of one stage-to-stage message, measured in ZB-2p."""

    model: str
    microbatches: int
    t_f: float
    t_b: float
    t_w: float
    t_comm: float

    @property
    def stages(self) -> int:
        return MODELS[self.model].pipelines

    @property
    def ideal_ms(self) -> float:
        """m (T_F + T_B + T_W): a device's busy time, the cost with no bubble."""
        return self.microbatches * (self.t_f + self.t_b + self.t_w)


# Table 6 (arXiv Table 9) — profiled T_F, T_B, T_W, T_comm in ms
PROFILES: tuple[Profile, ...] = (
    Profile("1.5B", 24, 18.522, 18.086, 9.337, 0.601),
    Profile("1.5B", 32, 18.513, 18.086, 9.331, 0.626),
    Profile("1.5B", 64, 18.546, 18.097, 9.321, 0.762),
    Profile("6.2B", 24, 29.718, 29.444, 19.927, 0.527),
    Profile("6.2B", 32, 29.802, 29.428, 19.530, 0.577),
    Profile("6.2B", 64, 29.935, 29.621, 19.388, 0.535),
    Profile("14.6B", 48, 11.347, 11.248, 8.132, 0.377),
    Profile("14.6B", 64, 11.307, 11.254, 8.101, 0.379),
    Profile("14.6B", 128, 11.325, 11.308, 8.109, 0.378),
    Profile("28.3B", 96, 10.419, 10.207, 7.715, 0.408),
    Profile("28.3B", 128, 10.408, 10.204, 7.703, 0.408),
    Profile("28.3B", 256, 10.402, 10.248, 7.698, 0.460),
)

# Table 5 — bubble rates (cost - m(T_F+T_B+T_W)) / cost, cost = the longest stage's time,
# "based on theoretical calculations" from Table 6. Columns as the paper names them.
TABLE5_COLUMNS = ("1F1B", "1F1B-I", "ZB-H1", "ZB-H2", "ZB-1p", "ZB-2p")
TABLE5: dict[tuple[str, int], dict[str, float]] = {
    (model, m): dict(zip(TABLE5_COLUMNS, rates))
    for model, m, rates in (
        ("1.5B", 24, (0.2431, 0.1055, 0.1585, 0.1083, 0.1585, 0.0433)),
        ("1.5B", 32, (0.1985, 0.0818, 0.1242, 0.0837, 0.1242, 0.0039)),
        ("1.5B", 64, (0.1240, 0.0443, 0.0674, 0.0444, 0.0674, 0.0026)),
        ("6.2B", 24, (0.2347, 0.0808, 0.1323, 0.0698, 0.1323, 0.0029)),
        ("6.2B", 32, (0.1898, 0.0628, 0.1045, 0.0559, 0.1045, 0.0022)),
        ("6.2B", 64, (0.1091, 0.0320, 0.0554, 0.0294, 0.0554, 0.0010)),
        ("14.6B", 48, (0.2552, 0.1104, 0.1397, 0.0672, 0.1397, 0.0066)),
        ("14.6B", 64, (0.2082, 0.0852, 0.1088, 0.0516, 0.1088, 0.0054)),
        ("14.6B", 128, (0.1251, 0.0445, 0.0576, 0.0266, 0.0576, 0.0028)),
        ("28.3B", 96, (0.2646, 0.1493, 0.1421, 0.0641, 0.1421, 0.0038)),
        ("28.3B", 128, (0.2168, 0.1164, 0.1106, 0.0490, 0.1106, 0.0029)),
        ("28.3B", 256, (0.1352, 0.0624, 0.0594, 0.0257, 0.0594, 0.0018)),
    )
}

# Table 4 — measured throughput (samples per GPU per second) on up to 32 A100 SXM 80G
TABLE4_THROUGHPUT: dict[tuple[str, int], dict[str, float]] = {
    (model, m): dict(zip(("ZB-2p", "ZB-1p", "1F1B", "1F1B-I"), values))
    for model, m, values in (
        ("1.5B", 24, (14.5, 12.9, 11.8, 13.1)),
        ("1.5B", 32, (14.8, 13.4, 12.5, 13.4)),
        ("1.5B", 64, (14.9, 14.2, 13.6, 13.9)),
        ("6.2B", 24, (4.32, 3.88, 3.50, 4.01)),
        ("6.2B", 32, (4.35, 4.00, 3.70, 4.08)),
        ("6.2B", 64, (4.39, 4.20, 4.03, 4.19)),
        ("14.6B", 48, (1.81, 1.61, 1.40, 1.54)),
        ("14.6B", 64, (1.83, 1.67, 1.49, 1.59)),
        ("14.6B", 128, (1.85, 1.76, 1.64, 1.66)),
        ("28.3B", 96, (0.99, 0.87, 0.76, 0.82)),
        ("28.3B", 128, (1.00, 0.90, 0.80, 0.85)),
        ("28.3B", 256, (1.00, 0.96, 0.88, 0.90)),
    )
}

# Table 4 — peak memory per GPU (GB), the same for every microbatch count of a model
TABLE4_MEMORY_GB: dict[str, dict[str, float]] = {
    model: dict(zip(("ZB-2p", "ZB-1p", "1F1B", "1F1B-I"), values))
    for model, values in (
        ("1.5B", (59, 32, 30, 40)),
        ("6.2B", (70, 42, 39, 48)),
        ("14.6B", (51, 33, 32, 39)),
        ("28.3B", (74, 44, 43, 58)),
    )
}
