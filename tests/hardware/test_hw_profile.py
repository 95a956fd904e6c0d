"""Profiles of measured op times: reading, round trip through the simulator, and errors."""

import pytest

from pipetab.hardware.context import Context
from pipetab.hardware.profile import Profile, StageProfile, load_profile, profile_to_toml
from pipetab.schedules import registry
from pipetab.schedules.ops import Kind
from pipetab.solver.pricing import costs_profile, hardware_costs, profile_costs
from pipetab.solver.simulate import simulate

UNIFORM = """\
summary = "test"
time_unit = "ms"
microbatch_size = 2
[default]
forward = 2.0
backward = 3.0
weight = 1.5
message = 0.25
activation_bytes = 100
weight_memory_bytes = 40
"""


@pytest.mark.parametrize("name, S, B, system, model, par", [
    ("1f1b", 4, 8, "dgx_h100_ib", "tiny_gpt", Context(microbatch_size=1)),
    ("zb-h1", 4, 8, "dgx_h100_ib", "llama3_8b", Context(tp=2, dp=2, sequence_parallel=True, zero=1, microbatch_size=1)),
    ("gpipe", 8, 8, "a100_cluster", "llama3_8b", Context(tp=4, dp=1, sequence_parallel=False, microbatch_size=1)),
])
def test_profile_of_the_simulators_own_times_round_trips(tmp_path, name, S, B, system, model, par):
    sched = registry.generate(name, S, B)
    costs = hardware_costs(sched, system, model, par)
    path = tmp_path / "own.toml"
    path.write_text(profile_to_toml(costs_profile(sched, costs, microbatch_size=1)))
    back = profile_costs(sched, load_profile(path))
    want, got = simulate(sched, costs), simulate(sched, back)
    assert got.makespan == pytest.approx(want.makespan, rel=1e-12)
    assert got.peak_memory == pytest.approx(want.peak_memory, rel=1e-12)
    assert got.fits_memory == want.fits_memory


def test_uniform_profile_scales_to_the_stage_share(tmp_path):
    path = tmp_path / "u.toml"
    path.write_text(UNIFORM)
    prof = load_profile(path)
    assert prof.uniform and prof.num_stages is None and prof.microbatch_size == 2
    assert prof.stage(5).forward_s == pytest.approx(2e-3)
    zbv = registry.generate("zbv", 4, 8)  # 8 stages over 4 devices: each half a device
    c = profile_costs(zbv, prof)
    assert c.op_time[(Kind.F, 0, 7)] == pytest.approx(1e-3)
    assert c.op_time[(Kind.W, 0, 0)] == pytest.approx(0.75e-3)
    assert c.activation[(0, 3)] == pytest.approx(50) and c.weight_part(0, 3) == pytest.approx(20)
    assert c.transfer(registry.generate("zbv", 4, 8).orders[0][0], 0, 1) == pytest.approx(0.25e-3)
    full = profile_costs(registry.generate("1f1b", 4, 8), prof)  # backward = T_B + T_W
    assert full.op_time[(Kind.B, 0, 2)] == pytest.approx(4.5e-3) and (Kind.W, 0, 2) not in full.op_time


def test_per_stage_profile(tmp_path):
    text = UNIFORM.replace('summary = "test"', 'summary = "test"\nstages = 2') + (
        "[[stage]]\nforward = 1.0\n[[stage]]\nmessage = 0.5\n")
    path = tmp_path / "two.toml"
    path.write_text(text)
    prof = load_profile(path)
    assert prof.stage(0).forward_s == pytest.approx(1e-3) and prof.stage(1).forward_s == pytest.approx(2e-3)
    assert prof.stage(1).message_s == pytest.approx(0.5e-3)
    with pytest.raises(ValueError, match="describes 2 pipeline devices, the schedule has 4"):
        profile_costs(registry.generate("zb-h1", 4, 8), prof)


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.replace('time_unit = "ms"', 'time_unit = "min"'), "key 'time_unit' must be one of s, ms, us"),
    (lambda t: t.replace("forward = 2.0\n", ""), r"missing key 'default.forward'"),
    (lambda t: t.replace("forward = 2.0", "forward = -2.0"), "forward_s must be a finite number >= 0"),
    (lambda t: t.replace("backward = 3.0", "backward = 0"), "backward_s must be > 0"),
    (lambda t: t.replace("weight_memory_bytes = 40", "weight_memory_bytes = 400"), "must not exceed activation_bytes"),
    (lambda t: t + "speed = 3\n", "unknown key 'default.speed'"),
    (lambda t: t.replace("microbatch_size = 2", "microbatch_size = 0"), "key 'microbatch_size' must be >= 1"),
    (lambda t: t.replace('summary = "test"', 'summary = "test"\nstages = 3') + "[[stage]]\n", "'stages' is 3 but 1"),
])
def test_bad_profiles(tmp_path, edit, message):
    path = tmp_path / "bad.toml"
    path.write_text(edit(UNIFORM))
    with pytest.raises(ValueError, match=message) as err:
        load_profile(path)
    assert "bad.toml" in str(err.value)
    with pytest.raises(ValueError, match=r"profile file .*nope.toml does not exist"):
        load_profile(tmp_path / "nope.toml")


def test_profile_values():
    with pytest.raises(ValueError, match="either every stage of a profile has a weight time or none"):
        Profile("p", (StageProfile(1.0, 1.0, 0.5), StageProfile(1.0, 1.0)))
    with pytest.raises(ValueError, match="a uniform profile has exactly one stage entry"):
        Profile("p", (StageProfile(1.0, 1.0),) * 2, uniform=True)


def _op_roofline(system):
    """``system`` with ops priced by the op roofline (no kernel model)."""
    from dataclasses import replace

    return replace(system, device=replace(system.device, sm_count=0))


def _profile_on(system, model, name="1f1b", par=None, mb=1):
    sched = registry.generate(name, 4, 8)
    par = (par or Context()).replace(microbatch_size=mb)
    costs = hardware_costs(sched, system, model, par)
    return costs_profile(sched, costs, microbatch_size=mb, tp=par.tp, dp=par.dp)


@pytest.mark.parametrize("name, par", [("1f1b", None), ("zb-h1", Context(tp=2, dp=2, sequence_parallel=False, zero=0))])
def test_calibrate_recovers_the_efficiency_that_made_the_profile(name, par):
    from dataclasses import replace

    from pipetab.hardware.calibrate import calibrate
    from pipetab.hardware.loaders import load_model, load_system

    base = _op_roofline(load_system("dgx_h100_ib"))
    truth = replace(base, device=replace(base.device, compute_efficiency=0.55, efficiency_half_tokens=512.0))
    model = load_model("llama3_8b")
    prof = _profile_on(truth, model, name, par)
    start = replace(base, device=replace(base.device, efficiency_half_tokens=512.0))  # 0.7 nominal
    fit = calibrate(prof, model, start)
    assert fit.compute_efficiency == pytest.approx(0.55, rel=1e-9)
    assert not fit.mem_identified and fit.mem_efficiency == base.device.mem_efficiency
    assert all(abs(o.error) < 1e-9 for o in fit.ops)
    assert {o.kind for o in fit.ops} == ({"F", "B", "W"} if name == "zb-h1" else {"F", "B"})


def test_calibrate_fits_memory_efficiency_of_memory_bound_ops():
    from dataclasses import replace

    from pipetab.hardware.calibrate import calibrate
    from pipetab.hardware.loaders import load_model, load_system

    base = _op_roofline(load_system("dgx_h100_ib"))  # tiny_gpt's ops are memory-bound on an H100
    truth = replace(base, device=replace(base.device, mem_efficiency=0.6))
    model = load_model("tiny_gpt")
    fit = calibrate(_profile_on(truth, model), model, base)
    assert fit.mem_identified and fit.memory_bound_ops == fit.total_ops
    assert fit.mem_efficiency == pytest.approx(0.6, rel=1e-9)


def test_system_file_round_trip(tmp_path):
    from pipetab.hardware.calibrate import system_to_toml
    from pipetab.hardware.loaders import load_system

    for name in ("dgx_h100_ib", "mid_nw_mid_cp"):
        s = load_system(name)
        path = tmp_path / f"{name}.toml"
        path.write_text(system_to_toml(s, "written by a test"))
        back = load_system(path)
        assert back.device == s.device and back.default_link == s.default_link
        assert back.intra_node_link == s.intra_node_link and back.devices_per_node == s.devices_per_node


def test_calibrate_needs_sizes(tmp_path):
    from pipetab.hardware.calibrate import calibrate
    from pipetab.hardware.loaders import load_model, load_system

    path = tmp_path / "u.toml"
    path.write_text(UNIFORM)
    prof = load_profile(path)
    with pytest.raises(ValueError, match="gives no 'layers': calibrate needs the layers of its stage"):
        calibrate(prof, load_model("tiny_gpt"), load_system("dgx_h100_ib"))
