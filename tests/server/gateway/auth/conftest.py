"""A stand-in gateway with the real trust layer, on a real socket, and a client that speaks to it.

The stand-in has handlers named like the real routes (``/api/start``, ``/api/speed``,
``/api/estop``, ``/ws/telemetry``, …) that record what they were asked to do in a
:class:`Robot`, so a test can prove that a refused request moved nothing. The
permission table is the real :func:`default_permissions`. Time is a :class:`FakeClock`
the test advances; passwords are hashed with cheap argon2 parameters (the production
cost is ~0.1 s a check, which the login tests would pay dozens of times).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from server.errors import ApiError
from server.gateway.auth import AUTH_KEY, AuthConfig, default_permissions, setup_auth
from server.gateway.commands import REGISTRY
from server.gateway.http import error_middleware
from tests.server.gateway.auth.client import (CHEAP_HASHER, FOREIGN_HOST, FOREIGN_ORIGIN, PASSWORD, USERS, Client,
                                              Creds, make_users)

__all__ = ["CHEAP_HASHER", "FOREIGN_HOST", "FOREIGN_ORIGIN", "PASSWORD", "USERS", "Creds", "Gateway", "make_users"]


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
    setup_auth(app, cfg, bound_host=bound_host, permissions=default_permissions(REGISTRY.permission_rows()), clock=clock,
               hasher=CHEAP_HASHER, housekeeping_s=housekeeping_s)
    return app


class Gateway(Client):
    """The running stand-in: its URL, service, robot and clock, and the request helpers."""

    def __init__(self, server: TestServer, http: aiohttp.ClientSession, clock: FakeClock) -> None:
        super().__init__(f"http://127.0.0.1:{server.port}", http)
        self.server = server
        self.clock = clock
        self.app = server.app
        self.svc = server.app[AUTH_KEY]
        self.robot = server.app[ROBOT_KEY]


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
