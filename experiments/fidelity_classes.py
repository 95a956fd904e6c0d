"""The fidelity benchmark's cells outside their target grouped by error class, with the sign
of each error (issue 41 item 3): a table of docs/fidelity.md, in-sample and left out."""

from __future__ import annotations

from collections import Counter
from typing import Callable

Rule = tuple[str, Callable[[dict], bool]]

CLASSES: tuple[Rule, ...] = (
    ("fitted to (in-sample only)", lambda r: r["status"] == "fitted"),
    ("Zero Bubble op times: classic attention's forward short, its input gradient long (forward-only "
     "kernels not modelled)", lambda r: r["study"] == "Zero Bubble" and r["table"].startswith("Table 6")),
    ("Zero Bubble ZB-2p: the automatic scheduler's order priced as ZB-H2",
     lambda r: r["study"] == "Zero Bubble" and "ZB-2p/1F1B" in r["config"]),
    ("Zero Bubble 1F1B-I ratios", lambda r: r["study"] == "Zero Bubble" and "1F1B-I/1F1B" in r["config"]),
    ("Zero Bubble step times: the run overhead refitted to Korthikanti's one-node run when left out "
     "(what a pipeline loses beside ops timed alone)",
     lambda r: r["study"] == "Zero Bubble" and r["quantity"] == "step time"),
    ("rankings (follow the ratios above)", lambda r: r["quantity"].startswith("ranking")),
    ("activation memory: Korthikanti's classic-attention count keeps more than the runs",
     lambda r: r["quantity"] == "peak memory per GPU"),
    ("Megatron SC'21: the 76.1B / 39.1B ratio (39B priced slow, 76B fast)",
     lambda r: r["study"] == "Megatron SC'21"),
    ("Korthikanti: the speed-up of SP + selective recomputation", lambda r: r["study"] == "Korthikanti 2022"),
    ("Llama 3 memory: FSDP and early deallocation of pipeline buffers not modelled",
     lambda r: r["study"] == "Llama 3" and r["quantity"].startswith("fits")),
    ("DeepSeek's pair: DeepEP's notification kernels and their SM residency not priced (docs/moe.md)",
     lambda r: r["study"] == "DeepSeek profile"),
)


def error_class(row: dict) -> str:
    """The first class of ``CLASSES`` whose rule holds for ``row`` (a cell outside target)."""
    return next((name for name, rule in CLASSES if rule(row)), "other")


def sign(row: dict) -> str:
    """Which way a cell is off: fast or slow (times and throughput), high or low (ratios and
    memory), "no" for a yes/no cell that is not."""
    if row["error_pct"] in ("", None):
        return "no"
    err = float(row["error_pct"])
    if row["unit"] in ("s", "ms"):
        return "fast" if err < 0 else "slow"
    if row["unit"] == "TFLOP/s":
        return "fast" if err > 0 else "slow"
    return "high" if err > 0 else "low"


def _counts(rows: list[dict]) -> dict[str, Counter]:
    out: dict[str, Counter] = {}
    for r in rows:
        if r["status"] != "ok":
            out.setdefault(error_class(r), Counter())[sign(r)] += 1
    return out


def class_table(rows: list[dict], loso: list[dict]) -> list[str]:
    """The markdown table: each class's cells outside target, in-sample (``rows``) and with
    their source left out of the fit (``loso``), and their signs."""
    mine, left = _counts(rows), _counts(loso)
    out = ["| error class | outside target | left out | sign (in-sample) |", "|---|---|---|---|"]
    for name in [n for n, _ in CLASSES] + ["other"]:
        if name in mine or name in left:
            signs = ", ".join(f"{n} {s}" for s, n in sorted(mine.get(name, Counter()).items()))
            out.append(f"| {name} | {sum(mine.get(name, Counter()).values())} | "
                       f"{sum(left.get(name, Counter()).values())} | {signs or '-'} |")
    out.append(f"| all | {sum(r['status'] != 'ok' for r in rows)} | {sum(r['status'] != 'ok' for r in loso)} | |")
    return out
