"""NCCL's collective kernels hold SMs while a data-parallel reduction overlaps the backward
(``Device.collective_sms``, ``collectives.sm_shared_exposed``), worked by hand."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pipetab.hardware import Context, load_model, load_system, schedule_costs
from pipetab.hardware.collectives import bucketed_exposed, sm_shared_exposed
from pipetab.schedules import registry


def test_the_overlapped_part_stretches_the_backward_by_the_sms_share():
    """1 s of reduction in 4 buckets beside a 2 s backward: bucket 4 is ready at 1.5 s and
    ends at 1.75 s, 0.25 s exposed, 0.75 s overlapped. With 20 of 132 SMs held, the backward
    does 20/132 x 0.75 = 0.11364 s of its work later: 0.36364 s exposed. k = 0: today's."""
    assert bucketed_exposed(1.0, 2.0, 4) == 0.25
    assert sm_shared_exposed(1.0, 2.0, 4, 0.0) == 0.25
    assert sm_shared_exposed(1.0, 2.0, 4, 20 / 132) == pytest.approx(0.25 + 0.75 * 20 / 132)
    assert sm_shared_exposed(1.0, 2.0, 4, 20 / 132) == pytest.approx(0.363636, abs=1e-6)
    # a reduction longer than its window: 1 s in 2 buckets beside 0.5 s, 0.75 s exposed, 0.25 s overlapped
    assert sm_shared_exposed(1.0, 0.5, 2, 0.25) == pytest.approx(0.75 + 0.25 * 0.25)
    with pytest.raises(ValueError, match=r"share of the SMs must be in \[0, 1\)"):
        sm_shared_exposed(1.0, 1.0, 1, 1.0)


def _sync(sms: int) -> float:
    h100 = load_system("dgx_h100_ib")
    h100 = replace(h100, device=replace(h100.device, collective_sms=sms))
    sched = registry.generate("1f1b", 2, 8)
    ctx = Context(tp=8, dp=4, zero=1, microbatch_size=1, seq_len=8192)
    return schedule_costs(sched, h100, load_model("llama3_70b"), ctx).dp_sync_s[0]


def test_a_preset_pays_the_share_on_its_exposed_reduction():
    """Llama 3 70B, PP 2 x TP 8 x DP 4 on H100s (132 SMs): the exposed sync grows linearly in
    the SMs NCCL holds (0 SMs: as before), 40 SMs adding twice what 20 add."""
    base, twenty, forty = _sync(0), _sync(20), _sync(40)
    assert twenty > base
    assert forty - base == pytest.approx(2 * (twenty - base), rel=1e-9)
    with pytest.raises(ValueError, match="collective_sms must be below sm_count"):
        replace(load_system("dgx_h100_ib").device, collective_sms=132)
