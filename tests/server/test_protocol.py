"""The runtime API's frames (server/runtime_api/protocol.py) as bytes: a params or result too long for a header
travels as the payload and every reader puts it back; what no frame holds is refused before it is
written; a bad header is a recoverable error (issue 18, item 11)."""

from __future__ import annotations

import asyncio
import socket
import threading

import pytest

from server.runtime_api import protocol


def big(kind: str, key: str, n: int = 20_000) -> dict:
    return {"type": kind, "id": 7, key: {"t_s": [i * 0.123456789 for i in range(n)]}}


@pytest.mark.parametrize("kind, key", [("request", "params"), ("notify", "params"), ("response", "result")])
def test_ok__a_value_over_64_kib_travels_as_the_payload(kind: str, key: str) -> None:
    header = big(kind, key)
    frame = protocol.encode(header)
    hlen = int.from_bytes(frame[4:6], "big")
    assert hlen < 200 and len(frame) > protocol.MAX_HEADER  # a short header, the value after it
    assert protocol.FrameBuffer().feed(frame) == [(header, b"")]
    a, b = socket.socketpair()
    with a, b:
        sender = threading.Thread(target=a.sendall, args=(frame,))  # more than the socket buffer holds
        sender.start()
        assert protocol.read_frame_sync(b) == (header, b"")
        sender.join(30)

    async def read() -> tuple[dict, bytes]:
        reader = asyncio.StreamReader()
        reader.feed_data(frame)
        reader.feed_eof()
        return await protocol.read_frame(reader)

    assert asyncio.run(read()) == (header, b"")


def test_ok__small_frames_are_unchanged() -> None:
    header = {"type": "request", "id": 1, "method": "ping", "params": {"t": 1.0}}
    frame = protocol.encode(header)
    assert b'"params":{"t":1.0}' in frame and b'"payload"' not in frame


@pytest.mark.parametrize("header, payload", [
    ({"type": "event", "data": "x" * 70_000}, b""),  # no field that may move
    ({"type": "snapshot", "seq": 1, "pad": "x" * 70_000}, b"{}"),  # the payload is taken
    (big("request", "params", 300_000), b""),  # over the 4 MiB frame even as a payload
])
def test_fail__what_no_frame_holds_raises_before_anything_is_written(header: dict, payload: bytes) -> None:
    with pytest.raises(protocol.ProtocolError):
        protocol.encode(header, payload)


@pytest.mark.parametrize("header_bytes", [b"not json", b"[1, 2]", b'{"type": "request", "payload": "nope"}',
                                          b'{"type": "request", "payload": "params"}'])
def test_fail__a_bad_header_is_a_header_error_the_stream_survives(header_bytes: bytes) -> None:
    frame = protocol._HEAD.pack(2 + len(header_bytes) + 3, len(header_bytes)) + header_bytes + b"{x]"
    with pytest.raises(protocol.HeaderError):
        protocol.FrameBuffer().feed(frame)


def test_fail__a_bad_length_is_not_a_header_error() -> None:
    frame = protocol._HEAD.pack(protocol.MAX_FRAME + 1, 2) + b"{}"
    with pytest.raises(protocol.ProtocolError) as err:
        protocol.FrameBuffer().feed(frame)
    assert not isinstance(err.value, protocol.HeaderError)
