"""The delay line's control protocol: one JSON object per line on its stdin, one reply per line on its
stdout (msgspec tagged structs). The delay line answers every request in order, so the
:class:`~linkemu.link.Link` that owns it writes a request and reads one line back.

>>> encode(Blackout(duration_s=3.0))
b'{"op":"blackout","on":true,"duration_s":3.0,"direction":"both"}\\n'
>>> decode_request(b'{"op":"stats"}')
Stats()
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from linkemu.profiles import Profile

Which = Literal["both", "uplink", "downlink"]


class Configure(msgspec.Struct, tag_field="op", tag="configure", forbid_unknown_fields=True):
    """Take this profile's delay, jitter, bursts and blackout schedule (rate and random loss are
    the kernel's). ``seed`` seeds the jitter and burst draws (None: from the OS)."""

    profile: Profile
    seed: int | None = None


class Blackout(msgspec.Struct, tag_field="op", tag="blackout", forbid_unknown_fields=True):
    """Go dark (``on``) for ``duration_s`` (None: until told otherwise), or come back (not ``on``)."""

    on: bool = True
    duration_s: float | None = None
    direction: Which = "both"


class Stall(msgspec.Struct, tag_field="op", tag="stall", forbid_unknown_fields=True):
    """Hold every packet of ``direction`` for ``duration_s`` from now, then let them go in order (a
    link-layer stall: nothing is lost, everything arrives late)."""

    duration_s: float
    direction: Which = "both"


class Stats(msgspec.Struct, tag_field="op", tag="stats", forbid_unknown_fields=True):
    """Counters per direction."""


class Exit(msgspec.Struct, tag_field="op", tag="exit", forbid_unknown_fields=True):
    """Stop (the devices go with the process)."""


Request = Configure | Blackout | Stall | Stats | Exit


class Reply(msgspec.Struct, forbid_unknown_fields=True):
    ok: bool
    error: str | None = None
    data: dict[str, Any] | None = None


_encoder = msgspec.json.Encoder()
_request_decoder = msgspec.json.Decoder(Request)
_reply_decoder = msgspec.json.Decoder(Reply)


def encode(message: msgspec.Struct) -> bytes:
    return _encoder.encode(message) + b"\n"


def decode_request(line: bytes) -> Request:
    return _request_decoder.decode(line)


def decode_reply(line: bytes) -> Reply:
    return _reply_decoder.decode(line)
