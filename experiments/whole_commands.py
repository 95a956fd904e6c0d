"""Whole ``pipetab search`` and ``bound`` processes against their ``--time-limit``: issue 28's
commands (S up to 128, B up to 4,096, JSON and torch CSV output, split backward, V, hardware
costs, a free partition, free placements) and issue 44's MoE searches and bounds with expert
parallelism (S 8-16, B 512-1,024, EP 8-64, linear and V), each with the 1-minute load average
at its start and end and the time it began (UTC).

``--load N`` adds N busy processes (one core each) for the whole run, begun before the first
command and waited on until the load average has risen, so rows at a chosen load (≈ 2, ≈ 4 on
this project's 2 cores) can be produced on purpose; the machine's own load adds to them, and
the rows say what it was. ``--append`` adds rows to the CSV (one file for several loads).

Run: python -m experiments.whole_commands [--load N] [--only REGEX] [--repeat K] [--time-limit S]
     [--append] [--out PATH]    (also: python -m experiments.bench_cpsat --whole-commands)
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Self

# issue 44: MoE searches and bounds with expert parallelism (S 8-16, B 512-1,024, EP 8-64)
_QWEN = "--system dgx_h100_ib --model qwen3_235b_a22b --tp 2 --ep 8 --dp 8 --zero 1 --recompute full"
_QWEN32 = "--system dgx_h100_ib --model qwen3_235b_a22b --ep 32 --dp 32 --zero 1 --recompute full"
_DSV3 = ("--system h800_ib --model deepseek_v3 --ep 64 --dp 64 --zero 1 --node-limit 4 --dispatch fp8 "
         "--gemm-precision fp8 --recompute full")
_MIXTRAL = "--system dgx_h100_ib --model mixtral_8x22b --tp 2 --ep 8 --dp 8 --zero 1 --recompute full"
_LLAMA = "--system dgx_h100_ib --model llama3_70b"
WHOLE_COMMANDS = tuple(argv.split() for argv in (
    # issue 28 / 29: S up to 128, B up to 4,096, JSON output, split backward, V, hardware costs, free partition
    "search -S 128 -B 1024 --format json",
    "search -S 128 -B 4096 --format json",
    "search -S 128 -B 4096 --format torch-csv",
    "search -S 128 -B 1024 --split-backward --format json",
    "bound -S 128 -B 4096 --activation-cap 128 --comm-slots 1",
    "search -S 64 -B 2048 --placement v --activation-cap 64 --comm-slots 1",
    f"search -S 64 -B 1024 {_LLAMA} --format json",
    f"bound -S 64 -B 1024 {_LLAMA}",
    f"search -S 64 -B 1024 {_LLAMA} --split-backward",
    f"search -S 64 -B 1024 {_LLAMA} --partition free",
    f"search -S 32 -B 1024 {_LLAMA} --placement v",
    # free placement: the canonical placements visited (S=8), one model (S=16), the dealt placement (S=32, 128)
    "search -S 8 -B 32 --placement free --activation-cap 8 --comm-slots 1",
    "search -S 16 -B 128 --placement free --activation-cap 16 --comm-slots 1",
    "bound -S 32 -B 256 --placement free --activation-cap 32 --comm-slots 1",
    "search -S 128 -B 1024 --placement free --format json",
    f"search -S 16 -B 1024 {_QWEN} --global-batch 65536",
    f"bound -S 16 -B 1024 {_QWEN} --global-batch 65536",
    f"search -S 8 -B 512 --placement v {_QWEN} --global-batch 32768",
    f"search -S 16 -B 512 {_QWEN32} --global-batch 32768",
    f"bound -S 16 -B 512 --placement v {_QWEN32} --global-batch 32768",
    f"search -S 16 -B 1024 {_DSV3} --global-batch 65536",
    f"search -S 16 -B 1024 {_DSV3} --global-batch 65536 --format json",
    f"bound -S 16 -B 1024 {_DSV3} --global-batch 65536",
    f"search -S 16 -B 1024 --placement v {_DSV3} --global-batch 65536",
    f"bound -S 16 -B 1024 --placement v {_DSV3} --global-batch 65536",
    f"search -S 8 -B 512 {_MIXTRAL} --global-batch 32768",
    f"bound -S 8 -B 512 --placement v {_MIXTRAL} --global-batch 32768",
))
FIELDS = ["command", "time_limit_s", "wall_s", "within_10pct", "exit", "status", "output_bytes", "load_1min",
          "load_1min_end", "added_load", "cores", "utc"]
_BUSY = "while True: pass"


class BusyLoad:
    """``n`` busy processes for the duration of a ``with`` block, each ended by its own
    handle on leaving; entering waits (at most ``rise_s``) until the 1-minute load average
    has risen by about ``n``."""

    def __init__(self, n: int, rise_s: float = 90.0):
        self.n, self.rise_s = n, rise_s
        self.procs: list[subprocess.Popen] = []

    def __enter__(self) -> Self:
        before = os.getloadavg()[0]
        self.procs = [subprocess.Popen([sys.executable, "-c", _BUSY]) for _ in range(self.n)]
        until = time.monotonic() + (self.rise_s if self.n else 0.0)
        while time.monotonic() < until and os.getloadavg()[0] < before + 0.8 * self.n:
            time.sleep(2.0)
        return self

    def __exit__(self, *exc) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            proc.wait()


def run_one(argv: list[str], limit: float, added: int) -> dict:
    """One whole command, output to a pipe, timed from before its interpreter starts."""
    load, utc = os.getloadavg()[0], time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pipetab.cli", *argv, "--time-limit", f"{limit:g}"],
                          capture_output=True, text=True)
    wall = time.perf_counter() - t0
    m = re.search(r'"status": "(\w+)"|status (\w+),', proc.stdout)
    return {"command": " ".join(argv), "time_limit_s": limit, "wall_s": round(wall, 2),
            "within_10pct": wall <= 1.1 * limit, "exit": proc.returncode,
            "status": (m[1] or m[2]) if m else proc.stderr.strip()[:80], "output_bytes": len(proc.stdout),
            "load_1min": round(load, 2), "load_1min_end": round(os.getloadavg()[0], 2), "added_load": added,
            "cores": os.cpu_count(), "utc": utc}


def run_whole_commands(out: Path, limit: float = 5.0, only: str | None = None, load: int = 0, repeat: int = 1,
                       append: bool = False) -> list[dict]:
    """``WHOLE_COMMANDS`` (those matching ``only``), each ``repeat`` times, with ``load`` busy
    processes added; rows written to ``out`` as they come (appended with ``append``)."""
    commands = [c for c in WHOLE_COMMANDS if only is None or re.search(only, " ".join(c))]
    out.parent.mkdir(parents=True, exist_ok=True)
    new = not (append and out.exists())
    rows = []
    with out.open("w" if new else "a", newline="") as fh, BusyLoad(load):
        w = csv.DictWriter(fh, fieldnames=FIELDS)
        if new:
            w.writeheader()
        for argv in commands:
            for _ in range(repeat):
                rows.append(run_one(argv, limit, load))
                w.writerow(rows[-1])
                fh.flush()
                print(rows[-1], flush=True)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=5.0, help="each command's --time-limit (default 5)")
    ap.add_argument("--load", type=int, default=0, help="busy processes added for the run (default 0)")
    ap.add_argument("--only", default=None, help="only the commands matching this regular expression")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each command (default 1)")
    ap.add_argument("--append", action="store_true", help="add rows to the CSV instead of replacing it")
    ap.add_argument("--out", default=None, help="CSV (default results/bench_cpsat_whole_commands.csv)")
    args = ap.parse_args(argv)
    for name, value, least in (("--time-limit", args.time_limit, 1e-9), ("--load", args.load, 0),
                               ("--repeat", args.repeat, 1)):
        if not value >= least:
            ap.error(f"{name} must be at least {least:g}, got {value}")
    if args.only is not None:
        try:
            re.compile(args.only)
        except re.error as exc:
            ap.error(f"--only must be a regular expression: {exc}")
    out = Path(args.out or Path(__file__).resolve().parent.parent / "results" / "bench_cpsat_whole_commands.csv")
    run_whole_commands(out, args.time_limit, args.only, args.load, args.repeat, args.append)
    return 0


if __name__ == "__main__":
    sys.exit(main())
