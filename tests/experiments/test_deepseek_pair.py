"""DeepSeek's profiled DualPipe pair: the trace's measurement by hand, the price within the
two-stream model's bounds (experiments/deepseek_pair.py)."""

import json

import pytest

from experiments.deepseek_pair import beside, measured, merged, priced


def test_intervals_by_hand():
    assert merged([(5, 7), (0, 2), (1, 3), (7, 8)]) == [(0, 3), (5, 8)]
    # compute kernels [0, 4) and [6, 10) beside communication [2, 7): 2 + 1 = 3
    assert beside([(0, 4), (6, 10)], [(2, 5), (4, 7)]) == 3


def test_a_small_trace_by_hand(tmp_path):
    """Compute stream (tid 1): kernels 0-4 and 5-9 us; DeepEP's stream (tid 2): dispatch
    3-6, combine 8-12; a second compute stream (tid 3): 1-2. Span 12 us; compute 8, of it
    beside communication 1 + 1 + 1 = 3; communication 7 (dispatch 3, combine 4)."""
    def k(tid, name, ts, dur):
        return {"cat": "kernel", "tid": tid, "name": name, "ts": ts, "dur": dur}

    events = [k(1, "gemm", 0, 4), k(1, "gemm", 5, 4), k(2, "void dpsk::ep::internode::dispatch<1>(int)", 3, 3),
              k(2, "void dpsk::ep::internode::combine<2>", 8, 4), k(3, "gemm", 1, 1), {"cat": "cpu_op", "ts": 0}]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    m = measured(path)
    assert m["span_ms"] == pytest.approx(12e-3)
    assert m["compute_ms"] == pytest.approx(8e-3)
    assert m["second_stream_ms"] == pytest.approx(1e-3)
    assert m["comm_ms"] == pytest.approx(7e-3)
    assert m["compute_beside_comm_ms"] == pytest.approx(3e-3)
    assert m["comm_dispatch_ms"] == pytest.approx(3e-3) and m["comm_combine_ms"] == pytest.approx(4e-3)


def test_the_price_lies_within_the_two_stream_bounds():
    """max(compute, communication) <= the pair <= their sum without the SM share; DeepEP's 20
    of the H800's 132 SMs only lengthen it, by at most the compute's share 132/112."""
    p = priced()
    assert p["comm_share"] == pytest.approx(20 / 132)
    assert max(p["compute_ms"], p["comm_ms"]) <= p["pair_without_sm_share_ms"] + 1e-9
    assert p["pair_without_sm_share_ms"] <= p["compute_ms"] + p["comm_ms"] + 1e-9
    assert p["pair_without_sm_share_ms"] < p["pair_ms"] <= p["compute_ms"] * 132 / 112 + p["comm_ms"]
