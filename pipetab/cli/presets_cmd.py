"""``pipetab models`` and ``pipetab systems``: the presets, or your own TOML files, with what
a planner needs to know of each (parameters and family; GPUs per node, memory, links)."""

from __future__ import annotations

from pipetab.files import printable

from .common import emit_json


def register(sub) -> None:
    for kind, what in (("models", "parameter count and family"),
                       ("systems", "GPUs per node, memory, peak FLOP/s and links")):
        p = sub.add_parser(kind, help=f"list the {kind} presets, or check your own TOML files ({what})")
        p.add_argument("files", metavar="FILE", nargs="*",
                       help=f"{kind[:-1]} TOML files to load and describe instead of the presets"
                       + (" (a .json file is read as a Hugging Face config.json)" if kind == "models" else ""))
        if kind == "models":
            p.add_argument("--from-hf", metavar="CONFIG_JSON", action="append", default=[],
                           help="describe the model of a Hugging Face config.json (Llama, Mistral, Mixtral, Qwen2, "
                                "Qwen3, Qwen3-MoE, DeepSeek-V2/V3); use the same path with --model anywhere")
        p.add_argument("--format", choices=["text", "json"], default="text")
        p.set_defaults(func=run, kind=kind)


def run(args) -> None:
    from pipetab import hardware

    if args.kind == "models":
        files = list(args.files) + list(args.from_hf)
        items = [(i.name, i.summary, str(i.path)) for i in hardware.list_models()] if not files else \
            [(None, None, f) for f in files]
        for f in args.from_hf:
            if not str(f).lower().endswith(".json"):
                from .common import UsageError

                raise UsageError(f"--from-hf takes a Hugging Face config.json file, got {f!r}")
        rows = [model_row(hardware.load_model(path), name, summary, path) for name, summary, path in items]
    else:
        items = [(i.name, i.summary, str(i.path)) for i in hardware.list_systems()] if not args.files else \
            [(None, None, f) for f in args.files]
        rows = [system_row(hardware.load_system(path), name, summary, path) for name, summary, path in items]
    if args.format == "json":
        emit_json(rows)
        return
    (print_models if args.kind == "models" else print_systems)(rows)


def model_row(m, name, summary, path) -> dict:
    return {"name": name or m.name, "summary": summary if summary is not None else m.summary, "path": path,
            "parameters": m.total_params, "active_parameters": m.active_params,
            "family": m.family, "layers": m.num_layers, "hidden": m.hidden,
            "seq_len": m.seq_len, "global_batch": m.global_batch}


def system_row(s, name, summary, path) -> dict:
    d = s.device

    def link(x):
        return None if x is None else {"bandwidth": x.bandwidth, "latency_s": x.latency_s}

    return {"name": name or s.name, "summary": summary if summary is not None else s.summary, "path": path,
            "gpus_per_node": s.devices_per_node, "num_devices": s.num_devices, "memory_bytes": d.memory_bytes,
            "usable_memory_bytes": d.usable_memory_bytes, "peak_flops": d.peak_flops,
            "compute_efficiency": d.compute_efficiency, "intra_node_link": link(s.intra_node_link),
            "link": link(s.default_link)}


def _count(n: float) -> str:
    return f"{n / 1e9:.2f} B" if n >= 1e9 else f"{n / 1e6:.1f} M"


def print_models(rows: list[dict]) -> None:
    head = ("name", "parameters", "active", "layers", "hidden", "seq", "family")
    table = [head] + [(r["name"], _count(r["parameters"]), _count(r["active_parameters"]), str(r["layers"]),
                       str(r["hidden"]), str(r["seq_len"]), r["family"]) for r in rows]
    _print_table(table, right={1, 2, 3, 4, 5})
    for r in rows:
        if r["summary"]:
            print(printable(f"  {r['name']}: {r['summary']}"))


def print_systems(rows: list[dict]) -> None:
    def link(x):
        return "-" if x is None else f"{x['bandwidth'] / 1e9:g} GB/s, {x['latency_s'] * 1e6:g} us"

    head = ("name", "GPUs/node", "memory GB", "peak TFLOP/s", "inside a node", "between nodes / devices")
    table = [head] + [(r["name"], "-" if r["gpus_per_node"] is None else str(r["gpus_per_node"]),
                       f"{r['memory_bytes'] / 1e9:g}", f"{r['peak_flops'] / 1e12:g}", link(r["intra_node_link"]),
                       link(r["link"])) for r in rows]
    _print_table(table, right={1, 2, 3})
    for r in rows:
        if r["summary"]:
            print(printable(f"  {r['name']}: {r['summary']}"))


def _print_table(table, right: set) -> None:
    table = [tuple(printable(x) for x in r) for r in table]
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    for r in table:
        print("  ".join(x.rjust(w) if i in right else x.ljust(w) for i, (x, w) in enumerate(zip(r, widths))).rstrip())
