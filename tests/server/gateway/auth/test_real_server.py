"""The trust layer in the real teleop server (``python -m server``: launcher, runtime, gateway).

- issue 10's reproductions, each against a server in local mode (``make run`` with no set-up,
  the most exposed case): a foreign Origin's start, speed, heartbeat and reset; a text/plain
  speed; a cross-site websocket; Host rebinding; the UWB calibration as text/plain; framing
  headers; the Server header's version. Every one must now fail and change nothing;
- the bind refusal without users, and the start-up notice that says how to add users;
- login limits, session expiry, a password change that ends sessions (and closes sockets);
- the control lease: hand-over, refusal naming the holder, the holder's link drops (the robot
  stops, the lease frees), a change of driver while the robot runs (a controlled stop), and a
  gateway restart (everybody logs in again, nothing moves until a new start).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import aiohttp
import pytest

from tests.conftest import REPO, ServerProc, module_server, wait_until
from tests.server.gateway.auth.client import FOREIGN_HOST, FOREIGN_ORIGIN, PASSWORD, Client, Creds, make_users

TURN = {"linear": 0.0, "angular": 0.2}


@pytest.fixture
def auth_server(server_factory, tmp_path):
    """auth_server(users={name: role} | None, **auth) -> (ServerProc, users file)."""
    def start(users: dict[str, str] | None = None, safety: dict | None = None, **auth: Any):
        path = tmp_path / f"users-{len(list(tmp_path.glob('users-*.json')))}.json"
        if users:
            make_users(path, users)
        srv = server_factory({"auth": {"users_file": str(path), **auth},
                              "server": {"state_dir": str(tmp_path / "state")}, **({"safety": safety} if safety else {})})
        return srv, path
    return start


async def client_for(srv: ServerProc):
    http = aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar())
    return Client(srv.url, http), http


def events(srv: ServerProc, creds: dict[str, str] | None = None) -> list[dict]:
    status, body = srv.get("/api/events?limit=1000", headers=creds or {})
    assert status == 200, body
    return body["events"]


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


# ---------------------------------------------------------------------- issue 10's reproductions, local mode
@pytest.fixture(scope="module")
def shared_local(tmp_path_factory) -> Iterator[ServerProc]:
    """No users: local mode, one server for the module's refusal tests (each leaves the robot as it found it, or
    started or e-stopped, which :func:`local` undoes). A long link timeout, so a started robot stays running
    through a test."""
    srv = module_server(tmp_path_factory, {"safety": {"command_timeout_s": 30}, "video": {
        "enabled": True, "width": 160, "height": 120, "fps": 5, "render_process": False}})
    yield srv
    srv.kill()


@pytest.fixture
def local(shared_local: ServerProc) -> ServerProc:
    """The shared local-mode server, idle as a fresh one would be."""
    if shared_local.state()["state"] != "idle":
        shared_local.post("/api/estop", {"reason": "test: reset between tests"})
        wait_until(lambda: shared_local.post("/api/reset", {})[0] == 200 or shared_local.state()["state"] == "idle",
                   10, "the shared server idle again")
    assert shared_local.state()["state"] == "idle"
    return shared_local


@pytest.mark.parametrize("command, body, ctype", [
    ("start", None, None),                                   # no body at all
    ("start", b"x=1", "application/x-www-form-urlencoded"),  # a form post
    ("start", b"--b\r\nContent-Disposition: form-data; name=x\r\n\r\n1\r\n--b--\r\n", "multipart/form-data; boundary=b"),
    ("speed", json.dumps(TURN).encode(), "text/plain"),
    ("heartbeat", None, None),
])
def test_a_foreign_origin_cannot_command(local: ServerProc, command, body, ctype) -> None:
    if command in ("speed", "heartbeat"):
        assert local.post("/api/start", {})[0] == 200
    before = local.state()
    headers = {"Origin": FOREIGN_ORIGIN, **({"Content-Type": ctype} if ctype else {})}
    status, reply = local.request("POST", f"/api/{command}", raw=body if body is not None else b"", headers=headers)
    assert status == 403 and reply["error"]["code"] == "bad_origin", reply
    after = wait_until(lambda: (s := local.state())["seq"] > before["seq"] and s, 10, "a newer snapshot")
    assert after["state"] == before["state"] and after["setpoint"] == before["setpoint"]
    if command == "heartbeat":  # the link was not renewed: its age kept growing
        assert after["link"]["age_s"] > before["link"]["age_s"]


def test_a_foreign_origin_cannot_reset(local: ServerProc) -> None:
    assert local.post("/api/estop", {})[0] == 200
    status, reply = local.request("POST", "/api/reset", raw=b"", headers={"Origin": FOREIGN_ORIGIN})
    assert status == 403 and reply["error"]["code"] == "bad_origin"
    assert local.state()["state"] == "estop"


def test_a_text_plain_speed_is_refused_even_without_an_origin(local: ServerProc) -> None:
    assert local.post("/api/start", {})[0] == 200
    status, reply = local.request("POST", "/api/speed", raw=json.dumps(TURN).encode(),
                                  headers={"Content-Type": "text/plain"})
    assert status == 415 and reply["error"]["code"] == "unsupported_media_type"
    assert local.state()["setpoint"]["angular"] == 0.0


def test_cross_site_fetch_metadata_is_refused_without_an_origin(local: ServerProc) -> None:
    status, reply = local.request("POST", "/api/start", raw=b"", headers={"Sec-Fetch-Site": "cross-site"})
    assert status == 403 and reply["error"]["code"] == "bad_origin"
    assert local.state()["state"] == "idle"


def test_host_rebinding_is_refused(local: ServerProc) -> None:
    for method, path in (("POST", "/api/start"), ("GET", "/api/state"), ("GET", "/")):
        status, reply = local.request(method, path, raw=b"" if method == "POST" else None,
                                      headers={"Host": FOREIGN_HOST})
        assert status == 400 and reply["error"]["code"] == "bad_host", (path, reply)
    assert local.state()["state"] == "idle"
    assert local.request("GET", "/api/state", headers={"Host": "localhost"})[0] == 200  # a loopback name is fine


def test_uwb_calibration_as_text_plain_stores_nothing(local: ServerProc) -> None:
    body = json.dumps({"pairs": [[1.0, 5.0], [2.0, 6.0], [3.0, 7.0]], "degree": 1}).encode()
    status, reply = local.request("POST", "/api/calibration/uwb", raw=body, headers={"Content-Type": "text/plain"})
    assert status == 415, reply
    assert local.get("/api/calibration")[1]["uwb"] is None
    assert not list((local.config_path.parent / "state").glob("*calibration*"))


async def test_a_cross_site_websocket_is_refused(local: ServerProc) -> None:
    async with aiohttp.ClientSession() as http:
        for path in ("/ws/telemetry", "/ws/video"):
            with pytest.raises(aiohttp.WSServerHandshakeError) as err:
                await http.ws_connect(local.ws_url + path, headers={"Origin": FOREIGN_ORIGIN})
            assert err.value.status == 403, path
        status, reply = await asyncio.to_thread(local.request, "GET", "/video.mjpeg",
                                                headers={"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors"})
        assert status == 403 and reply["error"]["code"] == "bad_origin"  # an <img> on a foreign page
        async with http.ws_connect(local.ws_url + "/ws/telemetry", headers={"Origin": local.url}) as ws:
            reply = await Client.ws_call(ws, "ping", t=1.0)  # this origin's own page is welcome
            assert reply["type"] == "pong"
    assert local.state()["state"] == "idle"


@pytest.mark.parametrize("path", ["/", "/api/state", "/static/js/main.js", "/api/nothing-here"])
def test_framing_and_security_headers_on_every_response(local: ServerProc, path: str) -> None:
    import urllib.error
    import urllib.request

    try:
        resp = urllib.request.urlopen(local.url + path, timeout=10)
    except urllib.error.HTTPError as err:
        resp = err
    headers = resp.headers
    assert "frame-ancestors 'none'" in headers["Content-Security-Policy"]
    assert "script-src 'self'" in headers["Content-Security-Policy"]
    assert headers["X-Frame-Options"] == "DENY"
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert headers["Referrer-Policy"] == "no-referrer"
    assert headers["Server"] == "teleop"  # no aiohttp version
    assert "Access-Control-Allow-Origin" not in headers  # CORS stays off


def test_local_mode_serves_loopback_without_login_and_says_how_to_add_users(local: ServerProc) -> None:
    assert local.post("/api/start", {})[0] == 200
    status, me = local.get("/api/auth/me")
    assert status == 200 and me["local_mode"] and me["role"] == "admin" and me["csrf_token"] is None
    notice = "".join(local.output)
    assert "local mode" in notice and "python -m server users add" in notice


# ---------------------------------------------------------------------- bind refusal
def run_launcher(*args: str, timeout_s: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "server", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout_s, env=dict(os.environ, PYTHONUNBUFFERED="1"))


def test_binding_beyond_loopback_without_users_is_refused(tmp_path) -> None:
    out = run_launcher("--host", "0.0.0.0", "--port", "0", "--set", f'auth.users_file="{tmp_path / "none.json"}"')
    assert out.returncode == 2, out
    assert "refusing to listen on 0.0.0.0 with no user configured" in out.stderr
    assert "python -m server users add NAME --role admin" in out.stderr
    assert "teleop listening" not in out.stdout


def test_a_corrupt_users_file_stops_start_up(tmp_path) -> None:
    bad = tmp_path / "users.json"
    bad.write_text("{not json")
    out = run_launcher("--port", "0", "--set", f'auth.users_file="{bad}"')
    assert out.returncode == 2 and "users file" in out.stderr, out


def test_with_a_user_the_server_listens_beyond_loopback(tmp_path) -> None:
    users = make_users(tmp_path / "users.json", {"ada": "admin"})
    proc = subprocess.Popen([sys.executable, "-m", "server", "--host", "0.0.0.0", "--port", "0",
                             "--set", f'auth.users_file="{users}"', "--set", "video.enabled=false"],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    try:
        lines = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if "login required" in line:
                break
        text = "".join(lines)
        assert "teleop listening on http://0.0.0.0:" in text and "login required: 1 user(s)" in text, text
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)


def test_the_container_health_check_needs_no_login(auth_server) -> None:
    import re

    import yaml

    srv, _ = auth_server({"ada": "admin"})
    for text in ((REPO / "docker-compose.yml").read_text(), (REPO / "Dockerfile").read_text()):
        path = re.search(r"http://127\.0\.0\.1:8080(/[\w/.-]*)", text).group(1)
        assert srv.get(path)[0] == 200, path
    assert srv.get("/api/state")[0] == 401
    assert yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]["teleop"]["command"][-3] == "0.0.0.0"


async def test_tls_with_a_self_signed_certificate(tmp_path) -> None:
    users = make_users(tmp_path / "users.json", {"olga": "operator"})
    cert, key = tmp_path / "tls" / "cert.pem", tmp_path / "tls" / "key.pem"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "server", "--port", "0", "--set", f'auth.users_file="{users}"',
        "--set", f'auth.tls_cert="{cert}"', "--set", f'auth.tls_key="{key}"', "--set", "auth.tls_self_signed=true",
        "--set", "video.enabled=false", cwd=REPO, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        env=dict(os.environ, PYTHONUNBUFFERED="1"))
    try:
        async with asyncio.timeout(60):
            while b"teleop listening on https://" not in (line := await proc.stdout.readline()):
                assert line, "the server exited before it listened"
        url = line.decode().split()[-1]
        assert cert.exists() and oct(key.stat().st_mode & 0o777) == "0o600"
        async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as http:
            client = Client(url, http)
            async with http.get(url + "/login", ssl=False) as resp:
                assert resp.status == 200 and resp.headers["Strict-Transport-Security"].startswith("max-age=")
            async with http.post(url + "/api/auth/login", json={"username": "olga", "password": PASSWORD},
                                 headers={"Origin": client.origin}, ssl=False) as resp:
                assert resp.status == 200
                cookie = resp.headers["Set-Cookie"]
            assert cookie.startswith("__Host-teleop_session=") and "Secure" in cookie and "HttpOnly" in cookie
    finally:
        proc.send_signal(signal.SIGTERM)
        await proc.communicate()


# ---------------------------------------------------------------------- login, sessions
async def test_three_failed_logins_a_minute_then_429(auth_server) -> None:
    srv, _ = auth_server({"olga": "operator"})
    client, http = await client_for(srv)
    async with http:
        for _ in range(3):
            status, body, _ = await client.request("POST", "/api/auth/login",
                                                   json_body={"username": "olga", "password": "wrong password"})
            assert status == 401 and body["error"]["code"] == "invalid_credentials"
        status, body, resp = await client.request("POST", "/api/auth/login",
                                                  json_body={"username": "olga", "password": PASSWORD})
        assert status == 429 and body["error"]["code"] == "rate_limited" and int(resp.headers["Retry-After"]) > 0


async def closed(ws: aiohttp.ClientWebSocketResponse, timeout_s: float = 30) -> int | None:
    """Read (and ack every video frame, so no stall sweep closes a viewer) until the server closes; the code of its
    close frame (None: dropped without one). Read from the frame: aiohttp's client, replying to it on its own,
    reports 1006 in ``close_code`` when the server has dropped the connection by then (a race at load)."""
    async with asyncio.timeout(timeout_s):
        while True:
            msg = await ws.receive()
            if msg.type == aiohttp.WSMsgType.CLOSE:
                return msg.data
            if msg.type in (aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.CLOSING, aiohttp.WSMsgType.ERROR):
                return None
            if msg.type == aiohttp.WSMsgType.BINARY:
                n = int.from_bytes(msg.data[:4], "big")
                try:
                    await ws.send_json({"type": "ack", "seq": json.loads(msg.data[4:4 + n])["seq"]})
                except ConnectionError:  # the server has dropped the connection meanwhile
                    return None


async def test_a_session_ends_at_its_maximum_age_and_its_sockets_close(server_factory, tmp_path) -> None:
    users = make_users(tmp_path / "users-video.json", {"vera": "viewer"})
    srv = server_factory({"auth": {"users_file": str(users), "session_idle_s": 3, "session_max_s": 3},
                          "video": {"enabled": True, "width": 160, "height": 120, "fps": 5, "render_process": False}})
    client, http = await client_for(srv)
    async with http:
        vera = await client.login("vera")
        ws = await client.ws(vera)
        video = await client.ws(vera, path="/ws/video")
        assert not isinstance(ws, int) and not isinstance(video, int)
        assert await closed(ws) == 4401  # closed by the housekeeping sweep, with the code the page knows
        await closed(video)  # the video socket of the session is dropped too
        status, body, _ = await client.request("GET", "/api/state", vera)
        assert status == 401 and "expired" in body["error"]["message"]


async def test_an_idle_session_ends(auth_server) -> None:
    srv, _ = auth_server({"vera": "viewer"}, session_idle_s=2)
    client, http = await client_for(srv)
    async with http:
        vera = await client.login("vera")
        assert (await client.request("GET", "/api/state", vera))[0] == 200
        await asyncio.sleep(2.5)  # unused for longer than session_idle_s (the next request decides)
        assert (await client.request("GET", "/api/state", vera))[0] == 401


async def test_a_password_change_by_the_cli_ends_the_sessions_and_closes_the_sockets(auth_server) -> None:
    srv, users = auth_server({"olga": "operator", "vera": "viewer"}, users_poll_s=0.2)
    client, http = await client_for(srv)
    async with http:
        olga, vera = await client.login("olga"), await client.login("vera")
        assert (await client.request("POST", "/api/lease/take", olga, json_body={}))[0] == 200
        ws = await client.ws(olga)
        # read while the CLI runs (seconds on a loaded machine): a socket nobody reads fills aiohttp's queue,
        # the server's writer stalls and its sweep drops the connection (1006) before the session ends
        reader = asyncio.create_task(closed(ws, timeout_s=120))
        out = await asyncio.to_thread(
            subprocess.run, [sys.executable, "-m", "server", "users", "--file", str(users), "passwd", "olga",
                             "--password-stdin"], input="a brand new password\n", capture_output=True, text=True,
            cwd=REPO, timeout=60)
        assert out.returncode == 0, out.stderr
        assert await reader == 4401
        assert (await client.request("GET", "/api/state", olga))[0] == 401
        assert (await client.request("GET", "/api/state", vera))[0] == 200  # others keep theirs
        assert (await client.request("GET", "/api/lease", vera))[1]["holder"] is None  # the lease went with it
        await client.login("olga", password="a brand new password")


async def test_a_password_change_by_the_user_ends_the_sessions(auth_server) -> None:
    srv, _ = auth_server({"olga": "operator"})
    client, http = await client_for(srv)
    async with http:
        olga = await client.login("olga")
        other = await client.login("olga", bearer=True)
        status, body, _ = await client.request("POST", "/api/auth/password", olga,
                                               json_body={"current": PASSWORD, "new": "another good password"})
        assert status == 200 and body["relogin"]
        for creds in (olga, other):
            assert (await client.request("GET", "/api/state", creds))[0] == 401


# ---------------------------------------------------------------------- the control lease
async def take(client: Client, creds: Creds) -> dict:
    status, body, _ = await client.request("POST", "/api/lease/take", creds, json_body={})
    assert status == 200, body
    return body


async def test_non_holders_get_409_naming_the_holder_until_it_is_handed_over(auth_server) -> None:
    srv, _ = auth_server({"olga": "operator", "otto": "operator", "ada": "admin"})
    client, http = await client_for(srv)
    async with http:
        olga, otto, ada = await client.login("olga"), await client.login("otto"), await client.login("ada")
        await take(client, olga)
        for who in (otto, ada):  # an admin who does not hold the lease does not drive either
            status, body, _ = await client.request("POST", "/api/start", who, json_body={})
            assert status == 409 and body["error"]["code"] == "lease_held" and "olga" in body["error"]["message"]
            assert body["error"]["details"]["holder"]["user"] == "olga"
        ws = await client.ws(otto)
        reply = await Client.ws_call(ws, "start")
        assert reply["type"] == "error" and reply["error"]["code"] == "lease_held"
        assert srv.get("/api/state", headers={"Cookie": olga.cookie})[1]["state"] == "idle"
        status, body, _ = await client.request("POST", "/api/lease/request", otto, json_body={})
        assert status == 200 and body["you"] == "requester"
        status, body, _ = await client.request("POST", "/api/lease/handover", olga, json_body={"accept": True})
        assert status == 200 and body["holder"]["user"] == "otto"
        reply = await Client.ws_call(ws, "start")
        assert reply["type"] == "ack" and reply["state"] == "running"
        assert (await client.request("POST", "/api/speed", olga, json_body=TURN))[0] == 409
        await ws.close()


async def test_the_dashboard_gets_the_lease_as_its_own_message(auth_server) -> None:
    srv, _ = auth_server({"olga": "operator", "vera": "viewer"})
    client, http = await client_for(srv)
    async with http:
        olga, vera = await client.login("olga"), await client.login("vera")
        ws = await client.ws(vera)
        first = await lease_message(ws)
        assert first["holder"] is None and first["local_mode"] is False
        await take(client, olga)
        changed = await lease_message(ws)
        assert changed["holder"]["user"] == "olga" and changed["version"] > first["version"]
        status, body, _ = await client.request("GET", "/api/lease", vera)
        assert status == 200 and body["holder"]["user"] == "olga" and body["you"] is None
        await ws.close()


async def lease_message(ws: aiohttp.ClientWebSocketResponse) -> dict:
    async with asyncio.timeout(10):
        while True:
            msg = json.loads((await ws.receive()).data)
            if msg["type"] == "lease":
                return msg["data"]
            if msg["type"] == "telemetry":
                assert "lease" not in msg["data"]  # the snapshot is forwarded as the runtime made it


async def test_the_holders_link_drops_the_robot_stops_and_the_lease_frees(auth_server) -> None:
    srv, _ = auth_server({"olga": "operator", "otto": "operator"}, safety={"command_timeout_s": 0.5})
    client, http = await client_for(srv)
    async with http:
        olga, otto = await client.login("olga"), await client.login("otto")
        await take(client, olga)
        ws = await client.ws(olga)
        assert (await Client.ws_call(ws, "start"))["state"] == "running"
        assert (await Client.ws_call(ws, "speed", **TURN))["type"] == "ack"
        await ws.close()  # the operator's link drops: no more heartbeats from anyone who may send them
        watch = await client.ws(otto)
        async with asyncio.timeout(20):
            while (await lease_message(watch))["holder"] is not None:
                pass
        state = srv.get("/api/state", headers={"Cookie": otto.cookie})[1]
        assert state["state"] == "estop" and state["cause"]["trigger"] == "link_loss"
        assert (await take(client, otto))["holder"]["user"] == "otto"  # free for the next operator
        await watch.close()


async def test_a_forced_takeover_while_the_robot_runs_stops_it(auth_server) -> None:
    srv, _ = auth_server({"olga": "operator", "ada": "admin"}, safety={"command_timeout_s": 30})
    client, http = await client_for(srv)
    async with http:
        olga, ada = await client.login("olga"), await client.login("ada")
        await take(client, olga)
        assert (await client.request("POST", "/api/start", olga, json_body={}))[0] == 200
        assert (await client.request("POST", "/api/speed", olga, json_body=TURN))[0] == 200
        status, body, _ = await client.request("POST", "/api/lease/take", ada, json_body={"force": True})
        assert status == 200 and body["holder"]["user"] == "ada"
        headers = {"Cookie": ada.cookie}
        wait_until(lambda: srv.get("/api/state", headers=headers)[1]["state"] == "idle", 15,
                   "a controlled stop after the lease changed hands")
        stops = [e for e in events(srv, headers) if e["trigger"] == "stop"]
        assert stops and stops[-1]["state_before"] == "running"
        assert (await client.request("POST", "/api/speed", olga, json_body=TURN))[0] == 409


def gateway_pid(srv: ServerProc) -> int:
    launcher = srv.proc.pid
    children = []
    for task in Path(f"/proc/{launcher}/task").iterdir():
        children += (task / "children").read_text().split()
    for pid in children:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        if b"server.gateway" in cmdline:
            return int(pid)
    raise AssertionError(f"no gateway among the launcher's children {children}")


async def test_a_gateway_restart_logs_everybody_out_and_nothing_moves_until_a_new_start(auth_server) -> None:
    srv, _ = auth_server({"olga": "operator"}, safety={"command_timeout_s": 0.5})
    client, http = await client_for(srv)
    async with http:
        olga = await client.login("olga")
        await take(client, olga)
        ws = await client.ws(olga)
        assert (await Client.ws_call(ws, "start"))["state"] == "running"
        assert (await Client.ws_call(ws, "speed", **TURN))["type"] == "ack"

        async def heartbeats() -> None:  # the dashboard keeps the link alive until the gateway dies
            while True:
                await ws.send_json({"type": "heartbeat"})
                await asyncio.sleep(0.1)

        beating = asyncio.create_task(heartbeats())
        old = gateway_pid(srv)
        os.kill(old, signal.SIGKILL)  # the gateway dies mid-drive; the launcher starts a new one
        beating.cancel()
        wait_until(lambda: gateway_pid(srv) != old, 30, "a new gateway")
        async with asyncio.timeout(60):
            while True:
                try:
                    status, body, _ = await client.request("GET", "/api/state", olga)
                    break
                except aiohttp.ClientError:
                    await asyncio.sleep(0.1)
        assert status == 401 and body["error"]["code"] == "unauthenticated"  # sessions lived in the old gateway
        olga = await client.login("olga")
        lease = (await client.request("GET", "/api/lease", olga))[1]
        assert lease["holder"] is None  # so did the lease
        state = (await client.request("GET", "/api/state", olga))[1]
        assert state["state"] == "estop" and state["cause"]["trigger"] == "link_loss"
        assert state["setpoint"]["angular"] == 0.0
        await take(client, olga)
        status, body, _ = await client.request("POST", "/api/start", olga, json_body={})
        assert status == 409  # latched: a reset, then a new start
