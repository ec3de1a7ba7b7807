"""One client cannot lock everyone out (issue 18, item 3): the connection guard on the real server.

The attack is the review's: slow-header sockets from the operator's own address (127.0.0.1),
re-opened as soon as the server closes them (``tests/server/attacks.py``, in its own process).
Meanwhile a logged-in operator's e-stop on a *new* connection latches and the robot stops, a new
login works, the operator's telemetry socket keeps its slot, the log holds no traceback and one
count line per ``connection_log_s``; the same attack in local mode; when the server is full, an
address, a network or a login session beyond its share gives way first; and a new connection is
refused (503 ``busy``) only when nothing may be evicted. Every request here opens a connection of its
own (``Fresh``): a kept-alive one would dodge the guard.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import threading
import time
from typing import Any

import pytest
from websockets.sync.client import connect

from tests.conftest import ServerProc, wait_until
from tests.server.attacks import Attacker
from tests.server.gateway.auth.client import PASSWORD, make_users

pytestmark = pytest.mark.timeout(240)

LIMIT_LINE = re.compile(r"connection limits: (\d+) refused, evicted (.*?) (?:\(first|in the last)")


class Fresh:
    """HTTP requests to ``srv``, each on a new TCP connection (optionally from a given loopback address)."""

    def __init__(self, srv: ServerProc, cookie: str | None = None, source: str | None = None) -> None:
        self.srv, self.cookie, self.source = srv, cookie, source

    def request(self, method: str, path: str, body: Any = None, csrf: str | None = None,
                timeout_s: float = 30.0) -> tuple[int, Any, http.client.HTTPResponse]:
        conn = http.client.HTTPConnection("127.0.0.1", self.srv.port, timeout=timeout_s,
                                          source_address=(self.source, 0) if self.source else None)
        headers = {"Connection": "close", "Origin": self.srv.url}
        if self.cookie:
            headers["Cookie"] = self.cookie
        if csrf:
            headers["X-CSRF-Token"] = csrf
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        try:
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
        finally:
            conn.close()
        return resp.status, json.loads(raw) if raw else None, resp

    def login(self, user: str) -> "Session":
        status, body, resp = self.request("POST", "/api/auth/login", {"username": user, "password": PASSWORD})
        assert status == 200, body
        cookie = resp.getheader("Set-Cookie").split(";", 1)[0]
        return Session(Fresh(self.srv, cookie, self.source), body["csrf_token"])


class Session:
    """A logged-in browser: its cookie, its CSRF token, a new connection per request."""

    def __init__(self, http: Fresh, csrf: str) -> None:
        self.http, self.csrf = http, csrf

    def get(self, path: str) -> tuple[int, Any]:
        # a GET whose new connection was evicted between its handshake and its first bytes (an attack's newer
        # connections in that moment, on a loaded machine; docs/security.md measured 1 in ~1,000) is asked again,
        # as a reader would reload: what these tests hold is that the operator is not locked out, and the e-stop
        # (a POST, never retried here) always latches
        try:
            status, body, _ = self.http.request("GET", path)
        except (http.client.RemoteDisconnected, ConnectionResetError):
            status, body, _ = self.http.request("GET", path)
        return status, body

    def post(self, path: str, body: Any = None) -> tuple[int, Any]:
        status, body, _ = self.http.request("POST", path, {} if body is None else body, csrf=self.csrf)
        return status, body


class Watcher(threading.Thread):
    """A dashboard's telemetry socket, read all the time in a thread: how many snapshots came, and when
    the last one did (wall clock). ``source``: the loopback address to connect from."""

    def __init__(self, srv: ServerProc, cookie: str | None = None, source: str | None = None) -> None:
        super().__init__(daemon=True)
        self.srv, self.cookie, self.source = srv, cookie, source
        self.snapshots = 0
        self.last_t = 0.0
        self.closed: BaseException | None = None
        self.ws: Any = None
        self.opened = threading.Event()
        self.start()
        assert self.opened.wait(30) and self.ws is not None, self.closed

    def run(self) -> None:
        try:
            sock = socket.socket()
            if self.source:
                sock.bind((self.source, 0))
            sock.connect(("127.0.0.1", self.srv.port))
            headers = {"Cookie": self.cookie} if self.cookie else {}
            with connect(self.srv.ws_url + "/ws/telemetry", sock=sock, origin=self.srv.url, additional_headers=headers,
                         proxy=None, compression=None) as ws:
                self.ws = ws
                self.opened.set()
                for message in ws:
                    if isinstance(message, str) and message.startswith('{"type":"telemetry"'):
                        self.snapshots += 1
                        self.last_t = time.time()
        except Exception as err:  # noqa: BLE001 - reported by the test through ``closed``
            self.closed = err
        else:
            self.closed = ConnectionError("closed")
        finally:
            self.opened.set()

    def fresh_snapshot(self, timeout_s: float = 20.0) -> None:
        """Wait for a snapshot that arrives after now (the socket is served, not only open)."""
        since = time.time()
        wait_until(lambda: self.closed is not None or self.last_t > since, timeout_s, "a new snapshot")
        assert self.closed is None, self.closed

    def close(self) -> None:
        if self.ws is not None:
            self.ws.close()
        self.join(10)


def limit_lines(srv: ServerProc) -> list[tuple[int, int]]:
    """(refused, evicted) of each of the guard's count lines in the log."""
    out = []
    for line in list(srv.output):
        m = LIMIT_LINE.search(line)
        if m:
            evicted = sum(int(n) for n in re.findall(r"(\d+) [a-z ]+", m.group(2)))
            out.append((int(m.group(1)), evicted))
    return out


def assert_quiet_log(srv: ServerProc, seconds: float, log_every_s: float) -> None:
    """No traceback; the refusals and evictions came as counts, at most one line per ``log_every_s``."""
    text = "".join(srv.output)
    assert "Traceback" not in text and "AssertionError" not in text, text[-3000:]
    lines = limit_lines(srv)
    assert lines, "the guard logged its counts"
    assert len(lines) <= seconds / log_every_s + 2, lines
    assert sum(e for _, e in lines) > 100 * len(lines), lines  # many evictions, few lines
    assert len(text) < 500_000


def moving(state: dict) -> bool:
    return abs(state["values"]["linear_m_s"]) > 0.02


def at_rest(state: dict) -> bool:
    return abs(state["values"]["linear_m_s"]) < 0.01


ATTACK_CFG = {"safety": {"command_timeout_s": 30}, "server": {"connection_log_s": 1.0}}


def test_a_slow_header_attack_does_not_lock_out_a_logged_in_operator(server_factory, tmp_path) -> None:
    users = make_users(tmp_path / "users.json", {"otto": "operator", "olga": "operator", "ada": "admin"})
    srv = server_factory({**ATTACK_CFG, "auth": {"users_file": str(users)}})
    anon = Fresh(srv)
    otto, ada = anon.login("otto"), anon.login("ada")
    assert otto.post("/api/lease/take")[0] == 200
    assert otto.post("/api/start")[1]["state"] == "running"
    assert otto.post("/api/speed", {"linear": 0.3, "angular": 0.0})[0] == 200
    wait_until(lambda: moving(otto.get("/api/state")[1]), 10, "the rover moving")

    dashboard = Watcher(srv, otto.http.cookie)  # the operator's dashboard, open before the attack
    t0 = time.monotonic()
    try:
        with Attacker("slow_headers", srv.port, sockets=300) as attack:
            attack.wait_connects(600)  # every socket opened, and again
            click_t = time.time()
            status, body = otto.post("/api/estop", {"reason": "during the attack"})
            assert status == 200 and body["state"] == "estop", body
            state = otto.get("/api/state")[1]
            assert state["state"] == "estop" and state["command"] == {"linear": 0.0, "angular": 0.0}
            wait_until(lambda: at_rest(otto.get("/api/state")[1]), 15, "the rover at rest")
            latched = [e for e in otto.get("/api/events?limit=1000")[1]["events"]
                       if e["trigger"] == "operator_estop" and e["wall_t"] >= click_t - 1]
            assert latched, "the e-stop is in the events"
            olga = anon.login("olga")  # a new login during the attack
            assert olga.get("/api/auth/me")[1]["user"] == "olga"
            stats = ada.get("/api/telemetry")[1]["connections"]
            assert stats["unauthenticated"] <= stats["max_connections"] - stats["reserved"]
            assert stats["evicted"]["fresh"] + stats["evicted"]["slow_headers"] > 100
            dashboard.fresh_snapshot()  # the dashboard kept its socket and is served
            wait_until(lambda: len(limit_lines(srv)) >= 3, 30, "the guard's count lines")
    finally:
        dashboard.close()
    assert_quiet_log(srv, time.monotonic() - t0, 1.0)


def test_a_slow_header_attack_in_local_mode_does_not_stop_the_estop(server_factory) -> None:
    """Local mode has no credentials to reserve for: what holds is that connections which have not
    completed their headers make room for a new one, and an e-stop completes its headers at once."""
    srv = server_factory(ATTACK_CFG)
    local = Fresh(srv)
    assert local.request("POST", "/api/start", {})[1]["state"] == "running"
    assert local.request("POST", "/api/speed", {"linear": 0.3, "angular": 0.0})[0] == 200
    wait_until(lambda: moving(local.request("GET", "/api/state")[1]), 10, "the rover moving")
    t0 = time.monotonic()
    with Attacker("slow_headers", srv.port, sockets=300) as attack:
        attack.wait_connects(600)  # every socket opened, and again
        for _ in range(5):  # each on a new connection
            status, body, _ = local.request("POST", "/api/estop", {})
            assert status == 200 and body["state"] == "estop", body
        wait_until(lambda: at_rest(local.request("GET", "/api/state")[1]), 15, "the rover at rest")
        assert local.request("GET", "/api/state")[1]["state"] == "estop"
        wait_until(lambda: len(limit_lines(srv)) >= 3, 30, "the guard's count lines")
    assert_quiet_log(srv, time.monotonic() - t0, 1.0)


# ---------------------------------------------------------------------- caps per address and per network
def silent(srv: ServerProc, source: str) -> socket.socket:
    """A connection from ``source`` that never sends a byte."""
    s = socket.socket()
    s.bind((source, 0))
    s.connect(("127.0.0.1", srv.port))
    return s


def closed_by_server(s: socket.socket, timeout_s: float = 20.0) -> bool:
    s.settimeout(timeout_s)
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def guard(srv: ServerProc) -> dict:
    status, body = srv.get("/api/telemetry")  # local mode: this machine is the admin
    assert status == 200, body
    return body["connections"]


def shares(max_connections: int) -> dict:
    return {"server": {"max_connections": max_connections, "max_connections_per_address": 4,
                       "max_connections_per_network": 8, "reserved_connections": 0, "request_timeout_s": 60.0}}


def test_when_full_an_address_beyond_its_share_gives_way_first(server_factory) -> None:
    """(``guard(srv)`` is a request of its own, from 127.0.0.1: it counts while it is served.)"""
    srv = server_factory(shares(12))
    socks: list[socket.socket] = []
    try:
        hog = [silent(srv, "127.0.0.2") for _ in range(10)]  # beyond its share of 4: allowed while there is room
        socks += hog
        wait_until(lambda: guard(srv)["busiest_addresses"].get("127.0.0.2") == 10, 10, "10 from 127.0.0.2")
        socks += [silent(srv, "127.0.0.3") for _ in range(2)]  # 12: full
        stats = guard(srv)  # one more: the hog's oldest gives way
        assert closed_by_server(hog[0])
        assert stats["connections"] == 12 and stats["busiest_addresses"]["127.0.0.3"] == 2
        socks.append(silent(srv, "127.0.1.1"))  # full again
        status, body, _ = Fresh(srv, source="127.0.0.3").request("GET", "/api/state")  # the hog's next oldest
        assert status == 200 and "state" in body
        assert closed_by_server(hog[1])
        stats = guard(srv)
        assert stats["busiest_addresses"] == {**stats["busiest_addresses"], "127.0.0.2": 8, "127.0.0.3": 2,
                                              "127.0.1.1": 1}
        assert stats["evicted"]["fresh"] + stats["evicted"]["slow_headers"] == 2
    finally:
        for s in socks:
            s.close()


def test_when_full_a_network_beyond_its_share_gives_way_first(server_factory) -> None:
    srv = server_factory(shares(12))
    socks: list[socket.socket] = []
    try:
        crowd = [silent(srv, f"127.0.0.{2 + i % 3}") for i in range(9)]  # 3 each: within the address share,
        socks += crowd                                                    # 9 in 127.0.0.0/24: beyond its 8
        wait_until(lambda: guard(srv)["busiest_networks"].get("127.0.0.0/24") == 10, 10, "9 (+ this) in the /24")
        socks += [silent(srv, "127.0.1.1") for _ in range(3)]  # 12: full
        stats = guard(srv)  # one more: the crowded network's oldest gives way
        assert closed_by_server(crowd[0])
        assert stats["busiest_networks"]["127.0.1.0/24"] == 3
    finally:
        for s in socks:
            s.close()


def test_with_nothing_to_evict_a_new_connection_gets_503_busy(server_factory) -> None:
    srv = server_factory(shares(5))
    held = [Watcher(srv, source="127.0.0.2") for _ in range(5)]  # served, authenticated (local mode): kept
    try:
        status, body, _ = Fresh(srv, source="127.0.0.3").request("GET", "/api/state")
        assert status == 503 and body["error"]["code"] == "busy", body
        for w in held:
            w.fresh_snapshot()
    finally:
        for w in held:
            w.close()
    wait_until(lambda: guard(srv)["refused"] == 1, 10, "the refusal counted")


def test_a_session_beyond_its_share_gives_way_to_an_operator_when_full(server_factory, tmp_path) -> None:
    """A logged-in client can hold connections busy (here: telemetry sockets); beyond its session's share they
    are what gives way when the server is full, so a viewer's session cannot lock an operator out either."""
    users = make_users(tmp_path / "users.json", {"vera": "viewer", "otto": "operator"})
    srv = server_factory({"auth": {"users_file": str(users)}, "safety": {"command_timeout_s": 30},
                          "server": {"max_connections": 12, "reserved_connections": 2,
                                     "max_connections_per_session": 4, "request_timeout_s": 60.0},
                          "telemetry": {"max_per_session": 20, "max_per_address": 20}})
    anon = Fresh(srv)
    vera, otto = anon.login("vera"), anon.login("otto")
    assert otto.post("/api/lease/take")[0] == 200 and otto.post("/api/start")[1]["state"] == "running"
    hog = [Watcher(srv, vera.http.cookie) for _ in range(12)]  # every connection the server has
    try:
        status, body = otto.post("/api/estop")
        assert status == 200 and body["state"] == "estop", body
        assert otto.get("/api/state")[1]["state"] == "estop"
        wait_until(lambda: sum(w.closed is not None for w in hog) >= 1, 10, "a socket of the hog closed")
    finally:
        for w in hog:
            w.close()
