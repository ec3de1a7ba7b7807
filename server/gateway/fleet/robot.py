"""The robot's side of the fleet: its gateway dials out to the fleet's router and serves the hub from there
(issue 22; docs/fleet.md). In the gateway, never in the runtime: the runtime's loop and its link-loss watchdog
know nothing of fleets, and stay the only thing that decides a stop when the hub, the router or the network
goes away (the hub relays its operator's heartbeats; when they stop, the watchdog stops the robot exactly as
for a dashboard that went away).

Under ``teleop/<fleet>/<robot_id>/`` (:mod:`~server.gateway.fleet.keys`):

* ``alive`` — a liveliness token: the hub sees the robot online while the session lives;
* ``description`` — ``GET /api/robot``'s body, put on every (re)connection and whenever it changes;
* ``summary`` — ``summary_hz`` (1 Hz): state, cause, battery, position, alerts, lease holder, link age;
* ``event`` — the runtime's events as they happen;
* ``telemetry`` — the full snapshots, only while a hub watches (a signed ``watch``, renewed), at the watcher's
  rate up to ``max_watch_hz``;
* ``rpc`` — a queryable for the hub's signed requests: ``command``, ``lease``, ``watch``, ``state``,
  ``describe``, ``session_end``, ``preview`` (one JPEG of the camera, at most 2 new ones a second: video itself
  is never carried over Zenoh), ``sync`` (this robot's monotonic clock, for the hub's clock-sync exchange: relayed
  commands come with ``sent_t`` on this clock, :meth:`FleetRobot.relayed`), ``webrtc`` (a page's WebRTC signalling
  relayed by the hub: the media then flows browser ↔ robot directly, :mod:`server.gateway.fleet.webrtc`).

Every put is latest-wins with congestion control DROP: a slow router or link drops a summary or a snapshot,
never blocks the event loop and never queues old state (Zenoh's default, BLOCK, would). Commands are queries,
answered once: after a router outage nothing is replayed (measured before: MQTT QoS 1 and nats-py replayed 3 s of
joystick commands; Zenoh none), and the hub's counter makes a captured request useless twice
(:mod:`~server.gateway.fleet.trust`).

A command goes through :meth:`~server.gateway.commands.Dispatcher.dispatch` with the ``fleet`` transport, the
same validation, permission, lease, rate limit and recording as HTTP and the websocket. The sender is the hub
user named in the signed request (``alice@hub``), with the role the hub gave (capped at ``max_role``) and a
session of this robot's own, one per hub session: this robot's lease decides who drives, and a hub user takes it
through the hub (``lease`` ``take``), as a local operator does with ``POST /api/lease/take``.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import math
import time
from types import SimpleNamespace
from typing import Any

import orjson
import zenoh
from aiohttp import web

from server.errors import ApiError, ValidationError
from server.gateway.auth import AUTH_KEY, Principal, Role
from server.gateway.auth.errors import Forbidden
from server.gateway.auth.permissions import OPERATOR, VIEWER
from server.gateway.auth.sessions import Session
from server.gateway.commands import dispatcher
from server.gateway.fleet.config import FleetConfig
from server.gateway.fleet.keys import RobotKeys
from server.gateway.fleet.link import ZenohLink, undeclare_all, zenoh_config
from server.gateway.fleet.trust import MAX_REQUEST_BYTES, Untrusted, Verifier
from server.gateway.fleet.webrtc import FleetWebrtc
from server.gateway.hooks import HOOKS
from server.gateway.keys import HUB
from server.gateway.link import RelayedStream
from server.gateway.state import current_snapshot, robot_description

log = logging.getLogger(__name__)

#: requests answered at once at most; beyond, refused at once (memory stays bounded under a flood of queries)
MAX_IN_FLIGHT = 256
OPS = ("command", "lease", "watch", "state", "describe", "session_end", "preview", "sync", "webrtc")
#: relayed operator sockets whose command streams are kept (their seq and drop counts); the oldest go first
MAX_RELAYED_STREAMS = 64
#: the low-rate preview (issue 22: video is not carried over Zenoh; until WebRTC is relayed, ≤ 2 fps on demand):
#: asked again sooner than this, the robot answers the frame it gave last
PREVIEW_INTERVAL_S = 0.5
LEASE_ACTIONS = ("take", "request", "release", "handover")


def summarise(snapshot: dict[str, Any], lease: dict[str, Any] | None) -> dict[str, Any]:
    """The 1 Hz summary of one snapshot: what a fleet card shows.

    >>> s = summarise({"state": "running", "cause": None, "values": {"battery_v": 12.1}, "stale": ["sonar"],
    ...                "link": {"age_s": 0.02}, "estimation": {"x": 1.0, "y": 2.0, "yaw": 0.5}}, None)
    >>> s["state"], s["battery"], s["position"], s["alerts"], s["link"], s["lease"]
    ('running', 12.1, {'x': 1.0, 'y': 2.0, 'yaw': 0.5}, ['stale: sonar'], {'age_s': 0.02}, None)
    """
    cause = snapshot.get("cause")
    values = snapshot.get("values") or {}
    position = None
    for source in (snapshot.get("estimation"), snapshot.get("position"), snapshot.get("truth")):
        if isinstance(source, dict) and "x" in source and "y" in source:
            position = {k: source[k] for k in ("x", "y", "yaw") if isinstance(source.get(k), (int, float))}
            break
    alerts = [f"stale: {ch}" for ch in snapshot.get("stale") or []]
    driver = snapshot.get("driver") or {}
    if driver.get("state") not in (None, "ok", "active", "inactive", "ready", "idle"):
        alerts.append(f"driver: {driver.get('state')}")
    holder = (lease or {}).get("holder")
    link = snapshot.get("link") or {}
    return {"state": snapshot.get("state"),
            "cause": {"trigger": cause.get("trigger"), "message": cause.get("message")} if isinstance(cause, dict)
            else None,
            "battery": values.get("battery_v"), "position": position, "alerts": alerts,
            "lease": holder.get("user") if isinstance(holder, dict) else None,
            "link": {"age_s": link.get("age_s")}}


class FleetRobot:
    """The fleet link of one robot's gateway (see the module docstring)."""

    def __init__(self, app: web.Application, cfg: FleetConfig) -> None:
        self.app = app
        self.cfg = cfg
        self.keys = RobotKeys(cfg.fleet, cfg.robot_id)
        self.verifier = Verifier.from_file(cfg.hub_public_key)
        self.max_role = Role.parse(cfg.max_role)
        self.link = ZenohLink(self.zenoh_config, self.declare, name=f"fleet {cfg.fleet}/{cfg.robot_id}",
                              check_s=cfg.check_s)
        self.declarations: list[Any] = []
        self.publishers: dict[str, Any] = {}
        self.loop: asyncio.AbstractEventLoop | None = None
        self.tasks: set[asyncio.Task] = set()
        self.sessions: dict[tuple[str, str], Session] = {}
        self.description: bytes | None = None
        self.watch_until = 0.0
        self.watch_interval_s = 1.0 / cfg.max_watch_hz
        self.last_telemetry = 0.0
        self.last_preview: tuple[float, dict[str, Any]] | None = None
        self.counts = {"requests": 0, "refused": 0, "untrusted": 0, "telemetry": 0, "summaries": 0, "events": 0}
        self.streams: dict[str, RelayedStream] = {}
        self.webrtc = FleetWebrtc(app)

    def zenoh_config(self) -> zenoh.Config:
        c = self.cfg
        return zenoh_config("client", connect=c.router, ca_file=c.ca_file, cert_file=c.cert_file,
                            key_file=c.key_file)

    # ------------------------------------------------------------------ declarations (on every new router)
    def declare(self, session: zenoh.Session) -> None:
        undeclare_all(self.declarations)
        self.publishers.clear()
        k = self.keys
        drop = zenoh.CongestionControl.DROP
        for name, key, priority in (("summary", k.summary, zenoh.Priority.DATA),
                                    ("telemetry", k.telemetry, zenoh.Priority.DATA),
                                    ("event", k.event, zenoh.Priority.DATA_HIGH),
                                    ("description", k.description, zenoh.Priority.DATA)):
            pub = session.declare_publisher(key, congestion_control=drop, priority=priority)
            self.publishers[name] = pub
            self.declarations.append(pub)
        self.declarations.append(session.declare_queryable(k.rpc, self.on_query))
        self.declarations.append(session.liveliness().declare_token(k.alive))
        self.description = None  # the new router's subscribers get it again
        self.publish_description()
        self.publish_summary()

    def put(self, name: str, data: bytes) -> bool:
        pub = self.publishers.get(name)
        if pub is None:
            return False
        try:
            pub.put(data)
        except Exception as err:  # noqa: BLE001 - a session closing under us: the next router declares again
            log.debug("fleet put %s failed: %s", name, err)
            return False
        return True

    def publish_description(self) -> None:
        desc = robot_description(self.app)
        if desc is None:
            return
        data = orjson.dumps(desc)
        if data != self.description and self.put("description", data):
            self.description = data

    def summary(self) -> dict[str, Any]:
        auth = self.app.get(AUTH_KEY)
        lease = auth.lease.to_json() if auth is not None else None
        desc = robot_description(self.app) or {}
        return {"id": self.cfg.robot_id, "fleet": self.cfg.fleet, "t": time.time(), "name": desc.get("name"),
                "profile": desc.get("profile"), **summarise(current_snapshot(self.app), lease)}

    def publish_summary(self) -> None:
        if self.put("summary", orjson.dumps(self.summary())):
            self.counts["summaries"] += 1

    def on_snapshot(self, data: bytes) -> None:
        """A hook: the runtime's serialised snapshot, passed on only while watched, at the watcher's rate."""
        now = time.monotonic()
        # (a quarter of the interval's slack: snapshots that arrive with jitter at exactly the watcher's rate
        # are not dropped every other one; measured: 32 of 50 Hz passed without it)
        if now >= self.watch_until or now - self.last_telemetry < 0.75 * self.watch_interval_s:
            return
        if self.put("telemetry", data):
            self.last_telemetry = now
            self.counts["telemetry"] += 1

    def on_event(self, event: dict[str, Any]) -> None:
        if self.put("event", orjson.dumps({"robot": self.cfg.robot_id, **event}, default=str)):
            self.counts["events"] += 1

    # ------------------------------------------------------------------ the hub's requests
    def on_query(self, query: zenoh.Query) -> None:
        """Zenoh's thread: hand the query to the event loop (checked and answered there)."""
        loop = self.loop
        if loop is not None:
            loop.call_soon_threadsafe(self.spawn, query)

    def spawn(self, query: zenoh.Query) -> None:
        if len(self.tasks) >= MAX_IN_FLIGHT:  # a flood (the router's ACL failed, or a hub bug): refuse, do not queue
            self.counts["refused"] += 1
            try:
                query.reply(self.keys.rpc, orjson.dumps({"ok": False, "status": 503, "error": {
                    "code": "busy", "message": f"over {MAX_IN_FLIGHT} requests in flight: refused"}}))
            finally:
                query.drop()
            return
        task = asyncio.get_running_loop().create_task(self.answer(query))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def answer(self, query: zenoh.Query) -> None:
        self.counts["requests"] += 1
        try:
            reply: dict[str, Any] = {"ok": True, "result": await self.handle(query)}
        except ApiError as err:
            self.counts["refused"] += 1
            if isinstance(err, Untrusted):
                self.counts["untrusted"] += 1
            reply = {"ok": False, "status": err.status, "error": err.to_json()}
            if err.details is not None:
                reply["error"]["details"] = err.details
        except Exception:  # noqa: BLE001 - a bug answers an error (logged), never leaves the hub waiting
            log.exception("fleet request failed")
            self.counts["refused"] += 1
            reply = {"ok": False, "status": 500, "error": {"code": "internal", "message": "the robot failed to "
                                                           "answer this request (its log says why)"}}
        try:
            query.reply(self.keys.rpc, orjson.dumps(reply, default=str))
        except Exception as err:  # noqa: BLE001 - the querier gave up (its timeout): nothing to answer
            log.debug("fleet reply failed: %s", err)
        finally:
            query.drop()

    def open(self, query: zenoh.Query) -> dict[str, Any]:
        payload = query.payload.to_bytes() if query.payload is not None else b""
        if len(payload) > MAX_REQUEST_BYTES:
            raise Untrusted(f"request of {len(payload)} bytes is over {MAX_REQUEST_BYTES}", code="too_large",
                            status=413)
        signature = query.attachment.to_bytes() if query.attachment is not None else None
        req = self.verifier.open(payload, signature, replay_ok=_is_estop(payload))
        if req.get("fleet") != self.cfg.fleet or req.get("robot") != self.cfg.robot_id:
            raise Untrusted(f"signed for {req.get('fleet')}/{req.get('robot')}, not this robot "
                            f"({self.cfg.fleet}/{self.cfg.robot_id})", code="wrong_robot", status=403)
        return req

    async def handle(self, query: zenoh.Query) -> Any:
        req = self.open(query)
        op = req.get("op")
        if op not in OPS:
            raise ValidationError(f"unknown op {op!r}; known: {', '.join(OPS)}", code="unknown_op")
        if op == "sync":  # the hub measures its clock against ours (its relayed stamps come on our clock)
            t2 = time.monotonic()
            return {"t2": t2, "t3": time.monotonic()}
        principal = self.principal(req)
        auth = self.app[AUTH_KEY]
        if op == "command":
            name, body = req.get("name"), req.get("body", {})
            if not isinstance(body, dict):
                raise ValidationError("body must be a JSON object", code="wrong_type")
            return await dispatcher(self.app).dispatch(principal, name, body, "fleet", stream=self.relayed(req))
        if op == "lease":
            return self.lease(principal, req)
        if op == "session_end":
            session = self.sessions.pop(self.session_key(req), None)
            if session is not None:
                auth.sessions.end(session, "logout")
            return {"ended": session is not None}
        auth.authorize_rule(principal, VIEWER)
        if op == "watch":
            rate = req.get("rate_hz", 10.0)
            if not isinstance(rate, (int, float)) or not 0.1 <= rate <= 1000:
                raise ValidationError("rate_hz must be a number in [0.1, 1000]", code="out_of_limits")
            self.watch_interval_s = 1.0 / min(float(rate), self.cfg.max_watch_hz)
            self.watch_until = time.monotonic() + self.cfg.watch_s
            return {"rate_hz": round(1.0 / self.watch_interval_s, 3), "for_s": self.cfg.watch_s}
        if op == "state":
            return current_snapshot(self.app)
        if op == "preview":
            return await self.preview()
        if op == "webrtc":  # the hub relays a page's signalling; the media goes direct (server/gateway/fleet/webrtc.py)
            return await self.webrtc.handle(req, str(req.get("user")), str(req.get("session")))
        return {"description": robot_description(self.app), "summary": self.summary(),
                "lease": self.lease_json(principal), "link": self.status()}

    def relayed(self, req: dict[str, Any]) -> RelayedStream | None:
        """The command stream of the operator socket the hub relays this command from (``stream``: its id on the
        hub; ``rtt_s``: the whole path's round trip), or None: arrival-time rules (HTTP through the hub, a hub
        that cannot convert the operator's stamps yet). The hub sends ``seq``/``sent_t`` in the body, ``sent_t``
        already on this robot's clock (server/hub/dashboard.py); the command path checks them."""
        sid, rtt = req.get("stream"), req.get("rtt_s")
        if sid is None:
            return None
        if not isinstance(sid, str) or not 0 < len(sid) <= 64:
            raise ValidationError("stream must be a string of 1 to 64 characters", code="wrong_type")
        if rtt is not None and (isinstance(rtt, bool) or not isinstance(rtt, (int, float))
                                or not math.isfinite(rtt) or not 0 <= rtt <= 60):
            raise ValidationError("rtt_s must be a number of seconds in [0, 60]", code="out_of_limits")
        name = f"hub:{sid}"
        stream = self.streams.pop(name, None)
        if stream is None:
            stream = RelayedStream(name, totals=self.app[HUB].commands_dropped if HUB in self.app else None)
        self.streams[name] = stream  # the newest last: the oldest are forgotten first
        while len(self.streams) > MAX_RELAYED_STREAMS:
            self.streams.pop(next(iter(self.streams)))
        stream.rtt_s = None if rtt is None else float(rtt)
        return stream

    async def preview(self) -> dict[str, Any]:
        """One JPEG of the camera for the hub (base64; ``seq``, ``capture_t``), at most one new frame per
        ``PREVIEW_INTERVAL_S`` whoever asks: the camera's own snapshot route (``GET /api/video/snapshot.jpg``:
        it wakes an idle camera and waits for a fresh frame, or says why there is none)."""
        now = time.monotonic()
        if self.last_preview is not None and now - self.last_preview[0] < PREVIEW_INTERVAL_S:
            return self.last_preview[1]
        from server.gateway.video import VIDEO_KEY
        from server.gateway.video.routes import _snapshot

        if self.app.get(VIDEO_KEY) is None:
            raise ApiError("this robot has no video (its [video] is off)", code="no_frame", status=503)
        resp = await _snapshot(SimpleNamespace(app=self.app))  # the route reads request.app only
        if resp.status != 200:
            err = orjson.loads(resp.body).get("error", {})
            raise ApiError(err.get("message", "no video frame"), code=err.get("code", "no_frame"), status=resp.status)
        result = {"jpeg": base64.b64encode(resp.body).decode(), "seq": int(resp.headers["X-Frame-Seq"]),
                  "capture_t": float(resp.headers["X-Capture-Time"])}
        self.last_preview = (now, result)
        return result

    def lease_json(self, principal: Principal) -> dict[str, Any]:
        """The lease as ``GET /api/lease`` shows it to this hub user: ``you`` is ``holder``, ``requester`` or None
        (the hub maps this robot's session of the user onto the user's hub session for the dashboard)."""
        auth = self.app[AUTH_KEY]
        out = auth.lease_json()
        sid = principal.session.id if principal.session is not None else None
        pending = auth.lease.pending
        out["you"] = ("holder" if auth.lease.holds(sid) else
                      "requester" if sid and pending and pending.session == sid else None)
        return out

    def lease(self, principal: Principal, req: dict[str, Any]) -> dict[str, Any]:
        """The lease operations of ``POST /api/lease/...`` for a hub user (operator; force: admin)."""
        auth = self.app[AUTH_KEY]
        action = req.get("action")
        if action not in LEASE_ACTIONS:
            raise ValidationError(f"unknown lease action {action!r}; known: {', '.join(LEASE_ACTIONS)}",
                                  code="unknown_op")
        auth.authorize_rule(principal, OPERATOR)
        sid = principal.session.id
        if action == "take":
            force = req.get("force", False) is True
            if force and not principal.role.at_least(Role.ADMIN):
                raise Forbidden("only an admin may take the lease by force")
            auth.lease.take(sid, principal.user, force=force)
        elif action == "request":
            auth.lease.request(sid, principal.user)
        elif action == "release":
            auth.lease.release(sid)
        else:
            auth.lease.handover(sid, accept=req.get("accept", True) is not False)
        return self.lease_json(principal)

    @staticmethod
    def session_key(req: dict[str, Any]) -> tuple[str, str]:
        return str(req.get("user")), str(req.get("session"))

    def principal(self, req: dict[str, Any]) -> Principal:
        """The hub user of a signed request, as this robot's checks see them: ``<user>@hub`` with the hub's role
        (capped at ``max_role``) and a session of this robot's own for that hub session (the lease's party)."""
        user, role_text, hub_session = req.get("user"), req.get("role"), req.get("session")
        if not isinstance(user, str) or not user or not isinstance(hub_session, str) or not hub_session:
            raise Untrusted("signed request names no user or session", code="malformed", status=400)
        try:
            role = Role.parse(str(role_text))
        except ValueError as err:
            raise Untrusted(str(err), code="malformed", status=400) from None
        if not self.max_role.at_least(role):
            role = self.max_role
        auth = self.app[AUTH_KEY]
        key = self.session_key(req)
        session = self.sessions.get(key)
        if session is None or not auth.sessions.alive(session):
            name = f"{user}@hub"
            _token, session = auth.sessions.create(name, via="fleet", remote=f"fleet/{user}")  # token never used
            self.sessions[key] = session
            for k in [k for k, s in self.sessions.items() if s.ended]:
                del self.sessions[k]
        return Principal(session.user, role, "fleet", f"fleet/{user}", external=True, session=session)

    # ------------------------------------------------------------------ lifecycle
    def status(self) -> dict[str, Any]:
        drops = self.app[HUB].runtime_drops() if HUB in self.app else None
        return {"fleet": self.cfg.fleet, "robot_id": self.cfg.robot_id, **self.link.status(),
                "watched": time.monotonic() < self.watch_until, **self.counts,
                "relayed_streams": [s.to_json(drops) for s in self.streams.values()], "webrtc": self.webrtc.status()}

    async def ticker(self) -> None:
        period = 1.0 / self.cfg.summary_hz
        while True:
            await asyncio.sleep(period)
            if self.link.connected:
                self.publish_description()
                self.publish_summary()

    async def ctx(self, app: web.Application):
        """cleanup_ctx: dial out, publish, answer; on the way down the token goes (the hub sees it offline)."""
        self.loop = asyncio.get_running_loop()
        hooks = app[HOOKS]
        hooks.on_snapshot.append(self.on_snapshot)
        hooks.on_event.append(self.on_event)
        runner = asyncio.create_task(self.link.run(), name="fleet-link")
        ticker = asyncio.create_task(self.ticker(), name="fleet-summary")
        expiry = asyncio.create_task(self.webrtc.run(), name="fleet-webrtc-expiry")
        try:
            yield
        finally:
            for t in (runner, ticker, expiry, *self.tasks):
                t.cancel()
            await asyncio.gather(runner, ticker, expiry, *self.tasks, return_exceptions=True)
            await self.webrtc.close()
            undeclare_all(self.declarations)
            self.publishers.clear()
            await self.link.close()


def _is_estop(payload: bytes) -> bool:
    try:
        req = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return False
    return isinstance(req, dict) and req.get("op") == "command" and req.get("name") == "estop"


__all__ = ["FleetRobot", "summarise"]
