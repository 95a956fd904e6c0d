"""The calibration script reproduces every fitted ([F]) value of the system presets and the
attention tables exactly (issue 41, items 4-5)."""

import re
from pathlib import Path

from experiments.calibrate_presets import attention_tables, main, preset_values
from pipetab.hardware.attention import TABLES
from pipetab.hardware.loaders import load_system

PRESETS = Path(__file__).resolve().parents[2] / "hardware" / "presets" / "systems"


def test_the_script_reproduces_every_fitted_preset_value():
    values = preset_values()
    for preset, fitted in values.items():
        device = load_system(preset).device
        for key, value in fitted.items():
            assert getattr(device, key) == value, (preset, key)


def test_every_fitted_device_value_of_the_kernel_presets_comes_from_the_script():
    values = preset_values()
    for preset in ("dgx_h100_ib", "h800_ib", "a100_cluster"):
        text = (PRESETS / f"{preset}.toml").read_text()
        device = text.split("[device]")[1].split("\n[")[0]
        fitted = set(re.findall(r"^(\w+)\s*=.*#\s*\[F\]", device, flags=re.M))
        assert fitted == set(values[preset]), preset
        for key in fitted:  # the key's comment (its line and the indented lines under it) names the script
            lines = device.split(f"\n{key} ")[1].splitlines()
            block = [lines[0]]
            for line in lines[1:]:
                if not line.startswith(" ") and "# [F]" not in line:  # a shared comment runs on
                    break
                block.append(line)
            assert "calibrate_presets" in " ".join(block).replace("python -m\n", ""), (preset, key)


def test_the_attention_tables_are_the_scripts_output():
    assert attention_tables() == TABLES


def test_the_script_prints_its_values(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    assert "dgx_h100_ib.device.compute_efficiency = 0.755" in out
    assert "attention hopper_cudnn: 28 points over 5 shapes" in out
