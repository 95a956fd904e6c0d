"""``pipetab profile TRACE.json... -o profile.toml``: PyTorch profiler traces into a profile."""

from __future__ import annotations

from pipetab.schedules.limits import MAX_DEVICES, SIZE_LIMITS

from . import common
from .common import UsageError, emit_json


def _layers(text: str) -> list[int]:
    import argparse

    try:
        counts = [int(x) for x in text.split(",")]
    except ValueError:
        counts = []
    if not counts or min(counts) < 0 or max(counts) > SIZE_LIMITS["layers"] or len(counts) > MAX_DEVICES:
        raise argparse.ArgumentTypeError(f"layers must be at most {MAX_DEVICES} comma-separated integers from 0 to "
                                         f"{SIZE_LIMITS['layers']:,}, got {text[:80]!r}")
    return counts


def register(sub) -> None:
    p = sub.add_parser("profile", help="turn PyTorch profiler traces (Chrome-trace JSON, one per pipeline rank) "
                                       "into a profile of per-stage op times for --profile and calibrate")
    p.add_argument("traces", metavar="TRACE.json", nargs="+",
                   help="torch.profiler Chrome traces (.json or .json.gz), one per rank (docs/cluster.md)")
    p.add_argument("-o", "--out", metavar="FILE.toml", required=True, help="where to write the profile")
    p.add_argument("-S", "--stages", type=common.positive_int("stages", maximum=MAX_DEVICES), default=None,
                   help="pipeline devices (ranks) the traces must cover (default: one per trace)")
    p.add_argument("--microbatch-size", type=common.positive_int("microbatch size",
                                                                 maximum=SIZE_LIMITS["microbatch_size"]), default=None,
                   help="sequences per microbatch of the traced run (calibrate needs it)")
    p.add_argument("--tp", type=common.positive_int("tp", maximum=SIZE_LIMITS["tp"]), default=1,
                   help="tensor-parallel GPUs per stage (default 1)")
    p.add_argument("--dp", type=common.positive_int("dp", maximum=SIZE_LIMITS["gpus"]), default=1,
                   help="data-parallel replicas (default 1)")
    p.add_argument("--layers", type=_layers, default=None, metavar="N,N,...",
                   help="transformer layers of each rank's stages (calibrate needs them)")
    p.add_argument("--time-unit", choices=["s", "ms", "us"], default="ms", help="unit of the written times (ms)")
    p.add_argument("--format", choices=["text", "json"], default="text")
    p.add_argument("--quiet", action="store_true", help="no live progress line on a terminal")
    p.set_defaults(func=run)


def run(args) -> None:
    from pipetab.hardware.profile import profile_to_toml
    from pipetab.hardware.trace import profile_from_traces

    out = common.output_path(args.out, "--out", (".toml",))
    from pipetab.console import Progress

    try:
        with Progress("profile", quiet=args.quiet) as progress:
            progress(f"reading {len(args.traces)} trace{'s' if len(args.traces) > 1 else ''}")
            prof = profile_from_traces(args.traces, args.stages, microbatch_size=args.microbatch_size, tp=args.tp,
                                       dp=args.dp, layers=args.layers)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    common.write_output(out, "--out", lambda p: p.write_text(profile_to_toml(prof, args.time_unit)))
    rows: list[dict] = [{"rank": d, "forward_s": s.forward_s, "backward_s": s.backward_s, "weight_s": s.weight_s,
             "message_s": s.message_s, "activation_bytes": s.activation_bytes} for d, s in enumerate(prof.stages)]
    if args.format == "json":
        emit_json({"written": str(out), "split_backward": prof.split_backward, "stages": rows})
        return
    print(f"{'rank':>4} {'T_F (ms)':>10} {'T_B (ms)':>10} {'T_W (ms)':>10} {'message (ms)':>13} {'activation MiB':>15}")
    for r in rows:
        w = "-" if r["weight_s"] is None else f"{r['weight_s'] * 1e3:.3f}"
        print(f"{r['rank']:>4} {r['forward_s'] * 1e3:>10.3f} {r['backward_s'] * 1e3:>10.3f} {w:>10} "
              f"{r['message_s'] * 1e3:>13.3f} {r['activation_bytes'] / 2**20:>15.2f}")
    print(f"wrote {out}")
