"""The MAVLink codec with byte literals: what the driver puts on the wire, checked field by field against the
MAVLink 2 serialisation rules and an X.25 CRC computed here (not pymavlink's), and what it makes of bad bytes."""

from __future__ import annotations

import math
import struct

import pytest

from drivers.mavlink import codec as mc
from drivers.serial.codec import Invalid

#: CRC_EXTRA of the messages checked below (message_definitions/v1.0/common.xml, as mavgen computes it)
CRC_EXTRA = {0: 50, 76: 152, 84: 143}

HEARTBEAT = bytes.fromhex("fd 09 00 00 00 ff be 00 00 00 00 00 00 00 06 08 00 04 03 3d 48")
#: forward 0.5 m/s, NED yaw rate -0.25 rad/s (a left turn), time_boot_ms 1000, to 1/1, BODY_NED, mask 0x05E7
SETPOINT = bytes.fromhex(
    "fd 35 00 00 01 ff be 54 00 00 e8 03 00 00" + " 00" * 12 + " 00 00 00 3f" + " 00" * 24 + " 00 00 80 be"
    " e7 05 01 01 08 0c 4f")
#: MAV_CMD_DO_SET_MODE (176) with CUSTOM_MODE_ENABLED and ArduPilot Rover's HOLD (4)
HOLD = bytes.fromhex("fd 20 00 00 02 ff be 4c 00 00 00 00 80 3f 00 00 80 40" + " 00" * 20 + " b0 00 01 01 d2 06")


def x25(data: bytes) -> int:
    """CRC-16/MCRF4XX, MAVLink's checksum (mavlink/checksum.h: crc_accumulate)."""
    crc = 0xFFFF
    for b in data:
        tmp = b ^ (crc & 0xFF)
        tmp = (tmp ^ (tmp << 4)) & 0xFF
        crc = ((crc >> 8) ^ (tmp << 8) ^ (tmp << 3) ^ (tmp >> 4)) & 0xFFFF
    return crc


@pytest.mark.parametrize("frame", [HEARTBEAT, SETPOINT, HOLD])
def test_frames_carry_the_x25_crc_over_header_payload_and_crc_extra(frame: bytes) -> None:
    assert frame[0] == 0xFD and frame[1] == len(frame) - 12, "MAVLink 2, length = payload bytes"
    msgid = int.from_bytes(frame[7:10], "little")
    assert struct.unpack("<H", frame[-2:])[0] == x25(frame[1:-2] + bytes([CRC_EXTRA[msgid]]))


def test_the_driver_encodes_these_bytes_with_sequence_numbers_counting() -> None:
    c = mc.MavlinkCodec(255, 190)
    assert c.encode(mc.gcs_heartbeat(c)) == HEARTBEAT
    assert c.encode(mc.velocity_setpoint(c, 1, 1, 0.5, -0.25, time_boot_ms=1000)) == SETPOINT
    assert c.encode(mc.command_long(c, 1, 1, 176, *mc.ARDUPILOT.mode_params(4))) == HOLD
    assert [f[4] for f in (HEARTBEAT, SETPOINT, HOLD)] == [0, 1, 2]


def test_the_setpoint_payload_field_by_field() -> None:
    payload = SETPOINT[10:-2]
    boot, *floats = struct.unpack("<I11f", payload[:48])
    mask, target_sys, target_comp, frame = struct.unpack("<HBBB", payload[48:])
    assert boot == 1000 and floats[3] == 0.5 and floats[10] == -0.25 and not any(floats[:3] + floats[4:10])
    assert mask == mc.VELOCITY_YAW_RATE_MASK == 0b010111100111  # x y z vz ax ay az yaw ignored
    assert (target_sys, target_comp, frame) == (1, 1, 8)  # MAV_FRAME_BODY_NED


def test_decoding_splits_a_stream_and_never_raises() -> None:
    c = mc.MavlinkCodec(1, 1)
    out = c.feed(HEARTBEAT[:7]) + c.feed(HEARTBEAT[7:] + b"\x00junk" + SETPOINT)
    kinds = [m.get_type() if not isinstance(m, Invalid) else "invalid" for m in out]
    assert kinds[0] == "HEARTBEAT" and kinds[-1] == "SET_POSITION_TARGET_LOCAL_NED" and "invalid" in kinds
    hb = out[0]
    assert (hb.get_srcSystem(), hb.get_srcComponent(), hb.type, hb.autopilot) == (255, 190, 6, 8)


def test_fail__a_wrong_crc_is_an_invalid_crc_item() -> None:
    bad = bytearray(SETPOINT)
    bad[-1] ^= 0xFF
    out = mc.MavlinkCodec(1, 1).feed(bytes(bad))
    assert len(out) == 1 and isinstance(out[0], Invalid) and out[0].crc


def test_px4_modes_pack_main_and_sub_mode() -> None:
    assert mc.PX4.drive_mode == 6 << 16 and mc.PX4.hold_mode == (4 << 16) | (3 << 24)
    assert mc.PX4.mode_params(mc.PX4.hold_mode) == (1.0, 4.0, 3.0)  # DO_SET_MODE: custom flag, main, sub
    assert mc.PX4.mode_name(mc.PX4.drive_mode) == "OFFBOARD" and mc.ARDUPILOT.mode_name(15) == "GUIDED"
    assert mc.ARDUPILOT.mode_name(99) == "mode 99"


@pytest.mark.parametrize("north, east, yaw_ned, forward", [
    (1.0, 0.0, 0.0, 1.0), (0.0, 1.0, math.pi / 2, 1.0), (-1.0, 0.0, 0.0, -1.0), (1.0, 1.0, math.pi / 4, math.sqrt(2))])
def test_forward_speed_is_signed_along_the_heading(north, east, yaw_ned, forward) -> None:
    assert mc.forward_speed(north, east, yaw_ned) == pytest.approx(forward)


@pytest.mark.parametrize("yaw_enu", [0.0, 0.5, math.pi / 2, -2.0, 3.0])
def test_yaw_ned_enu_round_trip(yaw_enu: float) -> None:
    assert mc.yaw_enu_from_ned(mc.yaw_ned_from_enu(yaw_enu)) == pytest.approx(yaw_enu)
