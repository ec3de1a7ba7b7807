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

docs/runtime-api.md describes the methods. Frames are capped at :data:`MAX_FRAME` bytes.
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
_HEAD = struct.Struct(">IH")


class ProtocolError(Exception):
    """A frame that does not decode (wrong length, not JSON, too big)."""


def dumps(obj: Any) -> bytes:
    """Compact JSON bytes; NaN/inf become null (JSON has no NaN); numpy values allowed."""
    return orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY)


def encode(header: dict[str, Any], payload: bytes = b"") -> bytes:
    h = dumps(header)
    if len(h) > 0xFFFF:
        raise ProtocolError(f"header of {len(h)} bytes is over 65535")
    return _HEAD.pack(2 + len(h) + len(payload), len(h)) + h + payload


def _decode(body: bytes, hlen: int) -> tuple[dict[str, Any], bytes]:
    try:
        header = orjson.loads(body[:hlen])
    except orjson.JSONDecodeError as err:
        raise ProtocolError(f"header is not JSON: {err}") from None
    if not isinstance(header, dict):
        raise ProtocolError("header is not an object")
    return header, body[hlen:]


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


__all__ = ["FrameBuffer", "MAX_FRAME", "PROTOCOL", "ProtocolError", "VERSION", "dumps", "encode", "read_frame",
           "read_frame_sync"]
