"""A stand-in gateway with the real trust layer, on a real socket, and a client that speaks to it.

The stand-in has handlers named like the real routes (``/api/start``, ``/api/speed``,
``/api/estop``, ``/ws/telemetry``, …) that record what they were asked to do in a
:class:`Robot`, so a test can prove that a refused request moved nothing. The
permission table is the real :func:`default_permissions`. Time is a :class:`FakeClock`
the test advances; passwords are hashed with cheap argon2 parameters (the production
cost is ~0.1 s a check, which the login tests would pay dozens of times).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import argon2
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from server.gateway.auth import AUTH_KEY, AuthConfig, Role, default_permissions, setup_auth
from server.gateway.auth.users import UserStore
from server.errors import ApiError
from server.gateway.http import error_middleware

CHEAP_HASHER = argon2.PasswordHasher(time_cost=1, memory_cost=8, parallelism=1)
PASSWORD = "correct horse battery"
USERS = {"vera": Role.VIEWER, "otto": Role.OPERATOR, "olga": Role.OPERATOR, "ada": Role.ADMIN}
FOREIGN_ORIGIN = "http://evil.example"
FOREIGN_HOST = "attacker.rebind.example"


class FakeClock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, dt_s: float) -> None:
        self.t += dt_s


@dataclass
class Robot:
    """What the stand-in handlers were asked to do: (command, user) in order."""

    actions: list[tuple[str, str]] = field(default_factory=list)

    def record(self, command: str, request: web.Request) -> None:
        p = request.app[AUTH_KEY].principal(request)
        self.actions.append((command, p.user if p else "?"))


ROBOT_KEY = web.AppKey("robot", Robot)


def command_handler(name: str):
    async def handle(request: web.Request) -> web.Response:
        if name == "estop":
            await request.read()  # any body, any content type: the e-stop never refuses
        else:
            raw = await request.read()
            if raw.strip():
                json.loads(raw)
        request.app[ROBOT_KEY].record(name, request)
        return web.json_response({"ok": True, "state": "running"})

    return handle


async def get_state(request: web.Request) -> web.Response:
    return web.json_response({"state": "idle"})


async def put_acquisition(request: web.Request) -> web.Response:
    await request.json()
    request.app[ROBOT_KEY].record("acquisition", request)
    return web.json_response({"ok": True})


async def index(request: web.Request) -> web.Response:
    csrf = request.app[AUTH_KEY].csrf_token(request) or ""
    return web.Response(text=f'<!doctype html><meta name="csrf-token" content="{csrf}"><title>dashboard</title>'
                        '<p id="dashboard">dashboard</p>', content_type="text/html")


async def telemetry_ws(request: web.Request) -> web.WebSocketResponse:
    """Like the real socket: every message goes through authorize_ws before it runs."""
    svc = request.app[AUTH_KEY]
    ws = web.WebSocketResponse()
    await ws.prepare(request)
    svc.track_ws(request, ws)
    async for msg in ws:
        if msg.type != aiohttp.WSMsgType.TEXT:
            break
        body = json.loads(msg.data)
        kind = body.get("type")
        try:
            svc.authorize_ws(request, kind)
        except ApiError as err:
            await ws.send_json({"type": "error", "id": body.get("id"), "status": err.status, "error": err.to_json()})
            continue
        if kind != "ping":
            request.app[ROBOT_KEY].record(kind, request)
        await ws.send_json({"type": "ack", "id": body.get("id"), "command": kind})
    return ws


def build_app(cfg: AuthConfig, clock: FakeClock, bound_host: str = "127.0.0.1",
              extra_routes: tuple = (), housekeeping_s: float | None = None) -> web.Application:
    """The stand-in; no housekeeping task unless asked (tests advance the clock and sweep themselves)."""
    app = web.Application(middlewares=[error_middleware])
    app[ROBOT_KEY] = Robot()
    r = app.router
    r.add_get("/", index)
    r.add_get("/api/state", get_state)
    r.add_put("/api/acquisition", put_acquisition)
    for name in ("start", "stop", "estop", "reset", "heartbeat", "speed"):
        r.add_post(f"/api/{name}", command_handler(name))
    r.add_get("/ws/telemetry", telemetry_ws)
    r.add_static("/static/", Path(__file__).resolve().parents[4] / "web" / "static")
    for method, path, handler in extra_routes:
        r.add_route(method, path, handler)
    setup_auth(app, cfg, bound_host=bound_host, permissions=default_permissions(), clock=clock,
               hasher=CHEAP_HASHER, housekeeping_s=housekeeping_s)
    return app


def make_users(path: Path, users: dict[str, Role] | None = None) -> None:
    store = UserStore(path, hasher=CHEAP_HASHER)
    for name, role in (USERS if users is None else users).items():
        store.add(name, role, PASSWORD)


@dataclass
class Creds:
    cookie: str | None = None
    csrf: str | None = None
    token: str | None = None
    session: str | None = None

    def headers(self, csrf: bool = True) -> dict[str, str]:
        h = {}
        if self.cookie:
            h["Cookie"] = self.cookie
            if csrf and self.csrf:
                h["X-CSRF-Token"] = self.csrf
        if self.token:
            h["Authorization"] = f"Bearer {self.token}"
        return h


class Gateway:
    """The running stand-in: its URL, service, robot and clock, and request helpers."""

    def __init__(self, server: TestServer, http: aiohttp.ClientSession, clock: FakeClock) -> None:
        self.server = server
        self.http = http
        self.clock = clock
        self.app = server.app
        self.svc = server.app[AUTH_KEY]
        self.robot = server.app[ROBOT_KEY]

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.server.port}"

    def url(self, path: str) -> str:
        return f"{self.origin}{path}"

    async def request(self, method: str, path: str, creds: Creds | None = None, *, json_body: Any = None,
                      data: bytes | str | None = None, content_type: str | None = "application/json",
                      origin: str | None = "same", host: str | None = None, csrf: bool = True,
                      headers: dict[str, str] | None = None) -> tuple[int, Any, aiohttp.ClientResponse]:
        h = dict(creds.headers(csrf) if creds else {})
        if origin == "same":
            origin = self.origin if method != "GET" else None
        if origin:
            h["Origin"] = origin
        if host:
            h["Host"] = host
        body: bytes | None = None
        if json_body is not None:
            body = json.dumps(json_body).encode()
        elif data is not None:
            body = data.encode() if isinstance(data, str) else data
        if body is not None and content_type:
            h["Content-Type"] = content_type
        h.update(headers or {})
        async with self.http.request(method, self.url(path), data=body, headers=h, allow_redirects=False) as resp:
            raw = await resp.read()
            try:
                payload = json.loads(raw) if raw else None
            except ValueError:
                payload = raw.decode(errors="replace")
            return resp.status, payload, resp

    async def login(self, user: str, password: str = PASSWORD, bearer: bool = False,
                    headers: dict[str, str] | None = None, **body: Any) -> Creds:
        status, payload, resp = await self.request("POST", "/api/auth/login", headers=headers,
                                                   json_body={"username": user, "password": password,
                                                              "bearer": bearer, **body})
        assert status == 200, (status, payload)
        if bearer:
            return Creds(token=payload["token"], session=payload["session"])
        morsel = resp.cookies.get("teleop_session")
        assert morsel is not None, resp.headers
        return Creds(cookie=f"teleop_session={morsel.value}", csrf=payload["csrf_token"], session=payload["session"])

    async def ws(self, creds: Creds | None = None, origin: str | None = "same", host: str | None = None):
        """Open /ws/telemetry; returns the socket, or the refused upgrade's status as an int."""
        h = dict(creds.headers(csrf=False) if creds else {})
        if origin == "same":
            origin = self.origin
        if origin:
            h["Origin"] = origin
        if host:
            h["Host"] = host
        try:
            return await self.http.ws_connect(self.url("/ws/telemetry"), headers=h)
        except aiohttp.WSServerHandshakeError as err:
            return err.status

    @staticmethod
    async def ws_call(ws: aiohttp.ClientWebSocketResponse, msg_type: str, **fields: Any) -> dict:
        await ws.send_json({"type": msg_type, "id": 1, **fields})
        return await asyncio.wait_for(ws.receive_json(), 10)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def users_file(tmp_path: Path) -> Path:
    path = tmp_path / "users.json"
    make_users(path)
    return path


@pytest.fixture
async def start_gateway(tmp_path: Path, clock: FakeClock):
    """start_gateway(users_file=None | path, **auth_table) -> Gateway on 127.0.0.1:<ephemeral>."""
    running: list[tuple[TestServer, aiohttp.ClientSession]] = []

    async def start(users_file: Path | None = None, bound_host: str = "127.0.0.1", ssl=None,
                    extra_routes: tuple = (), housekeeping_s: float | None = None, **table: Any) -> Gateway:
        table.setdefault("users_file", str(users_file or tmp_path / "no-users.json"))
        cfg = AuthConfig.from_table(table)
        server = TestServer(build_app(cfg, clock, bound_host, extra_routes, housekeeping_s), host="127.0.0.1", port=0)
        await server.start_server(ssl=ssl)
        http = aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar())
        running.append((server, http))
        return Gateway(server, http, clock)

    yield start
    for server, http in running:
        await http.close()
        await server.close()
