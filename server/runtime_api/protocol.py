"""The runtime API's wire format: length-prefixed frames over a Unix stream socket.

One frame::

    u32 length (big-endian, the bytes that follow) | u16 header length | header | payload

The header is a UTF-8 JSON object; the payload is raw bytes (empty for most frames, the
snapshot JSON for snapshot notifications, so a snapshot is serialised once in the runtime
and forwarded to browsers without being parsed again). Message types (``header["type"]``):

* ``hello`` (runtime → client, first frame): ``{"protocol": "teleop-runtime", "version": 1,
  "pid", "robot": <description>}``. A client of another major version is answered with an
  ``error`` and closed.
* ``request`` (client → runtime): ``{"id": int, "method": str, "params": {...}}``;
  ``response`` (runtime → client): ``{"id", "result": {...}}`` or ``{"id", "error":
  {"code", "message", "status"}}``. Requests are answered in order.
* ``notify`` (client → runtime): a request that wants no answer (heartbeats).
* ``event`` / ``snapshot`` (runtime → subscribed client): ``{"type": "event", "data":
  <Event>}``; ``{"type": "snapshot", "seq"}`` with the snapshot JSON as payload.

A header is at most 64 KiB (its length is a u16). A request's ``params`` or a response's
``result`` that would make it longer travels as the payload instead (JSON), the header naming
it (``"payload": "params"``); the readers put it back, so every reader sees the same header
whichever way it came (issue 18: a 92 805-byte program request used to fail to encode, and a
reply over 64 KiB closed the connection). docs/runtime-api.md describes the methods. Frames are
capped at :data:`MAX_FRAME` bytes.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from typing import Any

import orjson

PROTOCOL = "teleop-runtime"
VERSION = 1
MAX_FRAME = 4 * 1024 * 1024
MAX_HEADER = 0xFFFF
_HEAD = struct.Struct(">IH")
#: the header field that may travel as the payload, by message type
SPILLABLE = {"request": "params", "notify": "params", "response": "result"}


class ProtocolError(Exception):
    """A frame that does not decode (wrong length, not JSON, too big)."""


class HeaderError(ProtocolError):
    """A frame whose length is right but whose header is not a JSON object: the stream is still in step,
    so the reader can answer it and go on."""


def dumps(obj: Any) -> bytes:
    """Compact JSON bytes; NaN/inf become null (JSON has no NaN); numpy values allowed."""
    return orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY)


def encode(header: dict[str, Any], payload: bytes = b"") -> bytes:
    """One frame. A header over 64 KiB moves its :data:`SPILLABLE` field to the payload; a frame over
    :data:`MAX_FRAME`, or a long header with nothing to move, raises :class:`ProtocolError` (nothing is
    written: the caller answers with an error).

    >>> big = {"type": "request", "id": 1, "method": "program", "params": {"t_s": list(range(20000))}}
    >>> frame = encode(big)
    >>> len(frame) > MAX_HEADER, FrameBuffer().feed(frame) == [(big, b"")]
    (True, True)
    """
    h = dumps(header)
    if len(h) > MAX_HEADER:
        key = SPILLABLE.get(header.get("type"))  # type: ignore[arg-type]
        if payload or key is None or key not in header:
            raise ProtocolError(f"header of {len(h)} bytes is over {MAX_HEADER}")
        payload = dumps(header[key])
        h = dumps({**{k: v for k, v in header.items() if k != key}, "payload": key})
    if 2 + len(h) + len(payload) > MAX_FRAME:
        raise ProtocolError(f"frame of {2 + len(h) + len(payload)} bytes is over the {MAX_FRAME}-byte limit")
    return _HEAD.pack(2 + len(h) + len(payload), len(h)) + h + payload


def _decode(body: bytes, hlen: int) -> tuple[dict[str, Any], bytes]:
    try:
        header = orjson.loads(body[:hlen])
    except orjson.JSONDecodeError as err:
        raise HeaderError(f"header is not JSON: {err}") from None
    if not isinstance(header, dict):
        raise HeaderError("header is not an object")
    payload = body[hlen:]
    key = header.pop("payload", None)
    if key is not None:
        if key not in SPILLABLE.values():
            raise HeaderError(f"payload names {key!r}, not one of {', '.join(sorted(set(SPILLABLE.values())))}")
        try:
            header[key] = orjson.loads(payload)
        except orjson.JSONDecodeError as err:
            raise HeaderError(f"payload ({key}) is not JSON: {err}") from None
        payload = b""
    return header, payload


def _check(total: int, hlen: int) -> None:
    if total > MAX_FRAME or total < 2 or hlen > total - 2:
        raise ProtocolError(f"bad frame: length {total}, header {hlen}")


async def read_frame(reader: asyncio.StreamReader) -> tuple[dict[str, Any], bytes]:
    """The next frame; ``asyncio.IncompleteReadError`` at end of stream."""
    total, hlen = _HEAD.unpack(await reader.readexactly(_HEAD.size))
    _check(total, hlen)
    return _decode(await reader.readexactly(total - 2), hlen)


class FrameBuffer:
    """Frames out of a byte stream fed in pieces (an ``asyncio.Protocol``'s ``data_received``): no task
    switch between the bytes arriving and the frame being handled.

    >>> fb = FrameBuffer()
    >>> data = encode({"type": "snapshot"}, b"{}") + encode({"type": "event"})
    >>> fb.feed(data[:5]), [h["type"] for h, _ in fb.feed(data[5:])]
    ([], ['snapshot', 'event'])
    """

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[tuple[dict[str, Any], bytes]]:
        """The frames completed by ``data``; raises :class:`ProtocolError` on a bad frame."""
        buf = self._buf
        buf += data
        frames = []
        start = 0
        while len(buf) - start >= _HEAD.size:
            total, hlen = _HEAD.unpack_from(buf, start)
            _check(total, hlen)
            end = start + 4 + total
            if len(buf) < end:
                break
            frames.append(_decode(bytes(buf[start + _HEAD.size:end]), hlen))
            start = end
        if start:
            del buf[:start]
        return frames


def read_frame_sync(sock: socket.socket) -> tuple[dict[str, Any], bytes]:
    """:func:`read_frame` for a blocking socket (the console); ``EOFError`` at end of stream."""
    total, hlen = _HEAD.unpack(_recv_exactly(sock, _HEAD.size))
    _check(total, hlen)
    return _decode(_recv_exactly(sock, total - 2), hlen)


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError("runtime closed the connection")
        buf += chunk
    return bytes(buf)


__all__ = ["FrameBuffer", "HeaderError", "MAX_FRAME", "MAX_HEADER", "PROTOCOL", "ProtocolError", "VERSION", "dumps",
           "encode", "read_frame", "read_frame_sync"]
