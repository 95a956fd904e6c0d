"""``--offload-activations`` through the command line and the API: a hand-worked exposure
on the H100 preset's measured PCIe link, the same number from ``evaluate_levels``, and
CP-SAT's ``search`` choosing which activations move."""

from __future__ import annotations

import json

import pytest

from pipetab.cli import main
from pipetab.hardware.context import Context
from pipetab.schedules import registry
from pipetab.solver.levels import evaluate_levels
from pipetab.solver.offload import CopyRates, Offload, simulate_offload, simulated
from pipetab.solver.pricing import hardware_costs

# dgx_h100_ib's [host_link] as its preset records the measurement (experiments/measured/h200_2026-11-28):
# pinned copies alone, 54.8 GB/s device to host and 52.7 GB/s host to device
D2H, H2D = 54.8e9, 52.7e9
RUN = ["evaluate", "gpipe", "-S", "1", "-B", "1", "--system", "dgx_h100_ib", "--model", "gpt3_2p7b",
       "--microbatch-size", "1", "--format", "json"]


def _evaluate(capsys, *extra: str) -> dict:
    assert main([*RUN, *extra]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("share", [0.5, 1.0])
def test_one_stage_waits_for_its_copies_a_hand_worked_time(capsys, share):
    """One stage, one microbatch: F, then B. The share f of the activation A goes to host
    memory when F ends and comes back before B (prefetched at F's start, so it waits for
    the D2H), one copy at a time: B starts f A (1/d2h + 1/h2d) later, all of it exposed.
    Device memory still peaks at A (F allocates the whole at its start)."""
    plain = _evaluate(capsys)["simulation"]
    doc = _evaluate(capsys, "--offload-activations", str(share))
    sim = doc["simulation"]
    (activation,) = plain["peak_activation_bytes"]
    exposed = share * activation * (1 / D2H + 1 / H2D)
    assert sim["makespan_s"] - plain["makespan_s"] == pytest.approx(exposed, rel=1e-9)
    assert exposed > 0.1  # PCIe against a 2.7B model's whole activation: a tenth of a second and more
    assert sim["peak_activation_bytes"] == plain["peak_activation_bytes"]
    assert doc["context"]["offload_activations"] == share


def test_the_api_gives_the_command_s_number(capsys):
    """``hardware_costs`` on a ``Context`` with the share, through ``evaluate_levels``, is the
    command's simulation, and ``simulated`` is ``simulate_offload`` with every activation's
    share on the copy stream (``Offload.every``); share 0 is the plain simulation."""
    doc = _evaluate(capsys, "--offload-activations", "0.5")
    sched = registry.generate("gpipe", 1, 1)
    ctx = Context(microbatch_size=1, offload_activations=0.5)
    costs = hardware_costs(sched, "dgx_h100_ib", "gpt3_2p7b", ctx)
    assert costs.offload_fraction == 0.5 and costs.host_link is not None
    levels = evaluate_levels(sched, costs=costs)
    assert levels.simulation.makespan == pytest.approx(doc["simulation"]["makespan_s"], rel=1e-12)
    by_hand = simulate_offload(sched, costs, Offload.every(sched, CopyRates(D2H, H2D, 96e9), 0.5))
    assert simulated(sched, costs).makespan == pytest.approx(by_hand.makespan, rel=1e-12)
    plain = hardware_costs(sched, "dgx_h100_ib", "gpt3_2p7b", ctx.replace(offload_activations=0.0))
    assert simulated(sched, plain).makespan < levels.simulation.makespan


def test_search_chooses_which_activations_move(capsys):
    """``search --offload-activations``: CP-SAT's offload decisions (``offload_seconds``) under
    a cap where two live activations do not fit beside the weights; the answer says how many
    moved and its bound is below its simulated step."""
    assert main(["search", "-S", "2", "-B", "4", "--system", "dgx_h100_ib", "--model", "gpt3_2p7b",
                 "--microbatch-size", "1", "--offload-activations", "0.5", "--memory-cap", "25GiB",
                 "--time-limit", "10", "--format", "json", "--no-ops"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["offload"]["share"] == 0.5 and doc["status"] in ("optimal", "feasible")
    assert doc["lower_bound"] <= doc["makespan"]
    assert any("offload share" in a for a in doc["bound_assumptions"])
