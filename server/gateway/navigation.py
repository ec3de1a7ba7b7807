"""The rover's automatic motions and calibrations (docs/sensing.md) as commands of the registry
(:mod:`server.gateway.registry`), and ``GET /api/calibration``; the work runs in the runtime
(:mod:`server.runtime.calibration`), these validate at the edge and forward.

``POST /api/heading``, ``POST /api/calibration/magnetometer``, ``POST /api/calibration/uwb`` (commands:
recorded, on every transport), ``GET /api/calibration`` (a read).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from server.gateway.auth.permissions import ADMIN_LEASE_REAUTH, ADMIN_REAUTH, LEASE
from server.gateway.keys import RUNTIME
from server.gateway.registry import Command, Context
from server.runtime_api.params import HeadingParams, MagParams, UwbParams
from server.validation import check_range, convert


async def parse_heading(body: dict[str, Any], ctx: Context) -> dict[str, Any]:
    p = convert(body, HeadingParams)  # its range is the struct's (Meta bounds)
    return {"heading_deg": p.heading_deg}


async def parse_magnetometer(body: dict[str, Any], ctx: Context) -> dict[str, Any]:
    p = convert(body, MagParams)
    if p.revolutions is not None:
        check_range("revolutions", p.revolutions, 1.0, 10.0)
    if p.rate_rad_s is not None:
        check_range("rate_rad_s", p.rate_rad_s, 0.01, 50.0)  # the runtime checks the robot's own limit
    return {"revolutions": p.revolutions, "rate_rad_s": p.rate_rad_s}


async def parse_uwb(body: dict[str, Any], ctx: Context) -> dict[str, Any]:
    p = convert(body, UwbParams)
    return {"pairs": p.pairs, "degree": p.degree}


def forward(method: str):
    """The runtime call of a command whose method takes the validated params as they are."""
    async def call(ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
        return await ctx.request(method, params)
    return call


#: the automatic motions and calibrations, recorded as validated (the runtime converts them again)
COMMANDS: tuple[Command, ...] = (
    Command("heading", "/api/heading", LEASE, parse_heading, forward("heading"), body=HeadingParams,
            record="params", reply="result", doc="turn in place to a compass heading"),
    Command("calibrate_magnetometer", "/api/calibration/magnetometer", ADMIN_LEASE_REAUTH, parse_magnetometer,
            forward("calibrate_magnetometer"), body=MagParams, record="params", reply="result",
            doc="turn in place, sample, fit hard- and soft-iron, store"),
    Command("calibrate_uwb", "/api/calibration/uwb", ADMIN_REAUTH, parse_uwb, forward("calibrate_uwb"),
            body=UwbParams, moves=False, record="params", reply="result",
            doc="fit the UWB range correction, store and apply it"),
)


def setup_navigation(app: web.Application) -> None:
    """``GET /api/calibration`` (the commands are :data:`COMMANDS`)."""
    async def get_calibration(request: web.Request) -> web.Response:
        return web.json_response(await request.app[RUNTIME].request("calibration", {}))

    app.router.add_get("/api/calibration", get_calibration)


__all__ = ["COMMANDS", "setup_navigation"]
