"""The fleet link wired into the gateway: ``GET /api/fleet/link`` always, the link itself when ``[fleet]
enabled`` (docs/fleet.md).

Apart from :mod:`.robot` so that a gateway with the fleet off (most) does not import Zenoh, the hub's
signature checks (cryptography) and the relayed WebRTC at start (~25 ms of CPU each start).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from server.gateway.fleet.config import FleetConfig

if TYPE_CHECKING:
    from server.gateway.fleet.robot import FleetRobot

FLEET_KEY: web.AppKey[FleetRobot] = web.AppKey("fleet")


async def get_fleet_link(request: web.Request) -> web.Response:
    """``GET /api/fleet/link``: this robot's fleet link (off, or connected, router, reconnections, counts)."""
    robot = request.app.get(FLEET_KEY)
    return web.json_response({"enabled": False} if robot is None else {"enabled": True, **robot.status()})


def setup_fleet(app: web.Application, cfg: FleetConfig) -> FleetRobot | None:
    """The fleet link when ``[fleet] enabled`` (and ``GET /api/fleet/link`` either way)."""
    app.router.add_get("/api/fleet/link", get_fleet_link)
    if not cfg.enabled:
        return None
    from server.gateway.fleet.robot import FleetRobot  # only a robot in a fleet needs Zenoh (see above)

    robot = app[FLEET_KEY] = FleetRobot(app, cfg)
    app.cleanup_ctx.append(robot.ctx)
    return robot


__all__ = ["FLEET_KEY", "get_fleet_link", "setup_fleet"]
