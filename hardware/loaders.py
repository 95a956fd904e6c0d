"""Systems and models as TOML data files.

Presets live in ``hardware/presets/systems/<name>.toml`` and
``hardware/presets/models/<name>.toml``; the preset's name is the file name. A user adds a
preset by writing such a file, and every loader also accepts a path to a file elsewhere.

System file::

    summary = "one line"              # required
    num_devices = 16                  # optional; omitted = as many as a schedule needs
    devices_per_node = 8              # optional; needs [intra_node_link]
    [device]                          # required, all keys required
    peak_flops = 1e15                 # FLOP/s
    compute_efficiency = 0.7          # (0, 1]
    compute_latency_s = 1e-6          # s per op
    mem_bandwidth = 3.35e12           # bytes/s
    mem_efficiency = 0.8              # (0, 1]
    mem_latency_s = 50e-9             # s per op
    memory_bytes = 80e9               # bytes
    reserved_bytes = 4e9              # optional: memory the model cannot use (default 0)
    efficiency_half_tokens = 256      # optional: efficiency curve (see Device; default flat)
    sm_count = 132                    # optional: price ops as kernels (hardware.kernels; default 0: off)
    tile_m = 256                      # optional: GEMM tile rows and columns (default 256 x 128)
    tile_n = 128
    fp8_peak_flops = 1.979e15         # optional: fp8 GEMM peak (default 0: no fp8)
    attention_efficiency = 0.6        # optional: flash attention's share of peak (default: compute_efficiency)
    attention_backend = "hopper_cudnn"  # optional: measured attention kernels (hardware.attention; overrides the above)
    [link]                            # required: between nodes, or between any two devices
    bandwidth = 50e9                  # bytes/s
    latency_s = 500e-9                # s
    [intra_node_link]                 # optional: within a node
    [[links]]                         # optional per-pair overrides: src, dst, bandwidth, latency_s
    [host_link]                       # optional: d2h, h2d, duplex (bytes/s), host_memory_bytes per node,
                                      # adam_params_per_s (optional): offload to host memory
    [fabric]                          # optional (needs devices_per_node): nics_per_node (int; each a [link]),
                                      # nvls, sharp (bool): collectives as NCCL runs them (hardware.collectives)

Model file: ``summary``, ``num_layers``, ``hidden``, ``heads``, ``seq_len``, ``vocab``,
``global_batch`` (required); ``ffn_hidden``, ``kv_heads``, ``bytes_per_param_compute``,
``bytes_per_grad``, ``bytes_per_param_state``, ``logit_bytes`` (integers), ``mlp``
(``"gelu"``/``"swiglu"``), ``norm`` (``"layernorm"``/``"rmsnorm"``), ``attention``
(``"flash"``/``"classic"``), ``bias``, ``tied_embeddings``, ``dropout``, ``qk_norm``
(true/false); attention variants ``head_dim``, ``q_lora_rank``, ``kv_lora_rank``,
``qk_rope_head_dim``, ``v_head_dim``; mixture of experts ``num_experts``,
``experts_per_token``, ``expert_ffn_hidden``, ``shared_experts``, ``dense_layers``,
``moe_layer_freq``, ``mtp_layers`` (optional integers). See ``TransformerModel``.

Any problem (bad TOML, unknown / missing key, wrong type, out-of-range value) raises one
``ValueError`` naming the file and the key.
"""

from __future__ import annotations

import dataclasses
import tomllib
import typing
from pathlib import Path
from typing import NamedTuple

from pipetab.schedules.formats import read_text_file

from .model import TransformerModel
from .system import Device, Link, System

PRESET_DIR = Path(__file__).resolve().parent / "presets"

_NUMBER = (int, float)


class PresetInfo(NamedTuple):
    """A preset's name, one-line summary and file."""

    name: str
    summary: str
    path: Path


class _File:
    """Typed access to one parsed TOML table, raising errors that name file and key."""

    def __init__(self, path: Path, table: dict, prefix: str = "") -> None:
        self.path, self.table, self.prefix = path, table, prefix

    def fail(self, message: str) -> ValueError:
        return ValueError(f"{self.path}: {message}")

    def key(self, name: str) -> str:
        return f"{self.prefix}{name}"

    def check_keys(self, required: dict, optional: dict) -> None:
        for name in self.table:
            if name not in required and name not in optional:
                allowed = ", ".join(list(required) + list(optional))
                raise self.fail(f"unknown key '{self.key(name)}' (allowed: {allowed})")
        for name in required:
            if name not in self.table:
                raise self.fail(f"missing key '{self.key(name)}'")
        for name, kind in {**required, **optional}.items():
            if name in self.table:
                self._check_type(name, kind)

    def _check_type(self, name: str, kind) -> None:
        value = self.table[name]
        if kind is int:
            ok, what = isinstance(value, int) and not isinstance(value, bool), "an integer"
        elif kind is float:
            ok, what = isinstance(value, _NUMBER) and not isinstance(value, bool), "a number"
        elif kind is str:
            ok, what = isinstance(value, str), "a string"
        elif kind is bool:
            ok, what = isinstance(value, bool), "true or false"
        elif kind is dict:
            ok, what = isinstance(value, dict), "a table"
        else:
            ok, what = isinstance(value, list) and all(isinstance(v, dict) for v in value), \
                "an array of tables"
        if not ok:
            raise self.fail(f"key '{self.key(name)}' must be {what}, got {value!r}")

    def sub(self, name: str) -> "_File":
        return _File(self.path, self.table[name], f"{self.prefix}{name}.")

    def build(self, cls, **kwargs):
        try:
            return cls(**kwargs)
        except ValueError as exc:
            where = f"in [{self.prefix[:-1]}]: " if self.prefix else ""
            raise self.fail(f"{where}{exc}") from None


def parse_toml(path: Path, what: str = "file") -> dict:
    """A TOML file as a dict: a regular UTF-8 file (``read_text_file``), valid TOML, not
    nested too deeply, integers within TOML's 64 bits; ``ValueError`` naming the file."""
    text = read_text_file(path, what)
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path}: not valid TOML ({exc})") from None
    except RecursionError:
        raise ValueError(f"{path}: nested too deeply to be a {what}") from None
    _check_integers(path, doc)
    return doc


def _check_integers(path: Path, value, key: str = "") -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _check_integers(path, v, f"{key}.{k}" if key else k)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _check_integers(path, v, f"{key}[{i}]")
    elif isinstance(value, int) and not isinstance(value, bool) and not -2**63 <= value < 2**63:
        raise ValueError(f"{path}: key '{key}' is beyond TOML's 64-bit integers, got {value}")


def _parse(path: Path) -> dict:
    return parse_toml(path, "TOML file")


def _presets(kind: str) -> dict[str, Path]:
    return {p.stem: p for p in sorted((PRESET_DIR / f"{kind}s").glob("*.toml"))}


def _resolve(kind: str, name_or_path: str | Path) -> Path:
    text = str(name_or_path)
    if isinstance(name_or_path, Path) or text.endswith((".toml", ".json")) or "/" in text or "\\" in text:
        path = Path(name_or_path)
        if not path.exists():
            raise ValueError(f"{kind} file {str(path)!r} does not exist")
        return path
    presets = _presets(kind)
    if text not in presets:
        raise ValueError(f"unknown {kind} {text!r}; known: {', '.join(presets)}")
    return presets[text]


_DEVICE_KEYS = {k: float for k in (
    "peak_flops", "compute_efficiency", "compute_latency_s", "mem_bandwidth",
    "mem_efficiency", "mem_latency_s", "memory_bytes")}
_DEVICE_OPTIONAL = {"reserved_bytes": float, "efficiency_half_tokens": float, "sm_count": int, "tile_m": int,
                    "tile_n": int, "fp8_peak_flops": float, "attention_efficiency": float,
                    "attention_backend": str, "ep_kernels": str,
                    "fp8_compute_efficiency": float, "run_overhead": float, "p2p_efficiency": float,
                    "collective_sms": int}
_LINK_KEYS = {"bandwidth": float, "latency_s": float}
_READ_APART = ("device", "default_link", "intra_node_link")  # tables with rules of their own (below)


def _system_tables() -> dict[str, type]:
    """The optional tables of a system file: every other ``System`` field typed as a
    dataclass (``host_link``: ``HostLink``), read with that dataclass's fields as its keys
    (required: those without a default) — a new table is one field of ``System``."""
    hints = typing.get_type_hints(System)
    out = {}
    for name, hint in hints.items():
        found = [t for t in (hint, *typing.get_args(hint)) if isinstance(t, type) and dataclasses.is_dataclass(t)]
        if found and name not in _READ_APART:
            out[name] = found[0]
    return out


def _table_of(f: _File, name: str, cls: type):
    """``System``'s field ``name`` from the file's table of that name (None when absent)."""
    if name not in f.table:
        return None
    types = typing.get_type_hints(cls)
    t = f.sub(name)
    t.check_keys({x.name: types[x.name] for x in dataclasses.fields(cls) if x.default is dataclasses.MISSING},
                 {x.name: types[x.name] for x in dataclasses.fields(cls) if x.default is not dataclasses.MISSING})
    return t.build(cls, **t.table)


def _link(f: _File) -> Link:
    f.check_keys(_LINK_KEYS, {})
    return f.build(Link, **f.table)


def system_from_file(path: str | Path) -> System:
    """Read a system TOML file (format in the module docstring)."""
    path = Path(path)
    f = _File(path, _parse(path))
    f.check_keys(
        {"summary": str, "device": dict, "link": dict},
        {"num_devices": int, "devices_per_node": int, "intra_node_link": dict, "links": list,
         **dict.fromkeys(_system_tables(), dict)},
    )
    dev = f.sub("device")
    dev.check_keys(_DEVICE_KEYS, _DEVICE_OPTIONAL)
    device = dev.build(Device, **dev.table)
    default = _link(f.sub("link"))
    intra = _link(f.sub("intra_node_link")) if "intra_node_link" in f.table else None
    overrides = {}
    for i, entry in enumerate(f.table.get("links", [])):
        e = _File(path, entry, f"links[{i}].")
        e.check_keys({"src": int, "dst": int, **_LINK_KEYS}, {})
        overrides[(entry["src"], entry["dst"])] = e.build(
            Link, bandwidth=entry["bandwidth"], latency_s=entry["latency_s"])
    return f.build(
        System, name=path.stem, device=device, default_link=default,
        num_devices=f.table.get("num_devices"), links=overrides,
        devices_per_node=f.table.get("devices_per_node"), intra_node_link=intra,
        summary=f.table["summary"], **{name: _table_of(f, name, cls) for name, cls in _system_tables().items()},
    )


_MODEL_REQUIRED = {k: int for k in ("num_layers", "hidden", "heads", "seq_len", "vocab", "global_batch")}
_MODEL_OPTIONAL = {
    **{k: int for k in ("ffn_hidden", "kv_heads", "bytes_per_param_compute", "bytes_per_grad",
                        "bytes_per_param_state", "logit_bytes", "head_dim", "q_lora_rank", "kv_lora_rank",
                        "qk_rope_head_dim", "v_head_dim", "num_experts", "experts_per_token",
                        "expert_ffn_hidden", "shared_experts", "dense_layers", "moe_layer_freq", "mtp_layers")},
    **{k: str for k in ("mlp", "norm", "attention")},
    **{k: bool for k in ("bias", "tied_embeddings", "dropout", "qk_norm")},
}


def model_from_file(path: str | Path) -> TransformerModel:
    """Read a model TOML file (format in the module docstring)."""
    path = Path(path)
    f = _File(path, _parse(path))
    f.check_keys({"summary": str, **_MODEL_REQUIRED}, _MODEL_OPTIONAL)
    fields = {k: v for k, v in f.table.items()}
    return f.build(TransformerModel, name=path.stem, **fields)


def load_system(name_or_path: str | Path | System) -> System:
    """A preset system by name, or a system file by path (a ``System`` passes through)."""
    if isinstance(name_or_path, System):
        return name_or_path
    return system_from_file(_resolve("system", name_or_path))


def load_model(name_or_path: str | Path | TransformerModel) -> TransformerModel:
    """A preset model by name, a model TOML file, or a Hugging Face ``config.json``
    (any ``.json`` file: ``hardware.hf``) by path (a ``TransformerModel`` passes
    through)."""
    if isinstance(name_or_path, TransformerModel):
        return name_or_path
    path = _resolve("model", name_or_path)
    if path.suffix.lower() == ".json":
        from .hf import model_from_hf_config

        return model_from_hf_config(path)
    return model_from_file(path)


def _summaries(kind: str) -> list[PresetInfo]:
    out = []
    for name, path in _presets(kind).items():
        summary = _parse(path).get("summary", "")
        out.append(PresetInfo(name, summary if isinstance(summary, str) else "", path))
    return out


def list_systems() -> list[PresetInfo]:
    """Preset systems: (name, one-line summary, path), sorted by name."""
    return _summaries("system")


def list_models() -> list[PresetInfo]:
    """Preset models: (name, one-line summary, path), sorted by name."""
    return _summaries("model")
