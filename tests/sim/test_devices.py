"""Device emulators, driven with explicit times (no pty, no clock): what they answer and when.

The bytes here are written from the protocol documents, not through the
drivers' codecs, so these tests pin the emulators to the spec on their own.
"""

from __future__ import annotations

import pytest

from sim.devices.faulhaber_ascii import AsciiLine, DriveConfig, LineConfig
from sim.devices.faulhaber_mcv3 import McV3Bus, frame_crc, make_frame
from sim.devices.firmata import BoardConfig, FirmataBoard
from sim.devices.motor import MotorAxis


def run(dev, data: bytes, t: float) -> bytes:
    dev.receive(data, t)
    return dev.advance(t)


# ====================================================================== Firmata board
def booted(**kw) -> FirmataBoard:
    board = FirmataBoard(BoardConfig(**kw))
    board.host_opened(0.0)
    board.advance(board.config.banner_delay_s)
    return board


def test_board_sends_its_banner_after_the_boot_delay_and_ignores_input_while_booting():
    board = FirmataBoard(BoardConfig(banner_delay_s=2.0))
    board.host_opened(10.0)
    assert run(board, b"\xf9", 10.5) == b""  # eaten by the bootloader: no answer, ever
    assert board.advance(11.9) == b""
    banner = board.advance(12.0)
    name = "".join(f"{ord(c):02x} 00 " for c in "StandardFirmata.ino").strip()
    assert banner.hex(" ") == f"f9 02 05 f0 79 02 05 {name} f7"
    assert run(board, b"\xf9", 12.1) == bytes.fromhex("f9 02 05")


def test_board_answers_capability_and_analog_mapping_queries():
    board = booted()
    caps = run(board, bytes.fromhex("f0 6b f7"), 0.1)
    assert caps[:2] == b"\xf0\x6c" and caps[-1] == 0xF7
    pins = caps[2:-1].split(b"\x7f")[:-1]
    assert len(pins) == 20 and pins[0] == pins[1] == b""  # RX/TX
    assert bytes((3, 8)) in pins[9] and bytes((2, 10)) in pins[14] and bytes((4, 14)) in pins[9]
    amap = run(board, bytes.fromhex("f0 69 f7"), 0.2)
    assert amap.hex(" ") == "f0 6a " + "7f " * 14 + "00 01 02 03 04 05 f7"


def test_analog_reporting_at_the_sampling_interval_and_at_once_on_enable():
    board = booted()
    board.advance(0.99)
    first = run(board, bytes.fromhex("f0 7a 0a 00 f7 c0 01"), 1.0)  # 10 ms, then A0 on
    assert first[0] == 0xE0 and len(first) in (3, 6)  # the current value at once (protocol 2.4+)
    n = 0
    t = 1.0
    for _ in range(100):
        t += 0.001
        n += len(board.advance(t)) // 3
    assert n in (9, 10, 11)  # 100 ms at 10 ms
    run(board, bytes.fromhex("c0 00"), t)
    assert board.advance(t + 0.1) == b""


def test_set_pin_mode_analog_turns_reporting_on_like_standard_firmata():
    board = booted()
    run(board, bytes.fromhex("f4 0f 02"), 1.0)  # A1 = pin 15
    assert board.report_analog == 0b10


def test_digital_port_sent_on_enable_and_on_change_only():
    board = booted()
    out = run(board, bytes.fromhex("f4 02 0b d0 01"), 1.0)  # pin 2 pull-up (the e-stop), report port 0
    assert out == bytes.fromhex("90 04 00")
    assert board.advance(1.1) == b""
    board.inject("estop", pressed=True)
    assert board.advance(1.2) == bytes.fromhex("90 00 00")


def test_pwm_direction_and_relay_drive_the_rover_wheels():
    board = booted()
    run(board, bytes.fromhex("f4 05 03 f4 04 01 f4 08 01 f5 08 01 e5 7f 01 f5 04 01"), 1.0)
    assert board.pwm[5] == 255 and board.digital_out[4] == 1
    assert board.wheel_commands()[0] == pytest.approx(-board.max_wheel_speed_rad_s)
    run(board, bytes.fromhex("f5 08 00"), 1.1)  # relay released: no motor power
    assert board.wheel_commands() == (0.0, 0.0)


def test_pwm_on_a_pin_without_pwm_is_ignored_and_extended_analog_reaches_any_pin():
    board = booted()
    run(board, bytes.fromhex("f4 04 03 e4 40 00"), 1.0)  # pin 4 has no PWM
    assert board.pwm[4] == 0
    run(board, bytes.fromhex("f4 09 03 f0 6f 09 10 00 f7"), 1.1)
    assert board.pwm[9] == 16


def test_sysex_over_64_data_bytes_is_dropped_like_the_firmware_buffer():
    board = booted()
    assert run(board, b"\xf0\x79" + b"\x00" * 70 + b"\xf7", 1.0) == b""
    assert run(board, bytes.fromhex("f0 79 f7"), 1.1)[:2] == b"\xf0\x79"


def test_wire_speed_limits_the_sample_rate_the_board_achieves():
    board = booted(baudrate=57600)
    run(board, bytes.fromhex("f0 7a 01 00 f7") + bytes.fromhex("c0 01 c1 01 c2 01 c3 01 c4 01 c5 01"), 1.0)
    received = 0
    t = 1.0
    while t < 2.0:
        t += 0.0005
        received += len(board.advance(t))
    samples_per_s = received / 3
    assert samples_per_s <= 57600 / 10 / 3 * 1.01  # 1920 samples/s: the wire, not the 6000 asked for
    assert samples_per_s > 1500


def test_keep_alive_lapse_resets_firmata_express_and_zeroes_outputs():
    board = booted(firmware="FirmataExpress")
    run(board, bytes.fromhex("f4 05 03 e5 40 01 f0 50 01 00 f7"), 1.0)  # PWM 192, keep-alive 1 s
    assert board.pwm[5] == 192
    run(board, bytes.fromhex("f0 50 01 00 f7"), 1.8)  # refreshed
    board.advance(2.7)
    assert board.pwm[5] == 192
    board.advance(2.81)  # more than 1 s since the last keep-alive
    assert board.outputs_zero() and board.log[-1] == (2.81, "reset")
    assert any(e == "keep-alive lapsed" for _, e in board.log)


def test_standard_firmata_ignores_keep_alive_and_keeps_its_outputs():
    board = booted()
    run(board, bytes.fromhex("f4 05 03 e5 40 01 f0 50 01 00 f7"), 1.0)
    board.advance(30.0)
    assert board.pwm[5] == 192  # the danger docs/hardware.md warns about


def test_system_reset_puts_pins_back_and_stops_reporting():
    board = booted()
    run(board, bytes.fromhex("f4 05 03 e5 40 01 c0 01"), 1.0)
    run(board, b"\xff", 1.1)
    assert board.pwm[5] == 0 and board.mode[5] == 1 and board.report_analog == 0


# ====================================================================== FAULHABER ASCII
def line(**kw) -> AsciiLine:
    return AsciiLine(LineConfig(drives=[DriveConfig(1), DriveConfig(2)], **kw))


def test_ascii_answers_queries_and_confirms_commands_in_answer_mode_2():
    dev = line()
    assert run(dev, b"1POS\r", 0.0) == b"0\r\n"
    assert run(dev, b"1 en\r", 0.0) == b"OK\r\n"  # spaces ignored, case does not matter
    assert run(dev, b"1V500\r", 0.0) == b"OK\r\n"
    dev.advance(1.0)
    assert run(dev, b"1GN\r", 1.0) == b"500\r\n"
    assert run(dev, b"2GN\r", 1.0) == b"0\r\n"  # node 2 untouched


def test_ascii_answer_modes_0_and_1_do_not_confirm_commands():
    dev = line()
    assert run(dev, b"1ANSW0\r", 0.0) == b""
    assert run(dev, b"1EN\r", 0.0) == b""
    assert run(dev, b"1POS\r", 0.0) == b"0\r\n"  # queries are always answered
    assert run(dev, b"1ANSW2\r", 0.0) == b"OK\r\n"


@pytest.mark.parametrize("cmd, answer", [(b"1FOO\r", b"Unknown command\r\n"), (b"1V\r", b"Invalid parameter\r\n"),
                                         (b"1SP-5\r", b"Invalid parameter\r\n"), (b"1POS5\r", b"Invalid parameter\r\n"),
                                         (b"1M5\r", b"Invalid parameter\r\n"), (b"\x00\xff\r", b"Unknown command\r\n")])
def test_ascii_errors(cmd, answer):
    assert run(line(), cmd, 0.0) == answer


def test_ascii_other_nodes_number_gets_no_answer():
    assert run(line(), b"7POS\r", 0.0) == b""


def test_ascii_position_move_loads_then_starts_on_m_and_reports_p():
    dev = line()
    run(dev, b"1EN\r1SP3000\r1AC100\r1DEC100\r1LA4096\r1NP\r", 0.0)
    dev.advance(0.5)
    assert run(dev, b"1POS\r", 0.5) == b"0\r\n"  # LA alone does not move
    run(dev, b"1M\r", 0.5)
    out = b""
    t = 0.5
    while b"p\r\n" not in out and t < 5.0:
        t += 0.001
        out += dev.advance(t)
    assert b"p\r\n" in out
    assert run(dev, b"1POS\r", t) == b"4096\r\n"


def test_ascii_di_coasts_the_motor_down():
    dev = line()
    run(dev, b"1EN\r1V3000\r", 0.0)
    dev.advance(2.0)
    run(dev, b"1DI\r", 2.0)
    dev.advance(2.05)
    assert 0 < dev.drives[1].motor.speed_rev_s < 50  # coasting, not stopped dead
    dev.advance(3.0)
    assert dev.drives[1].motor.speed_rev_s == 0.0


def test_ascii_fault_injection_drop_hold_silent_unknown_reboot():
    dev = line()
    dev.inject("drop", count=1)
    assert run(dev, b"1POS\r", 0.0) == b""
    assert run(dev, b"1POS\r", 0.0) == b"0\r\n"
    dev.inject("hold")
    assert run(dev, b"1POS\r", 0.1) == b""
    dev.inject("release", now_s=0.2)
    assert dev.advance(0.2) == b"0\r\n"
    dev.inject("unknown")
    assert run(dev, b"1POS\r", 0.3) == b"Unknown command\r\n"
    dev.inject("clear")
    dev.inject("silent")
    assert run(dev, b"1POS\r", 0.4) == b""
    dev.inject("clear")
    run(dev, b"1EN\r1V1000\r", 0.5)
    dev.advance(1.0)
    dev.inject("reboot", now_s=1.0, boot_s=0.5)
    assert run(dev, b"1GN\r", 1.2) == b""
    assert dev.drives[1].motor.enabled is False
    assert run(dev, b"1POS\r", 1.6) == b"0\r\n"  # counters start again at zero


def test_ascii_delay_and_wire_time():
    dev = AsciiLine(LineConfig(drives=[DriveConfig(1)], baudrate=9600))
    dev.receive(b"1POS\r", 0.0)
    assert dev.advance(0.002) == b""
    assert dev.advance(0.0032) == b"0\r\n"  # 3 bytes at 9600 baud: 3.1 ms


# ====================================================================== FAULHABER MC V3.0
def sdo(node: int, cmd: int, index: int, data: bytes = b"") -> bytes:
    return make_frame(node, cmd, index.to_bytes(2, "little") + b"\x00" + data)


def test_mcv3_crc_matches_the_documented_frames():
    assert frame_crc(bytes.fromhex("07 01 01 41 60 00")) == 0x73
    assert sdo(1, 2, 0x6040, b"\x0f\x00").hex(" ") == "53 09 01 02 40 60 00 0f 00 25 45"


def test_mcv3_state_machine_to_operation_enabled_and_profile_velocity():
    bus = McV3Bus()
    assert run(bus, sdo(1, 1, 0x6041), 0.0) == sdo(1, 1, 0x6041, (0x0240).to_bytes(2, "little"))
    run(bus, sdo(1, 2, 0x6060, b"\x03"), 0.0)
    for cw in (0x06, 0x07, 0x0F):
        assert run(bus, sdo(1, 2, 0x6040, cw.to_bytes(2, "little")), 0.0) == sdo(1, 2, 0x6040)
    sw = int.from_bytes(run(bus, sdo(1, 1, 0x6041), 0.0)[7:9], "little")
    assert sw & 0x6F == 0x27
    run(bus, sdo(1, 2, 0x60FF, (600).to_bytes(4, "little", signed=True)), 0.0)
    bus.advance(1.0)
    v = int.from_bytes(run(bus, sdo(1, 1, 0x606C), 1.0)[7:11], "little", signed=True)
    assert v == 600


def test_mcv3_quick_stop_brakes_then_disables():
    bus = McV3Bus()
    for frame in (sdo(1, 2, 0x6060, b"\x03"), *(sdo(1, 2, 0x6040, cw.to_bytes(2, "little")) for cw in (6, 7, 15)),
                  sdo(1, 2, 0x60FF, (3000).to_bytes(4, "little"))):
        run(bus, frame, 0.0)
    bus.advance(1.0)
    run(bus, sdo(1, 2, 0x6040, b"\x02\x00"), 1.0)
    assert bus.drives[1].state == "quick_stop"
    bus.advance(2.0)
    assert bus.drives[1].state == "switch_on_disabled" and bus.drives[1].motor.speed_rev_s == 0.0


def test_mcv3_profile_position_move_on_the_new_setpoint_edge():
    bus = McV3Bus()
    for frame in (sdo(1, 2, 0x6060, b"\x01"), *(sdo(1, 2, 0x6040, cw.to_bytes(2, "little")) for cw in (6, 7, 15)),
                  sdo(1, 2, 0x607A, (8192).to_bytes(4, "little"))):
        run(bus, frame, 0.0)
    bus.advance(0.5)
    assert bus.drives[1].motor.counts == 0  # no edge yet
    run(bus, sdo(1, 2, 0x6040, (0x3F).to_bytes(2, "little")), 0.5)
    for i in range(3000):
        bus.advance(0.5 + i * 0.001)
    sw = bus.drives[1].statusword
    assert bus.drives[1].motor.counts == 8192 and sw & 0x400


def test_mcv3_bad_crc_is_dropped_and_unknown_objects_abort():
    bus = McV3Bus()
    frame = bytearray(sdo(1, 1, 0x6041))
    frame[-2] ^= 0xFF
    assert run(bus, bytes(frame), 0.0) == b"" and bus.crc_errors == 1
    assert run(bus, sdo(1, 1, 0x1234), 0.0) == sdo(1, 3, 0x1234, (0x06020000).to_bytes(4, "little"))
    assert run(bus, sdo(1, 2, 0x6064, b"\0\0\0\0"), 0.0) == sdo(1, 3, 0x6064, (0x06010002).to_bytes(4, "little"))
    assert run(bus, sdo(9, 1, 0x6041), 0.0) == b""  # no such node


def test_mcv3_fault_injection_corrupt_crc_and_reboot():
    bus = McV3Bus()
    bus.inject("corrupt_crc", count=1)
    bad = run(bus, sdo(1, 1, 0x6041), 0.0)
    assert frame_crc(bad[1:-2]) != bad[-2]
    good = run(bus, sdo(1, 1, 0x6041), 0.0)
    assert frame_crc(good[1:-2]) == good[-2]
    bus.inject("reboot", now_s=1.0, boot_s=0.5)
    assert run(bus, sdo(1, 1, 0x6041), 1.2) == b""
    assert bus.advance(1.5) == make_frame(1, 0, b"") + make_frame(2, 0, b"")


# ====================================================================== the motor
def test_motor_velocity_ramp_respects_acceleration():
    m = MotorAxis(max_speed_rev_s=50, accel_rev_s2=100, decel_rev_s2=200)
    m.enabled = True
    m.set_speed(50)
    m.step(0.1)
    assert m.speed_rev_s == pytest.approx(10)
    for _ in range(100):
        m.step(0.01)
    assert m.speed_rev_s == 50
    m.set_speed(0)
    m.step(0.1)
    assert m.speed_rev_s == pytest.approx(30)


def test_standalone_emulator_prints_its_pty_and_a_driver_talks_to_it():
    import re
    import signal
    import subprocess
    import sys

    from drivers.faulhaber import ascii as fa
    from drivers.serial.link import SerialLink

    proc = subprocess.Popen([sys.executable, "-m", "sim.devices.faulhaber_ascii", "--baud", "0"],
                            stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        path = re.search(r"on (\S+) ", line).group(1)
        link = SerialLink(path, fa.AsciiDecoder(), ordered=True, half_duplex=True, reply_timeout_s=2.0)
        link.open()
        try:
            assert link.request(b"1POS\r") == fa.Value(0)
        finally:
            link.close()
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(10) == 0
