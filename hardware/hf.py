"""Models from Hugging Face ``config.json`` files.

The standard keys of the published configs of these architectures are read (the
``architectures`` entry names one of them; anything else is refused by name):

* ``LlamaForCausalLM``, ``MistralForCausalLM``, ``Qwen2ForCausalLM``, ``Qwen3ForCausalLM``:
  ``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``, ``num_key_value_heads``,
  ``intermediate_size``, ``vocab_size``, ``head_dim`` (when given), ``tie_word_embeddings``;
  Qwen3 normalizes queries and keys (``qk_norm``);
* ``MixtralForCausalLM``: also ``num_local_experts`` and ``num_experts_per_tok`` (each
  expert an MLP of ``intermediate_size``);
* ``Qwen3MoeForCausalLM`` (and ``Qwen2MoeForCausalLM``): ``num_experts``,
  ``num_experts_per_tok``, ``moe_intermediate_size``, ``decoder_sparse_step`` (1 only),
  ``mlp_only_layers`` (empty only), Qwen2-MoE's ``shared_expert_intermediate_size`` (a
  multiple of the expert size);
* ``DeepseekV3ForCausalLM`` (and ``DeepseekV2ForCausalLM``): multi-head latent attention
  (``q_lora_rank``, ``kv_lora_rank``, ``qk_nope_head_dim``, ``qk_rope_head_dim``,
  ``v_head_dim``), ``n_routed_experts``, ``n_shared_experts``, ``num_experts_per_tok``,
  ``moe_intermediate_size``, ``first_k_dense_replace``, ``moe_layer_freq`` and
  ``num_nextn_predict_layers`` (multi-token prediction).

Every MLP of these families is gated (``hidden_act: silu``: SwiGLU) with RMSNorm and no
biases on the linear layers (Qwen2's Q/K/V biases, ``2 (a*d + 2 kv)`` parameters a layer,
are left out). A ``config.json`` says nothing of training, so the sequence length and
the global batch are pipetab's defaults (``seq_len``, ``global_batch`` arguments; the CLI's
``--seq`` and ``--global-batch``), and the training precision is bf16 with fp32
gradients and Adam (18 bytes per parameter), as the presets assume.
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

# the entry of ``schedules.limits.SIZE_LIMITS`` that bounds each key read
_LIMIT_OF = {"num_hidden_layers": "layers", "first_k_dense_replace": "layers", "moe_layer_freq": "layers",
             "num_nextn_predict_layers": "layers", "hidden_size": "hidden", "intermediate_size": "hidden",
             "moe_intermediate_size": "hidden", "shared_expert_intermediate_size": "hidden",
             "kv_lora_rank": "hidden", "q_lora_rank": "hidden", "num_attention_heads": "heads",
             "num_key_value_heads": "heads", "head_dim": "head_dim", "qk_nope_head_dim": "head_dim",
             "qk_rope_head_dim": "head_dim", "v_head_dim": "head_dim", "vocab_size": "vocab",
             "num_local_experts": "experts", "num_experts": "experts", "n_routed_experts": "experts",
             "n_shared_experts": "experts", "num_experts_per_tok": "experts"}

DEFAULT_SEQ_LEN = 4096
DEFAULT_GLOBAL_BATCH = 1024


class _Config:
    """Typed access to a parsed config, raising errors that name the file and the key."""

    def __init__(self, where: str, doc: dict) -> None:
        self.where, self.doc = where, doc

    def fail(self, message: str) -> ValueError:
        return ValueError(f"{self.where}: {message}")

    def count(self, key: str, default: Any = None, minimum: int = 1) -> int:
        value = self.doc.get(key, default)
        if value is None:
            if default is None and key not in self.doc:
                raise self.fail(f"missing key '{key}'")
            value = default
        limit = SIZE_LIMITS[_LIMIT_OF[key]]
        if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= limit:
            shown = repr(value) if not isinstance(value, int) or value.bit_length() < 128 else \
                f"a number of {value.bit_length()} bits"
            raise self.fail(f"key '{key}' must be an integer from {minimum} to {limit:,}, got {shown} "
                            "(see docs/limits.md)")
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = self.doc.get(key, default)
        if not isinstance(value, bool):
            raise self.fail(f"key '{key}' must be true or false, got {value!r}")
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


def _moe_fields(c: _Config, arch: str) -> dict:
    if arch in MIXTRAL:
        return {"num_experts": c.count("num_local_experts"), "experts_per_token": c.count("num_experts_per_tok"),
                "expert_ffn_hidden": c.count("intermediate_size")}
    if arch in QWEN_MOE:
        if c.doc.get("decoder_sparse_step", 1) != 1:
            raise c.fail("key 'decoder_sparse_step' other than 1 is not supported (every layer a MoE layer)")
        if c.doc.get("mlp_only_layers") not in (None, []):
            raise c.fail("key 'mlp_only_layers' must be empty (dense layers among MoE layers are not supported)")
        expert = c.count("moe_intermediate_size")
        shared = c.count("shared_expert_intermediate_size", 0, 0)
        if shared % expert:
            raise c.fail(f"key 'shared_expert_intermediate_size' ({shared}) must be a multiple of "
                         f"moe_intermediate_size ({expert})")
        return {"num_experts": c.count("num_experts"), "experts_per_token": c.count("num_experts_per_tok"),
                "expert_ffn_hidden": expert, "shared_experts": shared // expert}
    return {"num_experts": c.count("n_routed_experts"), "experts_per_token": c.count("num_experts_per_tok"),
            "expert_ffn_hidden": c.count("moe_intermediate_size"), "shared_experts": c.count("n_shared_experts", 0, 0),
            "dense_layers": c.count("first_k_dense_replace", 0, 0), "moe_layer_freq": c.count("moe_layer_freq", 1),
            "mtp_layers": c.count("num_nextn_predict_layers", 0, 0)}


def _attention_fields(c: _Config, arch: str) -> dict:
    heads = c.count("num_attention_heads")
    if arch in DEEPSEEK:
        return {"head_dim": c.count("qk_nope_head_dim"), "qk_rope_head_dim": c.count("qk_rope_head_dim"),
                "v_head_dim": c.count("v_head_dim"), "kv_lora_rank": c.count("kv_lora_rank"),
                "q_lora_rank": c.count("q_lora_rank", 0, 0)}
    out: dict = {"kv_heads": c.count("num_key_value_heads", heads)}
    if c.doc.get("head_dim") is not None:
        out["head_dim"] = c.count("head_dim")
    if arch in ("Qwen3ForCausalLM", "Qwen3MoeForCausalLM"):
        out["qk_norm"] = True
    return out


def model_from_hf_config(source: str | Path | dict, name: str | None = None, *,
                         seq_len: int = DEFAULT_SEQ_LEN, global_batch: int = DEFAULT_GLOBAL_BATCH) -> TransformerModel:
    """A ``TransformerModel`` from a Hugging Face ``config.json`` (a path or its parsed
    dict) of a supported architecture (module docstring); ``ValueError`` naming the file
    and the key otherwise."""
    where, doc = _load(source)
    arch = architecture_of(where, doc)
    c = _Config(where, doc)
    act = doc.get("hidden_act", "silu")
    if act != "silu":
        raise c.fail(f"key 'hidden_act' must be 'silu' (gated SwiGLU MLP) for {arch}, got {act!r}")
    fields = {
        "num_layers": c.count("num_hidden_layers"), "hidden": c.count("hidden_size"),
        "heads": c.count("num_attention_heads"), "vocab": c.count("vocab_size"),
        "ffn_hidden": c.count("intermediate_size"), "tied_embeddings": c.flag("tie_word_embeddings", False),
        **_attention_fields(c, arch),
    }
    if arch not in DENSE:
        fields.update(_moe_fields(c, arch))
    label = name or (Path(where).parent.name if where.endswith("config.json") else Path(where).stem) or "model"
    try:
        return TransformerModel(
            name=label, seq_len=seq_len, global_batch=global_batch, mlp="swiglu", norm="rmsnorm", bias=False,
            attention="flash", dropout=False, bytes_per_grad=4, bytes_per_param_state=18,
            summary=f"{arch} from {where}", **fields)
    except ValueError as exc:
        raise c.fail(str(exc)) from None
