"""What every sans-IO decoder shares: a ``feed(bytes) -> list`` method and :class:`Invalid`.

A decoder never raises on bad input: garbage, a truncated frame or a wrong CRC
come out as an :class:`Invalid` item in the message list, so the transport can
count them (``invalid_frames``, ``crc_errors``) and the decoder resynchronises
on the next frame start. Decoders keep bounded buffers, so a hostile stream
(megabytes without a frame end) costs bounded memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Invalid:
    """Bytes that did not decode; ``crc`` is true when only the checksum was wrong.

    >>> Invalid("no frame start", b"\\x00").crc
    False
    """

    reason: str
    data: bytes = b""
    crc: bool = False


class Decoder(Protocol):
    """Bytes in, messages out (including :class:`Invalid` items); never raises."""

    def feed(self, data: bytes) -> list[object]: ...
