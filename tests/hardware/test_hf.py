"""Hugging Face ``config.json`` read as transformers reads it (``hardware.hf``): parameter
counts against those transformers builds (recorded by ``experiments/hf_param_counts.py``
in ``tests/data/hf/param_counts.json``), counts worked by hand, transformers' defaults for
missing keys, the sequence length, and the keys refused by name."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pipetab.cli import main
from pipetab.hardware.context import Context
from pipetab.hardware.hf import TRANSFORMERS_VERSION, model_from_hf_config, transformers_param_count
from pipetab.hardware.layer import layer_params_per_gpu

HF = Path(__file__).resolve().parents[1] / "data" / "hf"
RECORDED = json.loads((HF / "param_counts.json").read_text())


def test_the_recorded_counts_cover_every_family():
    assert RECORDED["transformers"] == TRANSFORMERS_VERSION and RECORDED["torch"].startswith("2.")
    published = sorted(p.name for p in HF.glob("*.json") if p.name != "param_counts.json")
    generated = sorted(f"generated/{p.name}" for p in (HF / "generated").glob("*.json"))
    assert sorted(RECORDED["counts"]) == sorted(published + generated)
    families = {name.split("/")[1].rsplit("-", 1)[0] for name in generated}
    assert families == {"llama", "mistral", "qwen2", "qwen3", "mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2",
                        "deepseek_v3"}


@pytest.mark.parametrize("name, count", sorted(RECORDED["counts"].items()))
def test_counts_equal_transformers(name, count):
    assert transformers_param_count(model_from_hf_config(HF / name)) == count


def _write(tmp_path: Path, doc: dict) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(doc))
    return path


QWEN2 = {"architectures": ["Qwen2ForCausalLM"], "hidden_size": 64, "num_attention_heads": 4,
         "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128, "vocab_size": 100,
         "num_hidden_layers": 2, "max_position_embeddings": 8192}
QWEN2_MOE = {"architectures": ["Qwen2MoeForCausalLM"], "hidden_size": 64, "num_attention_heads": 4,
             "num_key_value_heads": 4, "intermediate_size": 128, "vocab_size": 100, "num_hidden_layers": 4,
             "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
             "shared_expert_intermediate_size": 64, "decoder_sparse_step": 2, "mlp_only_layers": [3]}


def test_qwen2_biases_by_hand(tmp_path):
    """Q, K and V biases, none on the output projection; the final norm in transformers' count."""
    m = model_from_hf_config(_write(tmp_path, QWEN2))
    attention = (64 * 64 + 64) + 2 * (64 * 32 + 32) + 64 * 64
    layer = attention + 2 * 64 + 3 * 64 * 128
    assert m.attention_params == attention == 12416
    assert transformers_param_count(m) == 2 * layer + 2 * 100 * 64 + 64 == 87104
    assert layer_params_per_gpu(m, Context()) == m.layer_params == layer  # the GEMMs hold the biases too


def test_qwen2_moe_gate_and_dense_layers_by_hand(tmp_path):
    """Layer i has experts when (i + 1) is a multiple of decoder_sparse_step and i is not
    in mlp_only_layers: here layer 1 alone; the shared expert (2 x 32) has an h x 1 gate."""
    m = model_from_hf_config(_write(tmp_path, QWEN2_MOE))
    assert [m.is_moe_layer(i) for i in range(4)] == [False, True, False, False]
    assert (m.moe_layers_in(0, 4), m.moe_layers_in(2, 4), m.shared_experts, m.shared_expert_gate) == (1, 0, 2, True)
    attention = 3 * (64 * 64 + 64) + 64 * 64  # qkv_bias true by default
    dense = attention + 2 * 64 + 3 * 64 * 128
    moe = attention + 2 * 64 + 64 * 4 + 64 + 4 * 3 * 64 * 32 + 3 * 64 * 64
    assert transformers_param_count(m) == 3 * dense + moe + 2 * 100 * 64 + 64 == 190592
    assert layer_params_per_gpu(m, Context(), moe=True) == m.layer_params_of(True) == moe
    no_bias = model_from_hf_config(_write(tmp_path, {**QWEN2_MOE, "qkv_bias": False}))
    assert m.total_params - no_bias.total_params == 4 * (64 + 64 + 64)


def test_missing_keys_take_transformers_defaults(tmp_path):
    # Qwen2: num_key_value_heads 32 (not the head count); Qwen3: head_dim 128 (not hidden / heads)
    doc = {**QWEN2, "num_attention_heads": 64, "hidden_size": 1024}
    del doc["num_key_value_heads"], doc["head_dim"]
    m = model_from_hf_config(_write(tmp_path, doc))
    assert (m.kv_heads, m.head_dim) == (32, 16)
    m = model_from_hf_config(_write(tmp_path, {**doc, "architectures": ["Qwen3ForCausalLM"]}))
    assert (m.kv_heads, m.head_dim, m.qk_norm) == (32, 128, True)
    # Llama: num_key_value_heads = heads, head_dim = hidden / heads
    m = model_from_hf_config(_write(tmp_path, {**doc, "architectures": ["LlamaForCausalLM"]}))
    assert (m.kv_heads, m.head_dim) == (64, 16)
    # DeepSeek-V3: q_lora_rank 1536, first_k_dense_replace 3, n_shared_experts 1, one MTP module
    v3 = {"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 256, "num_attention_heads": 4,
          "num_hidden_layers": 5, "intermediate_size": 512, "vocab_size": 100, "num_local_experts": 8,
          "num_experts_per_tok": 2, "moe_intermediate_size": 64}
    m = model_from_hf_config(_write(tmp_path, v3))
    assert (m.q_lora_rank, m.dense_layers, m.shared_experts, m.mtp_layers, m.num_experts) == (1536, 3, 1, 1, 8)
    assert (m.kv_lora_rank, m.head_dim, m.qk_rope_head_dim, m.v_head_dim) == (512, 128, 64, 128)
    m = model_from_hf_config(_write(tmp_path, {**v3, "q_lora_rank": None}))
    assert m.q_lora_rank == 0  # null: a full Q projection
    # Qwen3-MoE as transformers 5 writes it: num_local_experts
    qwen3_moe = {**QWEN2_MOE, "architectures": ["Qwen3MoeForCausalLM"], "num_local_experts": 8}
    del qwen3_moe["num_experts"], qwen3_moe["shared_expert_intermediate_size"]
    assert model_from_hf_config(_write(tmp_path, qwen3_moe)).num_experts == 8


def test_a_moe_config_without_moe_layers_is_dense(tmp_path):
    m = model_from_hf_config(_write(tmp_path, {**QWEN2_MOE, "decoder_sparse_step": 5}))
    assert not m.moe and m.num_layers == 4


def test_the_sequence_length_is_stated(tmp_path):
    m = model_from_hf_config(_write(tmp_path, QWEN2))
    assert m.seq_len == 8192 and "sequence length 8192 from max_position_embeddings" in m.summary
    doc = {**QWEN2, "architectures": ["LlamaForCausalLM"]}
    del doc["max_position_embeddings"]
    m = model_from_hf_config(_write(tmp_path, doc))
    assert m.seq_len == 2048 and "transformers' default max_position_embeddings of LlamaConfig" in m.summary
    m = model_from_hf_config(_write(tmp_path, QWEN2), seq_len=1000)
    assert m.seq_len == 1000 and "sequence length 1000 given" in m.summary


def test_a_sliding_window_is_stated_not_modelled(tmp_path):
    mistral = {**QWEN2, "architectures": ["MistralForCausalLM"]}
    assert "sliding_window 4096 not modelled" in model_from_hf_config(_write(tmp_path, mistral)).summary
    assert "not modelled" not in model_from_hf_config(_write(tmp_path, {**mistral, "sliding_window": None})).summary
    assert "not modelled" not in model_from_hf_config(_write(tmp_path, {**QWEN2, "sliding_window": 512})).summary
    qwen = {**QWEN2, "use_sliding_window": True, "sliding_window": 512}
    assert "sliding_window 512 not modelled" in model_from_hf_config(_write(tmp_path, qwen)).summary


def test_published_sequence_lengths():
    assert model_from_hf_config(HF / "llama-3.1-8b.json").seq_len == 131072
    assert model_from_hf_config(HF / "deepseek-v3.json").seq_len == 163840


@pytest.mark.parametrize("base, edit, message", [
    (QWEN2, {"attention_bias": True}, "key 'attention_bias' (true) is not read by transformers' Qwen2Config"),
    (QWEN2, {"mlp_bias": True}, "key 'mlp_bias' (true) is not read by transformers' Qwen2Config"),
    (QWEN2_MOE, {"num_local_experts": 8}, "key 'num_local_experts' (8) is not read by transformers' Qwen2MoeConfig"),
    (QWEN2_MOE, {"shared_expert_intermediate_size": 48},
     "key 'shared_expert_intermediate_size' (48) must be a multiple of moe_intermediate_size (32)"),
    (QWEN2_MOE, {"mlp_only_layers": "3"}, "key 'mlp_only_layers' must be a list of layer indices"),
    ({**QWEN2_MOE, "architectures": ["Qwen3MoeForCausalLM"]}, {"shared_expert_intermediate_size": 64},
     "key 'shared_expert_intermediate_size' (64) is not read by transformers' Qwen3MoeConfig"),
    ({**QWEN2_MOE, "architectures": ["Qwen3MoeForCausalLM"]}, {"num_local_experts": 8},
     "keys 'num_local_experts' and 'num_experts' name one setting and disagree"),
    (QWEN2, {"num_key_value_heads": 3}, "kv_heads must divide heads (4), got 3"),
    (QWEN2, {"hidden_size": 0}, "key 'hidden_size' must be an integer from 1 to 1,048,576, got 0"),
])
def test_keys_pipetab_cannot_honour_are_refused_by_name(tmp_path, base, edit, message):
    path = _write(tmp_path, {**base, **edit})
    with pytest.raises(ValueError, match=re.escape(message)) as info:
        model_from_hf_config(path)
    assert str(info.value).startswith(f"{path}: ")


V2 = {"architectures": ["DeepseekV2ForCausalLM"], "hidden_size": 256, "num_attention_heads": 4,
      "num_hidden_layers": 3, "intermediate_size": 512, "vocab_size": 100, "n_routed_experts": 8,
      "num_experts_per_tok": 2, "moe_intermediate_size": 64}


@pytest.mark.parametrize("edit, message", [
    ({"moe_layer_freq": 2}, "key 'moe_layer_freq' (2) is not read by transformers' DeepseekV2Config"),
    ({"attention_bias": True}, "key 'attention_bias' true is not supported"),
    ({"mlp_bias": True}, "key 'mlp_bias' true is not supported"),
    ({"num_nextn_predict_layers": 1}, "key 'num_nextn_predict_layers' (1) is not read by transformers' "
                                      "DeepseekV2Config"),
    ({"num_experts_per_tok": None}, "key 'num_experts_per_tok' must be given"),
    ({"first_k_dense_replace": 3}, "key 'first_k_dense_replace' (3) leaves no MoE layer"),
])
def test_deepseek_refusals(tmp_path, edit, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        model_from_hf_config(_write(tmp_path, {**V2, **edit}))


def test_the_cli_refuses_in_one_line(tmp_path, capsys):
    path = _write(tmp_path, {**QWEN2, "attention_bias": True})
    assert main(["models", "--from-hf", str(path)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and "'attention_bias'" in lines[0]
