"""TransformerModel parameter counts and the layer partition."""

import pytest

from pipetab.hardware.model import TransformerModel, partition


def test_partition_by_hand():
    # quotas 21.33, 21.33, 42.67, 42.67 -> floors 21, 21, 42, 42 (126); the 2 layers left go
    # to the largest fractional remainders (.67, stages 2 and 3)
    assert partition([1, 1, 2, 2], 128) == (21, 21, 43, 43)
    assert partition([1] * 8, 128) == (16,) * 8
    # quotas 3.33 each -> 3, 3, 3; the one left goes to the lowest index on a tie
    assert partition([1, 1, 1], 10) == (4, 3, 3)
    # quotas 0.099, 9.90 -> floors 0, 9; remainder to stage 1 -> (0, 10); stage 0 then takes
    # one layer from stage 1 so that every stage has at least one
    assert partition([1, 100], 10) == (1, 9)
    # Hanayo with W=8 waves on 8 devices: 2*W*S = 128 stages of one layer
    assert partition([1.0] * 128, 128) == (1,) * 128


def test_partition_too_many_stages():
    with pytest.raises(ValueError, match="cannot split 128 layers into 256 stages"):
        partition([1] * 256, 128)


@pytest.mark.parametrize("works", [[], [1, 0], [1, -2], [1, float("nan")]])
def test_partition_bad_work(works):
    with pytest.raises(ValueError, match="stage_work"):
        partition(works, 16)


def test_param_counts_by_hand():
    m = TransformerModel("m", num_layers=4, hidden=8, heads=2, seq_len=4, vocab=16, global_batch=4)
    assert m.ffn_hidden == 32
    assert m.layer_params == 12 * 64 + 13 * 8 == 872
    assert m.embedding_params == m.head_params == 16 * 8
    assert m.stage_params(2, first=True, last=False) == 2 * 872 + 128
    assert m.total_params == 4 * 872 + 2 * 128


def test_paper_and_gpt3_sizes():
    paper = TransformerModel("p", 128, 4096, 32, 4096, 51200, 512)
    assert paper.total_params == 128 * (12 * 4096**2 + 13 * 4096) + 2 * 51200 * 4096
    gpt3 = TransformerModel("g", 96, 12288, 96, 2048, 51200, 1536)
    assert 174.5e9 < gpt3.total_params < 175.5e9


def test_model_validation():
    with pytest.raises(ValueError, match=r"heads must divide hidden \(4096\) unless head_dim is given, got 80"):
        TransformerModel("p", 128, 4096, 80, 4096, 51200, 512)
    with pytest.raises(ValueError, match="num_layers must be an integer >= 1, got 0"):
        TransformerModel("p", 0, 4096, 32, 4096, 51200, 512)


def test_microbatch_size():
    from pipetab.hardware.context import Context

    m = TransformerModel("m", 4, 8, 2, 4, 16, global_batch=64)
    assert Context().resolved(m, 16).microbatch_size == 4
    with pytest.raises(ValueError, match=r"global batch 64 .* cannot be split into 3 equal microbatches"):
        Context().resolved(m, 3)


def test_family_param_counts_by_hand():
    # h=8, 4 heads of 2 with 2 K/V heads (kv width 4), SwiGLU f=12, RMSNorm, no biases:
    # attention 2*64 + 2*8*4 = 192, MLP 3*8*12 = 288, norms 2*8 = 16
    m = TransformerModel("g", num_layers=3, hidden=8, heads=4, seq_len=4, vocab=10, global_batch=1,
                         kv_heads=2, ffn_hidden=12, mlp="swiglu", norm="rmsnorm", bias=False,
                         tied_embeddings=True)
    assert m.kv_hidden == 4 and m.mlp_matrices == 3
    assert m.layer_params == 192 + 288 + 16 == 496
    assert m.total_params == 3 * 496 + 80  # the tied matrix counted once
    assert m.stage_params(1, first=False, last=True) == 496 + 80  # the last stage holds its copy
    assert m.family == "GQA 4/2, SwiGLU, RMSNorm, tied, flash attention"
    mqa = TransformerModel("q", 1, 8, 4, 4, 10, 1, kv_heads=1)
    assert mqa.family.startswith("MQA") and mqa.kv_hidden == 2


# Published parameter counts (1 % tolerance): Hugging Face model cards of
# meta-llama/Meta-Llama-3-8B ("8.03B params"), meta-llama/Meta-Llama-3-70B ("70.6B params"),
# meta-llama/Llama-3.1-405B (Meta: 405B); GPT-3, Brown et al. 2020, Table 2.1 (175.0B).
PUBLISHED = {"llama3_8b": 8.03e9, "llama3_70b": 70.6e9, "llama3_405b": 405e9, "gpt3_175b": 175.0e9}


@pytest.mark.parametrize("name, published", sorted(PUBLISHED.items()))
def test_presets_match_published_parameter_counts(name, published):
    from pipetab.hardware.loaders import load_model

    assert load_model(name).total_params == pytest.approx(published, rel=0.01)


def test_zero_bubble_models_match_their_names():
    from pipetab.hardware.loaders import load_model

    for name, size in (("zb_1p5b", 1.5e9), ("zb_6p2b", 6.2e9), ("zb_14p6b", 14.6e9), ("zb_28p3b", 28.3e9)):
        assert load_model(name).total_params == pytest.approx(size, rel=0.02)


@pytest.mark.parametrize("field, value, message", [
    ("kv_heads", 3, r"kv_heads must divide heads \(4\), got 3"),
    ("norm", "batchnorm", "norm must be one of layernorm, rmsnorm, got 'batchnorm'"),
    ("attention", "sparse", "attention must be one of flash, classic, got 'sparse'"),
    ("bias", 1, "bias must be true or false, got 1"),
    ("logit_bytes", -1, "logit_bytes must be an integer >= 0, got -1"),
    ("bytes_per_param_state", 3,
     r"bytes_per_param_state \(3\) must hold at least the weight and the gradient \(4 bytes\)"),
])
def test_family_validation(field, value, message):
    with pytest.raises(ValueError, match=message):
        TransformerModel("m", 2, 8, 4, 4, 16, 4, **{field: value})


def test_attention_share_of_the_model_flops_by_hand():
    """GPT layers (MHA, 4h GELU MLP) at b = 1: forward 24sh^2 GEMMs + 4s^2h attention core,
    LM head 2shV; the share of the attention core is 4s^2h / (24sh^2 + 4s^2h + 2shV / L)."""
    from pipetab.hardware.layer import attention_flops_share

    L, h, s, V = 2, 64, 512, 1000
    m = TransformerModel("g", num_layers=L, hidden=h, heads=4, seq_len=s, vocab=V, global_batch=1)
    share = L * 4 * s * s * h / (L * (24 * s * h * h + 4 * s * s * h) + 2 * s * h * V)
    assert attention_flops_share(m) == pytest.approx(share, rel=1e-12)


@pytest.mark.parametrize("name", ["gpt3_2p7b", "llama3_8b", "llama3_405b", "mixtral_8x7b", "qwen3_235b_a22b",
                                  "deepseek_v3", "zb_6p2b", "tiny_gpt"])
def test_closed_form_params_equal_the_gemm_lists(name):
    """Two implementations: the model's closed-form counts (``layer_params_of``,
    ``stage_params``) and the per-GPU counts summed from ``hardware.gemms`` at one GPU."""
    from pipetab.hardware.context import Context
    from pipetab.hardware.layer import layer_params_per_gpu, stage_params_per_gpu
    from pipetab.hardware.loaders import load_model

    m = load_model(name)
    one = Context()
    for moe in (False, True) if m.moe else (False,):
        assert m.layer_params_of(moe) == layer_params_per_gpu(m, one, moe)
    n = m.num_layers
    halves = ((n, True, True, 0), (n // 2, True, False, 0), (n - n // 2, False, True, n // 2))
    for layers, first, last, first_layer in halves:
        assert m.stage_params(layers, first, last, first_layer) == \
            stage_params_per_gpu(m, layers, first, last, one, first_layer)
