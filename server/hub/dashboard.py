"""One robot's full dashboard through the hub (issue 22; docs/fleet.md, "A robot's dashboard through the hub").

``GET /fleet/{id}/`` is the robot's own page (``web/templates/index.html``, the same ``web/static/js`` modules)
rendered by the hub with ``<meta name="api-base" content="/fleet/{id}">``: the page sends every API call and its
telemetry socket under that prefix, and this module answers them by relaying over Zenoh, never by anything of its
own that could move a robot:

* ``/fleet/{id}/ws/telemetry`` speaks the robot's ``/ws/telemetry`` protocol: ``hello`` (the description and a
  snapshot asked now), the robot's snapshots from its watched ``telemetry`` key (the watch renewed while the
  socket is open, latest wins), its events, ``lease`` on every change the summaries show, ``pong`` (the hub's
  clock: the RTT is the page's to the hub; the snapshots' age shows the rest), and commands relayed as the
  hub's signed ``command`` requests with ``ack``/``error`` answers; closed with 4401 when the hub session ends
  (the page goes to the login page, as on the robot);
* ``POST /fleet/{id}/api/<route>`` is the robot's command route of that name (the command registry's paths),
  ``lease/<action>`` its lease, ``estop`` its e-stop (any signed-in user, never refused by the hub);
* ``GET /fleet/{id}/api/{state,robot,events,lease,auth/me}``; any other GET answers 404 ``not_relayed``;
* ``/fleet/{id}/ws/webrtc`` speaks the robot's ``/ws/webrtc`` protocol, relayed as its signed ``webrtc`` requests:
  the media and the ``telemetry`` data channel then flow browser ↔ robot directly, and the robot closes the page's
  command channels (commands stay on the relayed socket; server/gateway/fleet/webrtc.py).

The checks are the hub's (the user's hub role, ``[hub.robots.<id>]`` view/drive: 403) and then the robot's own
(validation, permission, lease, rate limit): a viewer sees the dashboard and its Start is refused. A robot that is
offline answers 503 ``robot_offline``; one that does not answer, 504 ``robot_unreachable``.

The lease: the robot keys its lease on a session of its own per hub session; the robot says whether the asker
holds it (``you``) and the hub writes the user's hub session into it, so ``lease.js`` (which compares the holder's
session with ``GET /api/auth/me``'s) sees "You drive" and lets the page send speed and heartbeats. The page's
heartbeats are relayed one by one: when the page or the hub goes away they stop, and the robot's own watchdog
stops it (``test_fleet_dashboard.py`` kills the hub under this page).
"""

from __future__ import annotations

import asyncio
import copy
import logging
import secrets
import time
from typing import Any

import orjson
from aiohttp import WSMsgType, web

from server.errors import ApiError, ValidationError
from server.gateway.auth import Principal, Role
from server.gateway.auth.permissions import ESTOP, PAGE, STREAM, VIEWER, PermissionTable
from server.gateway.auth.routes import me as hub_me
from server.gateway.auth.wiring import csrf_token
from server.gateway.commands import REGISTRY
from server.gateway.http import read_body
from server.gateway.link import LinkClock, check_stamps
from server.gateway.ratelimit import TokenBucket

log = logging.getLogger(__name__)

PREFIX = "/fleet/{id}"
#: the robot's command routes by path (``/api/start`` → ``start``)
COMMAND_BY_PATH = {c.path: c.name for c in REGISTRY}


def dashboard_permissions(t: PermissionTable) -> None:
    """The routes of this module in the hub's table (the handlers check the robot, view and drive)."""
    for method, path, rule in (
            ("GET", PREFIX, PAGE), ("GET", PREFIX + "/", PAGE),
            ("POST", PREFIX + "/api/estop", ESTOP),
            ("GET", PREFIX + "/api/{tail}", VIEWER), ("POST", PREFIX + "/api/{tail}", VIEWER),
            ("GET", PREFIX + "/ws/telemetry", STREAM), ("GET", PREFIX + "/ws/webrtc", STREAM)):
        t.route(method, path, rule)


def add_dashboard_routes(app: web.Application) -> None:
    r = app.router
    r.add_get(PREFIX, redirect)
    r.add_get(PREFIX + "/", page)
    r.add_post(PREFIX + "/api/estop", post_estop)
    r.add_get(PREFIX + "/api/{tail:.+}", get_api)
    r.add_post(PREFIX + "/api/{tail:.+}", post_api)
    r.add_get(PREFIX + "/ws/telemetry", ws_telemetry)
    r.add_get(PREFIX + "/ws/webrtc", ws_webrtc)


async def redirect(request: web.Request) -> web.Response:
    raise web.HTTPFound(f"/fleet/{request.match_info['id']}/")


# ---------------------------------------------------------------------- the hub's checks (server.hub.app)
def _hub():
    from server.hub import app as hub  # the app module imports this one

    return hub


def online_robot(request: web.Request, what: str) -> tuple[str, Principal]:
    """The robot of the path, checked (404, 403) and online (503 ``robot_offline``)."""
    hub = _hub()
    rid = request.match_info["id"]
    p = hub.check_robot(request, rid, what)
    e = request.app[hub.FLEET].robots[rid]
    if not e.online:
        seen = f" (last seen {time.strftime('%H:%M:%S', time.gmtime(e.last_seen_t))} UTC)" if e.last_seen_t else ""
        raise ApiError(f"robot {rid} is offline{seen}", code="robot_offline", status=503)
    return rid, p


def hub_session(p: Principal) -> str:
    return _hub().identity(p)["session"]


def lease_for(p: Principal, lease: Any) -> Any:
    """The robot's lease as this page must see it: the holder's (or requester's) session is the user's hub session
    when the robot says it is them (``you``), else the robot's own (never equal to a hub session)."""
    if not isinstance(lease, dict):
        return lease
    out = copy.deepcopy(lease)
    you = out.get("you")
    key = {"holder": "holder", "requester": "request"}.get(you)
    if key and isinstance(out.get(key), dict):
        out[key]["session"] = hub_session(p)
    out["local_mode"] = False
    return out


def role_here(request: web.Request, rid: str, p: Principal) -> Role:
    """The user's role for this robot: the hub role, viewer if the hub does not let them drive it."""
    hub = _hub()
    role = hub.role_now(request, p)
    if not request.app[hub.HUB_CFG].may(rid, p.user, "drive"):
        role = Role.VIEWER
    return role


# ---------------------------------------------------------------------- the page
async def page(request: web.Request) -> web.Response:
    hub = _hub()
    rid = request.match_info["id"]
    hub.check_robot(request, rid, "view")
    e = request.app[hub.FLEET].robots[rid]
    env = request.app[hub.JINJA]
    desc = e.description
    title = f"{(desc or {}).get('name') or rid} · {request.app[hub.HUB_CFG].fleet} (through the hub)"
    html = env.get_template("index.html").render(title=title, robot=desc, csrf_token=csrf_token(request),
                                                 api_base=f"/fleet/{rid}")
    return web.Response(text=html, content_type="text/html", headers={"Cache-Control": "no-store"})


# ---------------------------------------------------------------------- HTTP
async def get_api(request: web.Request) -> web.Response:
    tail = request.match_info["tail"]
    if tail == "auth/me":
        return await me(request)
    hub = _hub()
    rid, p = online_robot(request, "view")
    fleet = request.app[hub.FLEET]
    if tail == "state":
        return web.json_response(await fleet.rpc(rid, "state", **hub.identity(p)))
    if tail == "robot":
        e = fleet.robots[rid]
        return web.json_response(e.description or (await fleet.rpc(rid, "describe", **hub.identity(p)))["description"])
    if tail == "events":
        return web.json_response({"events": list(fleet.robots[rid].events)})
    if tail == "lease":
        return web.json_response(lease_for(p, (await fleet.rpc(rid, "describe", **hub.identity(p)))["lease"]))
    raise ApiError(f"GET /api/{tail} is not relayed through the hub (docs/fleet.md lists what is)",
                   code="not_relayed", status=404)


async def me(request: web.Request) -> web.Response:
    """The hub's ``/api/auth/me`` for this robot's page: the hub user and session, the role they have *here*, and
    never local mode (the robot's lease is taken through the hub even when the hub has no users)."""
    rid = request.match_info["id"]
    p = _hub().check_robot(request, rid, "view")
    data = orjson.loads((await hub_me(request)).body)
    data.update(session=hub_session(p), role=role_here(request, rid, p).value, local_mode=False, lease=None)
    return web.json_response(data)


async def post_api(request: web.Request) -> web.StreamResponse:
    hub = _hub()
    tail = request.match_info["tail"]
    if tail.startswith("auth/"):  # the hub's own login routes (logout from the lease panel)
        raise web.HTTPTemporaryRedirect(f"/api/{tail}")
    if tail.startswith("lease/"):
        rid, p = online_robot(request, "drive")
        action = tail.split("/", 1)[1]
        if action not in hub.LEASE_ACTIONS:
            raise ValidationError(f"unknown lease action {action!r}; known: {', '.join(hub.LEASE_ACTIONS)}",
                                  code="unknown_op")
        return web.json_response(lease_for(p, await hub.lease_action(request, rid, action)))
    name = COMMAND_BY_PATH.get(f"/api/{tail}")
    if name is None:
        raise ApiError(f"POST /api/{tail} is not a command route of the robot (or not relayed through the hub)",
                       code="not_relayed", status=404)
    rid, p = online_robot(request, "view")
    return web.json_response(await hub.relay_command(request, rid, name, await read_body(request), p))


async def post_estop(request: web.Request) -> web.Response:
    """The page's HTTP e-stop (beside the socket's): the hub's e-stop route, never refused by the hub."""
    return await _hub().post_estop(request)


# ---------------------------------------------------------------------- stamps through the hub
class Relay:
    """One page socket's stamps, relayed (issue 20 §2 through the hub). The hub syncs its clock with the page's (the
    gateway's exchange: ``{"type": "sync", "t1"}`` out, the page's ``t2``/``t3`` back) and with the robot's (the
    robot's ``sync`` op, :meth:`~server.hub.fleet.HubFleet.sync`), so a command's ``sent_t`` reaches the robot on
    the robot's own monotonic clock, with this socket's id as its ``stream`` (the robot keeps its last ``seq`` and
    counts its drops) and the whole path's round trip. Until both clocks are synced ``sent_t`` is left out (the
    robot applies arrival-time rules); ``seq`` always goes, so a reordered command is dropped all the same."""

    def __init__(self, fleet: Any, robot: str) -> None:
        self.fleet, self.robot = fleet, robot
        self.page = LinkClock()
        self.stream = secrets.token_hex(8)  # unique across hub restarts: a new page's seq 1 is not "reordered"

    def stamps(self, body: dict[str, Any]) -> dict[str, Any]:
        """Check the body's ``seq``/``sent_t`` (a wrong one refused, naming it), put ``sent_t`` on the robot's clock
        in place (or drop it), and return what the robot's command path gets beside the body."""
        if "seq" not in body and "sent_t" not in body:
            return {}
        _, sent_t = check_stamps(body)
        robot = self.fleet.clock(self.robot)
        if sent_t is not None:
            hub_t = self.page.to_server(sent_t)
            robot_t = None if hub_t is None else robot.to_client(hub_t)
            if robot_t is None:
                body.pop("sent_t")
            else:
                body["sent_t"] = robot_t
        rtts = [r for r in (self.page.rtt_median_s, robot.rtt_median_s) if r is not None]
        return {"stream": self.stream, **({"rtt_s": round(sum(rtts), 6)} if rtts else {})}

    def answer(self, data: dict[str, Any], out: Any) -> None:
        try:
            self.page.answer(data)
        except ApiError as err:
            out.put(("error", data.get("id"), time.monotonic()), {"type": "error", "id": data.get("id"),
                                                                  "error": err.to_json()})

    async def drive_sync(self, out: Any) -> None:
        """Both exchanges, each when due (:meth:`LinkClock.due`); a slow robot does not hold up the page's."""
        async def page() -> None:
            while True:
                if self.page.due():
                    ping = self.page.ping()
                    out.put(("sync", ping["t1"]), ping)
                await asyncio.sleep(0.05)

        async def robot() -> None:
            while True:
                await self.fleet.sync(self.robot)
                await asyncio.sleep(0.05)

        await asyncio.gather(page(), robot())


# ---------------------------------------------------------------------- the telemetry socket
async def messages(ws: web.WebSocketResponse, out: Any) -> Any:
    """A page socket's text messages, parsed (``{"type": str, ...}``); a malformed one is answered on ``out``."""
    async for msg in ws:
        if msg.type != WSMsgType.TEXT:
            continue
        data = _hub().parse_message(msg.data, out)
        if data is not None:
            yield data


async def ws_telemetry(request: web.Request) -> web.WebSocketResponse:
    """The robot's ``/ws/telemetry`` protocol, relayed (see the module docstring)."""
    hub = _hub()
    rid, p = online_robot(request, "view")
    fleet, cfg = request.app[hub.FLEET], request.app[hub.HUB_CFG]
    who = hub.identity(p)
    try:
        state = await fleet.rpc(rid, "state", **who)
        described = await fleet.rpc(rid, "describe", **who)
    except ApiError as err:
        raise ApiError(f"robot {rid} did not answer: {err.message}", code=err.code, status=err.status) from None
    ws = web.WebSocketResponse(heartbeat=20.0, max_msg_size=64 * 1024)
    await ws.prepare(request)
    out = hub.Outbox()
    relay = Relay(fleet, rid)
    out.put("hello", {"type": "hello", "robot": described.get("description"), "state": state})
    out.put("lease", {"type": "lease", "data": lease_for(p, described.get("lease"))})
    last_lease = [(described.get("summary") or {}).get("lease")]
    events = [0]

    async def push_lease() -> None:
        try:
            lease = (await fleet.rpc(rid, "describe", **who))["lease"]
        except ApiError as err:
            log.debug("lease of %s: %s", rid, err.message)
            return
        out.put("lease", {"type": "lease", "data": lease_for(p, lease)})

    def listen(kind: str, robot: str, data: Any) -> None:
        if robot != rid:
            return
        if kind == "telemetry":  # the robot's own bytes, in the socket's envelope
            out.put("telemetry", b'{"type":"telemetry","data":' + data + b"}")
        elif kind == "event":
            events[0] += 1
            out.put(("event", events[0]), {"type": "event", "data": data})
        elif kind == "summary" and data.get("lease") != last_lease[0]:
            last_lease[0] = data.get("lease")
            spawn(push_lease())
        elif kind == "online" and not data.get("online"):
            asyncio.get_running_loop().create_task(ws.close(code=1011, message=b"robot offline"))

    pending: set[asyncio.Task] = set()

    def spawn(coro: Any) -> None:
        t = asyncio.get_running_loop().create_task(coro)
        pending.add(t)
        t.add_done_callback(pending.discard)

    async def command(msg: dict[str, Any]) -> None:
        name, mid = str(msg.get("type")), msg.get("id")
        body = {k: v for k, v in msg.items() if k not in ("type", "id")}
        try:
            stamps = relay.stamps(body)  # the page's seq/sent_t, sent_t put on the robot's clock
            result = await hub.relay_command(request, rid, name, body, p, **stamps)
        except ApiError as err:
            out.put(("error", mid, time.monotonic()), {"type": "error", "id": mid, "command": name,
                                                       "error": err.to_json()})
            return
        if name != "heartbeat":
            state_now = result.get("state") if isinstance(result, dict) else None
            ack = {"type": "ack", "id": mid, "command": name, "state": state_now}
            if isinstance(result, dict) and result.get("dropped") in ("stale", "reordered"):
                ack["dropped"] = result["dropped"]  # too old or out of order at the robot: not applied, counted
            out.put(("ack", mid, time.monotonic()), ack)
        if name.startswith("lease"):
            spawn(push_lease())

    fleet.listeners.append(listen)
    pump = asyncio.create_task(out.pump(ws, binary=False))
    hub.track_socket(request, ws, pump)
    tasks = {pump, asyncio.create_task(hub.keep_watching(fleet, rid, cfg, who)),
             asyncio.create_task(relay.drive_sync(out))}
    try:
        async for data in messages(ws, out):
            if data["type"] == "ping":
                out.put(("pong", time.monotonic()), {"type": "pong", "id": data.get("id"), "t": data.get("t"),
                                                     "server_t": time.time(), "server_mono": time.monotonic()})
            elif data["type"] == "sync":
                relay.answer(data, out)
            elif not hub.refuse_flood(pending, data, out):
                spawn(command(data))
    finally:
        await hub.end_socket(fleet, listen, {*tasks, *pending})
    return ws


# ---------------------------------------------------------------------- the WebRTC signalling socket
#: how often the page's peer is kept alive at the robot (its rate report comes back): under the robot's KEEP_S
KEEP_EVERY_S = 2.0
MAX_SDP = 64 * 1024


async def ws_webrtc(request: web.Request) -> web.WebSocketResponse:
    """The robot's ``/ws/webrtc`` protocol, its signalling relayed as the robot's signed ``webrtc`` requests
    (server/gateway/fleet/webrtc.py): ``webrtc_config`` on connect, ``offer`` → ``answer``, ``rate`` and
    ``webrtc_state`` from the robot's peer every KEEP_EVERY_S (which keeps it alive there), ``health`` passed on
    with the next keep, ``ping`` → ``pong``. The media flows browser ↔ robot directly (or through the robot's TURN
    server); when this socket closes, the peer is closed at the robot (and expires there if the hub is gone)."""
    hub = _hub()
    rid, p = online_robot(request, "view")
    fleet = request.app[hub.FLEET]
    who = hub.identity(p)
    try:
        config = await fleet.rpc(rid, "webrtc", action="config", **who)
    except ApiError as err:
        raise ApiError(f"robot {rid}: {err.message}", code=err.code, status=err.status) from None
    ws = web.WebSocketResponse(heartbeat=20.0, max_msg_size=MAX_SDP)
    await ws.prepare(request)
    out = hub.Outbox()
    out.put("config", {"type": "webrtc_config", "data": config})
    peer_id = secrets.token_hex(8)
    offered = asyncio.Event()
    lag: list[float | None] = [None]
    last_state: list[str | None] = [None]

    async def offer(sdp: str) -> None:
        try:
            answer = await fleet.rpc(rid, "webrtc", action="offer", peer=peer_id, sdp=sdp, **who)
        except ApiError as err:
            out.put(("error", time.monotonic()), {"type": "error", "error": err.to_json()})
            return
        out.put("answer", {"type": "answer", "sdp": answer["sdp"], "codec": answer.get("codec")})
        offered.set()

    async def keep() -> None:
        await offered.wait()
        while True:
            await asyncio.sleep(KEEP_EVERY_S)
            fields = {} if lag[0] is None else {"lag_ms": lag[0]}
            lag[0] = None
            try:
                kept = await fleet.rpc(rid, "webrtc", action="keep", peer=peer_id, **fields, **who)
            except ApiError as err:
                log.debug("keeping the WebRTC peer of %s: %s", rid, err.message)
                if err.code == "no_peer":
                    out.put(("error", time.monotonic()), {"type": "error", "error": err.to_json()})
                    return
                continue
            out.put("rate", {"type": "rate", "data": kept.get("rate")})
            if kept.get("state") != last_state[0]:
                last_state[0] = kept.get("state")
                out.put(("state", last_state[0]), {"type": "webrtc_state", "data": {"state": last_state[0]}})

    pump = asyncio.create_task(out.pump(ws, binary=False))
    hub.track_socket(request, ws, pump)
    tasks: set[asyncio.Task] = {pump, asyncio.create_task(keep())}
    bucket = TokenBucket(5.0, 20)  # the robot's /ws/webrtc budget: an offer makes a peer there
    try:
        async for data in messages(ws, out):
            kind = data["type"]
            if not bucket.take():
                out.put("rate_limited", {"type": "error", "error": {"code": "rate_limited",
                                                                    "message": "too many signalling messages"}})
                continue
            if kind == "ping":
                out.put(("pong", time.monotonic()), {"type": "pong"})
            elif kind == "health":
                value = data.get("lag_ms")
                if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 60_000:
                    lag[0] = float(value)
            elif kind == "offer" and isinstance(data.get("sdp"), str):
                if any(t.get_name() == "offer" and not t.done() for t in tasks):
                    out.put(("error", time.monotonic()), {"type": "error", "error": {
                        "code": "busy", "message": "an offer is being answered"}})
                else:  # a new offer replaces the peer at the robot, as on its own /ws/webrtc
                    tasks.add(asyncio.create_task(offer(data["sdp"]), name="offer"))
            else:
                out.put(("error", time.monotonic()), {"type": "error", "error": {
                    "code": "unknown_type", "message": f"{str(kind)[:40]!r} is not offer (with an sdp), health "
                                                       "or ping"}})
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        try:
            await fleet.rpc(rid, "webrtc", action="close", peer=peer_id, **who)
        except ApiError as err:  # the robot closes it by itself when it is not kept alive
            log.debug("closing the WebRTC peer of %s: %s", rid, err.message)
    return ws


__all__ = ["add_dashboard_routes", "dashboard_permissions"]
