"""FAULHABER ASCII (MCDC/MCBL 300x, 3564…B CS, 32xx/22xx…BX4), sans-IO.

Frame format (Communication and Function Manual; hardware-protocols §2.1)::

    host → drive   [node]COMMAND[argument] CR       e.g. b"1V500\\r", b"2POS\\r", b"EN\\r"
    drive → host   text CR LF                        e.g. b"98956\\r\\n", b"OK\\r\\n", b"p\\r\\n"

9600 baud 8N1 by default, XON/XOFF for fast sequences (ASCII never carries
0x11/0x13). Replies carry **no node number**, so on a line shared by several
drives the host waits for each answer before it sends the next command.

Answer modes (``ANSW``): 0 = commands unconfirmed, no async messages;
1 = async messages only; 2 = every command confirmed with ``OK``. Queries
(``POS``, ``GN``…) are always answered. Errors come back as text:
``Unknown command``, ``Invalid parameter``, ``Command not available``,
``Overtemperature – drive disabled``. Async messages are single letters:
``p`` (position reached, armed by ``NP``), ``v`` (velocity reached, ``NV``),
``r`` (error, [verify]).

Units: ``V``/``GN``/``SP`` rpm (signed), ``LA``/``LR``/``POS`` encoder
increments, ``AC``/``DEC`` rev/s² (EPICS driver), ``LCC``/``LPC``/``GRC`` mA.

>>> encode(1, "V", 500)
b'1V500\\r'
>>> AsciiDecoder().feed(b"98956\\r\\nOK\\r\\np\\r\\nUnknown command\\r\\n")
[Value(value=98956), Ok(), Event(kind='p'), ErrorReply(text='Unknown command')]
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from drivers.serial.codec import Invalid

CR = b"\r"
#: error texts a drive sends (the manual's list; matched case-insensitively)
ERROR_TEXTS = ("unknown command", "invalid parameter", "command not available", "overtemperature",
               "flash defect")
#: a reply line longer than this is garbage (the longest real one is ~35 characters)
MAX_LINE = 64
#: commands this code sends; a typo in a program fails here, not on the wire
COMMANDS = frozenset({
    "EN", "DI", "V", "LA", "LR", "M", "NP", "NV", "POS", "TPOS", "GN", "GV", "SP", "AC", "DEC",
    "GSP", "GAC", "GDEC", "LCC", "LPC", "GCC", "GPC", "GRC", "GCL", "HO", "ANSW", "GST", "OST",
    "GFS", "GAST", "VER", "TEM", "LL", "APL", "SAVE", "EEPSAV", "NET", "NODEADR", "BAUD", "GU",
})
_CMD_RE = re.compile(r"^[A-Z]{1,8}$")


@dataclass(frozen=True)
class Ok:
    """``OK``: a command was accepted (answer mode 2)."""


@dataclass(frozen=True)
class Value:
    """A query's answer (``POS`` → ``98956``)."""

    value: int


@dataclass(frozen=True)
class Text:
    """Any other reply line (``VER``'s version string)."""

    text: str


@dataclass(frozen=True)
class ErrorReply:
    """``Unknown command``, ``Invalid parameter``, …"""

    text: str


@dataclass(frozen=True)
class Event:
    """An asynchronous message: ``p`` (position reached), ``v`` (velocity reached), ``r`` (error)."""

    kind: str


def encode(node: int | None, command: str, argument: int | None = None) -> bytes:
    """``[node]COMMAND[argument]\\r``; ``node=None`` addresses every drive on the line.

    >>> encode(2, "LA", -20000), encode(None, "M"), encode(1, "pos")
    (b'2LA-20000\\r', b'M\\r', b'1POS\\r')
    >>> encode(1, "V", 1.5)
    Traceback (most recent call last):
    ...
    ValueError: FAULHABER argument must be an integer, got 1.5
    """
    cmd = command.upper()
    if cmd not in COMMANDS or not _CMD_RE.match(cmd):
        raise ValueError(f"unknown FAULHABER command {command!r}")
    if node is not None and (isinstance(node, bool) or not isinstance(node, int) or not 0 <= node <= 255):
        raise ValueError(f"FAULHABER node must be 0..255, got {node!r}")
    if argument is not None and (isinstance(argument, bool) or not isinstance(argument, int)):
        raise ValueError(f"FAULHABER argument must be an integer, got {argument!r}")
    if argument is not None and not -(2**31) <= argument < 2**31:
        raise ValueError(f"FAULHABER argument out of 32-bit range: {argument}")
    return f"{'' if node is None else node}{cmd}{'' if argument is None else argument}".encode("ascii") + CR


def classify(line: str) -> object:
    """One reply line (without CR LF) → message.

    >>> classify("OK"), classify("-12"), classify("Invalid parameter"), classify("v"), classify("2.50")
    (Ok(), Value(value=-12), ErrorReply(text='Invalid parameter'), Event(kind='v'), Text(text='2.50'))
    """
    s = line.strip()
    if s.upper() == "OK":
        return Ok()
    if s in ("p", "v", "r"):
        return Event(s)
    if re.fullmatch(r"[+-]?\d{1,11}", s):
        return Value(int(s))
    low = s.lower()
    if any(low.startswith(e) for e in ERROR_TEXTS):
        return ErrorReply(s)
    return Text(s)


class AsciiDecoder:
    """Reply bytes → messages, one per CR LF (a lone CR or LF also ends a line); never raises.

    Non-printable bytes make the line :class:`Invalid`; a line longer than
    :data:`MAX_LINE` is cut and reported, so garbage without line ends costs
    bounded memory.

    >>> d = AsciiDecoder()
    >>> d.feed(b"12"), d.feed(b"3\\r\\n")
    ([], [Value(value=123)])
    >>> d.feed(b"\\x00\\xff7\\r\\n")
    [Invalid(reason='non-ASCII reply', data=b'\\x00\\xff7', crc=False)]
    """

    def __init__(self) -> None:
        self._buf = bytearray()
        self._overflow = False

    def feed(self, data: bytes) -> list[object]:
        out: list[object] = []
        for b in data:
            if b in (0x0D, 0x0A):
                if self._overflow:
                    self._overflow = False
                elif self._buf:
                    out.append(self._line(bytes(self._buf)))
                self._buf.clear()
                continue
            if self._overflow:
                continue
            self._buf.append(b)
            if len(self._buf) > MAX_LINE:
                out.append(Invalid("reply line too long", bytes(self._buf[:MAX_LINE])))
                self._buf.clear()
                self._overflow = True
        return out

    @staticmethod
    def _line(raw: bytes) -> object:
        if any(b < 0x20 or b > 0x7E for b in raw if b not in (0x09,)):
            # the manual's "Overtemperature – drive disabled" has an en dash in some firmware: accept Latin-1 text
            text = raw.decode("latin-1")
            if text.lower().startswith("overtemperature"):
                return ErrorReply(text)
            return Invalid("non-ASCII reply", raw)
        return classify(raw.decode("ascii"))


def is_reply(msg: object) -> bool:
    """A message that answers a command or query (not an async event).

    >>> is_reply(Ok()), is_reply(Event("p"))
    (True, False)
    """
    return not isinstance(msg, Event)
