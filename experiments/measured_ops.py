"""pipetab's kernel model beside op times measured on one GPU: docs/bench/measured_ops.csv.

The measurements (``experiments/measured/<gpu>_<date>/``, made by
``experiments/device_ops.py`` on a lent H100 and H200; their ``meta.json`` says how) are
one Llama-style decoder layer in eager PyTorch (bf16, flash attention through
``scaled_dot_product_attention``) at tensor-parallel widths without collectives, and its
weight GEMMs alone. pipetab prices the same layer with the ``dgx_h100_ib`` device (the H100
preset: its GEMM efficiency fitted to the GEMMs measured alone on an H200 two days later,
``experiments/calibrate_presets.py``, so these H100 GEMMs are an independent check of it;
its attention cuDNN's, as measured there) and no sequence parallelism (the measured layer
runs its norms on the whole sequence). Per row: ``predicted / measured - 1``.

Rows: per layer shape the forward, the input gradient (B of a split backward), the weight
gradient (the full backward minus the input gradient) and the full backward; the activation
bytes the forward leaves for the backward against ``activation_bytes_per_layer``; per GEMM
its time against ``hardware.kernels.gemm_time``. H100 rows only: pipetab has no H200 preset
(the H200 files are kept as data).

Run: python -m experiments.measured_ops [--csv docs/bench/measured_ops.csv] [--md docs/measured_ops.md]
"""

from __future__ import annotations

import argparse
import csv
from dataclasses import replace
from pathlib import Path
from statistics import median

from pipetab.hardware import Context, load_model, load_system
from pipetab.hardware.kernels import gemm_time
from pipetab.hardware.layer import activation_bytes_per_layer
from pipetab.hardware.parts import kernel_seconds
from pipetab.schedules.ops import Kind

HERE = Path(__file__).resolve().parent
MEASURED = HERE / "measured" / "h100_2026-11-26"
OUT = HERE.parent / "docs" / "bench" / "measured_ops.csv"
MD = HERE.parent / "docs" / "measured_ops.md"
NOTES = """\
Read with care:

* The H100 preset's GEMM efficiency (0.755 of a tile's peak) is fitted to the GEMMs an
  H200 ran alone (``experiments/calibrate_presets.py``; the same chip), not to any run: on
  this H100's own GEMMs it prices the dense ones at a median of +8 % (31 of 48 within
  10 %), the narrow ones slowest (QKV at TP 4-8: +40 to +71 %, a partial wave of 256 x 128
  tiles). The forward of the layer lands within 6 % on every shape but the launch-bound
  one; the full backward is priced 10 to 18 % fast: the input gradient's part outside the
  GEMMs (attention's and the elementwise ops' backward in eager PyTorch) is more than
  pipetab prices (next bullets but one).
* The measured layer is eager PyTorch, not Megatron-LM's fused kernels: it launches about
  40 kernels per forward from Python. Llama 3 8B at TP 8 and 4,096 tokens is launch-bound
  on the H100 machine's CPU (its forward took 1.06 ms there, 0.68 ms on the H200), which
  pipetab, pricing kernels and not launches, reads as 31 % too fast.
* Activation bytes: pipetab's count (Korthikanti et al. 2022, generalized) against what
  eager PyTorch keeps; at TP 1 eager PyTorch keeps 18 % more (the norms' outputs and the
  rotary embedding's inputs besides what the formula counts).
* The input gradient weighs more against the forward than pipetab prices it: 1.30 to 1.53
  times the forward measured (all shapes but the launch-bound one), 1.11 to 1.35 priced.
  Taking the forward GEMMs' times as a stand-in for the backward's, the difference lies
  outside the GEMMs (attention's and the elementwise ops' backward); the weight gradient's
  share (0.62 to 1.05 measured, 0.65 to 0.81 priced) is closer. It is not the attention
  kernel: pinned to cuDNN's fused attention (`layers_cudnn.csv`; its forward and input
  gradient within 6 % of PyTorch's default here) the ratio is 1.30 to 1.60, pinned to
  FlashAttention-2 (`layers_flash.csv`, 3 to 21 % slower than cuDNN) 1.36 to 1.61. Schedules
  that balance F, B and W (zero bubble) are built on these ratios; a profile (`--profile`)
  gives them as measured.
* DeepSeek-V3's expert GEMMs with 128 rows are where the tile model is least right (up to
  +214 %): a 128-row GEMM fills a fraction of the tiles the model charges a whole wave of.
"""


def _read(name: str) -> list[dict]:
    with open(MEASURED / name, newline="") as fh:
        return list(csv.DictReader(fh))


def _pass(model, ctx: Context, kind: Kind, device) -> float:
    """One dense layer's pass ``kind`` as the stage costs price it (``kernel_seconds``)."""
    return sum(kernel_seconds(model, device, ctx, "dense", kind))


def rows() -> list[dict]:
    """One row per measured quantity: what, shape, measured, predicted, error."""
    # one GPU running one layer: the kernels alone, without the run overhead a cluster run adds
    device = replace(load_system("dgx_h100_ib").device, run_overhead=0.0)
    out = []
    for r in _read("layers.csv"):
        tp, seq = int(r["tp"]), int(r["seq"])
        model = replace(load_model(r["model"]), seq_len=seq)  # the layer functions read the model's
        ctx = Context(tp=tp, sequence_parallel=False, microbatch_size=int(r["microbatch"]), seq_len=seq)
        f, b, w = (_pass(model, ctx, k, device) for k in (Kind.F, Kind.B, Kind.W))
        meas = {"forward": float(r["forward_s"]), "input gradient": float(r["input_grad_s"]),
                "weight gradient": float(r["backward_s"]) - float(r["input_grad_s"]),
                "full backward": float(r["backward_s"]), "activation bytes": float(r["activation_bytes"])}
        pred = {"forward": f, "input gradient": b, "weight gradient": w, "full backward": b + w,
                "activation bytes": activation_bytes_per_layer(model, ctx)}
        shape = f"{r['model']} TP{tp} s={seq}"
        out += [{"what": f"layer {k}", "shape": shape, "measured": meas[k], "predicted": pred[k],
                 "error": pred[k] / meas[k] - 1} for k in meas]
    for r in _read("gemms.csv"):
        m, k, n = int(r["m"]), int(r["k"]), int(r["n"])
        pred = gemm_time(device, m, k, n)
        out.append({"what": f"gemm {r['gemm']}", "shape": f"{r['model']} TP{r['tp']} {m}x{k}x{n}",
                    "measured": float(r["time_s"]), "predicted": pred, "error": pred / float(r["time_s"]) - 1})
    return out


def ratios(table: list[dict]) -> dict[str, tuple[str, str]]:
    """Per layer shape, F:B:W as measured and as pipetab prices it (``1:b:w``)."""
    passes: dict[str, dict[str, tuple[float, float]]] = {}
    for r in table:
        if r["what"] in ("layer forward", "layer input gradient", "layer weight gradient"):
            passes.setdefault(r["shape"], {})[r["what"]] = (r["measured"], r["predicted"])
    out = {}
    for shape, p in passes.items():
        f, b, w = p["layer forward"], p["layer input gradient"], p["layer weight gradient"]
        out[shape] = tuple(f"1:{b[i] / f[i]:.2f}:{w[i] / f[i]:.2f}" for i in (0, 1))
    return out  # type: ignore[return-value]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--csv", default=str(OUT))
    ap.add_argument("--md", default=str(MD))
    args = ap.parse_args(argv)
    table = rows()
    with open(args.csv, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(table[0]), lineterminator="\n")
        w.writeheader()
        for r in table:
            w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})
    lines = ["# pipetab's kernel model against op times measured on one H100", "",
             "Generated by `python -m experiments.measured_ops` from "
             "`experiments/measured/h100_2026-11-26/` (made by `experiments/device_ops.py`; "
             "rows in `docs/bench/measured_ops.csv`). Error: predicted / measured - 1.", "",
             "| what | n | median | range |", "|---|---|---|---|"]
    for what in sorted({r["what"] for r in table}):
        errs = [r["error"] for r in table if r["what"] == what]
        lines.append(f"| {what} | {len(errs)} | {median(errs):+.1%} | {min(errs):+.1%} .. {max(errs):+.1%} |")
    lines += ["", "Per layer, forward : input gradient : weight gradient (the ratios a zero-bubble schedule "
              "is built on):", "", "| shape | measured | pipetab |", "|---|---|---|"]
    for shape, ratio in ratios(table).items():
        lines.append(f"| {shape} | {ratio[0]} | {ratio[1]} |")
    Path(args.md).write_text("\n".join(lines) + "\n\n" + NOTES)
    print("\n".join(lines))

if __name__ == "__main__":
    main()
