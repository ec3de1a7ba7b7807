"""FAULHABER MC V3.0 (MC 5004/5005/5010, MCS) binary RS232/USB protocol, sans-IO; CiA 402 objects.

Frame format (Communications Manual 7000.05052; FAULHABER's MCV30 Arduino library
and mc5005.py agree; hardware-protocols §2.2)::

    'S' LEN NODE CMD payload… CRC 'E'
    0x53                                 0x45
    LEN  = number of bytes from LEN through CRC (so LEN = 4 + len(payload))
    CRC8 over LEN…payload: init 0xFF; per byte: crc ^= b, then 8× (crc >> 1) ^ (0xD5 if crc & 1)
    CMD  0 boot, 1 SDO read, 2 SDO write, 3 SDO error, 4 controlword, 5 statusword, 6 logging, 7 EMCY
    SDO  payload = index (2 bytes LE), subindex, data (0–4 bytes LE)

Replies: an SDO read comes back as CMD 1 with the data, an SDO write as CMD 2
without data, a refused access as CMD 3 with a 4-byte abort code [verify];
the drive may send its statusword unprompted (CMD 5) and EMCY (CMD 7).

CiA 402 device control (statusword & 0x6F patterns, controlword values) is here
too, as pure functions, so the driver and its tests share one reading of it.
Both example frames of the notes (computed, not checked on hardware):

>>> encode_sdo_read(1, STATUSWORD).hex(" ")
'53 07 01 01 41 60 00 73 45'
>>> encode_sdo_write(1, CONTROLWORD, 0, 0x000F, 2).hex(" ")
'53 09 01 02 40 60 00 0f 00 25 45'
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from drivers.serial.codec import Invalid

SOF = 0x53  # 'S'
EOF = 0x45  # 'E'
MIN_LEN = 4
#: the longest frame this code accepts (SDO with 4 data bytes is 11; logging frames are longer)
MAX_LEN = 64


class Cmd(enum.IntEnum):
    BOOT = 0
    SDO_READ = 1
    SDO_WRITE = 2
    SDO_ERROR = 3
    CONTROLWORD = 4
    STATUSWORD = 5
    LOGGING = 6
    EMCY = 7


# CiA 402 objects (index, data size in bytes, signed)
CONTROLWORD = 0x6040
STATUSWORD = 0x6041
MODES_OF_OPERATION = 0x6060
MODES_OF_OPERATION_DISPLAY = 0x6061
POSITION_ACTUAL = 0x6064
VELOCITY_ACTUAL = 0x606C
TARGET_POSITION = 0x607A
PROFILE_VELOCITY = 0x6081
PROFILE_ACCELERATION = 0x6083
PROFILE_DECELERATION = 0x6084
TARGET_VELOCITY = 0x60FF
CURRENT_ACTUAL = 0x6078  # per mille of rated current
OBJECT_SIZES: dict[int, tuple[int, bool]] = {
    CONTROLWORD: (2, False), STATUSWORD: (2, False), MODES_OF_OPERATION: (1, True),
    MODES_OF_OPERATION_DISPLAY: (1, True), POSITION_ACTUAL: (4, True), VELOCITY_ACTUAL: (4, True),
    TARGET_POSITION: (4, True), PROFILE_VELOCITY: (4, False), PROFILE_ACCELERATION: (4, False),
    PROFILE_DECELERATION: (4, False), TARGET_VELOCITY: (4, True), CURRENT_ACTUAL: (2, True),
}

MODE_PROFILE_POSITION = 1
MODE_PROFILE_VELOCITY = 3

# controlword values (CiA 402 §8.4.1)
CW_SHUTDOWN = 0x0006
CW_SWITCH_ON = 0x0007
CW_ENABLE_OPERATION = 0x000F
CW_DISABLE_VOLTAGE = 0x0000
CW_QUICK_STOP = 0x0002
CW_FAULT_RESET = 0x0080
CW_NEW_SETPOINT = 0x0010  # bit 4: start a profile-position move
CW_SET_IMMEDIATELY = 0x0020  # bit 5
CW_RELATIVE = 0x0040  # bit 6
CW_HALT = 0x0100  # bit 8
SW_TARGET_REACHED = 0x0400
SW_FAULT = 0x0008


class Cia402State(enum.Enum):
    NOT_READY = "not ready to switch on"
    SWITCH_ON_DISABLED = "switch on disabled"
    READY = "ready to switch on"
    SWITCHED_ON = "switched on"
    OPERATION_ENABLED = "operation enabled"
    QUICK_STOP_ACTIVE = "quick stop active"
    FAULT_REACTION = "fault reaction active"
    FAULT = "fault"


def cia402_state(statusword: int) -> Cia402State:
    """The device-control state from a statusword (CiA 402 table 30).

    >>> cia402_state(0x0027), cia402_state(0x0040), cia402_state(0x0008)
    (<Cia402State.OPERATION_ENABLED: 'operation enabled'>, <Cia402State.SWITCH_ON_DISABLED: 'switch on disabled'>, <Cia402State.FAULT: 'fault'>)
    """
    for mask, value, state in _CIA402_STATES:
        if statusword & mask == value:
            return state
    return Cia402State.NOT_READY


#: CiA 402 table 30: (statusword mask, value under it, state), tried in order
_CIA402_STATES = (
    (0x4F, 0x00, Cia402State.NOT_READY),
    (0x4F, 0x40, Cia402State.SWITCH_ON_DISABLED),
    (0x6F, 0x21, Cia402State.READY),
    (0x6F, 0x23, Cia402State.SWITCHED_ON),
    (0x6F, 0x27, Cia402State.OPERATION_ENABLED),
    (0x6F, 0x07, Cia402State.QUICK_STOP_ACTIVE),
    (0x4F, 0x0F, Cia402State.FAULT_REACTION),
    (0x4F, 0x08, Cia402State.FAULT),
)


def crc8(data: bytes) -> int:
    """The MC V3.0 checksum (init 0xFF, reflected polynomial 0xD5).

    >>> hex(crc8(bytes.fromhex("07 01 01 41 60 00")))
    '0x73'
    """
    crc = 0xFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0xD5 if crc & 1 else crc >> 1
    return crc


def encode_frame(node: int, cmd: int, payload: bytes = b"") -> bytes:
    """``'S' LEN NODE CMD payload CRC 'E'``."""
    if not 0 <= node <= 127:
        raise ValueError(f"MC V3.0 node must be 0..127, got {node!r}")
    if len(payload) + MIN_LEN > MAX_LEN:
        raise ValueError("MC V3.0 payload too long")
    body = bytes((len(payload) + MIN_LEN, node, int(cmd))) + payload
    return bytes((SOF,)) + body + bytes((crc8(body), EOF))


def _index(index: int, sub: int) -> bytes:
    if not 0 <= index <= 0xFFFF or not 0 <= sub <= 0xFF:
        raise ValueError(f"bad object 0x{index:04X}.{sub}")
    return index.to_bytes(2, "little") + bytes((sub,))


def encode_sdo_read(node: int, index: int, sub: int = 0) -> bytes:
    return encode_frame(node, Cmd.SDO_READ, _index(index, sub))


def encode_sdo_write(node: int, index: int, sub: int, value: int, size: int | None = None) -> bytes:
    """Write ``value`` as ``size`` little-endian bytes (default: the object's size; signed allowed).

    >>> encode_sdo_write(1, MODES_OF_OPERATION, 0, MODE_PROFILE_VELOCITY).hex(" ")
    '53 08 01 02 60 60 00 03 a2 45'
    """
    if size is None:
        size = OBJECT_SIZES.get(index, (4, True))[0]
    if size not in (1, 2, 4):
        raise ValueError("SDO data size must be 1, 2 or 4 bytes")
    if not -(1 << (8 * size - 1)) <= value < (1 << (8 * size)):
        raise ValueError(f"value {value} does not fit {size} bytes")
    data = (value & ((1 << (8 * size)) - 1)).to_bytes(size, "little")
    return encode_frame(node, Cmd.SDO_WRITE, _index(index, sub) + data)


def encode_controlword(node: int, controlword: int) -> bytes:
    """The controlword service (CMD 4, two bytes); the driver writes 0x6040 by SDO instead."""
    return encode_frame(node, Cmd.CONTROLWORD, (controlword & 0xFFFF).to_bytes(2, "little"))


# ---------------------------------------------------------------- replies
@dataclass(frozen=True)
class SdoData:
    """An SDO read's answer."""

    node: int
    index: int
    sub: int
    data: bytes

    def value(self, signed: bool | None = None) -> int:
        if signed is None:
            signed = OBJECT_SIZES.get(self.index, (4, True))[1]
        return int.from_bytes(self.data, "little", signed=signed)


@dataclass(frozen=True)
class SdoWriteAck:
    node: int
    index: int
    sub: int


@dataclass(frozen=True)
class SdoAbort:
    node: int
    index: int
    sub: int
    code: int


@dataclass(frozen=True)
class StatusWordMessage:
    """The statusword sent unprompted (CMD 5)."""

    node: int
    statusword: int


@dataclass(frozen=True)
class Emergency:
    node: int
    data: bytes


@dataclass(frozen=True)
class OtherFrame:
    node: int
    cmd: int
    payload: bytes


def _message(node: int, cmd: int, payload: bytes) -> object:
    if cmd in (Cmd.SDO_READ, Cmd.SDO_WRITE, Cmd.SDO_ERROR):
        if len(payload) < 3:
            return Invalid(f"short SDO frame (cmd {cmd})", payload)
        index, sub, data = int.from_bytes(payload[:2], "little"), payload[2], payload[3:]
        if cmd == Cmd.SDO_READ:
            return SdoData(node, index, sub, data)
        if cmd == Cmd.SDO_WRITE:
            return SdoWriteAck(node, index, sub)
        return SdoAbort(node, index, sub, int.from_bytes(data[:4], "little"))
    if cmd == Cmd.STATUSWORD and len(payload) >= 2:
        return StatusWordMessage(node, int.from_bytes(payload[:2], "little"))
    if cmd == Cmd.EMCY:
        return Emergency(node, payload)
    return OtherFrame(node, cmd, payload)


class McV3Decoder:
    """Bytes → frames; resynchronises on the next ``'S'`` after a bad frame; never raises.

    >>> d = McV3Decoder()
    >>> d.feed(bytes.fromhex("00 53 0b 01 01 64 60 00 10 27 00 00"))  # noise, then a frame cut short
    [Invalid(reason='bytes outside a frame', data=b'\\x00', crc=False)]
    >>> d.feed(bytes((crc8(bytes.fromhex("0b 01 01 64 60 00 10 27 00 00")), 0x45)))
    [SdoData(node=1, index=24676, sub=0, data=b"\\x10'\\x00\\x00")]
    """

    def __init__(self) -> None:
        self._buf = bytearray()
        self._junk = bytearray()

    def feed(self, data: bytes) -> list[object]:
        out: list[object] = []
        self._buf.extend(data)
        buf = self._buf
        while buf:
            if buf[0] != SOF:
                cut = buf.find(SOF)
                cut = len(buf) if cut < 0 else cut
                self._junk.extend(buf[:cut])
                del buf[:cut]
                continue
            self._flush_junk(out)
            if len(buf) < 2:
                break
            length = buf[1]
            if not MIN_LEN <= length <= MAX_LEN:
                self._drop_sof(out, f"bad length {length}")
                continue
            total = length + 2  # 'S' + LEN..CRC + 'E'
            if len(buf) < total:
                break
            if buf[total - 1] != EOF:
                self._drop_sof(out, "no frame end")
                continue
            body = bytes(buf[1:total - 2])
            crc = buf[total - 2]
            if crc8(body) != crc:
                out.append(Invalid(f"CRC 0x{crc:02x}, expected 0x{crc8(body):02x}", bytes(buf[:total]), crc=True))
                del buf[:total]
                continue
            del buf[:total]
            out.append(_message(body[1], body[2], body[3:]))
        self._flush_junk(out)
        return out

    def _drop_sof(self, out: list[object], reason: str) -> None:
        self._flush_junk(out)
        out.append(Invalid(reason, bytes(self._buf[:MAX_LEN])))
        del self._buf[:1]

    def _flush_junk(self, out: list[object]) -> None:
        if self._junk:
            out.append(Invalid("bytes outside a frame", bytes(self._junk[:MAX_LEN])))
            self._junk.clear()


def reply_matcher(node: int, index: int, sub: int = 0):
    """A ``match`` predicate for the transport: the answer (or abort) to an SDO on this object."""
    def match(msg: object) -> bool:
        return (isinstance(msg, (SdoData, SdoWriteAck, SdoAbort))
                and msg.node == node and msg.index == index and msg.sub == sub)
    return match
