"""Cross-check of the Firmata board emulator with an independent client, pyfirmata2 (MIT), over a real pty.

pyfirmata2 shares no code with ``drivers.firmata``: if the emulator and our
codec misread the protocol the same way, this client would disagree.
"""

from __future__ import annotations

import pytest

from sim.devices.firmata import BoardConfig, FirmataBoard
from sim.devices.pty import PtyRunner
from tests.conftest import wait_until

pyfirmata2 = pytest.importorskip("pyfirmata2")


@pytest.fixture
def board_and_client(monkeypatch):
    import pyfirmata2.pyfirmata2 as pf

    monkeypatch.setattr(pf, "BOARD_SETUP_WAIT_TIME", 0)  # its fixed 5 s reset wait; our board boots at once
    board = FirmataBoard(BoardConfig())
    with PtyRunner(board, "firmata") as runner:
        client = pyfirmata2.Arduino(runner.port)
        try:
            yield board, client, runner
        finally:
            client.exit()


def test_pyfirmata2_parses_our_capability_report_into_the_uno_layout(monkeypatch):
    import pyfirmata2.pyfirmata2 as pf

    monkeypatch.setattr(pf, "BOARD_SETUP_WAIT_TIME", 0)
    with PtyRunner(FirmataBoard(BoardConfig()), "firmata") as runner:
        client = pyfirmata2.Board(runner.port)  # no layout given: pyfirmata2 asks for the capabilities
        try:
            layout = client._layout
        finally:
            client.exit()
    # pyfirmata2 numbers the pins that are not analog as digital 0..13 and the analog ones as A0..A5
    assert list(layout["digital"]) == list(range(14))
    assert list(layout["analog"]) == list(range(6))
    assert list(layout["pwm"]) == [3, 5, 6, 9, 10, 11]
    assert list(layout["disabled"]) == [0, 1]  # RX/TX report no modes


def test_pyfirmata2_reads_an_analog_channel_at_the_sampling_interval(board_and_client):
    board, client, _ = board_and_client
    values: list[float] = []
    pin = client.get_pin("a:0:i")
    pin.register_callback(values.append)
    client.samplingOn(10)
    wait_until(lambda: len(values) >= 20, timeout_s=10, message="20 samples of A0")
    assert board.sampling_interval_ms == 10
    expected = board.rover.battery_v / 3.0 / 5.0  # A0: the battery through its 1:3 divider, as a 0–1 fraction
    assert values[-1] == pytest.approx(expected, abs=0.01)


def test_pyfirmata2_pwm_write_reaches_the_pin_and_drives_the_wheel(board_and_client):
    board, client, runner = board_and_client
    client.get_pin("d:8:o").write(1)  # the safety relay: motor power on
    client.get_pin("d:5:p").write(0.5)
    wait_until(lambda: board.pwm[5] == 128, message="PWM 128 on pin 5")
    assert board.mode[5] == 3
    wait_until(lambda: board.rover.wheel_speeds[0] > 0.9 * board.wheel_commands()[0], timeout_s=10,
               message="the left wheel spun up")
    assert board.wheel_commands()[0] == pytest.approx(128 / 255 * board.max_wheel_speed_rad_s)
