"""``TransformerModel``'s derived sizes (``ffn_hidden``, ``kv_heads``, ``head_dim``,
``v_head_dim``): None or left out means derive, a value is kept, and once built they are
plain integers that survive ``replace``, equality, hashing and pickling."""

import pickle
from dataclasses import asdict, replace

import pytest

from pipetab.hardware.model import TransformerModel


def small(**kw) -> TransformerModel:
    return TransformerModel("small", num_layers=2, hidden=64, heads=8, seq_len=16, vocab=100, global_batch=4, **kw)


def test_left_out_sizes_are_derived():
    """hidden 64 over 8 heads: head_dim 8, kv_heads 8, ffn 256, v_head_dim 8."""
    m = small()
    assert (m.ffn_hidden, m.kv_heads, m.head_dim, m.v_head_dim) == (256, 8, 8, 8)
    assert all(type(x) is int for x in (m.ffn_hidden, m.kv_heads, m.head_dim, m.v_head_dim))


def test_none_means_derive_and_values_are_kept():
    assert small(ffn_hidden=None, kv_heads=None, head_dim=None, v_head_dim=None) == small()
    m = small(ffn_hidden=100, kv_heads=2, head_dim=16, v_head_dim=4)
    assert (m.ffn_hidden, m.kv_heads, m.head_dim, m.v_head_dim) == (100, 2, 16, 4)
    assert m.kv_hidden == 32 and m.qk_head_dim == 16


def test_derived_sizes_survive_replace_pickle_and_hash():
    """``replace`` keeps the derived sizes (it passes what the model holds), as before."""
    m = small()
    wider = replace(m, hidden=128)
    assert wider.ffn_hidden == 256 and wider.head_dim == 8
    assert pickle.loads(pickle.dumps(m)) == m and hash(pickle.loads(pickle.dumps(m))) == hash(m)
    assert asdict(m)["kv_heads"] == 8
    assert "ffn_hidden=256" in repr(m)


def test_bad_sizes_are_still_refused():
    with pytest.raises(ValueError, match="kv_heads must divide heads"):
        small(kv_heads=3)
    with pytest.raises(ValueError, match="ffn_hidden"):
        small(ffn_hidden=0)
    with pytest.raises(ValueError, match="heads must divide hidden"):
        TransformerModel("odd", num_layers=2, hidden=60, heads=8, seq_len=16, vocab=100, global_batch=4)
