"""The host link of a system (issue 40, item 3): validation and the preset's measured values."""

import pytest

from pipetab.hardware import HostLink
from pipetab.hardware.loaders import load_system


def test_preset_host_link_is_the_measured_pcie_gen5():
    """dgx_h100_ib: 54.8 / 52.7 GB/s alone, 96 GB/s both ways (H200 measurement, 16 MiB)."""
    link = load_system("dgx_h100_ib").host_link
    assert link == HostLink(54.8e9, 52.7e9, 96e9, 2e12)
    assert "host link 54.8 GB/s D2H" in link.description
    assert load_system("a100_cluster").host_link is None


@pytest.mark.parametrize("kwargs,message", [
    ({"d2h": 0.0}, "host link d2h must be > 0"),
    ({"duplex": 200e9}, "must not exceed d2h \\+ h2d"),
    ({"host_memory_bytes": -1.0}, "host_memory_bytes must be > 0"),
    ({"adam_params_per_s": -1.0}, "adam_params_per_s must be >= 0"),
])
def test_bad_host_link_values_are_refused(kwargs, message):
    values = {"d2h": 50e9, "h2d": 50e9, "duplex": 90e9, "host_memory_bytes": 1e12} | kwargs
    with pytest.raises(ValueError, match=message):
        HostLink(**values)


def test_preset_file_with_a_bad_host_link_key_is_refused(tmp_path):
    from pathlib import Path

    import pipetab.hardware as hw
    from pipetab.hardware.loaders import system_from_file

    base = (Path(hw.__file__).parent / "presets" / "systems" / "dgx_h100_ib.toml").read_text()
    bad = tmp_path / "x.toml"
    bad.write_text(base.replace("duplex = 96e9", "duplx = 96e9"))
    with pytest.raises(ValueError, match=r"duplx|duplex"):
        system_from_file(bad)
