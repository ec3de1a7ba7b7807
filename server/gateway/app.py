"""The gateway's aiohttp application: HTTP API, telemetry websocket, dashboard, video.

The robot itself runs in the runtime process; this app talks to it through
:class:`~server.gateway.runtime_client.RuntimeClient`. Every body is validated here, at
the edge, with the same structs the runtime checks again. Snapshots arrive serialised and
are forwarded as they are. While the runtime is down, ``/api/state`` and the dashboard
show ``fault`` ("robot runtime down") and commands get 503 ``runtime_down``; the e-stop
is still answered 200 (there is nothing to move: the runtime halted on its way down, or
died with the outputs cut by the driver's own watchdog, see docs/safety.md).
"""

from __future__ import annotations

import asyncio
import logging
import math
import socket
import time
from typing import Any

import jinja2
from aiohttp import WSCloseCode, WSMsgType, web

from server import commands
from server.config import REPO_ROOT, Profile
from server.errors import ApiError, MalformedError, RuntimeDownError, ValidationError
from server.gateway.arms import arm_command, commands_for, setup_arms, zero_speed
from server.gateway.auth.wiring import csrf_token, setup_trust
from server.gateway.connections import ConnectionGuard
from server.gateway.hooks import HOOKS, Hooks, record_command
from server.gateway.http import BODY_TIMEOUT, error_middleware, json_response, read_body, read_raw_body
from server.gateway.navigation import setup_navigation
from server.gateway.observability.setup import setup_observability
from server.gateway.ratelimit import BucketRegistry
from server.gateway.recording.setup import EVENT_LOG, setup_recording
from server.gateway.robot_svg import robot_svg
from server.gateway.runtime_client import DOWN_MESSAGE, RuntimeClient
from server.gateway.telemetry import TelemetryClient, TelemetryHub, dumps
from server.gateway.video import VIDEO_KEY, VideoService, camera_factory, setup_video
from server.gateway.vision.routes import setup_vision
from server.protocol import dumps as dumps_bytes
from server.runtime_api import ARM_COMMANDS, AcquisitionParams
from server.validation import MAX_BODY_BYTES, convert, number, parse_object, reject_unknown

log = logging.getLogger(__name__)

WEB_DIR = REPO_ROOT / "web"

PROFILE = web.AppKey("profile", Profile)
RUNTIME = web.AppKey("runtime", RuntimeClient)
HUB = web.AppKey("telemetry_hub", TelemetryHub)
JINJA = web.AppKey("jinja", jinja2.Environment)
BUCKETS = web.AppKey("command_buckets", BucketRegistry)
GUARD = web.AppKey("connection_guard", ConnectionGuard)
#: websocket commands a feature adds to /ws/telemetry: type → ``await handler(body, source)`` → the runtime's result
WS_COMMANDS = web.AppKey("ws_commands", dict)


# ---------------------------------------------------------------------- description and state
def robot_description(app: web.Application) -> dict[str, Any] | None:
    """``GET /api/robot``: the runtime's description plus the gateway's own settings."""
    desc = app[RUNTIME].description
    if desc is None:
        return None
    video = app[PROFILE].video
    return {**desc, "video": {"enabled": video.enabled, "source": video.source, "width": video.width,
                              "height": video.height, "fps": video.fps}}


def current_snapshot(app: web.Application) -> dict[str, Any]:
    """The newest snapshot; while the runtime is down, the last one turned into a ``fault``."""
    rt = app[RUNTIME]
    snap = rt.latest_snapshot()
    if rt.connected or rt.shutting_down and snap:
        return snap
    return down_snapshot(rt, snap)


def down_snapshot(rt: RuntimeClient, last: dict[str, Any]) -> dict[str, Any]:
    since = rt.down_since if rt.down_since is not None else time.monotonic()
    values = last.get("values") or {}
    return {
        **last,
        "seq": last.get("seq", 0),
        "t": time.time(),
        "state": "fault",
        "cause": {"trigger": "runtime_down", "message": DOWN_MESSAGE, "t": since, "category": 0,
                  "values": {"down_s": round(time.monotonic() - since, 3)}, "rule": None},
        "setpoint": {k: (0.0 if isinstance(v, (int, float)) else None) for k, v in (last.get("setpoint") or {}).items()},
        "command": {k: 0.0 for k in (last.get("command") or {})},
        "stale": sorted(values),
        "behavior": None,
        "runtime": {"up": False, "down_s": round(time.monotonic() - since, 3)},
    }


def state_text(app: web.Application) -> bytes:
    rt = app[RUNTIME]
    if (rt.connected or rt.shutting_down) and rt.latest is not None:
        return rt.latest
    return dumps_bytes(current_snapshot(app))


# ---------------------------------------------------------------------- commands
async def run_command(app: web.Application, name: str, body: dict[str, Any], source: str,
                      envelope: tuple[str, ...] = ()) -> dict[str, Any]:
    """Validate at the edge, then ask the runtime (which checks again). Returns its result. The motion
    commands are the robot's profile's own (:mod:`server.gateway.arms`)."""
    rt = app[RUNTIME]
    if name in ("start", "stop", "reset", "heartbeat"):
        commands.parse_bare(body, envelope)
        return await rt.request(name)
    desc = rt.description
    if name != "speed" and name not in ARM_COMMANDS:
        raise unknown_command(name, desc)
    if desc is None:
        raise RuntimeDownError(DOWN_MESSAGE)
    if name != "speed":
        return await arm_command(app, name, body, source, envelope)
    if desc.get("profile", "rover") != "rover":
        return await zero_speed(app, body, source, envelope)
    speed = commands.parse_speed(body, desc["limits"], envelope)
    params: dict[str, Any] = {"setpoint": {"linear": speed.linear, "angular": speed.angular}, "source": source}
    if speed.ttl_s is not None:
        params["ttl_s"] = speed.ttl_s
    return await rt.request("setpoint", params)


def unknown_command(name: str, desc: dict[str, Any] | None = None) -> ValidationError:
    known = commands_for(desc.get("profile", "rover")) if desc else commands.COMMANDS
    return ValidationError(f"unknown command {name!r}; known: {', '.join(known)}", code="unknown_command")


def command_handler(name: str):
    async def handle(request: web.Request) -> web.Response:
        body: Any = None
        try:
            body = await read_body(request, allow_empty=name != "speed")
            result = await run_command(request.app, name, body, "http")
        except ApiError as err:
            record_command(request, name, body, "http", error=err)
            raise
        record_command(request, name, body, "http", result)
        return web.json_response({"ok": True, "state": result["state"]})

    handle.__name__ = f"post_{name}"
    return handle


async def post_estop(request: web.Request) -> web.Response:
    """The e-stop is never refused: it latches before the body is even read, whatever the body, its
    content type or its size; a reason that is not a string of at most 200 characters is replaced
    and the answer says so."""
    rt = request.app[RUNTIME]
    reply: dict[str, Any] = {"ok": True}
    warnings = []
    try:
        reply["state"] = (await rt.request("estop"))["state"]
    except ApiError as err:  # the runtime is down: nothing can move; say so, never refuse
        reply["state"] = "fault"
        warnings.append(f"{err.message}")
    try:
        raw = await read_raw_body(request)
        reason, warning = commands.estop_reason(raw)
    except Exception as err:  # noqa: BLE001 - nothing about the body may refuse the stop
        reason, warning = "", f"body ignored: {err}"
    if reason and rt.connected:
        try:
            await rt.request("estop_reason", {"reason": reason})
        except ApiError:
            pass
    if warning:
        warnings.append(warning)
    if warnings:
        reply["warning"] = "; ".join(warnings)
    record_command(request, "estop", {"reason": reason} if reason else {}, "http", reply)
    return web.json_response(reply)


async def get_state(request: web.Request) -> web.Response:
    return json_response(state_text(request.app))


async def get_robot(request: web.Request) -> web.Response:
    desc = robot_description(request.app)
    if desc is None:
        raise RuntimeDownError(DOWN_MESSAGE)
    return web.Response(text=dumps(desc), content_type="application/json")


async def get_robot_svg(request: web.Request) -> web.Response:
    desc = robot_description(request.app)
    if desc is None:
        raise RuntimeDownError(DOWN_MESSAGE)
    return web.Response(text=robot_svg(desc), content_type="image/svg+xml")


async def get_events(request: web.Request) -> web.Response:
    raw = request.query.get("limit", "100")
    try:
        limit = int(raw)
    except ValueError:
        raise ValidationError(f"limit must be an integer, not {raw!r}", code="wrong_type") from None
    if not 1 <= limit <= 100000:
        raise ValidationError("limit must be in [1, 100000]", code="out_of_limits")
    if EVENT_LOG in request.app:  # the gateway's log (survives restarts) merged with the runtime's
        result = {"events": await request.app[EVENT_LOG].recent(request.app[RUNTIME], limit)}
    else:
        result = await request.app[RUNTIME].request("events", {"limit": limit})
    return web.Response(text=dumps(result), content_type="application/json")


async def get_acquisition(request: web.Request) -> web.Response:
    return web.json_response(await request.app[RUNTIME].request("acquisition"))


async def put_acquisition(request: web.Request) -> web.Response:
    p = convert(await read_body(request, allow_empty=False), AcquisitionParams)
    result = await request.app[RUNTIME].request("set_acquisition", {"rate_hz": p.rate_hz, "channels": p.channels})
    Hooks.call(request.app[HOOKS].on_settings, "acquisition", result, request)
    return web.json_response(result)


async def get_telemetry_stats(request: web.Request) -> web.Response:
    hub = request.app[HUB]
    clients = [{"peer": c.peer, "sent": c.sent, "direct": c.direct, "compressed": bool(c.ws.compress),
                "dropped": c.dropped,
                "refused": c.bucket.refused if c.bucket is not None else 0} for c in list(hub.clients)]
    rt = request.app[RUNTIME]
    return web.json_response({**hub.stats(), "per_client": clients,
                              "runtime": {"connected": rt.connected, "pid": rt.runtime_pid, "connects": rt.connects},
                              "connections": request.app[GUARD].stats() if GUARD in request.app else None})


async def index(request: web.Request) -> web.Response:
    env = request.app[JINJA]
    desc = robot_description(request.app)
    try:
        template = env.get_template("index.html")
    except jinja2.TemplateNotFound:
        return web.Response(text="<!doctype html><title>teleop</title><h1>teleop</h1>"
                            "<p>See <a href='/api/state'>/api/state</a>.</p>", content_type="text/html")
    html = template.render(title=desc["name"] if desc else "teleop (robot runtime down)", robot=desc,
                           csrf_token=csrf_token(request))
    return web.Response(text=html, content_type="text/html")


# ---------------------------------------------------------------------- websocket
async def telemetry_ws(request: web.Request) -> web.StreamResponse:
    app = request.app
    hub = app[HUB]
    if len(hub.clients) >= hub.max_clients:
        raise ApiError(f"too many telemetry clients (max {hub.max_clients})", code="busy", status=503)
    tcfg = app[PROFILE].telemetry
    # 4× the command limit: an e-stop that carries junk around it still arrives whole (it is never refused)
    ws = web.WebSocketResponse(heartbeat=10.0, max_msg_size=4 * MAX_BODY_BYTES)
    limit_send_buffer(request, tcfg.send_buffer_bytes)
    await ws.prepare(request)
    client = TelemetryClient(ws, request.remote or "?", request.transport)
    client.send_control(f'{{"type":"hello","robot":{dumps(robot_description(app))},'
                        f'"state":{state_text(app).decode()}}}')
    hub.clients.add(client)
    writer = client.task = asyncio.create_task(client.writer(), name=f"ws-writer-{client.peer}")
    Hooks.call(app[HOOKS].on_ws_open, request, client)
    bucket = app[BUCKETS].get(request.remote or "?")  # per address: reconnecting buys no fresh burst
    client.bucket = bucket
    last_refusal_reply = -math.inf
    try:
        async for msg in ws:
            if msg.type == WSMsgType.TEXT:
                data = msg.data
                if not bucket.take() and not commands.looks_like_estop(data):
                    if bucket.flooding:
                        log.warning("telemetry client %s keeps flooding (%d refused): closing it", client.peer,
                                    bucket.refused)
                        await ws.close(code=WSCloseCode.POLICY_VIOLATION, message=b"rate limit exceeded")
                        break
                    now = time.monotonic()
                    if now - last_refusal_reply >= 0.1:  # one reply per 100 ms, carrying the count
                        last_refusal_reply = now
                        client.send_control({"type": "error", "id": None, "error": {
                            "code": "rate_limited", "refused": bucket.refused,
                            "message": f"over {tcfg.command_rate_hz:g} messages/s (burst "
                                       f"{tcfg.command_burst}): message refused; keep flooding and the "
                                       "socket closes (1008)"}})
                else:
                    reply = await handle_ws_message(app, data, request)
                    if reply is not None:
                        client.send_control(reply)
            elif msg.type == WSMsgType.BINARY:
                client.send_control({"type": "error", "id": None,
                                     "error": {"code": "malformed", "message": "binary messages are not accepted"}})
            elif msg.type == WSMsgType.ERROR:
                break
            await asyncio.sleep(0)  # a flooding reader yields to every other task after each message
    finally:
        hub.clients.discard(client)
        writer.cancel()
    return ws


def limit_send_buffer(request: web.Request, nbytes: int) -> None:
    """Cap the kernel send buffer so a slow client's backlog shows up as drops within a
    fraction of a second instead of hiding megabytes of stale snapshots in the socket
    (notes/performance.md §3: kernel buffers held seconds of video for a slow reader)."""
    sock = request.transport.get_extra_info("socket") if request.transport else None
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, nbytes)
        except OSError:
            log.debug("could not set SO_SNDBUF", exc_info=True)


async def _ws_estop(app: web.Application, msg_id: Any, text: str, malformed: bool) -> dict[str, Any]:
    rt = app[RUNTIME]
    reply: dict[str, Any] = {"type": "ack", "id": msg_id, "command": "estop"}
    try:
        reply["state"] = (await rt.request("estop"))["state"]
    except ApiError as err:
        reply["state"] = "fault"
        reply["warning"] = err.message
        return reply
    if malformed:
        reply["warning"] = "message malformed: e-stop latched, the rest ignored"
        return reply
    reason, warning = commands.estop_reason(text)
    if reason:
        try:
            await rt.request("estop_reason", {"reason": reason})
        except ApiError:
            pass
    if warning:
        reply["warning"] = warning
    return reply


async def handle_ws_message(app: web.Application, text: str, request: web.Request | None = None) -> dict[str, Any] | None:
    """One client message → the reply to send (None: nothing). Any message whose ``type`` is
    ``estop`` stops the robot, whatever else it carries or however malformed it is."""
    msg_id = None
    try:
        if len(text) > MAX_BODY_BYTES and not commands.looks_like_estop(text):
            raise MalformedError(f"message of {len(text)} bytes is over the {MAX_BODY_BYTES}-byte limit",
                                 code="too_large", status=413)
        try:
            body = parse_object(text, max_bytes=4 * MAX_BODY_BYTES)
        except ApiError:
            if commands.looks_like_estop(text):
                return await _ws_estop(app, None, text, malformed=True)
            raise
        msg_id = body.get("id")
        if msg_id is not None and not isinstance(msg_id, (str, int)) or isinstance(msg_id, bool):
            msg_id = None
        kind = body.get("type")
        if kind == "estop":
            reply = await _ws_estop(app, msg_id, text, malformed=False)
            if request is not None:
                record_command(request, "estop", body, "websocket", reply)
            return reply
        if len(text) > MAX_BODY_BYTES:
            raise MalformedError(f"message of {len(text)} bytes is over the {MAX_BODY_BYTES}-byte limit",
                                 code="too_large", status=413)
        if "id" in body and msg_id is None:
            raise ValidationError("id must be a string or an integer", code="wrong_type")
        if not isinstance(kind, str):
            raise ValidationError("type is required and must be a string", code="missing_field")
        extra = app.get(WS_COMMANDS, {})
        if kind != "ping" and kind not in commands.COMMANDS and kind not in ARM_COMMANDS and kind not in extra:
            raise unknown_command(kind, app[RUNTIME].description)  # before authorisation: a type nobody handles is no permission question
        authorize = app[HOOKS].authorize_ws
        if authorize is not None and request is not None:
            authorize(request, kind)
        if kind == "ping":
            reject_unknown(body, {"type", "id", "t"})
            t = number(body, "t", required=False)
            return {"type": "pong", "id": msg_id, "t": t, "server_t": time.time()}
        if kind == "heartbeat":
            commands.parse_bare(body, commands.ENVELOPE)
            if not app[RUNTIME].notify("heartbeat"):
                raise RuntimeDownError(DOWN_MESSAGE)
            return None  # at 10–50 Hz an ack per heartbeat is noise; errors still come back
        try:
            handler = extra.get(kind)
            result = await (handler(body, "websocket") if handler is not None else
                            run_command(app, kind, body, "websocket", commands.ENVELOPE))
        except ApiError as err:
            if request is not None:
                record_command(request, kind, body, "websocket", error=err)
            raise
        if request is not None:
            record_command(request, kind, body, "websocket", result)
        return {"type": "ack", "id": msg_id, "command": kind, "state": result["state"]}
    except ApiError as err:
        return {"type": "error", "id": msg_id, "error": err.to_json()}


# ---------------------------------------------------------------------- debug (tests only)
async def debug_block(request: web.Request) -> web.Response:
    """Block the gateway's event loop on purpose (tests prove the runtime does not need it)."""
    seconds = number(await read_body(request), "seconds", 0.0, 30.0)
    t0 = time.monotonic()
    time.sleep(seconds)  # noqa: ASYNC251 - blocking is the point of this route
    return web.json_response({"ok": True, "blocked_s": seconds, "t_start": t0, "t_end": time.monotonic()})


async def debug_driver(request: web.Request) -> web.Response:
    body = await read_body(request, allow_empty=False)
    return web.json_response(await request.app[RUNTIME].request("debug_driver", {"command": body}))


# ---------------------------------------------------------------------- lifecycle
async def runtime_ctx(app: web.Application):
    """Connect to the runtime; forward its snapshots and events; show ``fault`` while it is down."""
    rt = app[RUNTIME]
    hub = app[HUB]
    hooks = app[HOOKS]

    def on_snapshot(data: bytes) -> None:
        hub.publish(data)
        Hooks.call(hooks.on_snapshot, data)

    def on_event(ev: dict[str, Any]) -> None:
        hub.broadcast({"type": "event", "data": ev})
        Hooks.call(hooks.on_event, ev)

    def on_link(up: bool) -> None:
        if up:
            hub.broadcast({"type": "runtime", "data": {"up": True, "pid": rt.runtime_pid}})
            return
        if rt.shutting_down:
            return
        on_event({"t": time.monotonic(), "wall_t": time.time(), "trigger": "runtime_down", "message": DOWN_MESSAGE,
                  "values": {}, "state_before": rt.latest_snapshot().get("state"), "state_after": "fault",
                  "kind": "safety"})
        on_snapshot(dumps_bytes(current_snapshot(app)))

    async def while_down() -> None:  # the dashboard keeps seeing the fault (and for how long)
        while True:
            await asyncio.sleep(1.0)
            if not rt.connected and not rt.shutting_down:
                on_snapshot(dumps_bytes(current_snapshot(app)))

    rt.on_snapshot, rt.on_event, rt.on_link = on_snapshot, on_event, on_link
    await hub.start()
    rt.start()
    if not await rt.wait_connected(30.0):
        log.error("the robot runtime is not reachable at %s; serving with the robot shown as down", rt.socket_path)
    ticker = asyncio.create_task(while_down())
    try:
        yield
    finally:
        ticker.cancel()
        await rt.stop()


async def on_shutdown(app: web.Application) -> None:
    """Tell every websocket client we are going away (1001), after the last snapshot went out."""
    await app[HUB].stop()


def create_app(profile: Profile, runtime: RuntimeClient, *, bound_host: str | None = None,
               **auth_options: Any) -> web.Application:
    """The gateway app; ``bound_host`` is the address or name it listens on (the Host allow-list,
    default ``server.host``); ``auth_options`` go to the trust layer (tests: ``hasher``)."""
    app = web.Application(middlewares=[error_middleware], client_max_size=MAX_BODY_BYTES)
    app[PROFILE] = profile
    app[RUNTIME] = runtime
    app[HOOKS] = Hooks()
    app[BODY_TIMEOUT] = profile.server.body_timeout_s
    app[HUB] = TelemetryHub(profile.telemetry.max_clients, profile.server.writer_stall_s)
    app[BUCKETS] = BucketRegistry(profile.telemetry.command_rate_hz, profile.telemetry.command_burst)
    app[JINJA] = jinja2.Environment(loader=jinja2.FileSystemLoader(str(WEB_DIR / "templates")), autoescape=True)
    app.cleanup_ctx.append(runtime_ctx)
    app.on_shutdown.append(on_shutdown)
    # metrics, health, recording, event log, replay controls (their cleanup contexts start after the runtime's)
    setup_observability(app, profile, runtime, app[HUB], lambda: current_snapshot(app))
    setup_recording(app, profile, runtime, lambda: robot_description(app))
    r = app.router
    r.add_get("/", index)
    r.add_get("/api/state", get_state)
    r.add_get("/api/robot", get_robot)
    r.add_get("/api/robot.svg", get_robot_svg)
    r.add_get("/api/events", get_events)
    r.add_get("/api/acquisition", get_acquisition)
    r.add_put("/api/acquisition", put_acquisition)
    for name in commands.COMMANDS:
        r.add_post(f"/api/{name}", post_estop if name == "estop" else command_handler(name))
    r.add_get("/api/telemetry", get_telemetry_stats)
    r.add_get("/ws/telemetry", telemetry_ws)
    setup_navigation(app, RUNTIME)
    setup_arms(app)
    if profile.debug.routes:
        r.add_post("/api/debug/block", debug_block)
        r.add_post("/api/debug/driver", debug_driver)
    if profile.video.enabled:
        def pose() -> dict[str, float]:
            truth = runtime.latest_snapshot().get("truth") or {}
            return {k: truth[k] for k in ("x", "y", "z", "yaw", "pitch", "roll") if k in truth} | \
                {"t": truth.get("sim_time_s", 0.0)}

        context = {"pose": pose, "world": lambda: (runtime.description or {}).get("world")}
        setup_video(app, VideoService(camera_factory(context), profile.video), profile.server.writer_stall_s)
    app[WS_COMMANDS] = setup_vision(app, profile, runtime, app.get(VIDEO_KEY))  # docs/vision.md
    static = WEB_DIR / "static"
    r.add_static("/static/", static, append_version=False)
    setup_trust(app, profile.auth, bound_host=bound_host or profile.server.host, hooks=app[HOOKS], hub=app[HUB],
                runtime=runtime, **auth_options)
    return app


__all__ = ["HOOKS", "HUB", "Hooks", "PROFILE", "RUNTIME", "create_app", "current_snapshot", "robot_description"]
