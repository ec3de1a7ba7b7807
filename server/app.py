"""The aiohttp application: HTTP API, telemetry websocket, dashboard page and lifecycle.

Background work is owned by ``cleanup_ctx``: the driver is opened and the
control loop started before the server accepts requests; on shutdown the robot
is halted first, then sockets close.
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
from server.ratelimit import TokenBucket
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


async def read_raw_body(request: web.Request, limit: int = MAX_BODY_BYTES) -> bytes:
    """Up to ``limit + 1`` bytes of the body, within ``server.body_timeout_s`` (a client that trickles
    its body does not hold a handler forever)."""
    timeout_s = request.app[CONFIG]["server"]["body_timeout_s"]
    try:
        async with asyncio.timeout(timeout_s):
            return await request.content.read(limit + 1)
    except TimeoutError:
        raise MalformedError(f"the body did not arrive within {timeout_s:g} s", code="timeout", status=408) from None


async def read_body(request: web.Request, allow_empty: bool = True) -> dict[str, Any]:
    if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
        raise MalformedError(f"body of {request.content_length} bytes is over the {MAX_BODY_BYTES}-byte limit",
                             code="too_large", status=413)
    return parse_object(await read_raw_body(request), allow_empty=allow_empty)


# ---------------------------------------------------------------------- HTTP handlers
def command_handler(name: str):
    async def handle(request: web.Request) -> web.Response:
        body = await read_body(request, allow_empty=name != "speed")
        state = commands.execute(request.app[LOOP], request.app[LIMITS], name, body, source="http")
        return web.json_response({"ok": True, "state": state})

    handle.__name__ = f"post_{name}"
    return handle


async def post_estop(request: web.Request) -> web.Response:
    """The e-stop is never refused: it latches before the body is even read, whatever the body, its
    content type or its size; a reason that is not a string of at most 200 characters is replaced
    and the answer says so."""
    loop = request.app[LOOP]
    state = loop.estop("")
    reply: dict[str, Any] = {"ok": True, "state": state}
    try:
        raw = await read_raw_body(request)
        reason, warning = commands.estop_reason(raw)
    except Exception as err:  # noqa: BLE001 - nothing about the body may refuse the stop
        reason, warning = "", f"body ignored: {err}"
    if reason:
        loop.note_estop_reason(reason)
    if warning:
        reply["warning"] = warning
    return web.json_response(reply)


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
            "min_rate_hz": drv.min_rate_hz, "max_rate_hz": drv.max_rate_hz}


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
    rules = request.app[CONFIG]["safety"]["rules"]
    estimation = request.app.get(ESTIMATION)
    needed = {}
    for rule in rules:  # a rule on a derived channel (tilt_rad) needs that channel's inputs
        for ch in (estimation.sources([rule["channel"]]) if estimation else {rule["channel"]}):
            needed.setdefault(ch, []).append(rule["name"])
    missing = sorted(set(needed) - set(channels))
    if missing:
        names = sorted({n for ch in missing for n in needed[ch]})
        raise ValidationError(f"channel(s) {', '.join(missing)} feed safety rule(s) {', '.join(names)} "
                              "and must stay active", code="safety_channel")
    stale_s = request.app[CONFIG]["safety"]["sensor_stale_s"]
    if needed and 1.0 / rate > stale_s / 2:
        names = sorted({n for ns in needed.values() for n in ns})
        raise ValidationError(
            f"rate_hz={rate:g} samples every {1.0 / rate:.3g} s: the safety rule(s) {', '.join(names)} would see "
            f"their channels go stale (safety.sensor_stale_s = {stale_s:g} s); use at least {2.0 / stale_s:g} Hz",
            code="safety_rate")
    if rate < drv.min_rate_hz:
        raise ValidationError(f"rate_hz={rate:g} is under the driver's floor of {drv.min_rate_hz:g} Hz",
                              code="out_of_limits")
    try:
        request.app[LOOP].set_acquisition(rate, channels)
    except AcquisitionError as err:
        raise ValidationError(str(err), code="invalid") from None
    return web.json_response(acquisition_json(request.app))


async def get_telemetry_stats(request: web.Request) -> web.Response:
    hub = request.app[HUB]
    clients = [{"peer": c.peer, "sent": c.sent, "dropped": c.dropped,
                "refused": c.bucket.refused if c.bucket is not None else 0} for c in list(hub.clients)]
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
    tcfg = app[CONFIG]["telemetry"]
    # 4× the command limit: an e-stop that carries junk around it still arrives whole (it is never refused)
    ws = web.WebSocketResponse(heartbeat=10.0, max_msg_size=4 * MAX_BODY_BYTES)
    limit_send_buffer(request, tcfg["send_buffer_bytes"])
    await ws.prepare(request)
    client = Client(ws, request.remote or "?", request.transport)
    client.send_control({"type": "hello", "robot": robot_description(app), "state": app[LOOP].snapshot()})
    hub.clients.add(client)
    writer = client.task = asyncio.create_task(client.writer(), name=f"ws-writer-{client.peer}")
    loop = app[LOOP]
    limits = app[LIMITS]
    bucket = TokenBucket(tcfg["command_rate_hz"], tcfg["command_burst"])
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
                            "message": f"over {tcfg['command_rate_hz']:g} messages/s (burst "
                                       f"{tcfg['command_burst']}): message refused; keep flooding and the "
                                       "socket closes (1008)"}})
                else:
                    reply = handle_ws_message(loop, limits, data)
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


def handle_ws_message(loop: ControlLoop, limits: Limits, text: str) -> dict[str, Any] | None:
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
                return {"type": "ack", "id": None, "command": "estop", "state": loop.estop(""),
                        "warning": "message malformed: e-stop latched, the rest ignored"}
            raise
        msg_id = body.get("id")
        if msg_id is not None and not isinstance(msg_id, (str, int)) or isinstance(msg_id, bool):
            msg_id = None
        kind = body.get("type")
        if kind == "estop":
            state = loop.estop("")
            reason, warning = commands.estop_reason(text)
            if reason:
                loop.note_estop_reason(reason)
            reply = {"type": "ack", "id": msg_id, "command": "estop", "state": state}
            if warning:
                reply["warning"] = warning
            return reply
        if len(text) > MAX_BODY_BYTES:
            raise MalformedError(f"message of {len(text)} bytes is over the {MAX_BODY_BYTES}-byte limit",
                                 code="too_large", status=413)
        if "id" in body and msg_id is None:
            raise ValidationError("id must be a string or an integer", code="wrong_type")
        if not isinstance(kind, str):
            raise ValidationError("type is required and must be a string", code="missing_field")
        if kind == "ping":
            reject_unknown(body, {"type", "id", "t"})
            t = number(body, "t", required=False)
            return {"type": "pong", "id": msg_id, "t": t, "server_t": time.time()}
        state = commands.execute(loop, limits, kind, body, source="websocket")
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
    driver_channels = {c.name for c in driver.channels()}
    for rule in supervisor.cfg.rules:  # a rule on a derived channel is as fresh as the stage's inputs
        if rule.channel not in driver_channels and stage is not None:
            loop.derived_sources[rule.channel] = tuple(sorted(stage.sources([rule.channel])))
    app[HUB] = TelemetryHub(loop.snapshot, cfg["telemetry"]["rate_hz"], cfg["telemetry"]["max_clients"],
                            cfg["server"]["writer_stall_s"])
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
        r.add_post(f"/api/{name}", post_estop if name == "estop" else command_handler(name))
    r.add_get("/api/telemetry", get_telemetry_stats)
    r.add_get("/ws/telemetry", telemetry_ws)
    if cfg["debug"]["routes"]:
        r.add_post("/api/debug/block", debug_block)
        r.add_post("/api/debug/driver", debug_driver)
    if cfg["video"]["enabled"]:
        setup_video(app, VideoService(camera_factory(driver), cfg["video"]), cfg["server"]["writer_stall_s"])
    static = WEB_DIR / "static"
    static.mkdir(parents=True, exist_ok=True)
    r.add_static("/static/", static, append_version=False)
    return app
