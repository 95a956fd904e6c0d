"""The error band ``pipetab plan`` prints beside each step time (issue 41 item 6), from the
development set's cells in docs/bench/fidelity.csv.

The cells: every absolute time the benchmark predicts (units s, ms and TFLOP/s: step and
iteration times, per-op times, throughput per GPU), less the cells a preset constant was
fitted to (status ``fitted``). The band is the 90th percentile of their absolute error
(nearest rank): nine in ten of the development set's time predictions lie inside it.

Leave-one-source-out (a source is a study: Zero Bubble, Megatron SC'21, Korthikanti 2022,
Llama 3): for each source the same percentile of the *other* sources' cells, and how many
of the held-out source's cells that band covers. The presets are not refitted per fold:
each GPU's constants come from one source (A100: the Zero Bubble 6.2B profile; H100's run
overhead: Llama 3 405B on 8,192 GPUs), so without it there would be nothing to fit; the
cells fitted to are left out instead, and a source's other cells are in-source for its GPU.

Run: python -m experiments.fidelity_band [--csv docs/bench/fidelity.csv] [--out pipetab/plan/fidelity_band.toml]
(tests/experiments/test_fidelity_band.py runs it on the CSV and compares with the file).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import math
from pathlib import Path

from pipetab.schedules.text import toml_string

ROOT = Path(__file__).resolve().parents[1]
CSV = ROOT / "docs" / "bench" / "fidelity.csv"
OUT = ROOT / "pipetab" / "plan" / "fidelity_band.toml"
TIME_UNITS = ("s", "ms", "TFLOP/s")
PERCENTILE = 0.9


def nearest_rank(values: list[float], p: float) -> float:
    """The ``p`` quantile of ``values`` by nearest rank (the smallest value with at least
    ``p`` of them at or below it)."""
    ordered = sorted(values)
    return ordered[max(math.ceil(p * len(ordered)) - 1, 0)]


def time_cells(path: Path = CSV) -> list[tuple[str, float]]:
    """(source, |error| %) of every absolute-time cell not fitted to."""
    with path.open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return [(r["study"], abs(float(r["error_pct"]))) for r in rows
            if r["unit"] in TIME_UNITS and r["status"] != "fitted"]


def band(path: Path = CSV) -> dict:
    """The band, its folds and its provenance, as the TOML file holds them."""
    cells = time_cells(path)
    errors = [e for _, e in cells]
    folds = {}
    for source in dict.fromkeys(s for s, _ in cells):
        others = [e for s, e in cells if s != source]
        held = [e for s, e in cells if s == source]
        b = nearest_rank(others, PERCENTILE)
        folds[source] = {"band_pct": round(b, 2), "cells": len(held), "covered": sum(e <= b for e in held)}
    return {
        "band_pct": round(nearest_rank(errors, PERCENTILE), 2),
        "cells": len(cells),
        "percentile": PERCENTILE,
        "covered_leave_one_source_out": sum(f["covered"] for f in folds.values()),
        "source_csv": "docs/bench/fidelity.csv",
        "source_sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "script": "python -m experiments.fidelity_band",
        "folds": folds,
    }


def to_toml(data: dict) -> str:
    lines = ["# written by python -m experiments.fidelity_band (do not edit): the error band pipetab plan",
             "# prints beside each step time; experiments/fidelity_band.py says how it is computed"]
    for key, value in data.items():
        if key != "folds":
            lines.append(f"{key} = {_value(value)}")
    for source, fold in data["folds"].items():
        lines += ["", f"[folds.{toml_string(source)}]", *(f"{k} = {_value(v)}" for k, v in fold.items())]
    return "\n".join(lines) + "\n"


def _value(value: object) -> str:
    return toml_string(value) if isinstance(value, str) else repr(value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--csv", default=str(CSV))
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args(argv)
    data = band(Path(args.csv))
    Path(args.out).write_text(to_toml(data), encoding="utf-8")
    print(f"band +-{data['band_pct']} % over {data['cells']} time cells; leave-one-source-out: "
          f"{data['covered_leave_one_source_out']} of {data['cells']} inside the other sources' band; "
          f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
