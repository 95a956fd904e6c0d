"""Helpers shared by the reproduction scripts: reading result CSVs and the derived tables
that both the figures and the report use (so they show the same numbers)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from pipetab.schedules import registry

CONFIGS = Path(__file__).resolve().parent / "configs"

# the paper's grid: which system plays which role in Fig. 4
SYSTEM_ROLE = {
    "slow_nw_fast_cp": "network-bound",
    "mid_nw_mid_cp": "balanced",
    "fast_nw_slow_cp": "compute-bound",
}
GRID_SYSTEMS = [f"{n}_nw_{c}_cp" for n in ("slow", "mid", "fast") for c in ("slow", "mid", "fast")]


def network(system: str) -> str:
    """'slow' / 'mid' / 'fast' for a grid system, '' otherwise."""
    return system.split("_nw_")[0] if "_nw_" in system else ""


def read(results: Path, name: str) -> pd.DataFrame:
    """The result CSV ``<results>/<name>.csv`` (``FileNotFoundError`` if absent)."""
    path = Path(results) / f"{name}.csv"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing")
    d = pd.read_csv(path)
    if "options" in d:
        d["options"] = d["options"].astype(object).fillna("")
    return d


def pivot(d: pd.DataFrame, value: str, index=("system", "stages", "microbatches")) -> pd.DataFrame:
    """One column per schedule, one row per (system, S, B)."""
    return d.pivot_table(index=list(index), columns="schedule", values=value, aggfunc="first")


def asym_ratio(d: pd.DataFrame) -> pd.DataFrame:
    """T_sim(chimera-asym) / T_sim(chimera) per (system, S, B), with both peak memories."""
    t = pivot(d, "simulation_makespan_s")
    m = pivot(d, "simulation_peak_memory_bytes")
    out = pd.DataFrame({
        "ratio": t["chimera-asym"] / t["chimera"],
        "mem_chimera": m["chimera"],
        "mem_asym": m["chimera-asym"],
    }).reset_index()
    return out.dropna()


def waves(options: object) -> int:
    """Hanayo's wave count W in a row's ``options`` text ("waves=2"); 1 (the default) if absent."""
    for part in str(options or "").split():
        key, _, value = part.partition("=")
        if key == "waves":
            return int(value)
    return 1


def only_waves(d: pd.DataFrame, w: int = 1) -> pd.DataFrame:
    """``d`` without the Hanayo rows of other wave counts than ``w``."""
    keep = (d.schedule != "hanayo") | (d.options.map(waves) == w)
    return d[keep]


def hanayo_table(d: pd.DataFrame, stages: int = 8, microbatches: int = 8, w: int = 1) -> pd.DataFrame:
    """Table I: per system, T_sim and idle ratio of Chimera and Hanayo (``w`` waves) at (S, B)
    and ``speedup`` = 1 - T_hanayo / T_chimera (> 0: Hanayo faster). Empty if there is no
    Hanayo row with ``w`` waves."""
    d = only_waves(d[(d.stages == stages) & (d.microbatches == microbatches)], w)
    if not ((d.schedule == "hanayo").any() and (d.schedule == "chimera").any()):
        return pd.DataFrame(columns=["system", "T_chimera", "T_hanayo", "idle_chimera", "idle_hanayo", "speedup"])
    t = d.pivot_table(index="system", columns="schedule", values="simulation_makespan_s", aggfunc="first")
    i = d.pivot_table(index="system", columns="schedule", values="simulation_idle_ratio", aggfunc="first")
    out = pd.DataFrame({
        "T_chimera": t["chimera"], "T_hanayo": t["hanayo"],
        "idle_chimera": i["chimera"], "idle_hanayo": i["hanayo"],
    }).dropna()
    out["speedup"] = 1 - out.T_hanayo / out.T_chimera
    order = {s: k for k, s in enumerate(GRID_SYSTEMS)}
    out = out.reset_index()
    return out.sort_values("system", key=lambda s: s.map(lambda x: order.get(x, 99))).reset_index(drop=True)


def hanayo_waves(d: pd.DataFrame) -> list[int]:
    """The wave counts of the Hanayo rows of ``d``, ascending."""
    return sorted({waves(o) for o in d[d.schedule == "hanayo"].options})


def ratio_to(d: pd.DataFrame, base=("gpipe", "1f1b"), value: str = "simulation_makespan_s") -> pd.DataFrame:
    """``value`` of every schedule divided by the smallest of the ``base`` schedules', per
    (system, S, B): one column per schedule."""
    t = pivot(d, value)
    return t.div(t[[b for b in base if b in t.columns]].min(axis=1), axis=0)


def faster(speedup: float) -> str:
    """'12.3 % faster' / '4.5 % slower' for speedup = 1 - T_new / T_base."""
    return f"{abs(speedup):.1%} {'faster' if speedup >= 0 else 'slower'}"


def placement_of(schedule: str) -> str:
    """The placement family of a registry schedule (its own name for any other)."""
    return str(registry.spec(schedule).family) if schedule in registry.REGISTRY else schedule


def _opt(row, col):
    """``row[col]`` as a float, or None where the column is absent or empty."""
    value = row.get(col) if hasattr(row, "get") else getattr(row, col, None)
    return None if value is None or pd.isna(value) else float(value)


def cpsat_cases(cp: pd.DataFrame) -> pd.DataFrame:
    """One row per CP-SAT run with the known schedules CP-SAT judged on the same problem
    (``known``: list of (name, seconds, fits) on the quantized costs), the best known that
    fits the cap, and the CP-SAT schedule's gain over it (``gain`` = 1 - T_cpsat / T_known)."""
    rows = []
    for _, r in cp.iterrows():
        known = []
        for col in cp.columns:
            if col.startswith("known_") and col.endswith("_ticks") and col != "known_makespan_ticks" \
                    and pd.notna(r[col]):
                name = col[len("known_"):-len("_ticks")]
                known.append((name, r[col] * r.tick_s, bool(r[f"known_{name}_fits"])))
        fitting = [t for _, t, fits in known if fits]
        best = min(fitting) if fitting else None
        cs = r.cpsat_makespan_s if pd.notna(r.cpsat_makespan_s) else None
        rows.append({
            "system": r.system, "microbatches": int(r.microbatches), "cap": r.cap, "schedule": r.schedule,
            "placement": placement_of(r.schedule), "known": known, "best_known_s": best,
            "cpsat_s": cs, "bound_s": r.bound_s if pd.notna(r.bound_s) else None, "status": r.status,
            "gap": r.gap if pd.notna(r.gap) else None, "tick_s": r.tick_s,
            "simulation_makespan_s": r.simulation_makespan_s,
            "gain": None if best is None or cs is None else 1 - cs / best,
            "assumptions": r.bound_assumptions if isinstance(r.bound_assumptions, str) else "",
            "cpsat_real_s": _opt(r, "cpsat_real_s"), "bound_real_s": _opt(r, "bound_real_s"),
        })
    return pd.DataFrame(rows)


def table1_markdown(d: pd.DataFrame) -> list[str]:
    """Table I as Markdown rows: Hanayo (W = 1, and every other wave count run) vs Chimera
    at (8, 8) on every system; empty when there are no such rows."""
    h = hanayo_table(d)
    if h.empty:
        return []
    more = [w for w in hanayo_waves(d) if w != 1]
    hw = {w: hanayo_table(d, w=w).set_index("system") for w in more}
    lines = ["| system | T_sim Chimera (s) | T_sim Hanayo (s) | Hanayo vs Chimera | idle Chimera | idle Hanayo |"
             + "".join(f" T_sim Hanayo W={w} (s) | Hanayo W={w} vs Chimera | idle Hanayo W={w} |" for w in more),
             "|---|---:|---:|---:|---:|---:|" + "---:|---:|---:|" * len(more)]
    for r in h.itertuples():
        cells = ""
        for w in more:
            if r.system in hw[w].index:
                x = hw[w].loc[r.system]
                cells += f" {x.T_hanayo:.2f} | {faster(x.speedup)} | {x.idle_hanayo:.1%} |"
            else:
                cells += " | | |"
        lines.append(f"| {r.system} | {r.T_chimera:.2f} | {r.T_hanayo:.2f} | {faster(r.speedup)} | "
                     f"{r.idle_chimera:.1%} | {r.idle_hanayo:.1%} |" + cells)
    return lines

