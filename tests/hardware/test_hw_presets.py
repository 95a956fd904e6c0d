"""Preset TOML files: every preset loads, the paper's grid scales by 10x, malformed files
give one clear error naming file and key."""

import itertools

import pytest

from pipetab.hardware.context import Context
from pipetab.hardware.loaders import (
    PRESET_DIR,
    list_models,
    list_systems,
    load_model,
    load_system,
    model_from_file,
)
from pipetab.hardware.model import TransformerModel
from pipetab.hardware.system import System

LEVELS = ("slow", "mid", "fast")
GRID = [f"{n}_nw_{c}_cp" for n, c in itertools.product(LEVELS, LEVELS)]


def test_all_presets_load():
    systems = {info.name: info for info in list_systems()}
    models = {info.name: info for info in list_models()}
    assert set(GRID) | {"dgx_h100_ib", "a100_cluster"} <= set(systems)
    assert {"paper_gpt", "gpt3_175b", "tiny_gpt"} <= set(models)
    for name, info in systems.items():
        s = load_system(name)
        assert isinstance(s, System) and s.name == name and info.summary and s.summary == info.summary
    for name, info in models.items():
        m = load_model(name)
        assert isinstance(m, TransformerModel) and m.name == name and info.summary


def test_paper_grid_scales_by_ten():
    grid = {name: load_system(name) for name in GRID}
    base = grid["mid_nw_mid_cp"]
    assert base.device.peak_flops == 1e15
    assert base.default_link.bandwidth == 50e9 and base.default_link.latency_s == pytest.approx(500e-9)
    assert base.device.mem_bandwidth == 34e12 and base.device.mem_latency_s == pytest.approx(50e-9)
    factor = {"slow": 0.1, "mid": 1.0, "fast": 10.0}
    for (n, c), s in zip(itertools.product(LEVELS, LEVELS), grid.values()):
        assert s.num_devices is None
        assert s.default_link.bandwidth == pytest.approx(50e9 * factor[n])
        assert s.default_link.latency_s == pytest.approx(500e-9 / factor[n])
        assert s.device.peak_flops == pytest.approx(1e15 * factor[c])
        assert s.device.compute_latency_s == pytest.approx(base.device.compute_latency_s / factor[c])
        # memory is the same at every grid point
        assert (s.device.mem_bandwidth, s.device.mem_efficiency, s.device.mem_latency_s,
                s.device.memory_bytes) == (base.device.mem_bandwidth, base.device.mem_efficiency,
                                           base.device.mem_latency_s, base.device.memory_bytes)
        assert s.device.compute_efficiency == base.device.compute_efficiency


def test_real_systems(dgx_h100_ib, a100_cluster):
    h100 = dgx_h100_ib
    assert h100.device.peak_flops == 989e12 and h100.device.mem_bandwidth == 3.35e12
    assert h100.link(0, 7).bandwidth == 450e9  # NVLink inside a node
    assert h100.link(7, 8).bandwidth == 50e9   # InfiniBand between nodes
    a100 = a100_cluster
    assert a100.device.peak_flops == 312e12
    assert a100.link(1, 2).bandwidth == 300e9 and a100.link(1, 9).bandwidth == 25e9


def test_paper_model():
    m = load_model("paper_gpt")
    assert (m.num_layers, m.hidden, m.seq_len, m.heads, m.ffn_hidden) == (128, 4096, 4096, 32, 16384)
    for b in (8, 16, 32, 64, 128, 256):
        assert Context().resolved(m, b).microbatch_size * b == m.global_batch


def test_unknown_preset():
    with pytest.raises(ValueError, match=r"unknown system 'x'; known: .*mid_nw_mid_cp"):
        load_system("x")
    with pytest.raises(ValueError, match=r"unknown model 'nope'; known: .*paper_gpt"):
        load_model("nope")
    with pytest.raises(ValueError, match=r"system file .*missing.toml. does not exist"):
        load_system("/no/such/missing.toml")


def test_load_by_path_and_passthrough(tmp_path):
    src = (PRESET_DIR / "systems" / "mid_nw_mid_cp.toml").read_text()
    path = tmp_path / "my_cluster.toml"
    path.write_text(src)
    s = load_system(str(path))
    assert s.name == "my_cluster" and s.device == load_system("mid_nw_mid_cp").device
    assert load_system(s) is s
    m = load_model("tiny_gpt")
    assert load_model(m) is m


SYSTEM = """\
summary = "test"
[device]
peak_flops = 1e15
compute_efficiency = 0.7
compute_latency_s = 1e-6
mem_bandwidth = 3.35e12
mem_efficiency = 0.8
mem_latency_s = 50e-9
memory_bytes = 80e9
[link]
bandwidth = 50e9
latency_s = 500e-9
"""


@pytest.mark.parametrize("edit, message", [
    (lambda t: t + "[[[", "not valid TOML"),
    (lambda t: t.replace('summary = "test"', 'summary = "test"\ncolour = 3'), "unknown key 'colour'"),
    (lambda t: t.replace("memory_bytes = 80e9", "memory_bytes = 80e9\nflops = 1"), "unknown key 'device.flops'"),
    (lambda t: t.replace("peak_flops = 1e15\n", ""), "missing key 'device.peak_flops'"),
    (lambda t: t.replace('summary = "test"\n', ""), "missing key 'summary'"),
    (lambda t: t.replace("bandwidth = 50e9", 'bandwidth = "fast"'),
     "key 'link.bandwidth' must be a number, got 'fast'"),
    (lambda t: t.replace("bandwidth = 50e9", "bandwidth = -1"),
     r"in \[link\]: link bandwidth must be > 0 bytes/s, got -1"),
    (lambda t: t.replace("bandwidth = 50e9", "bandwidth = 0"), r"link bandwidth must be > 0 bytes/s, got 0"),
    (lambda t: t.replace("peak_flops = 1e15", "peak_flops = 0.0"),
     r"in \[device\]: peak_flops must be > 0 FLOP/s, got 0.0"),
    (lambda t: t.replace("compute_efficiency = 0.7", "compute_efficiency = 7"),
     r"compute_efficiency must be in \(0, 1\], got 7"),
    (lambda t: t.replace('summary = "test"', 'summary = "test"\nnum_devices = 2.5'),
     "key 'num_devices' must be an integer, got 2.5"),
    (lambda t: t.replace('summary = "test"', 'summary = "test"\ndevices_per_node = 8'),
     "devices_per_node and intra_node_link must be given together"),
    (lambda t: t + "[[links]]\nsrc = 0\ndst = 1\nbandwidth = 1e9\n", "missing key 'links\\[0\\].latency_s'"),
    (lambda t: "link = 5\n" + t.split("[link]")[0], "key 'link' must be a table, got 5"),
])
def test_malformed_system(tmp_path, edit, message):
    path = tmp_path / "broken.toml"
    path.write_text(edit(SYSTEM))
    with pytest.raises(ValueError, match=message) as err:
        load_system(path)
    assert "broken.toml" in str(err.value)


def test_system_overrides_from_file(tmp_path):
    path = tmp_path / "ov.toml"
    path.write_text(SYSTEM + "[[links]]\nsrc = 3\ndst = 1\nbandwidth = 1e9\nlatency_s = 1e-6\n")
    s = load_system(path)
    assert s.link(1, 3).bandwidth == 1e9 and s.link(0, 1).bandwidth == 50e9


MODEL = """\
summary = "test"
num_layers = 4
hidden = 64
heads = 4
seq_len = 32
vocab = 128
global_batch = 8
"""


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.replace("heads = 4", "heads = 5"), r"heads must divide hidden \(64\) unless head_dim is given, got 5"),
    (lambda t: t.replace("hidden = 64", 'hidden = "64"'), "key 'hidden' must be an integer, got '64'"),
    (lambda t: t.replace("hidden = 64", "hidden = 64.0"), "key 'hidden' must be an integer, got 64.0"),
    (lambda t: t.replace("vocab = 128\n", ""), "missing key 'vocab'"),
    (lambda t: t + "colour = 1\n", "unknown key 'colour'"),
    (lambda t: t + "dropout = 1\n", "key 'dropout' must be true or false, got 1"),
    (lambda t: t + 'mlp = "relu"\n', "mlp must be one of gelu, swiglu, got 'relu'"),
    (lambda t: t + "kv_heads = 3\n", r"kv_heads must divide heads \(4\), got 3"),
    (lambda t: t.replace("num_layers = 4", "num_layers = 0"), "num_layers must be an integer >= 1, got 0"),
    (lambda t: t.replace("=", ":", 1), "not valid TOML"),
])
def test_malformed_model(tmp_path, edit, message):
    path = tmp_path / "bad_model.toml"
    path.write_text(edit(MODEL))
    with pytest.raises(ValueError, match=message) as err:
        model_from_file(path)
    assert "bad_model.toml" in str(err.value)


def test_every_preset_value_is_commented():
    """Each assumed value carries a comment with its reason or source."""
    for kind in ("systems", "models"):
        for path in (PRESET_DIR / kind).glob("*.toml"):
            for line in path.read_text().splitlines():
                stripped = line.strip()
                if "=" in stripped and not stripped.startswith(("#", "summary")):
                    assert "#" in stripped, f"{path.name}: no comment on {stripped!r}"
