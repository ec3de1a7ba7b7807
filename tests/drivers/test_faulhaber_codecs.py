"""FAULHABER codecs: ASCII commands and replies, MC V3.0 frames with CRC8, as byte literals."""

from __future__ import annotations

import numpy as np
import pytest

from drivers.faulhaber import ascii as fa
from drivers.faulhaber import mcv3
from drivers.serial.codec import Invalid


# ====================================================================== ASCII
@pytest.mark.parametrize(
    "node, cmd, arg, wire",
    [
        (1, "ANSW", 2, b"1ANSW2\r"), (1, "EN", None, b"1EN\r"), (2, "DI", None, b"2DI\r"),
        (1, "V", 500, b"1V500\r"), (1, "V", -500, b"1V-500\r"), (1, "V", 0, b"1V0\r"),
        (1, "LA", 20000, b"1LA20000\r"), (3, "LR", -100, b"3LR-100\r"), (None, "M", None, b"M\r"),
        (1, "M", None, b"1M\r"), (1, "NP", None, b"1NP\r"), (1, "POS", None, b"1POS\r"),
        (1, "GN", None, b"1GN\r"), (1, "GRC", None, b"1GRC\r"), (1, "SP", 3000, b"1SP3000\r"),
        (1, "AC", 50, b"1AC50\r"), (1, "DEC", 50, b"1DEC50\r"), (1, "LCC", 1500, b"1LCC1500\r"),
        (1, "LPC", 3000, b"1LPC3000\r"), (1, "HO", None, b"1HO\r"), (12, "pos", None, b"12POS\r"),
    ],
)
def test_ok__ascii_encode(node, cmd, arg, wire):
    assert fa.encode(node, cmd, arg) == wire


@pytest.mark.parametrize("node, cmd, arg", [(1, "XYZ", None), (1, "V", 1.5), (1, "V", True), (256, "EN", None),
                                            (-1, "EN", None), (1, "V", 2**31), (1, "V\r1EN", None)])
def test_fail__ascii_encode(node, cmd, arg):
    with pytest.raises(ValueError):
        fa.encode(node, cmd, arg)


@pytest.mark.parametrize(
    "wire, expected",
    [
        (b"98956\r\n", [fa.Value(98956)]), (b"-12\r\n", [fa.Value(-12)]), (b"OK\r\n", [fa.Ok()]),
        (b"p\r\n", [fa.Event("p")]), (b"v\r\n", [fa.Event("v")]),
        (b"Unknown command\r\n", [fa.ErrorReply("Unknown command")]),
        (b"Invalid parameter\r\n", [fa.ErrorReply("Invalid parameter")]),
        (b"Command not available\r\n", [fa.ErrorReply("Command not available")]),
        ("Overtemperature – drive disabled\r\n".encode("latin-1", "replace"),
         [fa.ErrorReply("Overtemperature ? drive disabled")]),
        (b"EEPROM writing done\r\n", [fa.Text("EEPROM writing done")]),
        (b"OK\r\n\r\n42\r", [fa.Ok(), fa.Value(42)]),  # empty lines skipped, a lone CR ends a line
    ],
)
def test_ok__ascii_decode(wire, expected):
    assert fa.AsciiDecoder().feed(wire) == expected


def test_fail__ascii_garbage_and_long_lines_are_invalid_and_bounded():
    d = fa.AsciiDecoder()
    out = d.feed(b"\x00\x13\xfe12\r\n" + b"A" * 10_000 + b"\r\nOK\r\n")
    assert [type(m) for m in out] == [Invalid, Invalid, fa.Ok]
    assert len(d._buf) == 0
    rng = np.random.default_rng(3)
    for _ in range(20):
        d.feed(bytes(rng.integers(0, 256, 500, dtype=np.uint8)))
    assert d.feed(b"\r\n7\r\n")[-1] == fa.Value(7)


# ====================================================================== MC V3.0
def test_crc8_examples_from_the_notes():
    assert mcv3.crc8(bytes.fromhex("07 01 01 41 60 00")) == 0x73
    assert mcv3.crc8(bytes.fromhex("09 01 02 40 60 00 0f 00")) == 0x25


@pytest.mark.parametrize(
    "frame, wire",
    [
        (mcv3.encode_sdo_read(1, mcv3.STATUSWORD), "53 07 01 01 41 60 00 73 45"),
        (mcv3.encode_sdo_write(1, mcv3.CONTROLWORD, 0, 0x000F), "53 09 01 02 40 60 00 0f 00 25 45"),
        (mcv3.encode_sdo_write(1, mcv3.MODES_OF_OPERATION, 0, 3), "53 08 01 02 60 60 00 03 a2 45"),
        (mcv3.encode_sdo_write(2, mcv3.TARGET_VELOCITY, 0, -100),
         "53 0b 02 02 ff 60 00 9c ff ff ff " + f"{mcv3.crc8(bytes.fromhex('0b 02 02 ff 60 00 9c ff ff ff')):02x} 45"),
        (mcv3.encode_sdo_read(1, mcv3.POSITION_ACTUAL), "53 07 01 01 64 60 00 "
         + f"{mcv3.crc8(bytes.fromhex('07 01 01 64 60 00')):02x} 45"),
        (mcv3.encode_controlword(1, 0x0006), "53 06 01 04 06 00 "
         + f"{mcv3.crc8(bytes.fromhex('06 01 04 06 00')):02x} 45"),
    ],
)
def test_ok__mcv3_encode(frame, wire):
    assert frame.hex(" ") == wire


def _frame(body_hex: str) -> bytes:
    body = bytes.fromhex(body_hex)
    return b"S" + body + bytes((mcv3.crc8(body),)) + b"E"


@pytest.mark.parametrize(
    "wire, expected",
    [
        (_frame("09 01 01 41 60 00 27 02"), [mcv3.SdoData(1, 0x6041, 0, b"\x27\x02")]),
        (_frame("07 01 02 40 60 00"), [mcv3.SdoWriteAck(1, 0x6040, 0)]),
        (_frame("0b 01 03 99 99 00 00 00 02 06"), [mcv3.SdoAbort(1, 0x9999, 0, 0x06020000)]),
        (_frame("06 02 05 37 06"), [mcv3.StatusWordMessage(2, 0x0637)]),
        (_frame("06 01 07 10 23"), [mcv3.Emergency(1, b"\x10\x23")]),
        (_frame("04 01 00"), [mcv3.OtherFrame(1, 0, b"")]),
    ],
)
def test_ok__mcv3_decode(wire, expected):
    assert mcv3.McV3Decoder().feed(wire) == expected


def test_sdo_values_are_signed_per_object():
    assert mcv3.SdoData(1, mcv3.POSITION_ACTUAL, 0, b"\xff\xff\xff\xff").value() == -1
    assert mcv3.SdoData(1, mcv3.STATUSWORD, 0, b"\xff\xff").value() == 0xFFFF


def test_fail__mcv3_wrong_crc_is_a_crc_error_and_the_next_frame_decodes():
    good = _frame("07 01 02 40 60 00")
    bad = bytearray(good)
    bad[-2] ^= 0x01
    out = mcv3.McV3Decoder().feed(bytes(bad) + good)
    assert isinstance(out[0], Invalid) and out[0].crc
    assert out[1] == mcv3.SdoWriteAck(1, 0x6040, 0)


@pytest.mark.parametrize(
    "prefix, reason",
    [(b"\x00\x01", "bytes outside a frame"), (b"S\x02", "bad length 2"), (b"S\x07\x01\x01\x41\x60\x00\x73X",
                                                                          "no frame end")],
)
def test_fail__mcv3_garbage_truncation_and_bad_framing_resynchronise(prefix, reason):
    good = _frame("07 01 02 40 60 00")
    out = mcv3.McV3Decoder().feed(prefix + good)
    assert any(isinstance(m, Invalid) and m.reason == reason for m in out)
    assert out[-1] == mcv3.SdoWriteAck(1, 0x6040, 0)


def test_fail__mcv3_truncated_frame_waits_then_decodes_split_reads():
    good = _frame("09 01 01 41 60 00 27 02")
    d = mcv3.McV3Decoder()
    assert d.feed(good[:5]) == []
    assert d.feed(good[5:]) == [mcv3.SdoData(1, 0x6041, 0, b"\x27\x02")]


def test_fail__mcv3_random_bytes_never_raise_and_stay_bounded():
    rng = np.random.default_rng(5)
    d = mcv3.McV3Decoder()
    for _ in range(50):
        d.feed(bytes(rng.integers(0, 256, 1000, dtype=np.uint8)))
        assert len(d._buf) <= mcv3.MAX_LEN + 2
    d.feed(b"\x00" * 70)
    assert d.feed(_frame("07 01 02 40 60 00"))[-1] == mcv3.SdoWriteAck(1, 0x6040, 0)


@pytest.mark.parametrize("sw, state", [(0x0000, "NOT_READY"), (0x0040, "SWITCH_ON_DISABLED"), (0x0021, "READY"),
                                       (0x0023, "SWITCHED_ON"), (0x0027, "OPERATION_ENABLED"),
                                       (0x0427, "OPERATION_ENABLED"), (0x0007, "QUICK_STOP_ACTIVE"),
                                       (0x000F, "FAULT_REACTION"), (0x0008, "FAULT")])
def test_cia402_states_from_the_statusword(sw, state):
    assert mcv3.cia402_state(sw) is mcv3.Cia402State[state]
