"""End to end on the Firmata path: ``python -m server`` with ``config/rover-firmata.toml`` driving the
emulated board on a pseudo-terminal (issue 12).

The emulator runs in this test process (``PtyRunner``); the server is the real three-process
server, its runtime opening the pty through the real Firmata driver, so every command and every
stop is real bytes on a tty. What the board did is read from the board itself (its pins) and
from the bytes it received (``runner.rx_log``), never from the server's own account.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from sim.devices.firmata import BoardConfig, FirmataBoard
from sim.devices.pty import PtyRunner
from tests.conftest import REPO, ServerProc, wait_until
from tests.server.test_stop_paths import Heartbeat, events

pytestmark = pytest.mark.timeout(120)

CONFIG = "config/rover-firmata.toml"
#: what halt() writes for this profile's wiring: zero duty on D5 and D6 (ANALOG_MESSAGE), then the relay
#: D8 low and the direction pins D4, D7 low (SET_DIGITAL_PIN_VALUE)
SAFE_STATE = bytes.fromhex("e5 00 00 e6 00 00 f5 08 00 f5 04 00 f5 07 00")
RULE_CHANNELS = ["estop", "range_front_m", "battery_v", "current_left_a", "current_right_a"]


def start_board(firmware: str = "StandardFirmata") -> PtyRunner:
    board = FirmataBoard(BoardConfig(firmware=firmware, banner_delay_s=0.0))
    runner = PtyRunner(board, "firmata")
    runner.board = board
    runner.start()
    return runner


@pytest.fixture
def board():
    runner = start_board()
    yield runner
    runner.stop()


@pytest.fixture
def express():
    runner = start_board("FirmataExpress")
    yield runner
    runner.stop()


def serve(server_factory, runner: PtyRunner, **driver) -> ServerProc:
    # this VM is shared and often loaded (load average over 10 on 2 cores): the profile's 0.5 s silent-board
    # and link limits and 0.1 s stall limit would now and then stop a healthy run; these tests are about other
    # faults, so those get room here
    return server_factory({"driver": {"port": runner.port, "banner_wait_s": 0.0, "stale_s": 2.0, **driver},
                           "safety": {"sensor_stale_s": 2.0, "command_timeout_s": 2.0}, "loop": {"max_stall_s": 2.0}},
                          config=CONFIG)


def driving(runner: PtyRunner) -> bool:
    """The board's motor outputs drive both wheels forward (relay closed, duty on)."""
    left, right = runner.board.wheel_commands()
    return left > 1.0 and right > 1.0


def start_and_drive(srv: ServerProc, runner: PtyRunner, linear: float = 0.3) -> None:
    try:
        wait_until(lambda: srv.post("/api/start")[0] == 200, 10, "start accepted")
    except AssertionError as err:
        raise AssertionError(f"{err}: {srv.post('/api/start')[1]}") from None
    status, body = srv.post("/api/speed", {"linear": linear, "angular": 0.0})
    assert status == 200, body
    wait_until(lambda: driving(runner), 10, "the emulated wheels driven")
    wait_until(lambda: srv.state()["state"] == "running" and srv.state()["driver"]["state"] == "active", 5,
               "running, the driver active")


def test_the_profile_validates_and_matches_the_documented_table() -> None:
    import re
    import tomllib

    from server.config import load_config
    from server.runtime.robot import Robot

    profile = load_config(REPO / CONFIG)  # every table, as the launcher checks it
    robot = Robot(profile)  # builds the driver from its table (nothing opened)
    assert robot.driver.name == "firmata" and set(robot.driver.actuators()) == {"wheel_left", "wheel_right"}
    assert {r.channel for r in profile.safety.rules} <= {c.name for c in robot.driver.channels()}
    text = (REPO / "docs" / "hardware.md").read_text().split("### Example: a Firmata rover", 1)[1]
    documented = tomllib.loads(re.search(r"```toml\n(.*?)```", text, re.S).group(1))["driver"]
    actual = tomllib.loads((REPO / CONFIG).read_text())["driver"]
    assert {k: actual.get(k) for k in documented} == documented


def test_start_speed_and_telemetry_through_the_board(server_factory, board) -> None:
    srv = serve(server_factory, board)
    status, robot = srv.get("/api/robot")
    assert status == 200 and robot["driver"] == "firmata"
    assert {c["name"] for c in robot["channels"]} >= {"battery_v", "range_front_m", "wheel_left_rad_s", "estop"}
    s = srv.state()
    assert s["state"] == "idle" and s["driver"]["state"] == "inactive"
    assert s["driver"]["firmware"] == "StandardFirmata.ino" and s["driver"]["connected"] is True
    assert 11.0 < s["values"]["battery_v"] < 13.5 and s["values"]["estop"] == 0.0
    assert board.board.digital_out[8] == 0, "the relay is open while the robot is idle"

    with Heartbeat(srv):
        start_and_drive(srv, board)
        assert board.board.digital_out[8] == 1, "the relay closes only while running"
        # the tachometers on A4/A5 read the emulated wheels back through the driver
        wait_until(lambda: srv.state()["values"]["wheel_left_rad_s"] > 3.0, 10, "tachometer reading the wheel")
        s = srv.state()
        assert s["state"] == "running" and s["driver"]["state"] == "active"
        health = s["driver"]
        for key in ("bytes_in", "bytes_out", "frames_in", "invalid_frames", "crc_errors", "retries", "timeouts",
                    "rtt_ms", "stops_sent", "reconnecting", "reconnects"):
            assert key in health, key
        assert health["bytes_in"] > 0 and health["bytes_out"] > 0 and health["invalid_frames"] == 0
        assert health["reconnecting"] is False and health["reconnects"] == 0
        assert srv.post("/api/stop")[0] == 200
        wait_until(lambda: srv.state()["state"] == "idle", 10, "controlled stop complete")
    wait_until(board.board.outputs_zero, 5, "the board's outputs off after the stop")


def test_acquisition_change_puts_the_sampling_interval_on_the_wire(server_factory, board) -> None:
    srv = serve(server_factory, board)
    since = len(board.rx_log)
    status, body = srv.put("/api/acquisition", {"rate_hz": 100, "channels": RULE_CHANNELS})
    assert status == 200, body
    assert body["rate_hz"] == 100.0 and sorted(body["channels"]) == sorted(RULE_CHANNELS)
    board.wait_for(bytes.fromhex("f0 7a 0a 00 f7"), since=since)  # SAMPLING_INTERVAL 10 ms
    board.wait_for(bytes.fromhex("c4 00"), since=since)  # REPORT_ANALOG A4 off (the tachometers)
    assert board.board.sampling_interval_ms == 10
    assert not board.board.report_analog & 0b110000 and board.board.report_analog & 0b1111 == 0b1111

    # refused: 4 analog channels at 500 Hz need 6000 B/s, 57600 baud carries 5184; nothing changes
    since = len(board.rx_log)
    status, body = srv.put("/api/acquisition", {"rate_hz": 500, "channels": RULE_CHANNELS})
    assert status == 422 and "57600 baud" in body["error"]["message"], body
    status, body = srv.put("/api/acquisition", {"rate_hz": 50, "channels": ["battery_v"]})
    assert status == 422 and body["error"]["code"] == "safety_channel", body
    assert srv.get("/api/acquisition")[1]["rate_hz"] == 100.0
    assert b"\xf0\x7a" not in b"".join(chunk for _, chunk in board.rx_log[since:])
    assert board.board.sampling_interval_ms == 10


def test_hardware_estop_button_stops_the_robot_through_the_server(server_factory, board) -> None:
    srv = serve(server_factory, board)
    with Heartbeat(srv):
        start_and_drive(srv, board)
        since = len(board.rx_log)
        with board.lock:
            board.board.inject("estop", pressed=True)
        board.wait_for(SAFE_STATE, since=since)  # the halt's bytes on the wire
        wait_until(board.board.outputs_zero, 5, "every board output low")
        wait_until(lambda: srv.state()["state"] == "estop", 5, "e-stop latched")
    s = srv.state()
    assert s["cause"]["trigger"] == "rule" and s["cause"]["rule"] == "estop_button", s["cause"]
    assert s["values"]["estop"] == 1.0 and s["driver"]["state"] == "inactive"
    zero = events(srv, "outputs_zero")[-1]
    assert zero["values"]["trigger"] == "rule"

    # latched while the button is down; released, a reset is accepted and nothing moves
    status, body = srv.post("/api/reset")
    assert status == 409 and body["error"]["code"] == "cause_persists" and "estop_button" in body["error"]["message"]
    with board.lock:
        board.board.inject("estop", pressed=False)
    wait_until(lambda: srv.post("/api/reset")[0] == 200, 5, "reset once the button is released")
    assert srv.state()["state"] == "idle"
    status, body = srv.post("/api/speed", {"linear": 0.2, "angular": 0.0})
    assert status == 409 and body["error"]["code"] == "not_running"
    assert board.board.wheel_commands() == (0.0, 0.0) and board.board.digital_out[8] == 0


def test_unplug_faults_then_reconnects_without_restarting_motion(server_factory, board) -> None:
    srv = serve(server_factory, board, reconnect_timeout_s=0.5)
    with Heartbeat(srv):
        start_and_drive(srv, board)
        board.unplug()
        wait_until(lambda: srv.state()["state"] == "fault", 5, "fault after the cable is pulled")
        s = srv.state()
        assert s["cause"]["trigger"] == "driver_fault" and "DriverLinkError" in s["cause"]["message"], s["cause"]
        wait_until(lambda: srv.state()["driver"]["reconnect_failures"] >= 1, 15, "reconnect tried while unplugged")
        assert srv.state()["driver"]["reconnecting"] is True
        status, body = srv.post("/api/reset")
        assert status == 409 and body["error"]["code"] == "cause_persists"

        opens = board.opens
        board.replug()
        wait_until(lambda: events(srv, "driver_reconnected"), 20, "the driver back")
        wait_until(lambda: srv.state()["driver"]["connected"] and not srv.state()["driver"]["reconnecting"], 5,
                   "reconnected in the snapshot")
        s = srv.state()
        assert board.opens == opens + 1, "the runtime opened the port again"
        # back, configured, outputs off, and still in fault: the operator decides what happens next
        assert s["state"] == "fault" and s["driver"]["state"] == "inactive", s
        assert s["driver"]["reconnects"] == 1
        assert board.board.outputs_zero() and board.board.wheel_commands() == (0.0, 0.0)
        kinds = [e["trigger"] for e in events(srv) if e["trigger"].startswith("driver_")]
        assert kinds[:3] == ["driver_fault", "driver_reconnecting", "driver_reconnect_failed"], kinds
        assert kinds[-1] == "driver_reconnected"

        wait_until(lambda: srv.post("/api/reset")[0] == 200, 5, "reset accepted once data flows")
        assert srv.state()["state"] == "idle" and not driving(board)
        status, body = srv.post("/api/speed", {"linear": 0.2, "angular": 0.0})
        assert status == 409 and body["error"]["code"] == "not_running"
        start_and_drive(srv, board)  # the operator's start moves it again


def process_state(pid: int) -> str:
    """The kernel's one-letter state of ``pid`` (``T`` = stopped)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0]


def test_a_frozen_runtime_lets_the_keep_alive_lapse_and_the_board_zero_its_outputs(server_factory, express) -> None:
    """FirmataExpress's KEEP_ALIVE: the board, not the host, zeroes the motors when the host stops."""
    srv = serve(server_factory, express)
    board = express.board
    assert srv.state()["driver"]["keep_alive"] is True
    with Heartbeat(srv):
        start_and_drive(srv, express)
        refreshed = board.keep_alives
        wait_until(lambda: board.keep_alives >= refreshed + 3, 10, "the control loop refreshing the keep-alive")
        pid = srv.get("/api/telemetry")[1]["runtime"]["pid"]
        os.kill(pid, signal.SIGSTOP)
        try:
            wait_until(board.outputs_zero, 10, "the board zeroing its outputs by itself")
            assert process_state(pid) == "T", "the runtime was still frozen when the outputs went low"
            with express.lock:
                last_refresh_t = board.last_keep_alive_t
                lapses = [t for t, what in board.log if what == "keep-alive lapsed"]
        finally:
            os.kill(pid, signal.SIGCONT)
        assert lapses and lapses[-1] - last_refresh_t >= 1.0, (lapses, last_refresh_t)  # keep_alive_s = 1

        # thawed, the runtime finds a board that reset itself: a fault, a reconnect, and no motion
        wait_until(lambda: srv.state()["state"] == "fault", 10, "fault after the thaw")
        assert srv.state()["cause"]["trigger"] == "driver_fault"
        wait_until(lambda: events(srv, "driver_reconnected"), 20, "the driver back")
    s = srv.state()
    assert s["state"] == "fault" and s["driver"]["state"] == "inactive" and s["driver"]["keep_alive"] is True
    assert board.outputs_zero()
    wait_until(lambda: board.keep_alive_s == 1, 5, "keep-alive armed again")
    wait_until(lambda: srv.post("/api/reset")[0] == 200, 5, "reset accepted")
    assert srv.state()["state"] == "idle" and board.outputs_zero()
