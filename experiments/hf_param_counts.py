"""Parameter counts of Hugging Face ``config.json`` files as transformers builds them: the
reference ``tests/hardware/test_hf.py`` checks ``pipetab.hardware.hf`` against.

Each config is read as ``from_pretrained`` reads it (the config class of its
``model_type``, ``from_dict``), the model built on the meta device
(``with torch.device("meta"): AutoModelForCausalLM.from_config(cfg)``: shapes only, no
memory) and its parameters counted (``model.parameters()``: a tied embedding once). A
``quantization_config`` is dropped first (the bf16 model is counted, as pipetab counts
it). The configs are the published ones in ``tests/data/hf/*.json`` and random valid
configs per family, made by the seeded generator below and written to
``tests/data/hf/generated/``.

Needs transformers and CPU torch, in a virtual environment of its own (``make clients``
makes one; never the project's)::

    python experiments/hf_param_counts.py           # write the generated configs and the counts
    python experiments/hf_param_counts.py --check   # recount; exit 1 on any difference

It imports nothing of pipetab: the counts are transformers' alone.
"""

from __future__ import annotations

import argparse
import datetime
import json
import random
import sys
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "hf"
GENERATED = DATA / "generated"
COUNTS = DATA / "param_counts.json"
SEED = 42
PER_FAMILY = 10

MODEL_TYPES = {
    "LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral", "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3", "MixtralForCausalLM": "mixtral", "Qwen2MoeForCausalLM": "qwen2_moe",
    "Qwen3MoeForCausalLM": "qwen3_moe", "DeepseekV2ForCausalLM": "deepseek_v2",
    "DeepseekV3ForCausalLM": "deepseek_v3",
}
# transformers' default num_key_value_heads per class (None: the number of heads): a config
# that leaves the key out gets a head count this default divides
KV_DEFAULT = {"llama": None, "mistral": 8, "qwen2": 32, "qwen3": 32, "mixtral": 8, "qwen2_moe": 16,
              "qwen3_moe": 4}


def _maybe(rng: random.Random, doc: dict, key: str, value: object, p: float = 0.5) -> None:
    """Set ``key`` with probability ``p`` (else leave it out: the class default)."""
    if rng.random() < p:
        doc[key] = value


def _attention(rng: random.Random, doc: dict, model_type: str) -> None:
    default = KV_DEFAULT[model_type]
    if rng.random() < 0.3:  # left out: transformers' default
        heads = rng.choice([1, 2]) * default if default else rng.choice([2, 4, 8])
    else:
        heads = rng.choice([2, 4, 8, 16])
        doc["num_key_value_heads"] = rng.choice([k for k in (1, 2, 4, 8, 16) if heads % k == 0])
    head_dim = rng.choice([16, 32, 64])
    doc["num_attention_heads"] = heads
    doc["hidden_size"] = heads * head_dim
    if rng.random() < 0.3:
        doc["head_dim"] = rng.choice([16, 32, 48, 64])
    elif model_type == "qwen3" and rng.random() < 0.5:
        doc["head_dim"] = head_dim  # else Qwen3's default 128


def _qwen_moe(rng: random.Random, doc: dict, layers: int) -> None:
    _maybe(rng, doc, "decoder_sparse_step", rng.choice([1, 1, 2, 3]))
    if rng.random() < 0.4:
        doc["mlp_only_layers"] = sorted(rng.sample(range(layers), rng.randint(0, min(3, layers - 1))))
    doc["num_experts_per_tok"] = rng.choice([1, 2, 4])


def generate(arch: str, rng: random.Random) -> dict:
    """One random config of ``arch`` that transformers and pipetab both accept."""
    model_type = MODEL_TYPES[arch]
    layers = rng.randint(2, 6)
    doc: dict = {"architectures": [arch], "model_type": model_type, "num_hidden_layers": layers,
                 "vocab_size": rng.choice([1000, 4096, 32000]), "intermediate_size": rng.choice([96, 256, 512]),
                 "hidden_act": "silu"}
    _maybe(rng, doc, "tie_word_embeddings", rng.random() < 0.5)
    _maybe(rng, doc, "max_position_embeddings", rng.choice([2048, 8192, 32768]))
    if model_type.startswith("deepseek"):
        heads = rng.choice([2, 4, 8])
        doc.update(num_attention_heads=heads, hidden_size=heads * rng.choice([32, 64]),
                   kv_lora_rank=rng.choice([32, 64]), qk_nope_head_dim=rng.choice([16, 32]),
                   qk_rope_head_dim=rng.choice([8, 16]), v_head_dim=rng.choice([16, 32]),
                   moe_intermediate_size=rng.choice([32, 64]), num_experts_per_tok=2)
        doc["n_routed_experts" if rng.random() < 0.7 else
            ("num_local_experts" if model_type == "deepseek_v3" else "num_experts")] = rng.choice([4, 8])
        _maybe(rng, doc, "q_lora_rank", rng.choice([None, 48, 96]))
        _maybe(rng, doc, "n_shared_experts", rng.choice([0, 1, 2]))
        if model_type == "deepseek_v3":
            doc["num_hidden_layers"] = layers = rng.randint(4, 7)  # room for the default 3 dense layers
            _maybe(rng, doc, "first_k_dense_replace", rng.choice([0, 1, 2]))
            _maybe(rng, doc, "num_nextn_predict_layers", rng.choice([0, 1]))
        else:
            _maybe(rng, doc, "first_k_dense_replace", rng.choice([0, 1]))
        return doc
    _attention(rng, doc, model_type)
    if model_type == "llama":
        _maybe(rng, doc, "attention_bias", rng.random() < 0.5)
        _maybe(rng, doc, "mlp_bias", rng.random() < 0.5)
    if model_type in ("qwen3", "qwen3_moe"):
        _maybe(rng, doc, "attention_bias", rng.random() < 0.5)
    if model_type == "mixtral":
        doc["num_local_experts" if rng.random() < 0.7 else "num_experts"] = rng.choice([4, 8])
        doc["num_experts_per_tok"] = rng.choice([1, 2])
    if model_type == "qwen2_moe":
        expert = rng.choice([32, 64])
        doc.update(num_experts=rng.choice([4, 8]), moe_intermediate_size=expert,
                   shared_expert_intermediate_size=expert * rng.choice([1, 2, 4]))
        _maybe(rng, doc, "qkv_bias", rng.random() < 0.5)
        _qwen_moe(rng, doc, layers)
    if model_type == "qwen3_moe":
        # transformers 5 writes num_local_experts; older files num_experts
        doc["num_local_experts" if rng.random() < 0.5 else "num_experts"] = rng.choice([4, 8])
        doc["moe_intermediate_size"] = rng.choice([32, 64])
        _qwen_moe(rng, doc, layers)
    return doc


def generated_configs() -> dict[str, dict]:
    """``generated/<family>-<nn>.json`` -> config, from the fixed seed."""
    rng = random.Random(SEED)
    out = {}
    for arch, model_type in MODEL_TYPES.items():
        for i in range(PER_FAMILY):
            out[f"generated/{model_type}-{i:02d}.json"] = generate(arch, rng)
    return out


def count(doc: dict) -> int:
    """Parameters of the model transformers builds from ``doc`` (module docstring)."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    doc = {k: v for k, v in doc.items() if k not in ("quantization_config", "auto_map")}
    cfg = CONFIG_MAPPING[doc["model_type"]].from_dict(doc)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    return sum(p.numel() for p in model.parameters())


def published_configs() -> dict[str, dict]:
    return {p.name: json.loads(p.read_text()) for p in sorted(DATA.glob("*.json")) if p != COUNTS}


def _dump(doc: object) -> str:
    return json.dumps(doc, indent=1) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="recount and compare with the recorded counts (exit 1 on any difference)")
    args = parser.parse_args(argv)
    import torch
    import transformers

    generated = generated_configs()
    if args.check:
        stale = [n for n, d in generated.items() if not (DATA / n).is_file() or (DATA / n).read_text() != _dump(d)]
        if stale:
            print(f"generated configs differ from the files: {', '.join(stale)}", file=sys.stderr)
            return 1
    else:
        GENERATED.mkdir(parents=True, exist_ok=True)
        for name, doc in generated.items():
            (DATA / name).write_text(_dump(doc))
    counts = {name: count(doc) for name, doc in {**published_configs(), **generated}.items()}
    if args.check:
        recorded = json.loads(COUNTS.read_text())
        bad = [f"{n}: transformers {c}, recorded {recorded['counts'].get(n)}"
               for n, c in counts.items() if recorded["counts"].get(n) != c]
        bad += [f"{n}: recorded, not counted" for n in recorded["counts"] if n not in counts]
        print("\n".join(bad) if bad else f"{len(counts)} configs: the counts of transformers "
              f"{transformers.__version__}, torch {torch.__version__} equal those recorded "
              f"(transformers {recorded['transformers']})")
        return 1 if bad else 0
    COUNTS.write_text(_dump({"transformers": transformers.__version__, "torch": torch.__version__,
                             "date": datetime.date.today().isoformat(), "seed": SEED, "counts": counts}))
    print(f"{len(counts)} configs counted into {COUNTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
