"""The aiohttp application: HTTP API, telemetry websocket, dashboard page and lifecycle.

Background work is owned by ``cleanup_ctx``: the driver is opened and the
control loop started before the server accepts requests; on shutdown the robot
is halted first, then sockets close.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from typing import Any

import jinja2
from aiohttp import WSMsgType, web

from drivers.base import Driver
from drivers.errors import AcquisitionError, DriverConfigError, DriverError
from drivers.registry import driver_class
from server import commands
from server.config import REPO_ROOT, ConfigError
from server.control_loop import ControlLoop
from server.controller import Limits, RoverController
from server.errors import ApiError, MalformedError, ValidationError, error_middleware
from server.estimation import EstimationStage, build_estimation
from server.navigation import setup_navigation
from server.robot_svg import rover_svg
from server.safety import SafetyConfig, Supervisor
from server.telemetry import Client, TelemetryHub, dumps
from server.video import VideoService, camera_factory, setup_video
from server.validation import MAX_BODY_BYTES, number, parse_object, reject_unknown, string_list

log = logging.getLogger(__name__)

WEB_DIR = REPO_ROOT / "web"

CONFIG = web.AppKey("config", dict)
LOOP = web.AppKey("control_loop", ControlLoop)
HUB = web.AppKey("telemetry_hub", TelemetryHub)
LIMITS = web.AppKey("limits", Limits)
DRIVER = web.AppKey("driver", Driver)
JINJA = web.AppKey("jinja", jinja2.Environment)
ESTIMATION = web.AppKey("estimation", EstimationStage)  # present when the driver has an IMU


def build_driver(cfg: dict[str, Any]) -> Driver:
    """Instantiate the configured driver from its own table; bad settings are a :class:`ConfigError`."""
    name = cfg["driver"].get("name", "sim")
    try:
        return driver_class(name).from_config(cfg["driver"], cfg)
    except DriverConfigError as err:
        key = f"driver.{err.key}" if err.key else "driver"
        raise ConfigError(f"{cfg.get('_source', '<config>')}: [{key}] {err.message}") from err
    except DriverError as err:
        raise ConfigError(f"{cfg.get('_source', '<config>')}: [driver] {err}") from err


def robot_description(app: web.Application) -> dict[str, Any]:
    cfg = app[CONFIG]
    lim = app[LIMITS]
    return {
        "profile": cfg["robot"]["profile"],
        "name": cfg["robot"]["name"],
        "driver": app[DRIVER].name,
        "channels": [c.to_json() for c in app[DRIVER].channels()]
        + ([c.to_json() for c in app[ESTIMATION].channels()] if ESTIMATION in app else []),
        "limits": {
            "linear_m_s": [-lim.linear_m_s, lim.linear_m_s],
            "angular_rad_s": [-lim.angular_rad_s, lim.angular_rad_s],
            "ttl_max_s": lim.ttl_max_s,
        },
        "geometry": {"wheel_radius_m": cfg["robot"]["wheel_radius_m"], "track_m": cfg["robot"]["track_m"]},
        "safety": {
            "command_timeout_s": cfg["safety"]["command_timeout_s"],
            "rules": cfg["safety"]["rules"],
        },
        "telemetry_rate_hz": cfg["telemetry"]["rate_hz"],
        "loop_rate_hz": cfg["loop"]["rate_hz"],
        "world": cfg["sim"]["world"] if app[DRIVER].name == "sim" else None,
        "uwb": {"anchors": cfg["uwb"]["anchors"], "tag_height_m": cfg["uwb"]["tag_height_m"]},
        "video": {"enabled": bool(cfg["video"]["enabled"]), "source": cfg["video"]["source"],
                  "width": cfg["video"]["width"], "height": cfg["video"]["height"], "fps": cfg["video"]["fps"]},
    }


async def read_body(request: web.Request, allow_empty: bool = True) -> dict[str, Any]:
    if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
        raise MalformedError(f"body of {request.content_length} bytes is over the {MAX_BODY_BYTES}-byte limit",
                             code="too_large", status=413)
    raw = await request.content.read(MAX_BODY_BYTES + 1)
    return parse_object(raw, allow_empty=allow_empty)


# ---------------------------------------------------------------------- HTTP handlers
def command_handler(name: str):
    async def handle(request: web.Request) -> web.Response:
        body = await read_body(request, allow_empty=name != "speed")
        state = commands.execute(request.app[LOOP], request.app[LIMITS], name, body)
        return web.json_response({"ok": True, "state": state})

    handle.__name__ = f"post_{name}"
    return handle


async def get_state(request: web.Request) -> web.Response:
    return web.Response(text=dumps(request.app[LOOP].snapshot()), content_type="application/json")


async def get_robot(request: web.Request) -> web.Response:
    return web.Response(text=dumps(robot_description(request.app)), content_type="application/json")


async def get_robot_svg(request: web.Request) -> web.Response:
    channels = [c.name for c in request.app[DRIVER].channels()]
    return web.Response(text=rover_svg(request.app[CONFIG], channels), content_type="image/svg+xml")


async def get_events(request: web.Request) -> web.Response:
    raw = request.query.get("limit", "100")
    try:
        limit = int(raw)
    except ValueError:
        raise ValidationError(f"limit must be an integer, not {raw!r}", code="wrong_type") from None
    if not 1 <= limit <= 100000:
        raise ValidationError("limit must be in [1, 100000]", code="out_of_limits")
    events = list(request.app[LOOP].events)[-limit:]
    return web.Response(text=dumps({"events": [e.to_json() for e in events]}), content_type="application/json")


def acquisition_json(app: web.Application) -> dict[str, Any]:
    drv = app[DRIVER]
    return {**drv.get_acquisition().to_json(), "available": [c.name for c in drv.channels()],
            "max_rate_hz": drv.max_rate_hz}


async def get_acquisition(request: web.Request) -> web.Response:
    return web.json_response(acquisition_json(request.app))


async def put_acquisition(request: web.Request) -> web.Response:
    body = await read_body(request, allow_empty=False)
    reject_unknown(body, {"rate_hz", "channels"})
    drv = request.app[DRIVER]
    rate = number(body, "rate_hz", 0.0, drv.max_rate_hz)
    if rate <= 0:
        raise ValidationError("rate_hz must be > 0", code="out_of_limits")
    channels = string_list(body, "channels")
    needed = {r["channel"] for r in request.app[CONFIG]["safety"]["rules"]}
    if ESTIMATION in request.app:  # a rule on a derived channel (tilt_rad) needs that channel's inputs
        needed = request.app[ESTIMATION].sources(needed)
    missing = sorted(needed - set(channels))
    if missing:
        raise ValidationError(f"channel(s) {', '.join(missing)} feed safety rules and must stay active",
                              code="safety_channel")
    try:
        request.app[LOOP].set_acquisition(rate, channels)
    except AcquisitionError as err:
        raise ValidationError(str(err), code="invalid") from None
    return web.json_response(acquisition_json(request.app))


async def get_telemetry_stats(request: web.Request) -> web.Response:
    hub = request.app[HUB]
    clients = [{"peer": c.peer, "sent": c.sent, "dropped": c.dropped} for c in list(hub.clients)]
    return web.json_response({**hub.stats(), "per_client": clients})


async def index(request: web.Request) -> web.Response:
    env = request.app[JINJA]
    try:
        template = env.get_template("index.html")
    except jinja2.TemplateNotFound:
        return web.Response(text="<!doctype html><title>teleop</title><h1>teleop</h1>"
                            "<p>See <a href='/api/state'>/api/state</a>.</p>", content_type="text/html")
    html = template.render(title=request.app[CONFIG]["robot"]["name"], robot=robot_description(request.app))
    return web.Response(text=html, content_type="text/html")


# ---------------------------------------------------------------------- websocket
async def telemetry_ws(request: web.Request) -> web.StreamResponse:
    app = request.app
    hub = app[HUB]
    if len(hub.clients) >= hub.max_clients:
        raise ApiError(f"too many telemetry clients (max {hub.max_clients})", code="busy", status=503)
    ws = web.WebSocketResponse(heartbeat=10.0, max_msg_size=MAX_BODY_BYTES)
    limit_send_buffer(request, app[CONFIG]["telemetry"]["send_buffer_bytes"])
    await ws.prepare(request)
    client = Client(ws, request.remote or "?")
    client.send_control({"type": "hello", "robot": robot_description(app), "state": app[LOOP].snapshot()})
    hub.clients.add(client)
    writer = client.task = asyncio.create_task(client.writer(), name=f"ws-writer-{client.peer}")
    loop = app[LOOP]
    limits = app[LIMITS]
    try:
        async for msg in ws:
            if msg.type == WSMsgType.TEXT:
                reply = handle_ws_message(loop, limits, msg.data)
                if reply is not None:
                    client.send_control(reply)
            elif msg.type == WSMsgType.BINARY:
                client.send_control({"type": "error", "id": None,
                                     "error": {"code": "malformed", "message": "binary messages are not accepted"}})
            elif msg.type == WSMsgType.ERROR:
                break
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


def handle_ws_message(loop: ControlLoop, limits: Limits, text: str) -> dict[str, Any] | None:
    msg_id = None
    try:
        body = parse_object(text)
        msg_id = body.get("id")
        if msg_id is not None and not isinstance(msg_id, (str, int)) or isinstance(msg_id, bool):
            msg_id = None
            raise ValidationError("id must be a string or an integer", code="wrong_type")
        kind = body.get("type")
        if not isinstance(kind, str):
            raise ValidationError("type is required and must be a string", code="missing_field")
        if kind == "ping":
            reject_unknown(body, {"type", "id", "t"})
            t = number(body, "t", required=False)
            return {"type": "pong", "id": msg_id, "t": t, "server_t": time.time()}
        state = commands.execute(loop, limits, kind, body)
        if kind == "heartbeat":
            return None  # at 10–50 Hz an ack per heartbeat is noise; errors still come back
        return {"type": "ack", "id": msg_id, "command": kind, "state": state}
    except ApiError as err:
        return {"type": "error", "id": msg_id, "error": err.to_json()}


# ---------------------------------------------------------------------- debug (tests only)
async def debug_block(request: web.Request) -> web.Response:
    """Block the event loop on purpose (tests prove the safety path does not need it)."""
    seconds = number(await read_body(request), "seconds", 0.0, 30.0)
    t0 = time.monotonic()
    time.sleep(seconds)  # noqa: ASYNC251 - blocking is the point of this route
    return web.json_response({"ok": True, "blocked_s": seconds, "t_start": t0, "t_end": time.monotonic()})


async def debug_driver(request: web.Request) -> web.Response:
    body = await read_body(request, allow_empty=False)
    try:
        result = request.app[LOOP].driver_debug(body)
    except (KeyError, ValueError, TypeError, NotImplementedError) as err:
        raise ValidationError(f"debug command refused: {err}") from None
    return web.json_response(result)


# ---------------------------------------------------------------------- lifecycle
async def robot_ctx(app: web.Application):
    driver = app[DRIVER]
    loop = app[LOOP]
    hub = app[HUB]
    driver.open()
    aio_loop = asyncio.get_running_loop()

    def on_event(ev) -> None:  # called from the control thread
        try:
            aio_loop.call_soon_threadsafe(hub.broadcast, {"type": "event", "data": ev.to_json()})
        except RuntimeError:
            pass  # event loop closed during shutdown

    loop.on_event = on_event
    await hub.start()
    loop.on_publish = hub.notify_threadsafe
    loop.start()
    deadline = aio_loop.time() + 5.0
    while loop.seq == 0:  # serve only once the first snapshot exists
        if aio_loop.time() > deadline or not loop.alive:
            await loop.shutdown_async()
            raise DriverError("the control loop produced no first tick within 5 s")
        await asyncio.sleep(0.005)
    try:
        yield
    finally:
        await loop.shutdown_async()  # the robot halts before any socket closes
        await hub.stop()
        try:
            driver.close()
        except DriverError:
            log.exception("driver close failed")


async def on_shutdown(app: web.Application) -> None:
    """Halt first, then tell every websocket client we are going away (1001)."""
    await app[LOOP].shutdown_async()
    await app[HUB].stop()


def create_app(cfg: dict[str, Any]) -> web.Application:
    app = web.Application(middlewares=[error_middleware], client_max_size=MAX_BODY_BYTES)
    app[CONFIG] = cfg
    app[LIMITS] = Limits.from_config(cfg)
    app[DRIVER] = driver = build_driver(cfg)
    supervisor = Supervisor(SafetyConfig.from_config(cfg))
    wheel_limit = min(hi for lo, hi in driver.actuators().values())
    controller = RoverController(app[LIMITS], cfg["robot"]["wheel_radius_m"], cfg["robot"]["track_m"], wheel_limit)
    app[LOOP] = loop = ControlLoop(
        driver, supervisor, controller,
        rate_hz=cfg["loop"]["rate_hz"], spin_s=cfg["loop"]["spin_us"] * 1e-6, realtime=cfg["loop"]["realtime"],
        event_log_size=cfg["telemetry"]["event_log_size"],
        publish_every=max(1, round(cfg["loop"]["rate_hz"] / cfg["telemetry"]["rate_hz"])),
    )
    stage = build_estimation(cfg, [c.name for c in driver.channels()])
    if stage is not None:
        app[ESTIMATION] = stage
        loop.stages.append(stage)
    app[HUB] = TelemetryHub(loop.snapshot, cfg["telemetry"]["rate_hz"], cfg["telemetry"]["max_clients"])
    app[JINJA] = jinja2.Environment(loader=jinja2.FileSystemLoader(str(WEB_DIR / "templates")),
                                    autoescape=True)
    app.cleanup_ctx.append(robot_ctx)
    setup_navigation(app, loop, stage, cfg)  # heading and calibration routes; loads the calibration state file
    app.on_shutdown.append(on_shutdown)
    r = app.router
    r.add_get("/", index)
    r.add_get("/api/state", get_state)
    r.add_get("/api/robot", get_robot)
    r.add_get("/api/robot.svg", get_robot_svg)
    r.add_get("/api/events", get_events)
    r.add_get("/api/acquisition", get_acquisition)
    r.add_put("/api/acquisition", put_acquisition)
    for name in commands.COMMANDS:
        r.add_post(f"/api/{name}", command_handler(name))
    r.add_get("/api/telemetry", get_telemetry_stats)
    r.add_get("/ws/telemetry", telemetry_ws)
    if cfg["debug"]["routes"]:
        r.add_post("/api/debug/block", debug_block)
        r.add_post("/api/debug/driver", debug_driver)
    if cfg["video"]["enabled"]:
        setup_video(app, VideoService(camera_factory(driver), cfg["video"]))
    static = WEB_DIR / "static"
    static.mkdir(parents=True, exist_ok=True)
    r.add_static("/static/", static, append_version=False)
    return app
