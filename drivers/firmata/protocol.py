"""Firmata 2.x, sans-IO: messages → bytes (``encode_*``) and bytes → messages (:class:`FirmataDecoder`).

Frame format (firmata/protocol ``protocol.md`` 2.8; MIDI style)::

    bytes >= 0x80 are commands, data bytes are 0x00..0x7F (values go LSB7, MSB7)
    9p b0-6 b7         DIGITAL_MESSAGE, port p = pins 8p..8p+7
    En lsb msb         ANALOG_MESSAGE: board→host n = analog channel, host→board n = PWM/servo pin
    Cn 0|1 / Dp 0|1    REPORT_ANALOG channel n / REPORT_DIGITAL port p
    F4 pin mode        SET_PIN_MODE
    F5 pin 0|1         SET_DIGITAL_PIN_VALUE
    F9 maj min         REPORT_VERSION (query: F9 alone)
    FF                 SYSTEM_RESET (firmware state, not the chip)
    F0 id data… F7     sysex

There is no checksum: a decoder resynchronises on any byte >= 0x80, so a
stray or lost byte costs one message, never the stream. Sysex payloads are
bounded (:data:`MAX_SYSEX_BYTES`) so a stream without ``F7`` cannot grow a
buffer without limit.

FirmataExpress adds KEEP_ALIVE (sysex 0x50, period in whole seconds 0–10):
when no keep-alive arrives for the period, the board resets itself and every
output goes low (FirmataExpress.ino, ``keepAliveInterval * 1000``).

>>> encode_set_pin_mode(9, PinMode.PWM).hex(" ")
'f4 09 03'
>>> encode_analog_write(9, 128).hex(" ")
'e9 00 01'
>>> FirmataDecoder().feed(bytes.fromhex("e0 7f 07"))
[AnalogValue(channel=0, value=1023)]
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from drivers.serial.codec import Invalid

DIGITAL_MESSAGE = 0x90
ANALOG_MESSAGE = 0xE0
REPORT_ANALOG = 0xC0
REPORT_DIGITAL = 0xD0
START_SYSEX = 0xF0
SET_PIN_MODE = 0xF4
SET_DIGITAL_PIN_VALUE = 0xF5
END_SYSEX = 0xF7
REPORT_VERSION = 0xF9
SYSTEM_RESET = 0xFF

# sysex ids
KEEP_ALIVE = 0x50  # FirmataExpress
ANALOG_MAPPING_QUERY = 0x69
ANALOG_MAPPING_RESPONSE = 0x6A
CAPABILITY_QUERY = 0x6B
CAPABILITY_RESPONSE = 0x6C
PIN_STATE_QUERY = 0x6D
PIN_STATE_RESPONSE = 0x6E
EXTENDED_ANALOG = 0x6F
SERVO_CONFIG = 0x70
STRING_DATA = 0x71
REPORT_FIRMWARE = 0x79
SAMPLING_INTERVAL = 0x7A

#: StandardFirmata reads at most 64 data bytes per message; replies (capability) are longer
MAX_SYSEX_BYTES = 1024
#: SAMPLING_INTERVAL is 14 bits of milliseconds; StandardFirmata clamps to >= 1 ms (commit dd85219)
MIN_SAMPLING_INTERVAL_MS = 1
MAX_SAMPLING_INTERVAL_MS = 0x3FFF
#: FirmataExpress accepts 0 (off) .. 10 s
MAX_KEEP_ALIVE_S = 10


class PinMode(enum.IntEnum):
    INPUT = 0
    OUTPUT = 1
    ANALOG = 2
    PWM = 3
    SERVO = 4
    I2C = 6
    ENCODER = 9
    SERIAL = 0x0A
    PULLUP = 0x0B
    IGNORE = 0x7F


# ---------------------------------------------------------------- messages (board → host)
@dataclass(frozen=True)
class AnalogValue:
    channel: int
    value: int


@dataclass(frozen=True)
class DigitalPort:
    port: int
    mask: int  # bit i = pin 8*port + i


@dataclass(frozen=True)
class ProtocolVersion:
    major: int
    minor: int


@dataclass(frozen=True)
class FirmwareReport:
    major: int
    minor: int
    name: str


@dataclass(frozen=True)
class CapabilityResponse:
    #: per pin: mode → resolution in bits (an empty dict: the pin does nothing)
    pins: tuple[dict[int, int], ...]


@dataclass(frozen=True)
class AnalogMapping:
    #: per pin: its analog channel, or None
    channels: tuple[int | None, ...]


@dataclass(frozen=True)
class PinStateResponse:
    pin: int
    mode: int
    state: int


@dataclass(frozen=True)
class StringData:
    text: str


@dataclass(frozen=True)
class Sysex:
    """A sysex this codec does not interpret (kept, not an error: firmware may add its own)."""

    command: int
    data: bytes = field(default=b"")


# ---------------------------------------------------------------- encoding (host → board)
def _check(name: str, value: int, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ValueError(f"{name} must be an integer in [{lo}, {hi}], got {value!r}")
    return value


def _lsb_msb(value: int) -> bytes:
    return bytes((value & 0x7F, (value >> 7) & 0x7F))


def _sysex(command: int, payload: bytes = b"") -> bytes:
    return bytes((START_SYSEX, command)) + payload + bytes((END_SYSEX,))


def encode_report_version() -> bytes:
    """REPORT_VERSION query; the board answers ``F9 maj min``.

    >>> encode_report_version().hex()
    'f9'
    """
    return bytes((REPORT_VERSION,))


def encode_query_firmware() -> bytes:
    """REPORT_FIRMWARE query; the board answers with its version and sketch name.

    >>> encode_query_firmware().hex(" ")
    'f0 79 f7'
    """
    return _sysex(REPORT_FIRMWARE)


def encode_capability_query() -> bytes:
    return _sysex(CAPABILITY_QUERY)


def encode_analog_mapping_query() -> bytes:
    return _sysex(ANALOG_MAPPING_QUERY)


def encode_pin_state_query(pin: int) -> bytes:
    return _sysex(PIN_STATE_QUERY, bytes((_check("pin", pin, 0, 127),)))


def encode_system_reset() -> bytes:
    return bytes((SYSTEM_RESET,))


def encode_set_pin_mode(pin: int, mode: PinMode | int) -> bytes:
    """``F4 pin mode``; A1 of an Uno as analog input:

    >>> encode_set_pin_mode(15, PinMode.ANALOG).hex(" ")
    'f4 0f 02'
    """
    return bytes((SET_PIN_MODE, _check("pin", pin, 0, 127), _check("mode", int(mode), 0, 127)))


def encode_report_analog(channel: int, on: bool) -> bytes:
    """Turn reporting of analog channel ``channel`` on or off (since 2.4 on sends the value at once).

    >>> encode_report_analog(1, True).hex(" ")
    'c1 01'
    """
    return bytes((REPORT_ANALOG | _check("channel", channel, 0, 15), 1 if on else 0))


def encode_report_digital(port: int, on: bool) -> bytes:
    """Turn reporting of a digital port on or off (a port is sent when it changes).

    >>> encode_report_digital(0, True).hex(" ")
    'd0 01'
    """
    return bytes((REPORT_DIGITAL | _check("port", port, 0, 15), 1 if on else 0))


def encode_set_digital_pin(pin: int, high: bool) -> bytes:
    """Set one output pin high or low (protocol 2.5).

    >>> encode_set_digital_pin(13, True).hex(" ")
    'f5 0d 01'
    """
    return bytes((SET_DIGITAL_PIN_VALUE, _check("pin", pin, 0, 127), 1 if high else 0))


def encode_digital_port(port: int, mask: int) -> bytes:
    """Set a whole port; pin 13 high, pins 8–15 otherwise low:

    >>> encode_digital_port(1, 1 << 5).hex(" ")
    '91 20 00'
    """
    _check("mask", mask, 0, 0xFF)
    return bytes((DIGITAL_MESSAGE | _check("port", port, 0, 15), mask & 0x7F, (mask >> 7) & 0x01))


def encode_analog_write(pin: int, value: int) -> bytes:
    """PWM or servo value; EXTENDED_ANALOG for a pin > 15 or a value >= 2**14.

    >>> encode_analog_write(9, 1000).hex(" ")
    'e9 68 07'
    >>> encode_analog_write(20, 1000).hex(" ")
    'f0 6f 14 68 07 f7'
    """
    _check("pin", pin, 0, 127)
    _check("value", value, 0, (1 << 21) - 1)  # StandardFirmata decodes up to 21 bits
    if pin <= 15 and value < (1 << 14):
        return bytes((ANALOG_MESSAGE | pin,)) + _lsb_msb(value)
    payload = bytes((pin, value & 0x7F, (value >> 7) & 0x7F))
    if value >= (1 << 14):
        payload += bytes(((value >> 14) & 0x7F,))
    return _sysex(EXTENDED_ANALOG, payload)


def encode_servo_config(pin: int, min_pulse_us: int = 544, max_pulse_us: int = 2400) -> bytes:
    """Attach a servo with its pulse range (544–2400 µs is the Arduino default).

    >>> encode_servo_config(9).hex(" ")
    'f0 70 09 20 04 60 12 f7'
    """
    _check("min_pulse_us", min_pulse_us, 0, 0x3FFF)
    _check("max_pulse_us", max_pulse_us, min_pulse_us + 1, 0x3FFF)
    return _sysex(SERVO_CONFIG, bytes((_check("pin", pin, 0, 127),)) + _lsb_msb(min_pulse_us) + _lsb_msb(max_pulse_us))


def encode_sampling_interval(interval_ms: int) -> bytes:
    """The global analog sampling interval in ms (StandardFirmata default 19 ms).

    >>> encode_sampling_interval(10).hex(" "), encode_sampling_interval(1000).hex(" ")
    ('f0 7a 0a 00 f7', 'f0 7a 68 07 f7')
    """
    _check("interval_ms", interval_ms, MIN_SAMPLING_INTERVAL_MS, MAX_SAMPLING_INTERVAL_MS)
    return _sysex(SAMPLING_INTERVAL, _lsb_msb(interval_ms))


def encode_keep_alive(period_s: int) -> bytes:
    """FirmataExpress KEEP_ALIVE: the board resets when no keep-alive arrives for ``period_s`` (0 = off).

    >>> encode_keep_alive(1).hex(" ")
    'f0 50 01 00 f7'
    """
    return _sysex(KEEP_ALIVE, _lsb_msb(_check("period_s", period_s, 0, MAX_KEEP_ALIVE_S)))


def encode_string(text: str) -> bytes:
    """STRING_DATA: each character as LSB7, MSB7."""
    return _sysex(STRING_DATA, b"".join(_lsb_msb(ord(c) & 0x3FFF) for c in text))


def decode_two_byte_string(data: bytes) -> str:
    """LSB/MSB pairs → text (firmware names, STRING_DATA); an odd last byte is ignored.

    >>> decode_two_byte_string(bytes.fromhex("53 00 46 00"))
    'SF'
    """
    return "".join(chr(data[i] | (data[i + 1] << 7)) for i in range(0, len(data) - 1, 2))


# ---------------------------------------------------------------- decoding (board → host)
_CHANNEL_LEN = {DIGITAL_MESSAGE: 2, ANALOG_MESSAGE: 2, REPORT_ANALOG: 1, REPORT_DIGITAL: 1}
_SYSTEM_LEN = {REPORT_VERSION: 2, SET_PIN_MODE: 2, SET_DIGITAL_PIN_VALUE: 2, SYSTEM_RESET: 0}


class FirmataDecoder:
    """Bytes from a board → messages. Resynchronises on any command byte; never raises.

    >>> d = FirmataDecoder()
    >>> d.feed(bytes.fromhex("f9 02"))  # a message split across reads
    []
    >>> d.feed(bytes.fromhex("05 90 04 00"))
    [ProtocolVersion(major=2, minor=5), DigitalPort(port=0, mask=4)]
    >>> d.feed(bytes.fromhex("e0 7f f9 02 05"))  # a truncated analog message
    [Invalid(reason='truncated message 0xe0', data=b'\\xe0\\x7f', crc=False), ProtocolVersion(major=2, minor=5)]
    """

    def __init__(self) -> None:
        self._cmd: int | None = None  # command byte being collected
        self._buf = bytearray()
        self._need = 0
        self._sysex = False

    def feed(self, data: bytes) -> list[object]:
        out: list[object] = []
        for b in data:
            if b >= 0x80:
                if self._sysex and b == END_SYSEX:
                    out.append(self._decode_sysex(bytes(self._buf)))
                    self._reset()
                    continue
                if self._cmd is not None or self._sysex:
                    head = bytes((START_SYSEX,)) if self._sysex else bytes((self._cmd or 0,))
                    what = "sysex" if self._sysex else f"message 0x{self._cmd:02x}"
                    out.append(Invalid(f"truncated {what}", head + bytes(self._buf[:64])))
                    self._reset()
                self._start(b, out)
                continue
            if self._sysex:
                if len(self._buf) >= MAX_SYSEX_BYTES:
                    out.append(Invalid("sysex too long", bytes(self._buf[:64])))
                    self._reset()
                    continue
                self._buf.append(b)
            elif self._cmd is not None:
                self._buf.append(b)
                if len(self._buf) == self._need:
                    out.append(self._decode(self._cmd, bytes(self._buf)))
                    self._reset()
            else:
                out.append(Invalid("data byte outside a message", bytes((b,))))
        return out

    def _reset(self) -> None:
        self._cmd = None
        self._buf.clear()
        self._need = 0
        self._sysex = False

    def _start(self, b: int, out: list[object]) -> None:
        if b == START_SYSEX:
            self._sysex = True
            return
        if b == END_SYSEX:
            out.append(Invalid("END_SYSEX outside a sysex", bytes((b,))))
            return
        need = _CHANNEL_LEN.get(b & 0xF0) if b < 0xF0 else _SYSTEM_LEN.get(b)
        if need is None:
            out.append(Invalid(f"unknown command 0x{b:02x}", bytes((b,))))
            return
        if need == 0:
            out.append(self._decode(b, b""))
            return
        self._cmd, self._need = b, need

    @staticmethod
    def _decode(cmd: int, args: bytes) -> object:
        kind = cmd & 0xF0 if cmd < 0xF0 else cmd
        if kind == ANALOG_MESSAGE:
            return AnalogValue(cmd & 0x0F, args[0] | (args[1] << 7))
        if kind == DIGITAL_MESSAGE:
            return DigitalPort(cmd & 0x0F, args[0] | (args[1] << 7))
        if kind == REPORT_VERSION:
            return ProtocolVersion(args[0], args[1])
        # host→board commands a board never sends; decoded so an emulator can reuse nothing of this
        return Invalid(f"unexpected command 0x{cmd:02x} from the board", bytes((cmd,)) + args)

    @staticmethod
    def _decode_sysex(buf: bytes) -> object:
        if not buf:
            return Invalid("empty sysex", b"")
        cmd, data = buf[0], buf[1:]
        if cmd == REPORT_FIRMWARE:
            if len(data) < 2:
                return Invalid("short REPORT_FIRMWARE", buf)
            return FirmwareReport(data[0], data[1], decode_two_byte_string(data[2:]))
        if cmd == CAPABILITY_RESPONSE:
            pins: list[dict[int, int]] = []
            current: dict[int, int] = {}
            i = 0
            while i < len(data):
                if data[i] == 0x7F:
                    pins.append(current)
                    current = {}
                    i += 1
                elif i + 1 < len(data):
                    current[data[i]] = data[i + 1]
                    i += 2
                else:
                    return Invalid("truncated CAPABILITY_RESPONSE", buf[:64])
            return CapabilityResponse(tuple(pins))
        if cmd == ANALOG_MAPPING_RESPONSE:
            return AnalogMapping(tuple(None if c == 0x7F else c for c in data))
        if cmd == PIN_STATE_RESPONSE:
            if len(data) < 2:
                return Invalid("short PIN_STATE_RESPONSE", buf)
            state = 0
            for i, v in enumerate(data[2:]):
                state |= v << (7 * i)
            return PinStateResponse(data[0], data[1], state)
        if cmd == STRING_DATA:
            return StringData(decode_two_byte_string(data))
        return Sysex(cmd, bytes(data))
