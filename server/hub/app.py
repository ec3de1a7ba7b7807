"""``python -m server hub --config hub.toml``: one place to see every robot of a fleet and drive any one of them
(issue 22; docs/fleet.md). Its own users, roles and sessions (the gateway's trust layer, its own ``[auth]``),
per-robot permissions (``[hub.robots.<id>]``), and the fleet over Zenoh (:mod:`server.hub.fleet`).

The hub decides nothing about safety: it relays. Every command it relays is signed with its key and carries its
user's name and role; the robot runs it through its own command path (validation, permission, its own lease,
rate limit, recording) and its own watchdog stops it when the hub's relayed heartbeats stop — a hub killed
mid-motion stops every robot it drove within that robot's ``command_timeout_s``.

Routes (docs/fleet.md, "Hub API"): ``GET /`` (the fleet page), ``GET /api/fleet``, ``GET /api/fleet/{id}``
(card, description, link), ``GET /api/fleet/{id}/state``, ``GET /api/fleet/{id}/events``, ``POST
/api/fleet/{id}/lease/{take|request|release|handover}``, ``POST /api/fleet/{id}/{command}`` (the robot's command
routes, ``/api/start`` → ``/api/fleet/{id}/start``), ``POST /api/fleet/{id}/estop`` (any signed-in user, any
robot), ``POST /api/fleet/stop_all`` (``{"confirm": true}``), ``GET /ws/fleet`` (cards as they change), ``GET
/ws/fleet/{id}`` (one robot's telemetry while open; commands as ``/ws/telemetry`` messages), ``/metrics``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import logging
import re
import sys
import time
from typing import Any, Callable

import jinja2
import orjson
from aiohttp import WSMsgType, web

from server.config import REPO_ROOT, ConfigError, HUB_TABLES, load_config, parse_overrides
from server.errors import ApiError, ValidationError
from server.procutil import say_line
from server.gateway.auth import AUTH_KEY, Principal, Role
from server.gateway.auth.errors import Forbidden
from server.gateway.auth.permissions import ADMIN, ESTOP, OPERATOR, PAGE, PUBLIC, STREAM, VIEWER, PermissionTable
from server.gateway.auth.setup import setup_auth
from server.gateway.commands import REGISTRY
from server.gateway.fleet.trust import Signer
from server.gateway.http import error_middleware, read_body
from server.hub.config import HubConfig
from server.hub.dashboard import add_dashboard_routes, dashboard_permissions
from server.hub.events import FILE_NAME, FleetEventLog
from server.hub.fleet import HubFleet
from server.validation import MAX_BODY_BYTES

log = logging.getLogger("teleop.hub")

FLEET = web.AppKey("hub_fleet", HubFleet)
HUB_CFG = web.AppKey("hub_cfg", HubConfig)
JINJA = web.AppKey("hub_jinja", jinja2.Environment)
WEB = REPO_ROOT / "web"
LEASE_ACTIONS = ("take", "request", "release", "handover")
ROBOT_ID = re.compile(r"^[A-Za-z0-9_-]{1,32}$")  # server.gateway.fleet.config.Name


def hub_permissions() -> PermissionTable:
    t = PermissionTable()
    for method, path, rule in (
            ("GET", "/", PAGE), ("GET", "/static", PUBLIC), ("GET", "/healthz", PUBLIC), ("GET", "/metrics", ADMIN),
            ("GET", "/api/fleet", VIEWER), ("GET", "/api/fleet/{id}", VIEWER),
            ("GET", "/api/fleet/{id}/state", VIEWER), ("GET", "/api/fleet/{id}/events", VIEWER),
            ("GET", "/api/fleet/{id}/preview.jpg", VIEWER), ("GET", "/api/fleet/{id}/events/files", VIEWER), ("GET", "/api/fleet/{id}/events/files/{name}", VIEWER),
            ("POST", "/api/fleet/{id}/lease/{action}", OPERATOR),
            ("POST", "/api/fleet/{id}/estop", ESTOP), ("POST", "/api/fleet/stop_all", ESTOP),
            # a robot's command: the command's role is checked by the handler (the registry's rule), its lease by
            # the robot
            ("POST", "/api/fleet/{id}/{command}", VIEWER),
            ("GET", "/ws/fleet", STREAM), ("GET", "/ws/fleet/{id}", STREAM)):
        t.route(method, path, rule)
    dashboard_permissions(t)
    return t


# ---------------------------------------------------------------------- who asks
def principal(request: web.Request) -> Principal:
    p = request.app[AUTH_KEY].principal(request)
    assert p is not None  # the middleware let only the authenticated through
    return p


def identity(p: Principal) -> dict[str, str]:
    """What the robot is told of the hub user (signed): name, role now, and the hub session."""
    return {"user": p.user, "role": p.role.value, "session": p.session_id or "local"}


def role_now(request: web.Request, p: Principal) -> Role:
    svc = request.app[AUTH_KEY]
    user = svc.users.get(p.user) if p.session is not None else None
    return user.role if user is not None else p.role


def check_robot(request: web.Request, robot: str, what: str) -> Principal:
    """The hub's own checks: the robot exists, and the user may ``view`` or ``drive`` it (403 ``forbidden``)."""
    fleet = request.app[FLEET]
    if robot not in fleet.robots:
        raise ApiError(f"no robot {robot!r} in fleet {fleet.cfg.fleet}", code="unknown_robot", status=404)
    p = principal(request)
    if what == "drive" and not role_now(request, p).at_least(Role.OPERATOR):
        raise Forbidden(f"driving needs the operator role; {p.user} is {role_now(request, p).value}")
    if not request.app[HUB_CFG].may(robot, p.user, what):  # type: ignore[arg-type]
        raise Forbidden(f"{p.user} may not {what} robot {robot} (the hub's [hub.robots.{robot}] {what})")
    return p


# ---------------------------------------------------------------------- routes
async def get_fleet(request: web.Request) -> web.Response:
    fleet, cfg, p = request.app[FLEET], request.app[HUB_CFG], principal(request)
    robots = [e.to_json() for rid, e in sorted(fleet.robots.items()) if cfg.may(rid, p.user, "view")]
    return web.json_response({"fleet": cfg.fleet, "robots": robots, "link": fleet.link.status()})


async def get_robot(request: web.Request) -> web.Response:
    rid = request.match_info["id"]
    check_robot(request, rid, "view")
    e = request.app[FLEET].robots[rid]
    return web.json_response({**e.to_json(), "description": e.description, "summary": e.summary})


async def get_state(request: web.Request) -> web.Response:
    rid = request.match_info["id"]
    p = check_robot(request, rid, "view")
    return web.json_response(await request.app[FLEET].rpc(rid, "state", **identity(p)))


async def get_events(request: web.Request) -> web.Response:
    rid = request.match_info["id"]
    check_robot(request, rid, "view")
    return web.json_response({"events": list(request.app[FLEET].robots[rid].events)})


async def get_preview(request: web.Request) -> web.Response:
    """``GET /api/fleet/{id}/preview.jpg``: the robot's camera at ≤ 2 fps, on demand (video is not carried over
    Zenoh). Every viewer of a robot shares one request to it per ``PREVIEW_INTERVAL_S`` (the hub's cache), and the
    robot itself gives one new frame per interval whoever asks."""
    rid = request.match_info["id"]
    p = check_robot(request, rid, "view")
    fleet = request.app[FLEET]
    if not fleet.robots[rid].online:
        raise ApiError(f"robot {rid} is offline", code="robot_offline", status=503)
    frame = await fleet.preview(rid, **identity(p))
    return web.Response(body=base64.b64decode(frame["jpeg"]), content_type="image/jpeg", headers={
        "Cache-Control": "no-store", "X-Frame-Seq": str(frame["seq"]), "X-Capture-Time": f"{frame['capture_t']:.6f}"})


def event_log_for(request: web.Request) -> tuple[str, FleetEventLog]:
    """The event log of the path's robot, for an admin or a user who may view that robot (a robot the hub has
    not seen since it started still has its files)."""
    rid, log_ = request.match_info["id"], request.app[FLEET].event_log
    if not ROBOT_ID.match(rid):  # the fleet's Name: no "..", no separators
        raise ValidationError(f"{rid!r} is not a robot id", code="bad_name")
    p = principal(request)
    if not role_now(request, p).at_least(Role.ADMIN) and not request.app[HUB_CFG].may(rid, p.user, "view"):
        raise Forbidden(f"{p.user} may not view robot {rid} (the hub's [hub.robots.{rid}] view)")
    if log_ is None:
        raise ApiError("the hub keeps no event files (events_dir is empty)", code="not_found", status=404)
    if rid not in request.app[FLEET].robots and not log_.robot_dir(rid).is_dir():
        raise ApiError(f"no robot {rid!r} in fleet {request.app[FLEET].cfg.fleet}", code="unknown_robot", status=404)
    return rid, log_


async def get_event_files(request: web.Request) -> web.Response:
    """``GET /api/fleet/{id}/events/files``: the robot's MCAP event files, one per UTC day, oldest first."""
    rid, log_ = event_log_for(request)
    return web.json_response({"robot": rid, "files": await asyncio.to_thread(log_.files, rid)})


async def get_event_file(request: web.Request) -> web.StreamResponse:
    """``GET /api/fleet/{id}/events/files/{name}``: one of them (the open one reads up to its last flush)."""
    rid, log_ = event_log_for(request)
    name = request.match_info["name"]
    if not FILE_NAME.match(name):
        raise ValidationError(f"{name!r} is not an event file's name (YYYY-MM-DD[.N].mcap)", code="bad_name")
    path = log_.robot_dir(rid) / name
    if not path.is_file():
        raise ApiError(f"robot {rid} has no event file {name}", code="not_found", status=404)
    return web.FileResponse(path, headers={"Content-Disposition": f'attachment; filename="{rid}-{name}"',
                                           "Content-Type": "application/octet-stream"})


async def post_lease(request: web.Request) -> web.Response:
    rid, action = request.match_info["id"], request.match_info["action"]
    if action not in LEASE_ACTIONS:
        raise ValidationError(f"unknown lease action {action!r}; known: {', '.join(LEASE_ACTIONS)}",
                              code="unknown_op")
    return web.json_response(await lease_action(request, rid, action))


async def lease_action(request: web.Request, rid: str, action: str) -> Any:
    """The robot's lease ``action`` for this hub user (operator + drive), its answer (the lease, ``you``)."""
    p = check_robot(request, rid, "drive")
    body = await read_body(request)
    extra = {k: body[k] for k in ("force", "accept") if k in body}
    return await request.app[FLEET].rpc(rid, "lease", action=action, **identity(p), **extra)


async def relay_command(request: web.Request, rid: str, name: str, body: Any, p: Principal, **relay: Any) -> Any:
    """``relay``: what the robot's command path gets beside the body (``stream``, ``rtt_s``: server/hub/dashboard.py)."""
    entry = REGISTRY.get(name)
    if entry is None:
        raise REGISTRY.unknown(name, None)
    if not entry.estop:
        check_robot(request, rid, "drive" if entry.rule.lease or entry.moves else "view")
        if entry.rule.role is not None and not role_now(request, p).at_least(entry.rule.role):
            raise Forbidden(f"{name} needs the {entry.rule.role.value} role; {p.user} is {role_now(request, p).value}")
    elif rid not in request.app[FLEET].robots:
        raise ApiError(f"no robot {rid!r}", code="unknown_robot", status=404)
    return await request.app[FLEET].rpc(rid, "command", name=name, body=body, **identity(p), **relay)


async def post_command(request: web.Request) -> web.Response:
    rid, name = request.match_info["id"], request.match_info["command"]
    body = await read_body(request)
    return web.json_response(await relay_command(request, rid, name, body, principal(request)))


async def post_estop(request: web.Request) -> web.Response:
    """Any signed-in hub user stops any robot (never refused by the hub; a robot that cannot be reached says so)."""
    rid = request.match_info["id"]
    try:
        body = await read_body(request)
    except ApiError:
        body = {}
    reason = body.get("reason") if isinstance(body.get("reason"), str) else "e-stop from the hub"
    return web.json_response(await relay_command(request, rid, "estop", {"reason": reason[:200]},
                                                 principal(request)))


async def stop_all(request: web.Request) -> web.Response:
    """``{"confirm": true}``: e-stop every online robot at once; each robot's outcome."""
    body = await read_body(request)
    if body.get("confirm") is not True:
        raise ValidationError('stop all needs {"confirm": true}', code="confirm_required")
    fleet, p = request.app[FLEET], principal(request)
    online = [rid for rid, e in fleet.robots.items() if e.online]

    async def one(rid: str) -> tuple[str, Any]:
        try:
            return rid, {"ok": True, **(await fleet.rpc(rid, "command", name="estop",
                                                        body={"reason": "stop all from the hub"}, **identity(p)))}
        except ApiError as err:
            return rid, {"ok": False, "error": err.to_json()}

    results = dict(await asyncio.gather(*(one(r) for r in online)))
    return web.json_response({"ok": all(r["ok"] for r in results.values()), "robots": results})


async def healthz(request: web.Request) -> web.Response:
    link = request.app[FLEET].link
    return web.json_response({"ok": link.connected, "router": link.connected}, status=200 if link.connected else 503)


async def metrics(request: web.Request) -> web.Response:
    fleet = request.app[FLEET]
    s = fleet.status()
    lines = [f"teleop_hub_{k} {int(v)}" for k, v in s.items() if isinstance(v, (int, bool)) and not isinstance(v, str)]
    for rid, e in sorted(fleet.robots.items()):
        lines.append(f'teleop_hub_robot_online{{robot="{rid}"}} {int(e.online)}')
        if e.summary_latency_s is not None:
            lines.append(f'teleop_hub_summary_latency_seconds{{robot="{rid}"}} {e.summary_latency_s:.6f}')
    return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")


async def index(request: web.Request) -> web.Response:
    return web.FileResponse(WEB / "templates" / "hub.html")


# ---------------------------------------------------------------------- websockets
class Outbox:
    """Latest wins per key: a slow browser skips summaries and snapshots, never queues them."""

    def __init__(self) -> None:
        self.pending: dict[Any, Any] = {}
        self.ready = asyncio.Event()

    def put(self, key: Any, message: Any) -> None:
        if len(self.pending) > 10000:
            self.pending.clear()
        self.pending[key] = message
        self.ready.set()

    async def pump(self, ws: web.WebSocketResponse, binary: bool = True) -> None:
        """Send what is pending: bytes as binary frames (``binary``) or as text (already JSON), the rest as JSON."""
        while not ws.closed:
            await self.ready.wait()
            self.ready.clear()
            batch, self.pending = self.pending, {}
            for msg in batch.values():
                if isinstance(msg, bytes):
                    await (ws.send_bytes(msg) if binary else ws.send_str(msg.decode()))
                else:
                    await ws.send_str(orjson.dumps(msg).decode())


async def keep_watching(fleet: HubFleet, rid: str, cfg: HubConfig, who: dict[str, str]) -> None:
    """Renew the robot's telemetry watch while a socket is open (the robot stops sending ``watch_s`` after the
    last renewal: a hub that goes away costs the robot nothing)."""
    while True:
        try:
            await fleet.rpc(rid, "watch", rate_hz=cfg.watch_hz, **who)
        except ApiError as err:
            log.debug("watch %s: %s", rid, err.message)
        await asyncio.sleep(2.0)


#: commands in flight per socket at most (a flood; the robot limits rates too)
MAX_PENDING = 64


def refuse_flood(pending: set[asyncio.Task], data: dict[str, Any], out: Outbox) -> bool:
    """True, with the refusal put on ``out``, when ``MAX_PENDING`` commands are in flight; never for an e-stop."""
    if len(pending) <= MAX_PENDING or data.get("type") == "estop":
        return False
    out.put(("error", time.monotonic()), {"type": "error", "id": data.get("id"), "error": {
        "code": "rate_limited", "message": "too many commands in flight"}})
    return True


def track_socket(request: web.Request, ws: web.WebSocketResponse, pump: asyncio.Task) -> None:
    """Close a robot socket with 4401 when its hub session ends (the auth layer's ``track_ws``: the dashboard's
    session.js goes to the login page), its writer stopped first: a frame interleaved with the close frame breaks
    the close."""
    async def close(code: int, message: bytes) -> None:
        pump.cancel()
        await asyncio.gather(pump, return_exceptions=True)
        await ws.close(code=code, message=message)

    request.app[AUTH_KEY].track_ws(request, ws, close)


async def end_socket(fleet: HubFleet, listen: Callable[..., None], tasks: set[asyncio.Task]) -> None:
    """A robot socket closed: stop listening, cancel its tasks (the watch is no longer renewed)."""
    fleet.listeners.remove(listen)
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def parse_message(text: str, out: Outbox) -> dict[str, Any] | None:
    """A socket message as ``{"type": str, ...}``, or None with the error put on ``out``."""
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError as err:
        out.put(("error", time.monotonic()), {"type": "error", "error": {"code": "malformed", "message": str(err)}})
        return None
    if not isinstance(data, dict) or not isinstance(data.get("type"), str):
        out.put(("error", time.monotonic()), {"type": "error", "error": {
            "code": "malformed", "message": 'a message is a JSON object with a "type"'}})
        return None
    return data


async def ws_fleet(request: web.Request) -> web.WebSocketResponse:
    """Every card as it changes: ``{"type": "robot", "data": card}`` and ``{"type": "event", "robot", "data"}``."""
    fleet, cfg, p = request.app[FLEET], request.app[HUB_CFG], principal(request)
    ws = web.WebSocketResponse(heartbeat=20.0, max_msg_size=MAX_BODY_BYTES)
    await ws.prepare(request)
    out = Outbox()
    seq = [0]

    def listen(kind: str, robot: str, data: Any) -> None:
        if not cfg.may(robot, p.user, "view") or kind == "telemetry":
            return
        if kind == "event":
            seq[0] += 1
            out.put(("event", seq[0]), {"type": "event", "robot": robot, "data": data})
        else:
            out.put(("robot", robot), {"type": "robot", "data": data})

    for rid, e in sorted(fleet.robots.items()):
        listen("summary", rid, e.to_json())
    fleet.listeners.append(listen)
    pump = asyncio.create_task(out.pump(ws))
    try:
        async for _ in ws:
            pass  # nothing to say to the hub over this socket
    finally:
        fleet.listeners.remove(listen)
        pump.cancel()
        await asyncio.gather(pump, return_exceptions=True)
    return ws


async def ws_robot(request: web.Request) -> web.WebSocketResponse:
    """One robot through the hub: its snapshots as it sends them (binary, the robot's own bytes, latest wins) while
    the socket is open (the hub renews its watch), and commands as ``/ws/telemetry`` messages (``{"type": "speed",
    "id", ...}`` → ``ack``/``error``; heartbeats one-way)."""
    rid = request.match_info["id"]
    p = check_robot(request, rid, "view")
    fleet, cfg = request.app[FLEET], request.app[HUB_CFG]
    ws = web.WebSocketResponse(heartbeat=20.0, max_msg_size=64 * 1024)
    await ws.prepare(request)
    out = Outbox()

    def listen(kind: str, robot: str, data: Any) -> None:
        if robot != rid:
            return
        if kind == "telemetry":
            out.put("telemetry", data)
        elif kind in ("summary", "online"):
            out.put("robot", {"type": "robot", "data": data})

    async def command(msg: dict[str, Any]) -> None:
        name, mid = msg.get("type"), msg.get("id")
        try:
            result = await relay_command(request, rid, str(name), msg, p)
            if name != "heartbeat":
                out.put(("ack", time.monotonic()), {"type": "ack", "id": mid, "command": name, "result": result})
        except ApiError as err:
            out.put(("error", time.monotonic()), {"type": "error", "id": mid, "command": name,
                                                  "error": err.to_json()})

    fleet.listeners.append(listen)
    pump = asyncio.create_task(out.pump(ws))
    track_socket(request, ws, pump)
    tasks = {pump, asyncio.create_task(keep_watching(fleet, rid, cfg, identity(p)))}
    pending: set[asyncio.Task] = set()
    try:
        async for msg in ws:
            if msg.type != WSMsgType.TEXT:
                continue
            data = parse_message(msg.data, out)
            if data is None:
                continue
            if refuse_flood(pending, data, out):
                continue
            t = asyncio.create_task(command(data))
            pending.add(t)
            t.add_done_callback(pending.discard)
    finally:
        await end_socket(fleet, listen, {*tasks, *pending})
    return ws


# ---------------------------------------------------------------------- the app
def create_hub_app(profile: Any, *, bound_host: str, **auth_options: Any) -> web.Application:
    cfg: HubConfig = profile.hub
    app = web.Application(middlewares=[error_middleware], client_max_size=MAX_BODY_BYTES)
    app[HUB_CFG] = cfg
    fleet = app[FLEET] = HubFleet(cfg, Signer.from_file(cfg.key_file))
    r = app.router
    r.add_get("/", index)
    r.add_static("/static/", WEB / "static", append_version=False)
    r.add_get("/healthz", healthz)
    r.add_get("/metrics", metrics)
    r.add_get("/api/fleet", get_fleet)
    r.add_post("/api/fleet/stop_all", stop_all)
    r.add_get("/api/fleet/{id}", get_robot)
    r.add_get("/api/fleet/{id}/state", get_state)
    r.add_get("/api/fleet/{id}/events", get_events)
    r.add_get("/api/fleet/{id}/preview.jpg", get_preview)
    r.add_get("/api/fleet/{id}/events/files", get_event_files)
    r.add_get("/api/fleet/{id}/events/files/{name}", get_event_file)
    r.add_post("/api/fleet/{id}/lease/{action}", post_lease)
    r.add_post("/api/fleet/{id}/estop", post_estop)
    r.add_post("/api/fleet/{id}/{command}", post_command)
    r.add_get("/ws/fleet", ws_fleet)
    r.add_get("/ws/fleet/{id}", ws_robot)
    add_dashboard_routes(app)
    app[JINJA] = jinja2.Environment(loader=jinja2.FileSystemLoader(str(WEB / "templates")), autoescape=True)
    svc = setup_auth(app, profile.auth, bound_host=bound_host, permissions=hub_permissions(), **auth_options)

    def session_ended(session: Any, reason: str) -> None:
        """A hub session ended (logout, expiry, revocation): every online robot ends its session for it, which
        frees the lease it held there (its watchdog has stopped the robot already if it was driving)."""
        if fleet.loop is None or not fleet.link.connected:
            return
        for rid, e in list(fleet.robots.items()):
            if e.online:
                fleet.spawn(fleet.rpc(rid, "session_end", user=session.user, role="viewer", session=session.id))

    svc.sessions.on_end.append(session_ended)

    async def fleet_ctx(app: web.Application):
        await fleet.start()
        yield
        await fleet.stop()

    app.cleanup_ctx.append(fleet_ctx)
    return app


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m server hub", description="the fleet's hub (docs/fleet.md)")
    p.add_argument("--config", required=True, help="the hub's TOML file: [hub], [auth], [server]")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--host")
    p.add_argument("--port", type=int)
    p.add_argument("--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    args = p.parse_args(argv)
    try:
        profile = load_config(args.config, overrides=parse_overrides(args.set), tables=HUB_TABLES)
        profile.hub.check_hub()
    except (ConfigError, ValueError) as err:
        print(f"teleop: hub configuration error: {err}", file=sys.stderr)
        return 2
    from server.gateway.observability import setup_logging
    from server.gateway.serve import run_served, serve_app

    setup_logging(profile.observability.log_format, args.log_level or profile.observability.log_level)
    host = args.host or profile.server.host

    async def serve() -> None:
        app = create_hub_app(profile, bound_host=host)
        await serve_app(app, profile, host=host, port=args.port,
                        announce=lambda url: say_line(f"teleop hub listening on {url}"))

    return run_served("hub", serve)


__all__ = ["create_hub_app", "hub_permissions", "main"]


if __name__ == "__main__":
    sys.exit(main())
