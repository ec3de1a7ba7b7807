"""``python -m drivers.check`` (issue 24, "bring your own robot") and drivers found by entry point.

The check runs the project's own contract (drivers/check/contract.py, which tests/drivers/test_contract.py
adapts for pytest): here against the simulator, the Firmata driver over a pty, the worked example of
docs/drivers.md (taken from the page itself, installed as a temporary distribution whose ``teleop.drivers``
entry point names it) against an emulated line robot over TCP, and against drivers that break the contract
— each failure must name its check.
"""

from __future__ import annotations

import importlib
import io
import logging
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from drivers.check.__main__ import main
from drivers.errors import DriverError
from drivers.registry import driver_class, driver_names
from drivers.sim import SimDriver
from sim.devices.firmata import BoardConfig, FirmataBoard
from sim.devices.net import TcpRunner
from sim.devices.pty import PtyRunner
from tests.conftest import REPO, wait_until
from tests.drivers.linebot_device import LineBot
from tests.drivers.test_firmata_driver import TABLE as FIRMATA_TABLE

pytestmark = pytest.mark.timeout(300)

SIM_MOTION = "wheel_left_rad_s,wheel_right_rad_s,linear_m_s,angular_rad_s"


def example(name: str) -> str:
    """A code block of docs/drivers.md, marked ``<!-- example: NAME -->``."""
    text = (REPO / "docs" / "drivers.md").read_text()
    block = re.search(rf"<!-- example: {re.escape(name)} -->\s*```\w+\n(.*?)```", text, re.S)
    assert block, f"docs/drivers.md has no example {name!r}"
    return block.group(1)


def install(tmp_path: Path, monkeypatch, dist: str, entry_points: str, modules: dict[str, str] | None = None) -> None:
    """A distribution as pip would leave it on sys.path: its modules and ``<dist>-0.1.0.dist-info`` with its
    METADATA and ``entry_points.txt`` (what importlib.metadata reads)."""
    for name, source in (modules or {}).items():
        (tmp_path / f"{name}.py").write_text(source)
        sys.modules.pop(name, None)
    info = tmp_path / f"{dist}-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(entry_points)
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()


@pytest.fixture
def linebot(tmp_path, monkeypatch):
    """docs/drivers.md's example driver, installed with its entry point."""
    install(tmp_path, monkeypatch, "linebot", "[teleop.drivers]\nlinebot = linebot_driver:LineBotDriver\n",
            {"linebot_driver": example("linebot_driver.py")})
    yield tmp_path
    sys.modules.pop("linebot_driver", None)


def check(*argv: str) -> tuple[int, str]:
    """The check in this process (a fault hook here can reach an emulator of this process)."""
    out = io.StringIO()
    rc = main(list(argv), out=out)
    return rc, out.getvalue()


def check_cli(*argv: str, env_path: Path | None = None) -> tuple[int, str]:
    """``python -m drivers.check`` as a user runs it."""
    env = None
    if env_path is not None:
        import os

        env = dict(os.environ, PYTHONPATH=str(env_path))
    proc = subprocess.run([sys.executable, "-m", "drivers.check", *argv], cwd=REPO, capture_output=True, text=True,
                          timeout=240, env=env)
    return proc.returncode, proc.stdout + proc.stderr


def statuses(report: str) -> dict[str, str]:
    return {m.group(2): m.group(1) for m in re.finditer(r"^  (PASS|FAIL|SKIP)  (\S+)", report, re.M)}


# ====================================================================== entry points
def test_a_driver_is_found_by_its_entry_point(linebot) -> None:
    cls = driver_class("linebot")
    assert cls.__name__ == "LineBotDriver" and cls.name == "linebot" and "linebot" in driver_names()


def test_fail__an_unknown_driver_says_how_to_plug_one_in() -> None:
    with pytest.raises(DriverError, match="unknown driver 'linebot'.*entry point in the 'teleop.drivers' group"):
        driver_class("linebot")


def test_an_entry_point_cannot_replace_a_builtin_driver(tmp_path, monkeypatch, caplog) -> None:
    install(tmp_path, monkeypatch, "impostor", "[teleop.drivers]\nsim = impostor:Fake\n", {"impostor": "Fake = 1\n"})
    with caplog.at_level(logging.WARNING, logger="drivers.registry"):
        assert driver_class("sim") is SimDriver
        assert "linebot" not in driver_names()
        driver_names()
    assert "driver entry point 'sim' (impostor:Fake) ignored" in caplog.text


@pytest.mark.parametrize("target, words", [("nosuchmodule:Driver", "No module named 'nosuchmodule'"),
                                           ("notadriver:Thing", "is not a drivers.base.Driver subclass")])
def test_fail__a_broken_entry_point_names_where_it_came_from(tmp_path, monkeypatch, target, words) -> None:
    install(tmp_path, monkeypatch, "broken", f"[teleop.drivers]\nbroken = {target}\n",
            {"notadriver": "class Thing:\n    pass\n"})
    with pytest.raises(DriverError, match=f"driver 'broken' from entry point '{target}'") as err:
        driver_class("broken")
    assert words in str(err.value)


# ====================================================================== the docs' example over TCP
_LINEBOT: dict = {}


def linebot_faults(driver, kind) -> None:
    """--faults for the line robot: its ``E`` line (a read error), silence (a timeout), and healing (reconnect)."""
    bot, runner = _LINEBOT["bot"], _LINEBOT["runner"]
    with runner.lock:
        bot.inject({"read_error": "fault", "timeout": "silent", None: "clear"}[kind])
    if kind is None:
        driver.reconnect(timeout_s=10)
        return
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # until the driver has seen it
        try:
            driver.read(0.01)
        except DriverError:
            return
        time.sleep(0.01)
    raise AssertionError(f"the driver did not see {kind}")


def test_the_docs_example_passes_the_contract_over_tcp(linebot, tmp_path) -> None:
    bot = LineBot()
    with TcpRunner(bot, "linebot") as runner:
        _LINEBOT.update(bot=bot, runner=runner)
        host, port = runner.url.split(":")[1:]
        profile = example("linebot.toml").replace('"socket://192.168.4.1:5000"', f'"socket://{host}:{port}"')
        # the robot is a thread of this process: on a loaded machine its telemetry comes late, and the example's
        # 0.5 s staleness limit failed checks that are not about it (the timeout fault has its own check)
        assert "\nstale_s = 0.5" in profile
        profile = profile.replace("\nstale_s = 0.5", "\nstale_s = 2.0")
        config = tmp_path / "linebot.toml"
        config.write_text(profile)
        rc, report = check("linebot", "--config", str(config), "--faults", f"{__name__}:linebot_faults")
    assert rc == 0, report
    st = statuses(report)
    assert st["registered_under_its_name"] == "PASS" and "(name 'linebot', entry point)" in report
    assert st["timeout_fault_raises_driver_timeout_error"] == "PASS" and "FAIL" not in st.values()
    assert re.search(r"\d+ passed, 0 failed, 1 skipped", report), report  # skipped: it reconnects
    assert any(line.startswith("M ") for _, line in bot.lines_in) and ("S" in [line for _, line in bot.lines_in])


# ====================================================================== the project's drivers
def test_the_simulator_passes_as_a_user_runs_it() -> None:
    rc, report = check_cli("sim", "--config", "config/rover-sim.toml", "--settle", "count", "--faults", "debug",
                           "--motion", SIM_MOTION)
    assert rc == 0, report
    assert "teleop driver check: drivers.sim.rover:SimDriver (name 'sim', built in)" in report
    assert re.search(r"^38 passed, 0 failed, 0 skipped in ", report, re.M), report


def firmata_faults(driver, kind) -> None:
    board, runner = _FIRMATA["board"], _FIRMATA["runner"]
    if kind is None:
        with runner.lock:
            board.inject("clear")
        driver.reconnect(timeout_s=10)
    elif kind == "read_error":
        before = driver.health().get("invalid_frames", 0)
        with runner.lock:
            board.inject("garbage", now_s=time.monotonic(), count=2000)
        wait_until(lambda: driver.health()["invalid_frames"] >= before + 8, message="garbage received")
    else:
        with runner.lock:
            board.inject("silent")
        wait_until(lambda: (driver.health().get("silent_s") or 0) > FIRMATA_STALE_S, 3 * FIRMATA_STALE_S,
                   message="the board silent for longer than the driver's stale_s")


_FIRMATA: dict = {}
#: the emulator is a thread of this process: on a loaded machine its frames come late, and a 0.3 s staleness limit
#: failed contract checks that are not about it (the timeout fault waits out this limit)
FIRMATA_STALE_S = 2.0


def test_the_firmata_driver_passes_over_a_pty(tmp_path) -> None:
    import tomli_w

    board = FirmataBoard(BoardConfig(firmware="FirmataExpress"))
    with PtyRunner(board, "firmata") as runner:
        _FIRMATA.update(board=board, runner=runner)
        config = tmp_path / "firmata.toml"
        config.write_text(tomli_w.dumps({"driver": {**FIRMATA_TABLE, "port": runner.port,
                                                    "stale_s": FIRMATA_STALE_S}}))
        rc, report = check("firmata", "--config", str(config), "--faults", f"{__name__}:firmata_faults")
    assert rc == 0, report
    assert "FAIL" not in statuses(report).values()


# ====================================================================== what a failure looks like
BROKEN = textwrap.dedent('''
    import time
    from drivers.sim.rover import SimDriver

    class NoHalt(SimDriver):
        """Forgets to zero its outputs on halt."""
        name = "nohalt"

        def _halt(self):
            pass

    class Sleepy(SimDriver):
        """Blocks in read."""
        name = "sleepy"

        def _read(self, dt_s):
            time.sleep(30)
            return super()._read(dt_s)
''')


def test_fail__a_driver_that_does_not_stop_fails_the_halt_checks(tmp_path) -> None:
    (tmp_path / "broken_drivers.py").write_text(BROKEN)
    rc, report = check_cli("broken_drivers:NoHalt", "--config", "config/rover-sim.toml", "--settle", "count",
                           "--faults", "debug", "--motion", SIM_MOTION, env_path=tmp_path)
    assert rc == 1, report
    st = statuses(report)
    assert st["halt_zeroes_the_outputs"] == "FAIL" and st["halt_from_another_thread_while_reading"] == "FAIL"
    assert re.search(r"FAIL  halt_zeroes_the_outputs +motion [\d.]+ after halt \(was [\d.]+\)", report), report
    assert st["registered_under_its_name"] == "FAIL" and "unknown driver 'nohalt'" in report
    assert st["open_close_lifecycle"] == "PASS"


def test_fail__a_blocking_read_fails_on_its_timeout(tmp_path) -> None:
    (tmp_path / "broken_drivers.py").write_text(BROKEN)
    rc, report = check_cli("broken_drivers:Sleepy", "--config", "config/rover-sim.toml", "--only",
                           "read_returns_every_active_channel_as_a_finite_float", "--timeout-s", "1",
                           env_path=tmp_path)
    assert rc == 1, report
    assert re.search(r"FAIL  read_returns_every_active_channel_as_a_finite_float +did not return within 1 s", report)
    assert "0 passed, 1 failed, 0 skipped" in report


def test_without_a_fault_hook_the_fault_checks_are_skipped_and_say_how() -> None:
    rc, report = check("sim", "--config", str(REPO / "config/rover-sim.toml"), "--settle", "count", "--motion",
                       SIM_MOTION, "--only", "timeout_fault_raises_driver_timeout_error", "--only",
                       "read_error_fault_makes_reads_raise_until_cleared")
    assert rc == 0, report
    st = statuses(report)
    assert set(st.values()) == {"SKIP"} and len(st) == 2
    assert "--faults MODULE:FUNCTION or --interactive" in report


@pytest.mark.parametrize("table, words", [
    ('name = "sim"\nbogus = 1\n', "cannot build the driver: [driver.bogus] unknown key"),
    ('name = "sim"\ntime_scale = 0\n', "cannot build the driver: [driver.time_scale] must be > 0"),
])
def test_fail__a_config_error_stops_the_check_naming_the_key(tmp_path, table, words) -> None:
    config = tmp_path / "bad.toml"
    config.write_text("[driver]\n" + table)
    rc, report = check("sim", "--config", str(config))
    assert rc == 2 and words in report, report


def test_fail__a_target_that_is_not_a_driver_is_refused(tmp_path) -> None:
    rc, report = check("drivers.base:ChannelSpec")
    assert rc == 2 and "is not a drivers.base.Driver subclass" in report, report


def test_interactive_faults_wait_for_the_driver_to_see_the_pulled_cable() -> None:
    from drivers.check.__main__ import interactive_faults

    d = SimDriver({"time_scale": 1.0}, {"size_m": [6.0, 4.0]})
    d.open()
    asked: list[str] = []

    def person(prompt: str) -> str:  # pulls the cable when asked
        asked.append(prompt)
        d.debug({"fault": "read_error" if "unplug" in prompt else None})
        return ""

    interactive_faults(d, "read_error", ask=person, wait_s=5)
    with pytest.raises(DriverError):
        d.read(0.01)
    interactive_faults(d, None, ask=person)
    d.read(0.01)
    assert "unplug the device's cable" in asked[0] and "plug the device back in" in asked[1]
    d.close()
