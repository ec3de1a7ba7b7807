"""Firmata codec: every message the driver sends or reads, as byte literals (protocol.md 2.8)."""

from __future__ import annotations

import pytest

from drivers.firmata import protocol as fp
from drivers.serial.codec import Invalid


# ---------------------------------------------------------------- encoding: every message the driver sends
@pytest.mark.parametrize(
    "message, expected",
    [
        (fp.encode_report_version(), "f9"),
        (fp.encode_query_firmware(), "f0 79 f7"),
        (fp.encode_capability_query(), "f0 6b f7"),
        (fp.encode_analog_mapping_query(), "f0 69 f7"),
        (fp.encode_pin_state_query(9), "f0 6d 09 f7"),
        (fp.encode_system_reset(), "ff"),
        (fp.encode_set_pin_mode(15, fp.PinMode.ANALOG), "f4 0f 02"),  # A1 on an Uno (not the spec's F4 0E 03)
        (fp.encode_set_pin_mode(2, fp.PinMode.PULLUP), "f4 02 0b"),
        (fp.encode_set_pin_mode(9, fp.PinMode.PWM), "f4 09 03"),
        (fp.encode_set_pin_mode(13, fp.PinMode.OUTPUT), "f4 0d 01"),
        (fp.encode_report_analog(1, True), "c1 01"),
        (fp.encode_report_analog(5, False), "c5 00"),
        (fp.encode_report_digital(0, True), "d0 01"),
        (fp.encode_set_digital_pin(13, True), "f5 0d 01"),
        (fp.encode_set_digital_pin(8, False), "f5 08 00"),
        (fp.encode_digital_port(1, 0x20), "91 20 00"),
        (fp.encode_digital_port(0, 0x80), "90 00 01"),
        (fp.encode_analog_write(9, 128), "e9 00 01"),
        (fp.encode_analog_write(5, 0), "e5 00 00"),
        (fp.encode_analog_write(9, 1000), "e9 68 07"),
        (fp.encode_analog_write(20, 1000), "f0 6f 14 68 07 f7"),  # pin > 15: EXTENDED_ANALOG
        (fp.encode_analog_write(9, 1 << 14), "f0 6f 09 00 00 01 f7"),  # > 14 bits: a third data byte
        (fp.encode_analog_write(9, 90), "e9 5a 00"),  # a servo at 90°
        (fp.encode_servo_config(9, 544, 2400), "f0 70 09 20 04 60 12 f7"),
        (fp.encode_sampling_interval(10), "f0 7a 0a 00 f7"),
        (fp.encode_sampling_interval(19), "f0 7a 13 00 f7"),
        (fp.encode_sampling_interval(1000), "f0 7a 68 07 f7"),
        (fp.encode_sampling_interval(16383), "f0 7a 7f 7f f7"),
        (fp.encode_keep_alive(1), "f0 50 01 00 f7"),
        (fp.encode_keep_alive(0), "f0 50 00 00 f7"),
        (fp.encode_string("OK"), "f0 71 4f 00 4b 00 f7"),
    ],
)
def test_ok__encode(message, expected):
    assert message.hex(" ") == expected


@pytest.mark.parametrize(
    "call",
    [
        lambda: fp.encode_sampling_interval(0),  # StandardFirmata's minimum is 1 ms
        lambda: fp.encode_sampling_interval(16384),
        lambda: fp.encode_keep_alive(11),
        lambda: fp.encode_set_pin_mode(128, fp.PinMode.OUTPUT),
        lambda: fp.encode_report_analog(16, True),
        lambda: fp.encode_analog_write(9, -1),
        lambda: fp.encode_analog_write(9, 1 << 21),
        lambda: fp.encode_digital_port(0, 256),
        lambda: fp.encode_servo_config(9, 2400, 544),
        lambda: fp.encode_analog_write(9, 1.5),
        lambda: fp.encode_set_pin_mode(True, fp.PinMode.OUTPUT),
    ],
)
def test_fail__encode_refuses_values_the_wire_cannot_carry(call):
    with pytest.raises(ValueError):
        call()


# ---------------------------------------------------------------- decoding: every message a board sends
@pytest.mark.parametrize(
    "wire, expected",
    [
        ("e0 7f 07", [fp.AnalogValue(0, 1023)]),
        ("e5 00 04", [fp.AnalogValue(5, 512)]),
        ("90 04 00", [fp.DigitalPort(0, 0x04)]),
        ("91 00 01", [fp.DigitalPort(1, 0x80)]),
        ("f9 02 05", [fp.ProtocolVersion(2, 5)]),
        ("f0 79 02 05 53 00 46 00 f7", [fp.FirmwareReport(2, 5, "SF")]),
        ("f0 6c 7f 7f 00 01 01 01 03 08 7f f7",
         [fp.CapabilityResponse(({}, {}, {0: 1, 1: 1, 3: 8}))]),
        ("f0 6a 7f 7f 00 01 f7", [fp.AnalogMapping((None, None, 0, 1))]),
        ("f0 6e 09 03 7f 01 f7", [fp.PinStateResponse(9, 3, 255)]),
        ("f0 71 4f 00 4b 00 f7", [fp.StringData("OK")]),
        ("f0 61 01 02 f7", [fp.Sysex(0x61, b"\x01\x02")]),
        ("e0 7f 07 e1 00 00 90 01 00", [fp.AnalogValue(0, 1023), fp.AnalogValue(1, 0), fp.DigitalPort(0, 1)]),
    ],
)
def test_ok__decode(wire, expected):
    assert fp.FirmataDecoder().feed(bytes.fromhex(wire)) == expected


def test_decode_byte_by_byte_equals_decode_at_once():
    wire = bytes.fromhex("f9 02 05 f0 79 02 05 53 00 46 00 f7 e0 7f 07 90 04 00")
    d = fp.FirmataDecoder()
    one_by_one = [m for b in wire for m in d.feed(bytes((b,)))]
    assert one_by_one == fp.FirmataDecoder().feed(wire)


@pytest.mark.parametrize(
    "wire, reason",
    [
        ("e0 7f e1 00 00", "truncated message 0xe0"),  # an analog message cut short by the next command
        ("00 e1 00 00", "data byte outside a message"),
        ("f7", "END_SYSEX outside a sysex"),
        ("f0 79 02 e1 00 00", "truncated sysex"),
        ("f4 09 03", "unexpected command 0xf4 from the board"),
        ("f1", "unknown command 0xf1"),
    ],
)
def test_fail__garbage_is_reported_and_the_stream_resynchronises(wire, reason):
    out = fp.FirmataDecoder().feed(bytes.fromhex(wire))
    invalid = [m for m in out if isinstance(m, Invalid)]
    assert invalid and invalid[0].reason == reason
    if wire.endswith("e1 00 00"):
        assert out[-1] == fp.AnalogValue(1, 0)  # the next good message decodes


def test_fail__endless_sysex_costs_bounded_memory():
    d = fp.FirmataDecoder()
    out = d.feed(b"\xf0" + b"\x01" * 100_000)
    assert any(isinstance(m, Invalid) and m.reason == "sysex too long" for m in out)
    assert len(d._buf) <= fp.MAX_SYSEX_BYTES
    assert d.feed(bytes.fromhex("f9 02 05"))[-1] == fp.ProtocolVersion(2, 5)


def test_fail__random_bytes_never_raise():
    import numpy as np

    rng = np.random.default_rng(7)
    d = fp.FirmataDecoder()
    for _ in range(50):
        d.feed(bytes(rng.integers(0, 256, 997, dtype=np.uint8)))
    assert d.feed(bytes.fromhex("f9 02 05 e0 7f 07"))[-2:] == [fp.ProtocolVersion(2, 5), fp.AnalogValue(0, 1023)]
