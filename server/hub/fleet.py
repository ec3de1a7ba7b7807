"""The hub's view of the fleet: who is online (liveliness), their summaries, descriptions and events as the robots
publish them, and the one way the hub asks a robot anything: a signed query (:meth:`HubFleet.rpc`).

All Zenoh callbacks land on Zenoh's threads and are handed to the event loop at once
(``call_soon_threadsafe``): a slow handler there would stall reception for every robot (zenoh-python's own
warning). Latest wins everywhere: a robot's summary replaces the last one; the watched robot's telemetry is
passed to its websocket clients as the newest snapshot only (:class:`~server.gateway.latest.LatestSlot`-like:
a client that cannot keep up skips snapshots, never queues them).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import orjson
import zenoh

from server.errors import ApiError
from server.gateway.fleet.keys import FleetKeys, robot_of
from server.gateway.fleet.robot import PREVIEW_INTERVAL_S
from server.gateway.fleet.link import ZenohLink, undeclare_all, zenoh_config
from server.gateway.fleet.trust import Signer
from server.gateway.link import LinkClock
from server.hub.config import HubConfig
from server.hub.events import FleetEventLog

log = logging.getLogger(__name__)


@dataclass
class RobotEntry:
    """What the hub knows of one robot."""

    id: str
    online: bool = False
    last_seen_t: float | None = None
    summary: dict[str, Any] = field(default_factory=dict)
    description: dict[str, Any] | None = None
    events: collections.deque = field(default_factory=lambda: collections.deque(maxlen=500))
    summary_latency_s: float | None = None

    def to_json(self) -> dict[str, Any]:
        s = self.summary
        return {"id": self.id, "online": self.online, "last_seen_t": self.last_seen_t, "state": s.get("state"),
                "cause": s.get("cause"), "battery": s.get("battery"), "position": s.get("position"),
                "lease": s.get("lease"), "link": s.get("link"), "alerts": s.get("alerts", []),
                "name": s.get("name") or (self.description or {}).get("name"),
                "profile": s.get("profile") or (self.description or {}).get("profile")}


class HubFleet:
    """The hub's Zenoh session and its robots (see the module docstring)."""

    def __init__(self, cfg: HubConfig, signer: Signer) -> None:
        self.cfg = cfg
        self.signer = signer
        self.keys = FleetKeys(cfg.fleet)
        self.robots: dict[str, RobotEntry] = {}
        self.link = ZenohLink(self.zenoh_config, self.declare, name=f"hub {cfg.fleet}", check_s=cfg.check_s)
        self.declarations: list[Any] = []
        self.loop: asyncio.AbstractEventLoop | None = None
        #: called on the event loop: (kind, robot id, data) for "summary", "online", "event", "telemetry"
        self.listeners: list[Callable[[str, str, Any], None]] = []
        self.counts = {"summaries": 0, "events": 0, "telemetry": 0, "requests": 0, "timeouts": 0}
        self.task: asyncio.Task | None = None
        #: robot → (monotonic time asked, its preview request): shared by every viewer for PREVIEW_INTERVAL_S
        self.previews: dict[str, tuple[float, asyncio.Future]] = {}
        #: the fleet's events as MCAP, one file per robot per UTC day (None: ``events_dir = ""``)
        self.event_log = FleetEventLog(cfg.events_dir, cfg.fleet) if cfg.events_dir else None
        #: robot → the hub's clock measured against the robot's (``sync``): relayed stamps go on the robot's clock
        self.clocks: dict[str, LinkClock] = {}
        self._syncing: set[str] = set()

    def zenoh_config(self) -> zenoh.Config:
        c = self.cfg
        return zenoh_config("client", connect=c.router, ca_file=c.ca_file, cert_file=c.cert_file,
                            key_file=c.tls_key_file)

    def entry(self, robot: str) -> RobotEntry:
        e = self.robots.get(robot)
        if e is None:
            e = self.robots[robot] = RobotEntry(robot)
            e.events = collections.deque(maxlen=self.cfg.events_kept)
        return e

    # ------------------------------------------------------------------ declarations
    def declare(self, session: zenoh.Session) -> None:
        undeclare_all(self.declarations)
        k = self.keys
        for leaf, kind in (("summary", "summary"), ("event", "event"), ("description", "description"),
                           ("telemetry", "telemetry")):
            self.declarations.append(session.declare_subscriber(k.all(leaf), self._sample_cb(kind)))
        self.declarations.append(session.liveliness().declare_subscriber(k.all("alive"), self._on_alive,
                                                                         history=True))

    def _sample_cb(self, kind: str) -> Callable[[zenoh.Sample], None]:
        def cb(sample: zenoh.Sample) -> None:
            robot = robot_of(str(sample.key_expr))
            if robot is not None and self.loop is not None:
                self.loop.call_soon_threadsafe(self.on_sample, kind, robot, sample.payload.to_bytes(), time.time())
        return cb

    def _on_alive(self, sample: zenoh.Sample) -> None:
        robot = robot_of(str(sample.key_expr))
        if robot is not None and self.loop is not None:
            self.loop.call_soon_threadsafe(self.on_alive, robot, sample.kind == zenoh.SampleKind.PUT)

    def notify(self, kind: str, robot: str, data: Any) -> None:
        for fn in list(self.listeners):
            try:
                fn(kind, robot, data)
            except Exception:  # noqa: BLE001 - one client's bug must not stop the fleet's view
                log.exception("fleet listener failed")

    def on_alive(self, robot: str, online: bool) -> None:
        e = self.entry(robot)
        e.online = online
        e.last_seen_t = time.time()
        log.info("robot %s %s", robot, "online" if online else "offline")
        self.record_event(robot, {"trigger": "online" if online else "offline", "wall_t": e.last_seen_t,
                                  "kind": "fleet", "message": f"{robot} {'online' if online else 'offline'}"})
        self.notify("online", robot, e.to_json())
        if online and e.description is None:
            self.spawn(self.fetch_description(robot))

    def on_sample(self, kind: str, robot: str, payload: bytes, received_t: float) -> None:
        e = self.entry(robot)
        if kind == "telemetry":  # passed on as the robot serialised it
            self.counts["telemetry"] += 1
            self.notify("telemetry", robot, payload)
            return
        try:
            data = orjson.loads(payload)
        except orjson.JSONDecodeError:
            log.warning("robot %s sent a %s that is not JSON", robot, kind)
            return
        if not isinstance(data, dict):
            return
        if kind == "summary":
            self.counts["summaries"] += 1
            e.summary = data
            e.last_seen_t = received_t
            if isinstance(data.get("t"), (int, float)):
                e.summary_latency_s = received_t - data["t"]
            self.notify("summary", robot, e.to_json() | {"t": data.get("t")})
        elif kind == "description":
            e.description = data
        elif kind == "event":
            self.counts["events"] += 1
            self.record_event(robot, data)
            self.notify("event", robot, data)

    def record_event(self, robot: str, event: dict[str, Any]) -> None:
        e = self.entry(robot)
        e.events.append(event)
        if self.event_log is not None:
            self.event_log.record(robot, event)  # a queue: the writer thread does the I/O

    def spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        task.add_done_callback(lambda t: t.exception() if not t.cancelled() else None)

    async def fetch_description(self, robot: str) -> None:
        try:
            result = await self.rpc(robot, "describe", user="hub", role="viewer", session="hub")
        except ApiError as err:
            log.info("describe %s: %s", robot, err.message)
            return
        e = self.entry(robot)
        e.description = result.get("description")
        if isinstance(result.get("summary"), dict):
            e.summary = result["summary"]

    # ------------------------------------------------------------------ asking a robot
    def clock(self, robot: str) -> LinkClock:
        """The hub's clock against ``robot``'s (the robot is the "client" side: its offset is robot − hub)."""
        c = self.clocks.get(robot)
        if c is None:
            c = self.clocks[robot] = LinkClock(lossy=True)  # several requests may be in flight
        return c

    async def sync(self, robot: str) -> None:
        """One clock-sync exchange with ``robot`` when one is due (the robot answers its ``t2``/``t3``; one in flight
        per robot). Errors are the link's: the next exchange tries again."""
        c = self.clock(robot)
        if robot in self._syncing or not c.due():
            return
        self._syncing.add(robot)
        try:
            t1 = c.ping()["t1"]
            try:
                r = await self.rpc(robot, "sync", user="hub", role="viewer", session="hub-sync")
            except ApiError as err:
                log.debug("clock sync with %s: %s", robot, err.message)
                return
            try:
                if not isinstance(r, dict):
                    raise ApiError(f"a sync answer must be an object, not {type(r).__name__}", code="wrong_type")
                c.answer({"t1": t1, "t2": r.get("t2"), "t3": r.get("t3")})
            except ApiError as err:
                log.warning("robot %s answered the clock sync wrongly: %s", robot, err.message)
        finally:
            self._syncing.discard(robot)

    async def rpc(self, robot: str, op: str, *, user: str, role: str, session: str, **fields: Any) -> Any:
        """One signed request to ``robot``; its result, or the robot's refusal raised as an :class:`ApiError`
        (504 ``robot_unreachable`` without an answer within ``request_timeout_s``)."""
        zs = self.link.session
        if zs is None or not self.link.connected:
            raise ApiError("the hub has no router now", code="router_unreachable", status=503)
        payload, sig = self.signer.sign({"op": op, "fleet": self.cfg.fleet, "robot": robot, "user": user,
                                         "role": role, "session": session, **fields})
        loop = asyncio.get_running_loop()
        fut: asyncio.Future = loop.create_future()
        got: list[bytes] = []

        def on_reply(reply: zenoh.Reply) -> None:
            if reply.ok is not None:
                got.append(reply.ok.payload.to_bytes())

        def on_done() -> None:
            loop.call_soon_threadsafe(lambda: fut.done() or fut.set_result(got[0] if got else None))

        self.counts["requests"] += 1
        zs.get(self.keys.robot(robot).rpc, zenoh.handlers.Callback(on_reply, on_done), payload=payload,
               attachment=sig, timeout=self.cfg.request_timeout_s,
               congestion_control=zenoh.CongestionControl.DROP)
        try:
            raw = await asyncio.wait_for(fut, self.cfg.request_timeout_s + 2.0)
        except asyncio.TimeoutError:
            raw = None
        if raw is None:
            self.counts["timeouts"] += 1
            raise ApiError(f"robot {robot} did not answer within {self.cfg.request_timeout_s:g} s",
                           code="robot_unreachable", status=504)
        reply = orjson.loads(raw)
        if reply.get("ok"):
            return reply.get("result")
        err = reply.get("error") or {}
        raise ApiError(err.get("message", "refused by the robot"), code=err.get("code", "refused"),
                       status=int(reply.get("status", 502)), details=err.get("details"))

    async def preview(self, robot: str, **who: str) -> dict[str, Any]:
        """The robot's camera preview (``jpeg`` bytes, ``seq``, ``capture_t``): one request per robot per
        ``PREVIEW_INTERVAL_S`` whoever asks (concurrent askers share it), so a robot sends ≤ 2 JPEGs a second."""
        cached = self.previews.get(robot)
        now = time.monotonic()
        if cached is not None and (not cached[1].done() or now - cached[0] < PREVIEW_INTERVAL_S):
            return await asyncio.shield(cached[1])
        fut = asyncio.ensure_future(self.rpc(robot, "preview", **who))
        self.previews[robot] = (now, fut)
        try:
            result = await asyncio.shield(fut)
        except ApiError:
            self.previews.pop(robot, None)  # the next asker tries again
            raise
        return result

    # ------------------------------------------------------------------ lifecycle
    def status(self) -> dict[str, Any]:
        return {"fleet": self.cfg.fleet, **self.link.status(), **self.counts,
                **(self.event_log.status() if self.event_log is not None else {}),
                "robots": len(self.robots), "online": sum(e.online for e in self.robots.values())}

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        if self.event_log is not None:
            self.event_log.start()
        self.task = asyncio.create_task(self.link.run(), name="hub-link")

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
        undeclare_all(self.declarations)
        await self.link.close()
        if self.event_log is not None:
            await asyncio.to_thread(self.event_log.close)


__all__ = ["HubFleet", "RobotEntry"]
