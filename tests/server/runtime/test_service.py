"""The runtime API server's request handler (server/runtime_api/service.py) with stand-in methods: every
exception a method raises is an error reply, never the connection's end (issue 18, item 1)."""

from __future__ import annotations

import logging

import pytest

from server.runtime_api import protocol
from server.errors import TracebackLimiter
from server.runtime.service import RuntimeService
from server.runtime_api.params import Empty


class Conn:
    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.topics: set[str] = set()

    def send(self, frame: bytes) -> None:
        self.frames.append(frame)


def service(fn, clock=lambda: 0.0) -> RuntimeService:
    svc = RuntimeService.__new__(RuntimeService)  # no robot: only the request path is under test
    svc.methods = {"m": (Empty, fn)}
    svc._internal = TracebackLimiter(logging.getLogger("test.service"), clock=clock)
    svc._publish = lambda: None
    svc.claims = {}
    return svc


def raises(exc: BaseException):
    def fn(p):
        raise exc
    return fn


@pytest.mark.parametrize("exc, code, status", [
    (OverflowError("cannot convert float infinity to integer"), "out_of_limits", 422),
    (ZeroDivisionError("float division by zero"), "out_of_limits", 422),
    (ValueError("bad"), "invalid", 422),
    (KeyError("k"), "invalid", 422),
    (RecursionError("maximum recursion depth exceeded"), "internal", 500),
    (MemoryError(), "internal", 500),
    (AssertionError("a bug"), "internal", 500),
    (RuntimeError("a bug"), "internal", 500),
])
def test_every_exception_is_an_error_reply(exc: BaseException, code: str, status: int) -> None:
    reply = service(raises(exc))._handle(Conn(), {"type": "request", "id": 3, "method": "m", "params": {}})
    assert reply["id"] == 3 and reply["error"]["code"] == code and reply["error"]["status"] == status, reply


def test_a_reply_that_cannot_be_encoded_is_answered_with_an_error() -> None:
    conn = Conn()
    svc = service(lambda p: {"n": 2 ** 70})
    svc._answer(conn, {"type": "request", "id": 9, "method": "m", "params": {}})
    [(header, _)] = protocol.FrameBuffer().feed(conn.frames[0])
    assert header["id"] == 9 and header["error"]["code"] == "internal", header


def test_a_reply_over_64_kib_travels_as_the_payload() -> None:
    conn = Conn()
    big = {"events": [{"message": "x" * 100} for _ in range(2000)]}
    service(lambda p: big)._answer(conn, {"type": "request", "id": 1, "method": "m", "params": {}})
    [(header, _)] = protocol.FrameBuffer().feed(conn.frames[0])
    assert header["result"] == big


def test_an_id_that_cannot_be_echoed_is_replaced() -> None:
    conn = Conn()
    service(lambda p: {"ok": True})._answer(conn, {"type": "request", "id": 2 ** 70, "method": "m", "params": {}})
    [(header, _)] = protocol.FrameBuffer().feed(conn.frames[0])
    assert header["id"] is None and header["result"] == {"ok": True}


def test_tracebacks_are_rate_limited(caplog) -> None:
    t = [0.0]
    svc = service(raises(AssertionError("again")), clock=lambda: t[0])
    with caplog.at_level(logging.ERROR, logger="test.service"):
        for _ in range(50):
            svc._handle(Conn(), {"type": "request", "id": 1, "method": "m", "params": {}})
        assert len([r for r in caplog.records if r.exc_info]) == 5
        t[0] = 61.0
        svc._handle(Conn(), {"type": "request", "id": 1, "method": "m", "params": {}})
    assert any("45 more failure(s)" in r.getMessage() for r in caplog.records)
    assert len([r for r in caplog.records if r.exc_info]) == 6
