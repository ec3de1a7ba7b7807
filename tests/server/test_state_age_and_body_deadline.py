"""Docs vs behaviour (issue 18, item 12), on the real server: a frozen runtime's state says how old it is,
and a big body gets as long as a slow link needs, while a trickled one does not.

Before: while the runtime was frozen (SIGSTOP), ``GET /api/state`` kept answering ``running`` with the same
``seq`` and nothing said it was old; a 3 MB, 100,000-point trajectory at 0.6 MB/s got 408 after the fixed
5 s body timeout.
"""

from __future__ import annotations

import os
import signal
import socket
import threading

import pytest

from tests.conftest import wait_until

pytestmark = pytest.mark.timeout(180)


def test_a_frozen_runtimes_state_is_marked_stale_with_its_age(server_factory) -> None:
    srv = server_factory({"safety": {"command_timeout_s": 60.0}})
    assert srv.post("/api/start")[0] == 200
    s = srv.state()
    assert s["state"] == "running" and s["snapshot_stale"] is False and s["age_s"] >= 0.0, s
    pid = srv.get("/api/telemetry")[1]["runtime"]["pid"]
    os.kill(pid, signal.SIGSTOP)
    try:
        first = wait_until(lambda: (st := srv.state())["snapshot_stale"] and st, 10, "the state marked stale")
        later = wait_until(lambda: (st := srv.state())["age_s"] > first["age_s"] and st, 10, "its age growing")
        assert first["state"] == later["state"] == "running"  # the last state known, said to be old
        assert later["seq"] == first["seq"]
    finally:
        os.kill(pid, signal.SIGCONT)
    wait_until(lambda: not srv.state()["snapshot_stale"], 20, "fresh snapshots again")
    assert srv.state()["seq"] > first["seq"]


def _csv(rows: int) -> bytes:
    return ("t_s,q1_rad,q2_rad\n" + "".join(f"{i * 0.01:.2f},0,1.5\n" for i in range(rows))).encode()


def _post_slowly(port: int, body: bytes, chunk: int, period_s: float, declared: int | None = None) -> tuple[bytes, int]:
    """POST /api/trajectory with ``body`` sent ``chunk`` bytes every ``period_s`` (a slow link); returns the
    response and how many body bytes had been sent when it came."""
    head = (f"POST /api/trajectory HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: text/csv\r\n"
            f"Content-Length: {declared or len(body)}\r\nConnection: close\r\n\r\n").encode()
    sent = 0
    answered = threading.Event()
    reply = b""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(head)

        def read() -> None:
            nonlocal reply
            sock.settimeout(120)
            try:
                while data := sock.recv(65536):
                    reply += data
                    answered.set()
            except OSError:
                pass
            answered.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        while sent < len(body) and not answered.is_set():
            try:
                sock.sendall(body[sent:sent + chunk])
            except OSError:
                break
            sent += min(chunk, len(body) - sent)
            answered.wait(period_s)  # the pace of a slow link, not a wait for a condition
        reader.join(120)
    return reply, sent


def test_a_slow_upload_that_keeps_the_minimum_rate_is_read_whole(server_factory) -> None:
    """Base 1 s, at least 20 kB/s: 210 kB at ~80 kB/s take ~2.6 s, past the base, and are served (a fixed
    1 s answered 408)."""
    srv = server_factory({"server": {"body_timeout_s": 1.0, "body_min_rate_bytes_s": 20_000.0},
                          "safety": {"command_timeout_s": 60.0}}, config="config/scara-sim.toml")
    assert srv.post("/api/start")[0] == 200
    body = _csv(17_000)
    assert len(body) > 200_000
    reply, sent = _post_slowly(srv.port, body, 8192, 0.1)
    assert reply.startswith(b"HTTP/1.1 200"), reply[:400]
    assert sent == len(body)
    assert srv.post("/api/estop")[0] == 200


def test_a_trickled_body_gets_408_whatever_length_it_declares(server_factory) -> None:
    """A slowloris body declaring 1 MB and sending 10 bytes every 0.2 s falls behind the rate at once after
    the base time: answered 408 long before the 1 + 1e6 / 20 000 = 51 s its declared length would allow."""
    srv = server_factory({"server": {"body_timeout_s": 1.0, "body_min_rate_bytes_s": 20_000.0}},
                         config="config/scara-sim.toml")
    reply, sent = _post_slowly(srv.port, b"t_s,q1_rad,q2_rad\n" + b"0" * 999_982, 10, 0.2, declared=1_000_000)
    assert reply.startswith(b"HTTP/1.1 408"), reply[:400]
    assert b'"timeout"' in reply
    assert sent < 10_000, sent
    assert srv.state()["state"] == "idle"  # the server carries on
