"""The runtime's fault → reconnect → operator path (server/runtime/reconnect.py), in-process.

The robot is built from ``config/rover-firmata.toml`` exactly as the runtime builds it (real
Firmata driver, supervisor, rover controller, the loop's own thread) against the emulated board
on a pty; faults are a pulled cable (``runner.unplug()``) and its return (``replug()``). The
end-to-end versions through ``python -m server`` are in tests/server/test_hardware_firmata.py.
"""

from __future__ import annotations

import doctest
import threading
from pathlib import Path

import pytest

import server.runtime.reconnect
from drivers.base import DriverState
from drivers.errors import DriverLinkError
from server.config import RUNTIME_TABLES, load_config
from server.runtime.controllers.rover import RoverSetpoint
from server.runtime.reconnect import Activator, Reconnector
from server.runtime.robot import Robot
from server.runtime.supervisor import Refused
from sim.devices.firmata import BoardConfig, FirmataBoard
from sim.devices.pty import PtyRunner
from tests.conftest import wait_until

pytestmark = pytest.mark.timeout(60)

REPO = Path(__file__).resolve().parents[3]
PROFILE = REPO / "config" / "rover-firmata.toml"


@pytest.fixture
def board():
    b = FirmataBoard(BoardConfig(banner_delay_s=0.0))
    with PtyRunner(b, "firmata") as runner:
        runner.board = b
        yield runner


def build(runner: PtyRunner, **driver) -> Robot:
    overrides = {
        # the shared VM is often loaded: the silent-board and stall limits get room (they are not the subject)
        "driver": {"port": runner.port, "banner_wait_s": 0.0, "stale_s": 2.0, **driver},
        "loop": {"realtime": False, "max_stall_s": 2.0},
        "safety": {"command_timeout_s": 60.0, "sensor_stale_s": 2.0},  # no heartbeats needed in these tests
    }
    robot = Robot(load_config(PROFILE, overrides=overrides, tables=RUNTIME_TABLES))
    robot.driver.open()
    robot.loop.start()
    wait_until(lambda: robot.loop.snapshot().get("values"), 10, "first frame")
    return robot


@pytest.fixture
def robots():
    made: list[Robot] = []
    yield made
    for robot in made:
        robot.loop.shutdown()
        robot.driver.close()


def snapshot(robot: Robot) -> dict:
    return robot.loop.snapshot()


def wait_back(robot: Robot, reconnects: int = 1, timeout_s: float = 30.0) -> None:
    """Wait until the driver came back ``reconnects`` times, no reconnect runs and a snapshot shows it."""
    r = robot.loop.reconnector
    try:
        wait_until(lambda: r.reconnects >= reconnects and not r.busy, timeout_s, "the driver back")
    except AssertionError as err:
        raise AssertionError(f"{err}; driver: {snapshot(robot).get('driver')}") from None
    wait_until(lambda: snapshot(robot)["driver"]["connected"] and not snapshot(robot)["driver"]["reconnecting"], 5,
               "a snapshot taken after the reconnect")


def drive(robot: Robot, runner: PtyRunner, linear: float = 0.3) -> None:
    loop = robot.loop
    wait_until(lambda: _try(loop.start_robot) == "running", 5, "start accepted")
    loop.set_setpoint(RoverSetpoint(linear, 0.0))
    wait_until(lambda: min(runner.board.wheel_commands()) > 1.0, 5, "the emulated wheels driven")


def _try(fn):
    try:
        return fn()
    except Refused:  # pre-start checks: rule channels still arriving
        return None


def refusal(fn, code: str) -> str:
    """The message of the :class:`Refused` ``fn`` raises with ``code``."""
    try:
        fn()
    except Refused as r:
        assert r.code == code, r
        return r.message
    raise AssertionError(f"{fn} was not refused")


def events(robot: Robot, trigger: str) -> list:
    return [e for e in list(robot.loop.events) if e.trigger == trigger]


class ReadWatch:
    """Records whether the loop read the driver while a reconnect of it was running."""

    def __init__(self, driver) -> None:
        self.driver = driver
        self.in_reconnect = threading.Event()
        self.overlaps = 0
        self.reads_during = 0
        real_reconnect, real_read = driver.reconnect, driver._read

        def reconnect(*a, **k):
            self.in_reconnect.set()
            try:
                return real_reconnect(*a, **k)
            finally:
                self.in_reconnect.clear()

        def read(dt_s):
            if self.in_reconnect.is_set():
                self.overlaps += 1
            return real_read(dt_s)

        driver.reconnect = reconnect
        driver._read = read


def test_the_module_examples_hold() -> None:
    assert doctest.testmod(server.runtime.reconnect).failed == 0


def test_a_sim_profile_has_no_reconnector_and_a_serial_one_has() -> None:
    sim = Robot(load_config(REPO / "config" / "rover-sim.toml", tables=RUNTIME_TABLES))
    assert sim.loop.reconnector is None  # the simulator heals when its fault is cleared
    firmata = Robot(load_config(PROFILE, tables=RUNTIME_TABLES))  # built, not opened
    assert isinstance(firmata.loop.reconnector, Reconnector)


def test_unplug_faults_reconnects_and_waits_for_the_operator(board, robots) -> None:
    robot = build(board)
    robots.append(robot)
    watch = ReadWatch(robot.driver)
    drive(robot, board)

    board.unplug()
    wait_until(lambda: snapshot(robot)["state"] == "fault", 5, "fault after the unplug")
    s = snapshot(robot)
    assert s["cause"]["trigger"] == "driver_fault" and "DriverLinkError" in s["cause"]["message"], s["cause"]
    wait_until(lambda: snapshot(robot)["driver"]["reconnecting"], 5, "reconnecting in the snapshot")
    # reset is refused while the driver is away, and the refusal says why
    wait_until(lambda: "reconnecting to the driver" in refusal(robot.loop.reset, "cause_persists"), 5,
               "reset refused: reconnecting")

    board.replug()
    wait_back(robot)
    assert events(robot, "driver_reconnected")
    assert watch.overlaps == 0, "the loop read the driver while it was being reopened"
    # back, but nothing moves until the operator says so
    s = snapshot(robot)
    assert s["state"] == "fault" and s["driver"]["state"] == DriverState.INACTIVE.value, s
    assert s["driver"]["reconnects"] == 1 and s["driver"]["connected"] is True
    assert board.board.outputs_zero() and board.board.wheel_commands() == (0.0, 0.0)
    assert events(robot, "driver_reconnecting")[0].values["reason"].startswith("DriverLinkError")

    wait_until(lambda: _try(robot.loop.reset) == "idle", 5, "reset accepted once fresh data flows")
    assert snapshot(robot)["driver"]["state"] == "inactive"
    refusal(lambda: robot.loop.set_setpoint(RoverSetpoint(0.3, 0.0)), "not_running")  # reset never restarts motion
    drive(robot, board)  # the operator's start does
    wait_until(lambda: snapshot(robot)["driver"]["state"] == "active", 5, "active in the snapshot")


def test_reconnect_keeps_trying_until_the_port_returns(board, robots) -> None:
    robot = build(board, reconnect_timeout_s=0.3)
    robots.append(robot)
    robot.loop.reconnector.retry_s = 0.05
    board.unplug()
    wait_until(lambda: snapshot(robot)["driver"]["reconnect_failures"] >= 3, 15, "several failed reconnects")
    s = snapshot(robot)
    assert s["state"] == "fault" and s["driver"]["reconnecting"]
    assert "DriverOpenError" in s["driver"]["reconnect_error"], s["driver"]
    # the port's counters stay in telemetry while there is no link, and go on counting after
    assert s["driver"]["connected"] is False and s["driver"]["bytes_in"] > 0 and "timeouts" in s["driver"]
    bytes_in = s["driver"]["bytes_in"]
    assert len(events(robot, "driver_reconnect_failed")) == 1  # once per outage, not once per try
    board.replug()
    wait_back(robot)
    wait_until(lambda: snapshot(robot)["driver"]["reconnect_error"] is None, 5, "the error cleared")
    wait_until(lambda: snapshot(robot)["driver"]["bytes_in"] > bytes_in, 5, "counting on from where it was")


def test_acquisition_changes_wait_while_the_driver_reconnects(board, robots) -> None:
    robot = build(board)
    robots.append(robot)
    before = robot.driver.get_acquisition()
    board.unplug()
    wait_until(lambda: robot.loop.reconnector.busy, 5, "reconnecting")
    with pytest.raises(DriverLinkError, match="reconnecting"):
        robot.loop.set_acquisition(100.0, list(before.channels))
    assert robot.driver.get_acquisition() == before
    board.replug()
    wait_back(robot)
    assert robot.loop.set_acquisition(100.0, list(before.channels)).rate_hz == 100.0


def test_shutdown_ends_a_reconnect_in_progress(board, robots) -> None:
    robot = build(board)
    board.unplug()
    wait_until(lambda: robot.loop.reconnector.busy, 5, "reconnecting")
    robot.loop.shutdown()
    assert not robot.loop.reconnector.busy
    assert robot.loop.reconnector._thread is not None and not robot.loop.reconnector._thread.is_alive()
    robot.driver.close()
    assert robot.driver.state is DriverState.CLOSED


class QuickDriver:
    """Reconnects at once (the backoff between reconnects is the subject here, not the port)."""

    def __init__(self) -> None:
        self.calls = 0

    def reconnect(self, timeout_s=None, stop=None) -> int:
        self.calls += 1
        return 1


class EventLog:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict]] = []

    def emit(self, trigger, message, kind="info", values=None) -> None:
        self.events.append((trigger, values or {}))

    emit_now = emit


def test_a_driver_that_fails_again_soon_after_coming_back_waits_longer_each_time() -> None:
    now = [1000.0]
    log = EventLog()
    r = Reconnector(QuickDriver(), log, stable_s=10.0, cycle_backoff_s=(0.0, 0.01, 0.02), clock=lambda: now[0])
    delays = []
    for _ in range(4):  # four faults, each right after the driver came back
        assert r.start("DriverTimeoutError: board silent")
        assert r.wait_idle(5.0)
        delays.append([v for t, v in log.events if t == "driver_reconnecting"][-1]["delay_s"])
        now[0] += 1.0
    assert delays == [0.0, 0.0, 0.01, 0.02]  # the first fault is no flap; then 0, 0.01, then the last repeats
    now[0] += 60.0  # stable for a minute: the next fault reconnects at once again
    r.start("DriverLinkError: unplugged")
    assert r.wait_idle(5.0)
    assert [v for t, v in log.events if t == "driver_reconnecting"][-1]["delay_s"] == 0.0
    assert r.status() == {"reconnecting": False, "reconnects": 5, "reconnect_failures": 0, "reconnect_error": None}


def test_start_is_refused_while_running_and_after_stop() -> None:
    r = Reconnector(QuickDriver(), EventLog())
    r._busy.set()  # a reconnect in progress
    assert not r.start("again")
    r._busy.clear()
    r.stop()
    assert not r.start("after shutdown")


class SlowDrive:
    """Enabling waits for ``release`` (a drive answering late); counts halts; ``fail`` makes it raise."""

    def __init__(self, fail: bool = False) -> None:
        self.state = DriverState.INACTIVE
        self.release = threading.Event()
        self.halts = 0
        self.fail = fail
        self.activations = 0

    def activate(self) -> None:
        self.activations += 1
        halts = self.halts
        self.release.wait(5.0)
        if self.fail:
            raise DriverLinkError("no answer to EN")
        if self.halts == halts:  # like drivers.base: a halt during the activation wins
            self.state = DriverState.ACTIVE

    def halt(self) -> None:
        self.halts += 1
        self.state = DriverState.INACTIVE


def test_activation_runs_in_a_worker_one_start_at_a_time() -> None:
    drive = SlowDrive()
    a = Activator(drive)
    assert not a.poll(1) and a.busy  # started, waiting for the drive
    assert not a.poll(1)
    assert not a.poll(2) and drive.activations == 1  # a later start waits for this one to end
    drive.release.set()
    assert a.wait_idle(5.0)
    assert a.poll(2) is False and a.wait_idle(5.0) and a.poll(2)  # then start 2 gets its own activation
    assert drive.activations == 2 and drive.state is DriverState.ACTIVE and drive.halts == 0


def test_a_halt_during_the_activation_is_repeated_after_it() -> None:
    drive = SlowDrive()
    a = Activator(drive)
    a.poll(1)
    drive.halt()  # an e-stop while the drives are being enabled
    drive.release.set()
    assert a.wait_idle(5.0) and a.poll(1)
    assert drive.state is DriverState.INACTIVE
    assert drive.halts == 2  # the e-stop's, and one after the activation's last bytes


def test_an_activation_error_reaches_the_tick_and_halts() -> None:
    drive = SlowDrive(fail=True)
    drive.release.set()
    a = Activator(drive)
    a.poll(1)
    assert a.wait_idle(5.0)
    with pytest.raises(DriverLinkError, match="EN"):
        a.poll(1)
    assert drive.halts == 1
