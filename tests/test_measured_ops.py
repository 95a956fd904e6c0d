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
