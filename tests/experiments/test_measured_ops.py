"""pipetab's H100 kernel model against op times measured on an H100
(experiments/measured/h100_2026-11-26, made by experiments/device_ops.py): what holds."""

from __future__ import annotations

from experiments.measured_ops import rows


def test_every_measured_shape_is_compared():
    table = rows()
    layers = {r["shape"] for r in table if r["what"].startswith("layer")}
    assert len(layers) == 12 and sum(r["what"].startswith("gemm") for r in table) == 4 * 12 + 5


def test_the_forward_within_ten_percent_and_the_backward_priced_fast_by_at_most_a_fifth():
    """Kernel efficiencies from kernels alone (issue 41): the forward of every shape but the
    CPU-launch-bound one (Llama 3 8B at TP 8, 4,096 tokens) within 10 %; the full backward
    fast on every shape, by no more than 20 % (its input gradient's part outside the GEMMs,
    the notes in docs/measured_ops.md)."""
    table = rows()
    forward = [r["error"] for r in table if r["what"] == "layer forward" and r["shape"] != "llama3_8b TP8 s=4096"]
    backward = [r["error"] for r in table if r["what"] == "layer full backward"]
    assert len(forward) == 11 and all(abs(e) <= 0.10 for e in forward)
    assert len(backward) == 12 and all(-0.20 <= e < 0 for e in backward)


def test_dense_gemms_priced_with_the_h200_fit_match_the_h100s_own():
    """The preset's GEMM efficiency comes from the H200's GEMMs (experiments/calibrate_presets.py):
    on the H100's GEMMs, measured apart, the dense ones' median error within 10 % and most of them
    within 10 %."""
    from statistics import median

    dense = [r["error"] for r in rows() if r["what"].startswith("gemm") and r["what"] != "gemm expert"]
    assert len(dense) == 48 and abs(median(dense)) <= 0.10 and sum(abs(e) <= 0.10 for e in dense) >= 30


def test_ratios_are_the_layers_own():
    """F:B:W of Llama 3 8B TP1 at 4,096 tokens, read straight from layers.csv."""
    import csv

    from experiments.measured_ops import MEASURED, ratios

    with open(MEASURED / "layers.csv", newline="") as fh:
        r = next(x for x in csv.DictReader(fh) if (x["model"], x["tp"], x["seq"]) == ("llama3_8b", "1", "4096"))
    f, full, b = float(r["forward_s"]), float(r["backward_s"]), float(r["input_grad_s"])
    table = ratios(rows())
    assert len(table) == 12
    assert table["llama3_8b TP1 s=4096"][0] == f"1:{b / f:.2f}:{(full - b) / f:.2f}"
