"""What the gateway serves of the robot's state: ``GET /api/robot`` (the runtime's description, its command
list through the command registry, and the gateway's own settings), ``GET /api/state`` and the websocket's
hello (the newest snapshot as the runtime serialised it, with its age), and while the runtime is down the
last snapshot turned into a ``fault`` ("robot runtime down")."""

from __future__ import annotations

import time
from typing import Any

from aiohttp import web

from server.gateway.commands import REGISTRY
from server.gateway.keys import PROFILE, RUNTIME
from server.runtime_api.client import DOWN_MESSAGE, RuntimeClient
from server.runtime_api.protocol import dumps as dumps_bytes


def robot_description(app: web.Application) -> dict[str, Any] | None:
    """``GET /api/robot``: the runtime's description, its ``commands`` those of the command registry it declares,
    plus the gateway's own settings."""
    desc = app[RUNTIME].description
    if desc is None:
        return None
    video = app[PROFILE].video
    return {**desc, "commands": REGISTRY.listed(desc), "video": {"enabled": video.enabled, "source": video.source, "width": video.width,
                              "height": video.height, "fps": video.fps}}


def current_snapshot(app: web.Application) -> dict[str, Any]:
    """The newest snapshot; while the runtime is down, the last one turned into a ``fault``."""
    rt = app[RUNTIME]
    snap = rt.latest_snapshot()
    if not rt.down or rt.shutting_down and snap:
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


#: a snapshot older than this many telemetry periods (and at least STALE_MIN_S) is ``snapshot_stale``
STALE_PERIODS = 5
STALE_MIN_S = 0.25


def stale_after_s(app: web.Application) -> float:
    return max(STALE_PERIODS / app[PROFILE].telemetry.rate_hz, STALE_MIN_S)


def state_text(app: web.Application) -> bytes:
    """``GET /api/state`` (and the websocket's hello): the newest snapshot as the runtime serialised it, plus
    ``age_s`` (since it arrived) and ``snapshot_stale`` once that is over :func:`stale_after_s` (issue 18: a
    frozen runtime's last snapshot kept answering ``running`` with the same ``seq``)."""
    rt = app[RUNTIME]
    if (not rt.down or rt.shutting_down) and rt.latest is not None:
        data = rt.latest
    else:
        data = dumps_bytes(current_snapshot(app))
    age = rt.snapshot_age_s()
    stale = age is None or age > stale_after_s(app)
    body = data.rstrip()[:-1]  # the object without its closing brace
    sep = b"," if body.rstrip() != b"{" else b""
    return body + sep + (b'"age_s":%s,"snapshot_stale":%s}' % (b"null" if age is None else b"%.3f" % age,
                                                               b"true" if stale else b"false"))



__all__ = ["STALE_MIN_S", "STALE_PERIODS", "current_snapshot", "down_snapshot", "robot_description", "stale_after_s",
           "state_text"]
