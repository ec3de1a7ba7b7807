"""The firmata driver against the emulated board on a pty: handshake, acquisition, outputs, safety, faults."""

from __future__ import annotations

import copy
import time

import pytest

from drivers.base import DriverState
from drivers.errors import (AcquisitionError, DriverConfigError, DriverError, DriverLinkError, DriverOpenError,
                            DriverProtocolError, DriverTimeoutError)
from drivers.firmata.driver import FirmataDriver
from sim.devices.firmata import BoardConfig, FirmataBoard
from sim.devices.pty import PtyRunner
from tests.conftest import wait_until

MAX_W = 20.0
#: the rover wiring of sim.devices.firmata (and of the example in docs/hardware.md)
TABLE = {
    "name": "firmata",
    "baudrate": 57600,
    "banner_wait_s": 0.0,  # tests: no boot blink to wait for
    "query_timeout_s": 1.0,
    # the board is a thread of this test process: a loaded machine starved it past 0.3-0.5 s in tests about
    # other things (fresh-clone runs); the tests about staleness set their own (0.2 s)
    "stale_s": 2.0,
    "rate_hz": 50,
    "estop_pin": 2,
    "relay_pin": 8,
    "analog": {
        "battery_v": {"channel": 0, "poly": [0.0, 15.0 / 1023], "unit": "V", "min": 0, "max": 15, "warn_low": 11.0,
                      "crit_low": 10.5},
        "range_front_m": {"channel": 1, "poly": [0.0, 4.0 / 1023], "unit": "m", "min": 0, "max": 4,
                          "widget": "bar"},
        "current_left_a": {"channel": 2, "poly": [-2.5 / 0.185, 5.0 / 1023 / 0.185], "unit": "A", "min": -5,
                           "max": 5},
        "current_right_a": {"channel": 3, "poly": [-2.5 / 0.185, 5.0 / 1023 / 0.185], "unit": "A", "min": -5,
                            "max": 5},
        "wheel_left_rad_s": {"channel": 4, "poly": [-MAX_W * 512 / 511.5, MAX_W / 511.5], "unit": "rad/s",
                             "min": -25, "max": 25},
        "wheel_right_rad_s": {"channel": 5, "poly": [-MAX_W * 512 / 511.5, MAX_W / 511.5], "unit": "rad/s", "min": -25, "max": 25},
    },
    "wheels": {
        "wheel_left": {"pwm_pin": 5, "dir_pin": 4, "max_rad_s": MAX_W},
        "wheel_right": {"pwm_pin": 6, "dir_pin": 7, "max_rad_s": MAX_W},
    },
}


def table(**over) -> dict:
    t = copy.deepcopy(TABLE)
    t.update(over)
    return t


@pytest.fixture
def board():
    b = FirmataBoard(BoardConfig())
    with PtyRunner(b, "firmata") as runner:
        runner.board = b
        yield runner


@pytest.fixture
def express():
    b = FirmataBoard(BoardConfig(firmware="FirmataExpress", baudrate=None))
    with PtyRunner(b, "firmata") as runner:
        runner.board = b
        yield runner


def make(runner: PtyRunner, **over) -> FirmataDriver:
    return FirmataDriver.from_config({**table(**over), "port": runner.port}, {"loop": {"rate_hz": 100}})


def read_until(driver, predicate, timeout_s: float = 5.0, message: str = "condition"):
    """Read like the control loop (every 5 ms) until ``predicate(frame)``; the frame."""
    holder = {}

    def once():
        holder["f"] = driver.read(0.005)
        return predicate(holder["f"])

    wait_until(once, timeout_s=timeout_s, interval_s=0.005, message=message)
    return holder["f"]


# ---------------------------------------------------------------- config
def test_ok__config_builds_channels_and_actuators():
    d = FirmataDriver.from_config({**TABLE, "port": "loop://"}, {})
    assert [c.name for c in d.channels()] == list(TABLE["analog"]) + ["estop"]
    assert d.actuators() == {"wheel_left": (-MAX_W, MAX_W), "wheel_right": (-MAX_W, MAX_W)}
    assert d.get_acquisition().rate_hz == 50 and len(d.get_acquisition().channels) == 7
    estop = d.channels()[-1]
    assert (estop.kind, estop.widget) == ("digital", "lamp")


@pytest.mark.parametrize(
    "change, key",
    [
        ({"port": None}, "port"),
        ({"bogus": 1}, "bogus"),
        ({"baudrate": "fast"}, "baudrate"),
        ({"rate_hz": 0}, "rate_hz"),
        ({"keep_alive_s": 11}, "keep_alive_s"),
        ({"analog": {"x": {"channel": 0, "poly": []}}}, "analog.x.poly"),
        ({"analog": {"x": {"channel": 0, "poly": [0, float("nan")]}}}, "analog.x.poly[1]"),
        ({"analog": {"x": {"channel": 16}}}, "analog.x.channel"),
        ({"analog": {"x": {"channel": 0, "min": 5, "max": 1}}}, "analog.x.max"),
        ({"analog": {"Bad": {"channel": 0}}}, "analog.Bad"),
        ({"analog": {"x": {"channel": 0, "colour": 1}}}, "analog.x.colour"),
        ({"wheels": {"w": {"pwm_pin": 5, "dir_pin": 5, "max_rad_s": 1}}}, "wheels.w.dir_pin"),
        ({"wheels": {"w": {"pwm_pin": 5, "dir_pin": 4, "max_rad_s": 0}}}, "wheels.w.max_rad_s"),
        ({"relay_pin": 5}, ""),  # pin 5 is a wheel's PWM
        ({"rate_hz": 1000}, ""),  # 6 channels × 1000 Hz: more than 57600 baud carries
    ],
)
def test_fail__bad_config_names_the_key(change, key):
    t = {**table(**change), "port": "loop://"} if "port" not in change else table(**change)
    with pytest.raises((DriverConfigError, AcquisitionError)) as info:
        FirmataDriver.from_config(t, {})
    if isinstance(info.value, DriverConfigError):
        assert info.value.key == key


# ---------------------------------------------------------------- handshake
def test_handshake_waits_for_the_banner_after_reset_on_open():
    b = FirmataBoard(BoardConfig(banner_delay_s=0.3))
    with PtyRunner(b, "firmata") as runner:
        d = make(runner, banner_wait_s=2.0)
        d.open()
        try:
            assert d.firmware == (2, 5, "StandardFirmata.ino") and d.protocol_version == (2, 5)
            assert runner.opens == 1 and b.log[-1][1] == "reset"  # the board rebooted when the port opened
            assert len(d.pin_capabilities) == 20 and d.analog_map[14:] == (0, 1, 2, 3, 4, 5)
        finally:
            d.close()


def test_handshake_asks_again_when_the_banner_was_missed():
    # no banner wait: the first query is eaten by the booting board, the banner still arrives in the query window
    b = FirmataBoard(BoardConfig(banner_delay_s=0.2))
    with PtyRunner(b, "firmata") as runner:
        d = make(runner, banner_wait_s=0.0, query_timeout_s=2.0)
        d.open()
        d.close()
        assert d.firmware is not None


def test_fail__a_silent_port_is_refused_with_a_clear_error(board):
    board.board.inject("silent")
    d = make(board, query_timeout_s=0.2)
    with pytest.raises(DriverOpenError, match="no answer.*StandardFirmata"):
        d.open()
    assert d.state is DriverState.CLOSED


def test_fail__a_wheel_on_a_pin_without_pwm_is_refused_at_open(board):
    d = make(board, wheels={"wheel_left": {"pwm_pin": 4, "dir_pin": 2, "max_rad_s": 20.0}}, estop_pin=None)
    with pytest.raises(DriverOpenError, match="pin 4.*PWM"):
        d.open()


def test_fail__missing_port(tmp_path):
    d = FirmataDriver.from_config({**TABLE, "port": str(tmp_path / "ttyACM7")}, {})
    with pytest.raises(DriverOpenError, match="ttyACM7"):
        d.open()


# ---------------------------------------------------------------- acquisition
def test_values_are_scaled_and_stamped_with_their_arrival_time(board):
    d = make(board)
    d.open()
    try:
        before = time.monotonic()
        f = read_until(d, lambda f: f.sample_t.get("battery_v", 0) > before, message="a fresh battery sample")
        assert f.values["battery_v"] == pytest.approx(board.board.rover.battery_v, abs=0.05)
        assert f.values["wheel_left_rad_s"] == pytest.approx(0.0, abs=0.05)
        assert f.values["estop"] == 0.0
        assert all(t <= f.t for t in f.sample_t.values())
    finally:
        d.close()


def test_acquisition_change_puts_the_sampling_interval_on_the_wire(board):
    d = make(board)
    d.open()
    try:
        since = len(board.rx_log)
        acq = d.set_acquisition(100, ["battery_v", "estop"])
        assert (acq.rate_hz, acq.channels) == (100.0, ("battery_v", "estop"))
        board.wait_for(bytes.fromhex("f0 7a 0a 00 f7 c0 01 c1 00"), since=since)
        wait_until(lambda: board.board.sampling_interval_ms == 10 and board.board.report_analog == 0b1,
                   message="the board samples A0 only, every 10 ms")
        assert set(d.read(0.01).values) == {"battery_v", "estop"}
        assert d.set_acquisition(300, ["battery_v"]).rate_hz == pytest.approx(1000 / 3)  # 3 ms is what exists
    finally:
        d.close()


def test_fail__a_channel_set_the_baud_rate_cannot_carry_is_refused_and_nothing_changes(board):
    d = make(board)
    d.open()
    try:
        before = d.get_acquisition()
        since = len(board.rx_log)
        with pytest.raises(AcquisitionError, match=r"rate_hz=500 × 6 analog channels.*57600 baud"):
            d.set_acquisition(500, [c.name for c in d.channels()])
        assert d.get_acquisition() == before
        assert bytes.fromhex("f0 7a") not in b"".join(c for _, c in board.rx_log[since:])
    finally:
        d.close()


def test_estop_input_reads_pressed(board):
    d = make(board)
    d.open()
    try:
        read_until(d, lambda f: f.values.get("estop") == 0.0, message="e-stop released")
        board.board.inject("estop", pressed=True)
        read_until(d, lambda f: f.values["estop"] == 1.0, message="e-stop pressed")
    finally:
        d.close()


# ---------------------------------------------------------------- outputs and safety
def test_wheels_move_and_halt_writes_the_safe_state_on_the_stop_lane(board):
    b = board.board
    d = make(board)
    d.open()
    try:
        assert b.digital_out[8] == 0  # relay open while inactive
        d.activate()
        wait_until(lambda: b.digital_out[8] == 1, message="relay closed when active")
        assert d.write({"wheel_left": 10.0, "wheel_right": -10.0}) is True
        read_until(d, lambda f: f.values["wheel_left_rad_s"] > 8 and f.values["wheel_right_rad_s"] < -8,
                   message="wheels at ±10 rad/s")
        assert b.digital_out[7] == 1  # right wheel reversed by its direction pin
        since = len(board.rx_log)
        d.halt()
        board.wait_for(bytes.fromhex("e5 00 00 e6 00 00 f5 08 00"), since=since)
        assert b.pwm[5] == b.pwm[6] == 0 and b.digital_out[8] == 0
        assert d.write({"wheel_left": 10.0}) is False  # halted until activated again
        read_until(d, lambda f: abs(f.values["wheel_left_rad_s"]) < 0.2, message="wheels stopped")
    finally:
        d.close()


def test_close_leaves_outputs_zero_and_resets_the_firmware(board):
    d = make(board)
    d.open()
    d.activate()
    d.write({"wheel_left": 5.0, "wheel_right": 5.0})
    wait_until(lambda: board.board.pwm[5] > 0, message="PWM on")
    since = len(board.rx_log)
    d.close()
    board.wait_for(b"\xff", since=since)
    wait_until(lambda: board.board.outputs_zero(), message="outputs zero")


def test_keep_alive_armed_and_refreshed_by_reads_and_the_board_zeros_pwm_when_it_lapses(express):
    b = express.board
    d = make(express, keep_alive_s=1, stale_s=5.0)
    d.open()
    try:
        assert d.has_keep_alive
        express.wait_for(bytes.fromhex("f0 50 01 00 f7"))
        d.activate()
        d.write({"wheel_left": 10.0, "wheel_right": 10.0})
        t_end = time.monotonic() + 1.5  # longer than the keep-alive period: the reads keep the board alive
        while time.monotonic() < t_end:
            d.read(0.01)
            time.sleep(0.01)
        assert b.pwm[5] > 0 and not any(e == "keep-alive lapsed" for _, e in b.log)
        # the host stops refreshing (a frozen control loop): the board resets itself
        wait_until(lambda: b.outputs_zero(), timeout_s=5.0, message="the board zeroed its outputs")
        lapse = [t for t, e in b.log if e == "keep-alive lapsed"]
        assert lapse and lapse[0] - b.last_keep_alive_t >= 1.0
        with pytest.raises(DriverError):
            read_until(d, lambda f: False, timeout_s=3.0, message="the driver notices the reset")
        assert d.state is DriverState.INACTIVE
    finally:
        d.close()


def test_standard_firmata_has_no_keep_alive_and_can_be_required(board):
    d = make(board)
    d.open()
    assert not d.has_keep_alive
    d.close()
    with pytest.raises(DriverOpenError, match="KEEP_ALIVE"):
        make(board, require_keep_alive=True).open()


# ---------------------------------------------------------------- faults
def test_unplug_mid_motion_is_a_link_error_and_reconnect_stays_inactive(board):
    b = board.board
    d = make(board)
    d.open()
    d.activate()
    try:
        d.write({"wheel_left": 10.0, "wheel_right": 10.0})
        wait_until(lambda: b.pwm[5] > 0, message="moving")
        board.unplug()
        with pytest.raises(DriverLinkError):
            read_until(d, lambda f: False, timeout_s=3.0, message="the unplug noticed")
        assert d.state is DriverState.INACTIVE  # halted on the fault
        board.replug()
        attempts = d.reconnect(timeout_s=10.0)
        assert attempts >= 1 and d.state is DriverState.INACTIVE
        f = read_until(d, lambda f: "battery_v" in f.values, message="reading again")
        assert f.values["battery_v"] > 10
        assert b.pwm[5] == 0 and d.write({"wheel_left": 5.0}) is False  # no motion without an operator
    finally:
        d.close()


def test_reconnect_backs_off_until_the_port_returns(board):
    d = make(board)
    d.open()
    board.unplug()
    with pytest.raises(DriverLinkError):
        read_until(d, lambda f: False, timeout_s=3.0)
    with pytest.raises(DriverOpenError):
        d.reconnect(timeout_s=0.5)  # still unplugged: the last open error after the backoff
    board.replug()
    assert d.reconnect(timeout_s=10.0) >= 1
    d.close()


def test_garbage_on_the_line_is_a_protocol_error_and_halts(board):
    d = make(board)
    d.open()
    d.activate()
    try:
        d.write({"wheel_left": 10.0, "wheel_right": 10.0})
        with board.lock:
            board.board.inject("garbage", count=400)
        with pytest.raises(DriverProtocolError, match="garbage"):
            read_until(d, lambda f: False, timeout_s=3.0)
        assert d.state is DriverState.INACTIVE
        wait_until(lambda: board.board.pwm[5] == 0, message="halted")
    finally:
        d.close()


def test_truncated_frames_are_counted(board):
    d = make(board)
    d.open()
    try:
        with board.lock:
            board.board.inject("truncated")
        wait_until(lambda: d.health()["invalid_frames"] >= 1, message="the truncated message counted")
        d.read(0.01)  # one bad message is not a fault
    finally:
        d.close()


def test_silent_board_is_a_timeout_after_stale_s(board):
    d = make(board, stale_s=0.2)
    d.open()
    try:
        d.read(0.01)
        board.board.inject("silent")
        with pytest.raises(DriverTimeoutError, match="nothing from the board"):
            read_until(d, lambda f: False, timeout_s=3.0)
    finally:
        d.close()


def test_health_exposes_the_link_counters(board):
    d = make(board)
    d.open()
    try:
        read_until(d, lambda f: "battery_v" in f.values)
        h = d.health()
        for key in ("bytes_in", "bytes_out", "invalid_frames", "crc_errors", "retries", "timeouts", "rtt_ms"):
            assert key in h
        assert h["bytes_in"] > 0 and h["bytes_out"] > 0 and h["connected"] is True
    finally:
        d.close()


def doc_table(title: str) -> dict:
    """The TOML example under ``title`` in docs/hardware.md, parsed."""
    import re
    import tomllib
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "hardware.md").read_text()
    section = text.split(title, 1)[1]
    block = re.search(r"```toml\n(.*?)```", section, re.S).group(1)
    return tomllib.loads(block)["driver"]


def test_the_documented_rover_table_runs_on_the_emulated_board(board):
    t = doc_table("### Example: a Firmata rover")
    # stale_s 5: the board is a thread of this process, and a loaded machine starved it past the table's 0.5 s in a
    # test about the wiring (a fresh-clone run); staleness has its own tests
    d = FirmataDriver.from_config({**t, "port": board.port, "banner_wait_s": 0.0, "stale_s": 5.0}, {})
    d.open()
    d.activate()
    try:
        d.write({"wheel_left": 10.0, "wheel_right": 10.0})
        f = read_until(d, lambda f: f.values["wheel_left_rad_s"] > 9.5, message="the documented wiring drives")
        assert f.values["battery_v"] == pytest.approx(board.board.rover.battery_v, abs=0.05)
        assert abs(f.values["current_left_a"]) < 5
    finally:
        d.close()


def test_servo_and_digital_output_actuators(board):
    d = make(board, servos={"gripper": {"pin": 9, "min_rad": 0.0, "max_rad": 3.141592653589793}},
             outputs={"lamp": {"pin": 13}})
    d.open()
    d.activate()
    try:
        board.wait_for(bytes.fromhex("f0 70 09 20 04 60 12 f7"))  # attached with the default pulse range
        d.write({"gripper": 3.141592653589793 / 2, "lamp": 1.0})
        wait_until(lambda: board.board.pwm[9] == 90 and board.board.digital_out[13] == 1, message="servo 90°, lamp on")
        d.halt()
        wait_until(lambda: board.board.digital_out[13] == 0, message="outputs low on halt")
        assert board.board.pwm[9] == 90  # a servo holds its position: it has no "off"
    finally:
        d.close()


def test_polynomial_scaling():
    from drivers.firmata.driver import AnalogSpec

    spec = AnalogSpec("t", 0, (1.0, 0.5, 0.25), None)  # 1 + x/2 + x²/4
    assert spec.scale(0) == 1.0 and spec.scale(2) == 3.0 and spec.scale(10) == 31.0
