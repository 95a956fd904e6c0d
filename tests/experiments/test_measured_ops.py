"""pipetab's H100 kernel model against op times measured on an H100
(experiments/measured/h100_2026-11-26, made by experiments/device_ops.py): what holds."""

from __future__ import annotations

from experiments.measured_ops import rows


def test_every_measured_shape_is_compared():
    table = rows()
    layers = {r["shape"] for r in table if r["what"].startswith("layer")}
    assert len(layers) == 12 and sum(r["what"].startswith("gemm") for r in table) == 4 * 12 + 5


def test_the_full_backward_of_every_shape_within_ten_percent():
    errors = [r["error"] for r in rows() if r["what"] == "layer full backward"]
    assert len(errors) == 12 and all(abs(e) <= 0.10 for e in errors)


def test_no_dense_gemm_is_priced_faster_than_the_h100_ran_it():
    """The preset's GEMM efficiency is fitted to a whole run, below what GEMMs reach alone."""
    dense = [r for r in rows() if r["what"].startswith("gemm") and r["what"] != "gemm expert"]
    assert dense and all(r["predicted"] > r["measured"] for r in dense)


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
