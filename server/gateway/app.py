"""The gateway's aiohttp application: HTTP API, telemetry websocket, dashboard, video.

The robot itself runs in the runtime process; this app talks to it through
:class:`~server.runtime_api.client.RuntimeClient`. Every body is validated here, at
the edge, with the same structs the runtime checks again. Snapshots arrive serialised and
are forwarded as they are. While the runtime is down, ``/api/state`` and the dashboard
show ``fault`` ("robot runtime down") and commands get 503 ``runtime_down``; the e-stop
is still answered 200 (there is nothing to move: the runtime halted on its way down, or
died with the outputs cut by the driver's own watchdog, see docs/safety.md). A link lost
while the runtime lives is not "down": the e-stop is sent again on the new link until the
runtime confirms it (:meth:`RuntimeClient.estop`), and the state served is the last
snapshot with its age (``age_s``, ``snapshot_stale``).

What used to be in this module lives beside it: the app keys in :mod:`~server.gateway.keys`, what the
state routes serve in :mod:`~server.gateway.state`, the command registry and its one dispatch in
:mod:`~server.gateway.commands`, the dashboard's socket in :mod:`~server.gateway.ws_telemetry`.
``handle_ws_message`` is re-exported here for code that still imports it from the app (a new transport
calls :meth:`~server.gateway.commands.Dispatcher.dispatch` instead).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import jinja2
from aiohttp import web

from server.config import REPO_ROOT, Profile
from server.errors import RuntimeDownError, ValidationError
from server.gateway.admission import ADMISSION, admission
from server.gateway.arms import setup_arms
from server.gateway.auth import AUTH_KEY
from server.gateway.auth.permissions import ADMIN
from server.gateway.auth.wiring import csrf_token, setup_trust
from server.gateway.commands import REGISTRY, add_routes
from server.gateway.connections import GUARD, authenticated_middleware
from server.gateway.fleet.setup import setup_fleet
from server.gateway.hooks import HOOKS, Hooks
from server.gateway.http import BODY_MIN_RATE, BODY_TIMEOUT, error_middleware, json_response, read_body
from server.gateway.keys import BUCKETS, HUB, JINJA, PROFILE, RUNTIME
from server.gateway.missions import setup_missions
from server.gateway.navigation import setup_navigation
from server.gateway.observability.setup import setup_observability
from server.gateway.ratelimit import BucketRegistry
from server.gateway.recording.setup import EVENT_LOG, RECORDING_AUTH, setup_recording
from server.gateway.robot_svg import robot_svg
from server.gateway.state import current_snapshot, robot_description, state_text
from server.gateway.telemetry import TelemetryHub, dumps
from server.gateway.video import VIDEO_KEY
from server.gateway.vision.routes import setup_vision
from server.gateway.ws_telemetry import handle_ws_message, telemetry_ws
from server.runtime_api.client import DOWN_MESSAGE, RuntimeClient
from server.runtime_api.params import AcquisitionParams
from server.runtime_api.protocol import dumps as dumps_bytes
from server.validation import MAX_BODY_BYTES, convert, number

log = logging.getLogger(__name__)

WEB_DIR = REPO_ROOT / "web"


# ---------------------------------------------------------------------- reads
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
    by_stream = hub.runtime_drops()
    clients = [{"peer": c.peer, "sent": c.sent, "direct": c.direct, "compressed": bool(c.ws.compress),
                "dropped": c.dropped, "expired": c.expired,
                "refused": c.bucket.refused if c.bucket is not None else 0, "tcp": c.tcp, **c.subscription_json(),
                **(c.stream.to_json(by_stream) if c.stream is not None else {})} for c in list(hub.clients)]
    rt = request.app[RUNTIME]
    return web.json_response({**hub.stats(), "per_client": clients,
                              "runtime": {"connected": rt.connected, "down": rt.down, "pid": rt.runtime_pid,
                                          "connects": rt.connects, "link_losses": rt.link_losses,
                                          "pending": rt.pending(), "estops_retried": rt.estops_retried},
                              "connections": request.app[GUARD].stats() if GUARD in request.app else None,
                              "slots": request.app[ADMISSION].stats()})


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
            if rt.down and not rt.shutting_down:
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
    app[BODY_MIN_RATE] = profile.server.body_min_rate_bytes_s
    app[HUB] = TelemetryHub(profile.server.writer_stall_s)
    admission(app).add_pool("telemetry", "telemetry sockets", profile.telemetry.slots(), "telemetry", "max_clients")
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
    add_routes(app, REGISTRY)  # every command's route (server/gateway/commands.py)
    r.add_get("/api/telemetry", get_telemetry_stats)
    r.add_get("/ws/telemetry", telemetry_ws)
    setup_navigation(app)
    setup_missions(app)
    setup_arms(app)
    if profile.debug.routes:
        r.add_post("/api/debug/block", debug_block)
        r.add_post("/api/debug/driver", debug_driver)
    if profile.video.enabled:  # OpenCV and the encoders are imported only for a gateway with video
        from server.gateway.video import VideoService, camera_factory, setup_video

        # the simulator's true pose comes on the runtime's declared ``truth`` channel (docs/runtime-api.md), not
        # from the public snapshot: the camera renders what the robot sees even if the snapshot drops ``truth``
        if "truth" not in runtime.topics:
            runtime.topics = [*runtime.topics, "truth"]

        def pose() -> dict[str, float]:
            truth = runtime.latest_truth
            return {k: truth[k] for k in ("x", "y", "z", "yaw", "pitch", "roll") if k in truth} | \
                {"t": truth.get("sim_time_s", 0.0)}

        context = {"pose": pose, "world": lambda: (runtime.description or {}).get("world")}
        setup_video(app, VideoService(camera_factory(context), profile.video), profile.server.writer_stall_s)
    setup_vision(app, profile, runtime, app.get(VIDEO_KEY))  # docs/vision.md
    static = WEB_DIR / "static"
    r.add_static("/static/", static, append_version=False)
    setup_trust(app, profile.auth, bound_host=bound_host or profile.server.host, hooks=app[HOOKS], hub=app[HUB],
                runtime=runtime, commands=REGISTRY.permission_rows(), **auth_options)
    if RECORDING_AUTH in app:  # stopping the always-on recording (the black box) is for an admin
        svc = app[AUTH_KEY]

        async def admin(request: web.Request) -> None:
            svc.authorize_rule(svc.principal(request), ADMIN)

        app[RECORDING_AUTH].admin = admin
    if VIDEO_KEY in app:  # WebRTC carries the video: nothing to set up (nor aiortc to import) without it
        from server.gateway.webrtc import setup_webrtc

        setup_webrtc(app, profile.webrtc, bound_host or profile.server.host, profile.debug.routes)  # docs/video.md
    setup_fleet(app, profile.fleet)  # docs/fleet.md: dial out to the fleet's router when [fleet] enabled
    # inside the trust layer's middleware: the connection guard learns which connections authenticated
    app.middlewares.append(authenticated_middleware(app[AUTH_KEY].principal))
    return app


__all__ = ["GUARD", "HOOKS", "HUB", "Hooks", "PROFILE", "RUNTIME", "create_app", "current_snapshot", "handle_ws_message",
           "robot_description"]
