"""``python -m server replay FILE``: the dashboard driven by a recording, with no robot attached.

The same gateway app (:func:`server.gateway.app.create_app`) serves the same dashboard; only
its runtime client is replaced by a :class:`ReplayRuntime`, which offers the surface the app
uses (the robot description, the newest snapshot, ``request``, the snapshot/event/link
callbacks, start/stop) and is fed by a :class:`~server.gateway.recording.replay.ReplaySource`
instead of the runtime's socket. Recorded snapshots are forwarded byte for byte, so the
gauges, plots and badges behave as they did live; recorded events reach the event log.

No runtime, no driver: every robot command is refused with 409 ``replay`` — over HTTP by a
middleware before any handler runs, over the websocket by ``ReplayRuntime.request`` — except
the e-stop, which is never refused: HTTP and websocket alike answer it (200, an ``ack``) with
that refusal as its ``warning`` and ``latch: "unconfirmed"`` (issue 18: HTTP answered 409). There is no recorder (``/api/recordings/start`` is 409 ``no_recorder``)
and no camera (``[video]`` is forced off: recorded frames are shown by Foxglove, not here).
Playback is controlled through ``/api/replay`` (play, pause, seek, speed; see
docs/recording.md) and the dashboard's REPLAY banner (web/static/js/replay.js).

``GET /api/events`` answers with the recorded events up to the playback position;
``GET /api/acquisition`` with the newest recorded acquisition settings before it.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from server.config import DEFAULT_CONFIG, GATEWAY_TABLES, ConfigError, load_config, parse_overrides
from server.gateway.commands import ESTOP_COMMAND, REGISTRY
from server.procutil import say_line
from server.gateway.recording import topics
from server.gateway.recording.reader import Msg, Recording, RecordingError
from server.gateway.recording.replay import ReplaySource
from server.gateway.recording.routes import replay_refusal
from server.runtime_api.client import RuntimeClient

log = logging.getLogger("teleop.replay")

#: settings routes that act on the robot or its camera (no command: not in the registry)
SETTINGS_ROUTES = ("/api/acquisition", "/api/debug/", "/api/video")
#: HTTP routes that act on the robot: every command's (the registry's) and the settings'; refused in replay mode
#: whatever their method (GETs of them are reads); not the e-stop, which is never refused (it is answered with the
#: refusal as its warning)
ROBOT_ROUTES = tuple(p for p in REGISTRY.robot_routes() if p != ESTOP_COMMAND.path) + SETTINGS_ROUTES
STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class ReplayRuntime(RuntimeClient):
    """A :class:`RuntimeClient` whose robot is a recording (see the module docstring)."""

    live = False  # a recorded link loss is history: it does not end the lease of whoever watches the replay

    def __init__(self, source: ReplaySource, *, autoplay: bool = True, period_s: float = 0.02) -> None:
        super().__init__(f"replay:{source.path.name}")
        self.replay_source = source
        self.autoplay = autoplay
        self.period_s = period_s
        robot = dict(source.robot)
        robot.setdefault("name", source.info.get("robot") or source.path.stem)
        robot.setdefault("profile", source.info.get("profile") or "")
        robot.setdefault("driver", "replay")
        robot.setdefault("channels", [])
        robot.setdefault("limits", {"linear_m_s": [0.0, 0.0], "angular_rad_s": [0.0, 0.0]})
        robot["replay"] = {"file": source.path.name}
        self.description = robot
        # the recording's lookups (events, settings up to the playback position: a scan of a long file) have a
        # thread of their own: on the default pool they queued behind, and held up, the gateway's other work
        self._lookups = ThreadPoolExecutor(1, thread_name_prefix="replay-lookup")

    async def _lookup(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._lookups, fn, *args)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        self._task = asyncio.create_task(self.run(), name="replay")

    async def run(self) -> None:
        source = self.replay_source
        # show the first instant at once (a paused replay too): the snapshot at the start is primed
        await asyncio.to_thread(source.seek, min(source.start_t + 1e-3, source.end_t))
        if self.autoplay:
            source.play()
        self.connected = True
        self.connects += 1
        self.down_since = None
        self._connected_event.set()
        self.on_link(True)
        await source.run(self._emit, self.period_s)

    async def stop(self) -> None:
        await super().stop()
        self.connected = False
        await asyncio.to_thread(self.replay_source.close)
        self._lookups.shutdown(wait=False, cancel_futures=True)

    def _emit(self, m: Msg) -> None:
        if m.topic == topics.TELEMETRY:
            data = bytes(m.data)
            self.latest = data
            self.on_snapshot(data)
        elif m.topic == topics.EVENTS:
            try:
                ev = orjson.loads(m.data)
            except orjson.JSONDecodeError:
                return
            if isinstance(ev, dict):
                self.on_event(ev)

    # ------------------------------------------------------------------ requests
    async def request(self, method: str, params: dict[str, Any] | None = None,
                      timeout_s: float | None = None, principal: str | None = None) -> Any:
        params = params or {}
        if method == "state":
            return self.latest_snapshot()
        if method == "events":
            limit = params.get("limit", 100)
            return {"events": await self._lookup(self._events_until_now, int(limit))}
        if method == "acquisition":
            return await self._lookup(self._acquisition_until_now)
        if method == "loop_stats":  # no loop runs here: nothing for the /metrics histogram
            return {}
        raise replay_refusal(method)

    def notify(self, method: str, params: dict[str, Any] | None = None, principal: str | None = None) -> bool:
        raise replay_refusal(method)

    def set_control(self, principal: str | None) -> None:
        """Nobody controls a recording: the lease changes, nothing is told."""
        self.control = principal

    def _position(self) -> float:
        return self.replay_source.status()["position_t"]

    def _events_until_now(self, limit: int) -> list[dict[str, Any]]:
        # a reader of its own: the source's is in use by the playback thread
        out: list[dict[str, Any]] = []
        with Recording(self.replay_source.path) as rec:
            for m in rec.messages(topics.EVENTS, end_t=self._position() + 1e-6, reverse=True):
                try:
                    ev = orjson.loads(m.data)
                except orjson.JSONDecodeError:
                    continue
                out.append(ev)
                if len(out) >= limit:
                    break
        return out[::-1]

    def _acquisition_until_now(self) -> dict[str, Any]:
        names = [c["name"] for c in self.description.get("channels", []) if isinstance(c, dict) and "name" in c]
        found: dict[str, Any] = {"rate_hz": None, "channels": names}
        with Recording(self.replay_source.path) as rec:
            for m in rec.messages(topics.SETTINGS, end_t=self._position() + 1e-6, reverse=True):
                try:
                    rec_settings = orjson.loads(m.data)
                except orjson.JSONDecodeError:
                    continue
                if rec_settings.get("kind") == "acquisition" and isinstance(rec_settings.get("settings"), dict):
                    found = rec_settings["settings"]
                    break
        return {**found, "available": found.get("available", names), "replay": True}


@web.middleware
async def replay_middleware(request: web.Request, handler):
    """409 ``replay`` for every request that would act on the robot (nothing is attached)."""
    if request.method in STATE_CHANGING and request.path.startswith(ROBOT_ROUTES):
        raise replay_refusal(f"{request.method} {request.path}")
    return await handler(request)


def create_replay_app(profile: Any, source: ReplaySource, *, autoplay: bool = True,
                      bound_host: str | None = None) -> web.Application:
    """The gateway app driven by ``source`` (``profile``: the gateway's tables, video forced off;
    ``bound_host`` as for :func:`server.gateway.app.create_app`)."""
    from server.gateway.app import create_app

    app = create_app(profile, ReplayRuntime(source, autoplay=autoplay), bound_host=bound_host)
    app.middlewares.append(replay_middleware)  # inside the error middleware: refusals become JSON
    return app


# ---------------------------------------------------------------------- command line
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m server replay",
                                description="Replay a recording (.mcap) on the dashboard: play, pause, seek, "
                                            "speed; no robot attached, every command refused.")
    p.add_argument("file", help="the recording (.mcap), e.g. recordings/20261130T193600Z_auto_000.mcap")
    p.add_argument("--config", default=str(DEFAULT_CONFIG), help="profile for the gateway's own tables "
                   "(server, telemetry, observability; default: %(default)s)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override one config key")
    p.add_argument("--host", help="address to listen on (default: server.host)")
    p.add_argument("--port", type=int, help="TCP port (default: server.port; 0 = any free port)")
    p.add_argument("--speed", type=float, default=1.0, help="playback speed (0 < x <= 100; default 1)")
    p.add_argument("--paused", action="store_true", help="start paused at the first snapshot")
    p.add_argument("--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    return p.parse_args(argv)


async def serve(profile: Any, source: ReplaySource, args: argparse.Namespace) -> None:
    """The live gateway's way onto the network (:func:`server.gateway.serve.serve_app`): a recording shows the
    robot's runs, so the same rules apply (no users → loopback only; TLS from ``[auth]``)."""
    from server.gateway.serve import serve_app

    host = args.host or profile.server.host
    app = create_replay_app(profile, source, autoplay=not args.paused, bound_host=host)

    def announce(url: str) -> None:
        log.info("replaying %s (%.1f s of recording)", source.path, source.end_t - source.start_t)
        say_line(f"teleop listening on {url}")

    await serve_app(app, profile, host=host, port=args.port, announce=announce)


def main(argv: list[str] | None = None) -> int:
    from server.gateway.observability import setup_logging

    args = parse_args(argv)
    try:
        overrides = parse_overrides([*args.set, "video.enabled=false", "fleet.enabled=false"])  # a replay is no robot
        profile = load_config(args.config, overrides=overrides, tables=GATEWAY_TABLES)
    except ConfigError as err:
        print(f"teleop: configuration error: {err}", file=sys.stderr)
        return 2
    obs = profile.observability
    setup_logging(obs.log_format, args.log_level or obs.log_level)
    path = Path(args.file)
    try:
        source = ReplaySource(path, speed=args.speed)
    except (RecordingError, ValueError) as err:
        print(f"teleop: cannot replay {path}: {err}", file=sys.stderr)
        return 2
    from server.gateway.serve import run_served

    return run_served("the replay server", lambda: serve(profile, source, args))


__all__ = ["ROBOT_ROUTES", "ReplayRuntime", "create_replay_app", "main", "replay_middleware"]
