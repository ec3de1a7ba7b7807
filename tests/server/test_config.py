"""Config loading: defaults, units, and refusals that name the key and the file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from server.config import ConfigError, load_config

REPO = Path(__file__).resolve().parents[2]


def test_ok__default_profile_loads() -> None:
    cfg = load_config(REPO / "config" / "rover-sim.toml")
    assert cfg.robot.profile == "rover"
    assert cfg.loop.rate_hz == 100.0
    assert any(r.channel == "range_front_m" for r in cfg.safety.rules)


@pytest.mark.parametrize(
    "text, key",
    [
        ("[loop]\nrte_hz = 5\n", "loop.rte_hz"),
        ("[loop]\nrate_hz = 'fast'\n", "loop.rate_hz"),
        ("[loop]\nrate_hz = 0\n", "loop.rate_hz"),
        ("[loop]\nrate_hz = nan\n", "loop.rate_hz"),
        ("[loop]\nrealtime = 1\n", "loop.realtime"),
        ("[safety]\ncommand_timeout_s = -1\n", "safety.command_timeout_s"),
        ("[[safety.rules]]\nname='x'\nchannel='a'\n", "safety.rules[0]"),
        ("[[safety.rules]]\nname='x'\nchannel='a'\nbelow=1\nwhen='sometimes'\n", "safety.rules[0].when"),
        ("[[safety.rules]]\nchannel='a'\nbelow=1\n", "safety.rules[0].name"),
        ("[robot]\nprofile='tank'\n", "robot.profile"),
        ("[telemetry]\nlink_degraded_ms = 0\n", "telemetry.link_degraded_ms"),
        ("[telemetry]\nlink_bad_ms = 100\n", "telemetry"),  # not above link_degraded_ms (150)
        ("bogus = 1\n", "bogus"),
        ("loop = 3\n", "loop"),
    ],
)
def test_fail__bad_config_names_the_key(tmp_path: Path, text: str, key: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert f"'{key}" in str(err.value) and str(path) in str(err.value)


def test_fail__missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.toml")


def test_fail__invalid_toml(tmp_path: Path) -> None:
    path = tmp_path / "broken.toml"
    path.write_text("[loop\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(path)


def test_server_refuses_to_start_on_bad_config(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("[limits]\nlinear_m_s = 'quick'\n")
    proc = subprocess.run([sys.executable, "-m", "server", "--config", str(path), "--port", "0"],
                          cwd=REPO, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2
    assert "limits.linear_m_s" in proc.stderr and str(path) in proc.stderr


def test_server_refuses_to_start_on_a_bad_driver_table_naming_the_key(tmp_path: Path) -> None:
    """The driver's own table is checked where the driver is built, in the runtime (the launcher builds no
    driver, docs/architecture.md): its refusal is still the command's exit 2 with the key named."""
    path = tmp_path / "bad-driver.toml"
    path.write_text((REPO / "config/rover-sim.toml").read_text().replace("seed = 1", "seed = 1\nwarp_factor = 9"))
    proc = subprocess.run([sys.executable, "-m", "server", "--config", str(path), "--port", "0"],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "configuration error" in proc.stderr and "driver.warp_factor" in proc.stderr, proc.stderr
    assert "listening on" not in proc.stdout, proc.stdout


def test_help_explains_usage() -> None:
    proc = subprocess.run([sys.executable, "-m", "server", "--help"], cwd=REPO, capture_output=True, text=True,
                          timeout=30)
    assert proc.returncode == 0
    for word in ("--config", "--host", "--port"):
        assert word in proc.stdout
