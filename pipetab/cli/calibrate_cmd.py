"""``pipetab calibrate PROFILE --model M --system S``: fit a system's efficiencies to a profile."""

from __future__ import annotations

from pipetab.files import printable

from . import common
from .common import emit_json


def register(sub) -> None:
    p = sub.add_parser("calibrate", help="fit a system's compute and memory efficiencies to a profile "
                                         "of measured op times and write the system file")
    p.add_argument("profile", metavar="PROFILE", help="profile TOML file (docs/cluster.md)")
    p.add_argument("--model", required=True, help="model preset or TOML file the profile ran")
    p.add_argument("--system", required=True, help="system preset or TOML file to start from")
    p.add_argument("--recompute", choices=["none", "selective", "full"], default="none",
                   help="activation recomputation of the profiled run (default none)")
    p.add_argument("--out", metavar="FILE.toml", default=None,
                   help="where to write the fitted system (default: SYSTEM_calibrated.toml)")
    p.add_argument("--format", choices=["text", "json"], default="text")
    p.add_argument("--quiet", action="store_true", help="no live progress line on a terminal")
    p.set_defaults(func=run)


def run(args) -> None:
    from pipetab.hardware.calibrate import calibrate, system_to_toml
    from pipetab.hardware.loaders import load_model, load_system
    from pipetab.hardware.profile import load_profile

    out = common.output_path(args.out, "--out", (".toml",)) if args.out else None
    profile = load_profile(args.profile)
    model, system = load_model(args.model), load_system(args.system)
    from .hardware_args import check_recompute

    check_recompute(args.recompute, model)
    from pipetab.console import Progress

    with Progress("calibrate", quiet=args.quiet) as progress:
        progress(f"fitting {system.name}'s efficiencies to profile {profile.name}")
        fit = calibrate(profile, model, system, recompute=args.recompute)
    out = out or common.output_path(f"{system.name}_calibrated.toml", "--out", (".toml",))
    note = (printable(f"{fit.system.name}: {system.name} with efficiencies fitted by 'pipetab calibrate' to profile "
                      f"{args.profile} for model {model.name}") + "\n[F] fitted: compute_efficiency"
            + (", mem_efficiency" if fit.mem_identified else " (mem_efficiency kept: not identified)"))
    common.write_output(out, "--out", lambda p: p.write_text(system_to_toml(fit.system, note)))
    if args.format == "json":
        emit_json({**fit.as_dict(), "written": str(out)})
        return
    print(printable(f"calibrated {system.name} to {profile.name} ({model.name}, "
                    f"microbatch {profile.microbatch_size}):"))
    print(f"  compute efficiency {fit.compute_efficiency:.3f} (was {system.device.compute_efficiency:g}), "
          f"memory efficiency {fit.mem_efficiency:.3f}"
          + ("" if fit.mem_identified else " (kept: the profile does not identify it)"))
    print(f"  {'op':<3} {'measured':>12} {'fitted':>12} {'error':>8} {'efficiency alone':>17}")
    for o in fit.ops:
        print(f"  {o.kind:<3} {o.measured_s * 1e3:>10.3f}ms {o.fitted_s * 1e3:>10.3f}ms "
              f"{100 * o.error:>7.1f}% {o.efficiency:>17.3f}")
    print(printable(f"wrote {out}"))
