"""The error band ``pipetab plan`` prints beside each step time (issue 41 item 6), from a
leave-one-source-out cross-validation of the development set.

A source is a study of ``experiments.bench_fidelity`` (Zero Bubble, Megatron SC'21,
Korthikanti 2022, Llama 3). For each source, every fitted constant of the presets is refitted
without it (``experiments.calibrate_presets.preset_values(without=source)``: the A100
efficiencies and the H100 run overhead fall back to the development set's next source of
their kind when theirs is left out) and that source's cells are priced on the refitted
presets. Every cell is then a prediction of data its constants never saw, the cells the
presets are fitted to included. The folds' cells go to ``docs/bench/fidelity_loso.csv``
(status against each cell's own target) and the refitted values to
``docs/bench/fidelity_loso_constants.csv``.

The band: the 90th percentile (nearest rank) of the absolute leave-one-source-out error of
the time cells (units s, ms and TFLOP/s: step and iteration times, per-op times, throughput
per GPU): nine in ten of the development set's time predictions, each made without its own
source, lie inside it. Per fold the file keeps its cells, how many lie within 10 %, its own
90th percentile and the constants its refit changed (none where no constant was fitted to it).

Run: python -m experiments.fidelity_band (the folds, then the band), or with --from-csv only
the band from the stored folds; ``experiments.bench_fidelity`` runs it. The tests check the
stored files are the script's output (tests/experiments/test_experiments_fidelity.py: the
folds; test_fidelity_band.py: the band from them).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import math
from pathlib import Path

from pipetab.schedules.text import toml_string

ROOT = Path(__file__).resolve().parents[1]
LOSO_CSV = ROOT / "docs" / "bench" / "fidelity_loso.csv"
CONSTANTS_CSV = ROOT / "docs" / "bench" / "fidelity_loso_constants.csv"
OUT = ROOT / "pipetab" / "plan" / "fidelity_band.toml"
TIME_UNITS = ("s", "ms", "TFLOP/s")
PERCENTILE = 0.9
WITHIN = 10.0
SOURCES = ("Zero Bubble", "Megatron SC'21", "Korthikanti 2022", "Llama 3", "DeepSeek profile")


def nearest_rank(values: list[float], p: float) -> float:
    """The ``p`` quantile of ``values`` by nearest rank (the smallest value with at least
    ``p`` of them at or below it)."""
    ordered = sorted(values)
    return ordered[max(math.ceil(p * len(ordered)) - 1, 0)]


def folds() -> tuple[list[dict], list[dict]]:
    """(every cell priced without its source, the constants each source's refit changes)."""
    from .bench_fidelity import run
    from .calibrate_presets import fitted_system, preset_values

    cells, constants, full = [], [], preset_values()
    for source in SOURCES:
        values = preset_values(without=source)
        rows = run(fitted_system("a100_cluster", values), fitted_system("dgx_h100_ib", values))
        cells += [_restatus(r) for r in rows if r["study"] == source]
        constants += [{"left_out": source, "preset": preset, "key": key, "value": value}
                      for preset, keys in values.items() for key, value in keys.items() if full[preset][key] != value]
    return cells, constants


def _restatus(row: dict) -> dict:
    """``row`` with its status against its target: no cell of a fold is fitted to."""
    if row["target_pct"] is None:
        ok = row["predicted"] == row["measured"]
    else:
        ok = abs(row["error_pct"]) <= row["target_pct"]
    return {**row, "status": "ok" if ok else "miss"}


def write_folds(cells: list[dict], constants: list[dict], path: Path = LOSO_CSV,
                constants_path: Path = CONSTANTS_CSV) -> None:
    from .bench_fidelity import write_csv

    write_csv(cells, path)
    with constants_path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=["left_out", "preset", "key", "value"])
        w.writeheader()
        w.writerows({**c, "value": repr(c["value"])} for c in constants)


def _read(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as f:
        return list(csv.DictReader(f))


def band(path: Path = LOSO_CSV, constants_path: Path = CONSTANTS_CSV) -> dict:
    """The band, its folds and its provenance, as the TOML file holds them."""
    rows = _read(path)
    times = [(r["study"], abs(float(r["error_pct"]))) for r in rows if r["unit"] in TIME_UNITS]
    refits = _read(constants_path) if constants_path.exists() else []
    per: dict[str, dict] = {}
    for source in dict.fromkeys(r["study"] for r in rows):
        errors = [e for s, e in times if s == source]
        per[source] = {"cells": sum(r["study"] == source for r in rows),
                       "within_target": sum(r["study"] == source and r["status"] == "ok" for r in rows),
                       "time_cells": len(errors), "time_within_10_pct": sum(e <= WITHIN for e in errors),
                       "band_pct": round(nearest_rank(errors, PERCENTILE), 2) if errors else 0.0,
                       "refit": " ".join(f"{c['preset']}.{c['key']}={c['value']}" for c in refits
                                         if c["left_out"] == source)}
    errors = [e for _, e in times]
    return {
        "band_pct": round(nearest_rank(errors, PERCENTILE), 2),
        "time_cells": len(errors),
        "time_within_10_pct": sum(e <= WITHIN for e in errors),
        "cells": len(rows),
        "within_target": sum(r["status"] == "ok" for r in rows),
        "percentile": PERCENTILE,
        "source_csv": "docs/bench/fidelity_loso.csv",
        "source_sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "script": "python -m experiments.fidelity_band",
        "folds": per,
    }


def to_toml(data: dict) -> str:
    lines = ["# written by python -m experiments.fidelity_band (do not edit): the error band pipetab plan",
             "# prints beside each step time, from leave-one-source-out refits; experiments/fidelity_band.py",
             "# says how it is computed"]
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
    parser.add_argument("--from-csv", action="store_true", help="the band from the stored folds, no refits")
    parser.add_argument("--loso-csv", default=str(LOSO_CSV))
    parser.add_argument("--constants-csv", default=str(CONSTANTS_CSV))
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args(argv)
    loso, constants = Path(args.loso_csv), Path(args.constants_csv)
    if not args.from_csv:
        write_folds(*folds(), loso, constants)
    data = band(loso, constants)
    Path(args.out).write_text(to_toml(data), encoding="utf-8")
    print(f"leave-one-source-out: {data['within_target']} of {data['cells']} cells within target, "
          f"{data['time_within_10_pct']} of {data['time_cells']} time cells within 10 %; band "
          f"+-{data['band_pct']} %; wrote {loso}, {constants} and {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
