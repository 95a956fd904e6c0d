"""Models from Hugging Face ``config.json`` files, read as transformers reads them.

The ``architectures`` entry names one of the supported architectures (anything else is
refused by name); each is read with the keys and the defaults of transformers' config
class for it (``transformers`` 5.24.0, ``models/<family>/configuration_<family>.py``): a
key missing from the file takes that class's default, and every key the class defines
that changes the parameters is either counted or refused by name. Keys that change
neither the parameters nor the shapes (RoPE, norm epsilon, dropout, token ids, the
router's scoring) are not read.

Defaults per family (a key missing from the file):

============================== ======================================================
family                         transformers' defaults
============================== ======================================================
``LlamaForCausalLM``           vocab 32000, hidden 4096, intermediate 11008, 32 layers,
                               32 heads, ``num_key_value_heads`` = heads, ``head_dim``
                               = hidden / heads, ``attention_bias`` and ``mlp_bias``
                               false, ``max_position_embeddings`` 2048
``MistralForCausalLM``         vocab 32000, hidden 4096, intermediate 14336, 32 layers,
                               32 heads, 8 KV heads, ``head_dim`` hidden / heads,
                               ``max_position_embeddings`` 131072
``Qwen2ForCausalLM``           vocab 151936, hidden 4096, intermediate 22016, 32
                               layers, 32 heads, 32 KV heads, ``head_dim`` hidden /
                               heads, ``max_position_embeddings`` 32768; Q, K and V
                               always have biases, the output projection none
``Qwen3ForCausalLM``           as Qwen2 but ``head_dim`` 128, ``attention_bias`` false
                               (Q, K, V and output biases when true), Q/K RMSNorm
``MixtralForCausalLM``         vocab 32000, hidden 4096, intermediate 14336 (each
                               expert), 32 layers, 32 heads, 8 KV heads,
                               ``num_local_experts`` (alias ``num_experts``) 8,
                               ``num_experts_per_tok`` 2, ``max_position_embeddings``
                               131072
``Qwen2MoeForCausalLM``        vocab 151936, hidden 2048, intermediate 5632, 24 layers,
                               16 heads, 16 KV heads, ``num_experts`` 60,
                               ``num_experts_per_tok`` 4, ``moe_intermediate_size``
                               1408, ``shared_expert_intermediate_size`` 5632 (with a
                               ``h x 1`` gate), ``qkv_bias`` true,
                               ``decoder_sparse_step`` 1, ``mlp_only_layers`` [],
                               ``max_position_embeddings`` 32768
``Qwen3MoeForCausalLM``        vocab 151936, hidden 2048, intermediate 6144, 24 layers,
                               32 heads, 4 KV heads, ``head_dim`` hidden / heads,
                               ``num_experts`` (alias ``num_local_experts``, as
                               transformers 5 writes it) 128, ``num_experts_per_tok`` 8,
                               ``moe_intermediate_size`` 768, ``attention_bias`` false,
                               ``decoder_sparse_step`` 1, ``mlp_only_layers`` [],
                               ``max_position_embeddings`` 32768, Q/K RMSNorm
``DeepseekV2ForCausalLM``      vocab 102400, hidden 4096, intermediate 11008, 32
                               layers, 32 heads, ``q_lora_rank`` 1536 (null: a full Q
                               projection), ``kv_lora_rank`` 512, ``qk_nope_head_dim``
                               128, ``qk_rope_head_dim`` 64, ``v_head_dim`` 128,
                               ``n_routed_experts`` (alias ``num_experts``) 64,
                               ``n_shared_experts`` 2, ``moe_intermediate_size`` 1407,
                               ``first_k_dense_replace`` 0, ``num_experts_per_tok`` none
                               (so the file must give it), ``max_position_embeddings``
                               2048
``DeepseekV3ForCausalLM``      vocab 129280, hidden 7168, intermediate 18432, 61
                               layers, 128 heads, ``q_lora_rank`` 1536,
                               ``kv_lora_rank`` 512, ``qk_nope_head_dim`` 128,
                               ``qk_rope_head_dim`` 64, ``v_head_dim`` 128,
                               ``n_routed_experts`` (alias ``num_local_experts``) 256,
                               ``n_shared_experts`` 1, ``num_experts_per_tok`` 8,
                               ``moe_intermediate_size`` 2048,
                               ``first_k_dense_replace`` 3,
                               ``num_nextn_predict_layers`` (alias ``num_mtp_layers``) 1,
                               ``max_position_embeddings`` 4096
============================== ======================================================

``tie_word_embeddings`` defaults to false and ``hidden_act`` to ``silu`` (gated SwiGLU
MLP, the only one accepted) everywhere. Counted as transformers builds them: MLP biases
(Llama's ``mlp_bias``), attention biases per projection (Llama's and Qwen3's
``attention_bias``: Q, K, V and output; Qwen2's Q, K and V; Qwen2-MoE's ``qkv_bias``),
Qwen2-MoE's shared-expert gate, dense layers among MoE layers (Qwen-MoE's
``mlp_only_layers`` and ``decoder_sparse_step``: layer ``i`` has experts when ``(i + 1)``
is a multiple of the step and ``i`` is not listed; DeepSeek's ``first_k_dense_replace``).
Refused by name: a key a family's class does not read but another family's does, set to
something other than its neutral value (e.g. ``attention_bias`` in a Qwen2 file: Qwen2
has no such key), DeepSeek's ``attention_bias`` and ``mlp_bias`` (biases on only some of
the MLA and MLP projections), ``moe_layer_freq`` other than 1 (transformers' DeepSeek
classes do not read it: every layer from ``first_k_dense_replace`` on has experts), and
a Qwen2-MoE shared expert whose size is not a multiple of the expert size.

The sequence length is ``max_position_embeddings`` (the file's or the class default)
unless ``seq_len`` is given (the CLI's ``--seq`` overrides either); the model's summary
says which. A sliding window (Mistral's and Mixtral's ``sliding_window``, default 4096 for
Mistral and none for Mixtral; the Qwen families' with ``use_sliding_window`` true) changes
no parameter and is not modelled: the summary says so (attention is priced as full
causal). A ``config.json`` says nothing else of training, so the global batch is pipetab's
default (``global_batch``; the CLI's ``--global-batch``) and the training precision is bf16
with fp32 gradients and Adam (18 bytes per parameter), as the presets assume.

``transformers_param_count`` is the count transformers' model has: pipetab's
``total_params`` plus the final norm (which pipetab leaves out; DeepSeek's multi-token-
prediction modules are not built by transformers, as they are apart from ``total_params``).
``experiments/hf_param_counts.py`` records transformers' own counts in
``tests/data/hf/param_counts.json``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pipetab.schedules.formats import read_text_file
from pipetab.schedules.limits import SIZE_LIMITS

from .model import TransformerModel

DENSE = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM")
MIXTRAL = ("MixtralForCausalLM",)
QWEN_MOE = ("Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM")
DEEPSEEK = ("DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM")
ARCHITECTURES = DENSE + MIXTRAL + QWEN_MOE + DEEPSEEK

TRANSFORMERS_VERSION = "5.24.0"  # the version whose config classes the defaults below are read from
# the entry of ``schedules.limits.SIZE_LIMITS`` that bounds each integer key read
_LIMIT_OF = {"num_hidden_layers": "layers", "first_k_dense_replace": "layers", "moe_layer_freq": "layers",
             "num_nextn_predict_layers": "layers", "decoder_sparse_step": "layers", "hidden_size": "hidden",
             "intermediate_size": "hidden", "moe_intermediate_size": "hidden",
             "shared_expert_intermediate_size": "hidden", "kv_lora_rank": "hidden", "q_lora_rank": "hidden",
             "num_attention_heads": "heads", "num_key_value_heads": "heads", "head_dim": "head_dim",
             "qk_nope_head_dim": "head_dim", "qk_rope_head_dim": "head_dim", "v_head_dim": "head_dim",
             "vocab_size": "vocab", "num_local_experts": "experts", "num_experts": "experts",
             "n_routed_experts": "experts", "n_shared_experts": "experts", "num_experts_per_tok": "experts",
             "max_position_embeddings": "seq_len", "sliding_window": "seq_len"}
DEFAULT_GLOBAL_BATCH = 1024

_COMMON = {"tie_word_embeddings": False, "hidden_act": "silu", "head_dim": None}
_QWEN = {"vocab_size": 151936, "max_position_embeddings": 32768, "use_sliding_window": False, "sliding_window": 4096}
# transformers' defaults of each config class (module docstring); None: the class's None
DEFAULTS: dict[str, dict[str, Any]] = {
    "LlamaForCausalLM": {
        "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": None, "max_position_embeddings": 2048,
        "attention_bias": False, "mlp_bias": False},
    "MistralForCausalLM": {
        "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "max_position_embeddings": 4096 * 32,
        "sliding_window": 4096},
    "Qwen2ForCausalLM": {
        **_QWEN, "hidden_size": 4096, "intermediate_size": 22016, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 32},
    "Qwen3ForCausalLM": {
        **_QWEN, "hidden_size": 4096, "intermediate_size": 22016, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 32, "head_dim": 128, "attention_bias": False},
    "MixtralForCausalLM": {
        "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "max_position_embeddings": 4096 * 32,
        "sliding_window": None, "num_local_experts": 8, "num_experts_per_tok": 2},
    "Qwen2MoeForCausalLM": {
        **_QWEN, "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 24,
        "num_attention_heads": 16, "num_key_value_heads": 16, "num_experts": 60, "num_experts_per_tok": 4,
        "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632, "qkv_bias": True,
        "decoder_sparse_step": 1, "mlp_only_layers": None},
    "Qwen3MoeForCausalLM": {
        **_QWEN, "hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 24,
        "num_attention_heads": 32, "num_key_value_heads": 4, "num_experts": 128, "num_experts_per_tok": 8,
        "moe_intermediate_size": 768, "attention_bias": False, "decoder_sparse_step": 1, "mlp_only_layers": None},
    "DeepseekV2ForCausalLM": {
        "vocab_size": 102400, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
        "num_attention_heads": 32, "max_position_embeddings": 2048, "attention_bias": False, "mlp_bias": False,
        "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
        "v_head_dim": 128, "n_routed_experts": 64, "n_shared_experts": 2, "moe_intermediate_size": 1407,
        "first_k_dense_replace": 0, "num_experts_per_tok": None},
    "DeepseekV3ForCausalLM": {
        "vocab_size": 129280, "hidden_size": 7168, "intermediate_size": 18432, "num_hidden_layers": 61,
        "num_attention_heads": 128, "max_position_embeddings": 4096, "attention_bias": False,
        "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
        "v_head_dim": 128, "n_routed_experts": 256, "n_shared_experts": 1, "moe_intermediate_size": 2048,
        "first_k_dense_replace": 3, "num_experts_per_tok": 8, "num_nextn_predict_layers": 1},
}
# keys that another name sets (transformers' attribute_map of the class)
ALIASES: dict[str, dict[str, str]] = {
    "MixtralForCausalLM": {"num_experts": "num_local_experts"},
    "Qwen3MoeForCausalLM": {"num_local_experts": "num_experts"},
    "DeepseekV2ForCausalLM": {"num_experts": "n_routed_experts"},
    "DeepseekV3ForCausalLM": {"num_local_experts": "n_routed_experts", "num_mtp_layers": "num_nextn_predict_layers"},
}
# keys that change the parameters in some family, with the value that changes nothing: a
# file of a family whose class does not read one (nor reads it through an alias) may only
# hold that value (transformers would ignore anything else, pipetab would not know what
# was meant)
NEUTRAL: dict[str, Any] = {
    "attention_bias": False, "mlp_bias": False, "qkv_bias": False, "num_local_experts": 0, "num_experts": 0,
    "n_routed_experts": 0, "shared_expert_intermediate_size": 0, "n_shared_experts": 0, "mlp_only_layers": [],
    "decoder_sparse_step": 1, "first_k_dense_replace": 0, "num_nextn_predict_layers": 0, "num_mtp_layers": 0,
    "q_lora_rank": 0, "kv_lora_rank": 0, "moe_layer_freq": 1, "moe_intermediate_size": 0,
}


class _Config:
    """Typed access to a parsed config with its class's defaults, raising errors that name
    the file and the key."""

    def __init__(self, where: str, doc: dict, arch: str) -> None:
        self.where, self.doc, self.arch = where, doc, arch
        self.defaults = {**_COMMON, **DEFAULTS[arch]}
        aliases = ALIASES.get(arch, {})
        for alias, key in aliases.items():
            if alias in doc and key in doc and doc[alias] != doc[key]:
                raise self.fail(f"keys '{alias}' and '{key}' name one setting and disagree "
                                f"({doc[alias]!r} against {doc[key]!r})")
        self.values = {**self.defaults, **{aliases.get(k, k): v for k, v in doc.items()}}
        for key, neutral in NEUTRAL.items():
            if key not in self.defaults and key not in aliases and doc.get(key, neutral) not in (neutral, None):
                raise self.fail(f"key '{key}' ({json.dumps(doc[key])}) is not read by transformers' {self.cls} "
                                f"(only {json.dumps(neutral)} or no key is accepted)")

    @property
    def cls(self) -> str:
        return self.arch.replace("ForCausalLM", "Config")

    def fail(self, message: str) -> ValueError:
        return ValueError(f"{self.where}: {message}")

    def key_of(self, key: str) -> str:
        """The name the file used for ``key`` (an alias or the key)."""
        return next((a for a, k in ALIASES.get(self.arch, {}).items() if k == key and a in self.doc), key)

    def given(self, key: str) -> bool:
        return self.key_of(key) in self.doc

    def raw(self, key: str) -> Any:
        return self.values.get(key)

    def count(self, key: str, minimum: int = 1) -> int:
        value = self.values.get(key)
        limit = SIZE_LIMITS[_LIMIT_OF[key]]
        if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= limit:
            shown = repr(value) if not isinstance(value, int) or value.bit_length() < 128 else \
                f"a number of {value.bit_length()} bits"
            raise self.fail(f"key '{self.key_of(key)}' must be an integer from {minimum} to {limit:,}, got {shown} "
                            "(see docs/limits.md)")
        return value

    def maybe_count(self, key: str, none: int | None) -> int | None:
        """An integer key the class lets be null (``none``: what null means)."""
        return none if self.values.get(key) is None else self.count(key)

    def flag(self, key: str) -> bool:
        value = self.values.get(key)
        if not isinstance(value, bool):
            raise self.fail(f"key '{self.key_of(key)}' must be true or false, got {value!r}")
        return value


def _load(source: str | Path | dict) -> tuple[str, dict]:
    if isinstance(source, dict):
        return "config", source
    path = Path(source)
    text = read_text_file(path, "config.json")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:
        raise ValueError(f"{path}: not a config.json pipetab can read: its JSON is nested too deeply") from None
    except ValueError as exc:  # a number of over 4,300 digits
        raise ValueError(f"{path}: not a config.json pipetab can read ({str(exc).split(';')[0]})") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: a config.json holds one JSON object, got {type(doc).__name__}")
    return str(path), doc


def architecture_of(where: str, doc: dict) -> str:
    """The supported architecture a config names; ``ValueError`` naming it otherwise."""
    archs = doc.get("architectures")
    if not isinstance(archs, list) or len(archs) != 1 or not isinstance(archs[0], str):
        raise ValueError(f"{where}: key 'architectures' must name one architecture, got {archs!r}")
    if archs[0] not in ARCHITECTURES:
        raise ValueError(f"{where}: architecture {archs[0]!r} is not supported (supported: {', '.join(ARCHITECTURES)})")
    return archs[0]


def _qwen_moe_layers(c: _Config, layers: int) -> tuple[int, tuple[int, ...]] | None:
    """(leading dense layers, further dense layers) of a Qwen-MoE config as transformers
    builds it (module docstring); None when no layer has experts."""
    step = c.count("decoder_sparse_step")
    only = c.raw("mlp_only_layers") or []
    if not isinstance(only, list) or any(isinstance(i, bool) or not isinstance(i, int) for i in only):
        raise c.fail(f"key 'mlp_only_layers' must be a list of layer indices, got {only!r}")
    dense = [i for i in range(layers) if i in only or (i + 1) % step]
    if len(dense) == layers:
        return None
    lead = next(i for i in range(layers) if i not in dense)
    return lead, tuple(i for i in dense if i > lead)


def _moe_fields(c: _Config, arch: str, layers: int) -> dict:
    if arch in MIXTRAL:
        return {"num_experts": c.count("num_local_experts"), "experts_per_token": c.count("num_experts_per_tok"),
                "expert_ffn_hidden": c.count("intermediate_size")}
    if arch in QWEN_MOE:
        experts = c.count("num_experts", 0)
        split = _qwen_moe_layers(c, layers) if experts else None
        if split is None:  # transformers builds every layer with the dense MLP
            return {}
        expert = c.count("moe_intermediate_size")
        out = {"num_experts": experts, "experts_per_token": c.count("num_experts_per_tok"),
               "expert_ffn_hidden": expert, "dense_layers": split[0], "mlp_only_layers": split[1]}
        if arch == "Qwen2MoeForCausalLM":
            shared = c.count("shared_expert_intermediate_size")
            if shared % expert:
                raise c.fail(f"key 'shared_expert_intermediate_size' ({shared}) must be a multiple of "
                             f"moe_intermediate_size ({expert})")
            out.update(shared_experts=shared // expert, shared_expert_gate=True)
        return out
    if arch == "DeepseekV2ForCausalLM" and c.raw("num_experts_per_tok") is None:
        raise c.fail("key 'num_experts_per_tok' must be given (transformers' DeepseekV2Config has no default)")
    dense = c.count("first_k_dense_replace", 0)
    if dense >= layers:
        raise c.fail(f"key 'first_k_dense_replace' ({dense}) leaves no MoE layer (num_hidden_layers {layers})")
    return {"num_experts": c.count("n_routed_experts"), "experts_per_token": c.count("num_experts_per_tok"),
            "expert_ffn_hidden": c.count("moe_intermediate_size"), "shared_experts": c.count("n_shared_experts", 0),
            "dense_layers": dense,
            "mtp_layers": c.count("num_nextn_predict_layers", 0) if arch == "DeepseekV3ForCausalLM" else 0}


def _attention_fields(c: _Config, arch: str) -> dict:
    heads = c.count("num_attention_heads")
    if arch in DEEPSEEK:
        for key in ("attention_bias", "mlp_bias"):
            if key in c.defaults and c.flag(key):
                raise c.fail(f"key '{key}' true is not supported (biases on some of the MLA or MLP projections "
                             f"only); pipetab reads DeepSeek configs without biases")
        return {"head_dim": c.count("qk_nope_head_dim"), "qk_rope_head_dim": c.count("qk_rope_head_dim"),
                "v_head_dim": c.count("v_head_dim"), "kv_lora_rank": c.count("kv_lora_rank"),
                "q_lora_rank": c.maybe_count("q_lora_rank", 0)}
    out: dict = {"kv_heads": c.maybe_count("num_key_value_heads", heads),
                 "head_dim": c.maybe_count("head_dim", None)}
    if arch in ("Qwen3ForCausalLM", "Qwen3MoeForCausalLM"):
        out["qk_norm"] = True
    if arch == "Qwen2ForCausalLM":
        out.update(qkv_bias=True, out_bias=False)
    elif arch == "Qwen2MoeForCausalLM":
        out.update(qkv_bias=c.flag("qkv_bias"), out_bias=False)
    elif "attention_bias" in c.defaults:
        out.update(qkv_bias=c.flag("attention_bias"), out_bias=c.flag("attention_bias"))
    if "mlp_bias" in c.defaults:
        out["mlp_bias"] = c.flag("mlp_bias")
    return out


def _sequence(c: _Config, seq_len: int | None) -> tuple[int, str]:
    """The sequence length and what the summary says of it (and of a sliding window)."""
    if seq_len is not None:
        seq, stated = seq_len, f"sequence length {seq_len} given"
    else:
        whence = ("max_position_embeddings" if c.given("max_position_embeddings")
                  else f"transformers' default max_position_embeddings of {c.cls}")
        seq = c.count("max_position_embeddings")
        stated = f"sequence length {seq} from {whence} (--seq sets another)"
    sliding = "sliding_window" in c.defaults and c.raw("use_sliding_window") is not False
    window = c.raw("sliding_window") if sliding else None
    if window is not None:
        stated += f"; sliding_window {c.count('sliding_window')} not modelled (attention priced as full causal)"
    return seq, stated


def model_from_hf_config(source: str | Path | dict, name: str | None = None, *,
                         seq_len: int | None = None, global_batch: int = DEFAULT_GLOBAL_BATCH) -> TransformerModel:
    """A ``TransformerModel`` from a Hugging Face ``config.json`` (a path or its parsed
    dict) of a supported architecture (module docstring), sequences of ``seq_len`` tokens
    (default: ``max_position_embeddings``); ``ValueError`` naming the file and the key
    otherwise."""
    where, doc = _load(source)
    arch = architecture_of(where, doc)
    c = _Config(where, doc, arch)
    act = c.raw("hidden_act")
    if act != "silu":
        raise c.fail(f"key 'hidden_act' must be 'silu' (gated SwiGLU MLP) for {arch}, got {act!r}")
    layers = c.count("num_hidden_layers")
    fields = {
        "num_layers": layers, "hidden": c.count("hidden_size"),
        "heads": c.count("num_attention_heads"), "vocab": c.count("vocab_size"),
        "ffn_hidden": c.count("intermediate_size"), "tied_embeddings": c.flag("tie_word_embeddings"),
        **_attention_fields(c, arch),
    }
    if arch not in DENSE:
        fields.update(_moe_fields(c, arch, layers))
    seq, stated = _sequence(c, seq_len)
    label = name or (Path(where).parent.name if where.endswith("config.json") else Path(where).stem) or "model"
    try:
        return TransformerModel(
            name=label, seq_len=seq, global_batch=global_batch, mlp="swiglu", norm="rmsnorm", bias=False,
            attention="flash", dropout=False, bytes_per_grad=4, bytes_per_param_state=18,
            summary=f"{arch} from {where}; {stated}", **fields)
    except ValueError as exc:
        raise c.fail(str(exc)) from None


def transformers_param_count(model: TransformerModel) -> int:
    """The parameters transformers' model of a config has: ``total_params`` and the final
    norm (module docstring)."""
    return model.total_params + model.norm_params
