"""Routes of the rover's automatic motions and calibrations (docs/sensing.md); the work runs in the
runtime (:mod:`server.runtime.calibration`), these validate at the edge and forward.

``POST /api/heading``, ``POST /api/calibration/magnetometer``, ``POST /api/calibration/uwb``,
``GET /api/calibration``.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from server.errors import ApiError
from server.gateway.hooks import record_command
from server.gateway.http import read_body
from server.runtime_api import HeadingParams, MagParams, UwbParams
from server.validation import check_range, convert


def setup_navigation(app: web.Application, runtime_key: web.AppKey) -> None:
    async def forward(request: web.Request, method: str, params: dict[str, Any]) -> web.Response:
        try:
            result = await request.app[runtime_key].request(method, params)
        except ApiError as err:
            if method != "calibration":
                record_command(request, method, params, "http", error=err)
            raise
        if method != "calibration":  # the automatic motions and calibrations are commands too (recorded)
            record_command(request, method, params, "http", result)
        return web.json_response(result)

    async def post_heading(request: web.Request) -> web.Response:
        p = convert(await read_body(request), HeadingParams)
        check_range("heading_deg", p.heading_deg, 0.0, 360.0)
        return await forward(request, "heading", {"heading_deg": p.heading_deg})

    async def post_magnetometer(request: web.Request) -> web.Response:
        p = convert(await read_body(request), MagParams)
        if p.revolutions is not None:
            check_range("revolutions", p.revolutions, 1.0, 10.0)
        if p.rate_rad_s is not None:
            check_range("rate_rad_s", p.rate_rad_s, 0.01, 50.0)  # the runtime checks the robot's own limit
        return await forward(request, "calibrate_magnetometer", {"revolutions": p.revolutions, "rate_rad_s": p.rate_rad_s})

    async def post_uwb(request: web.Request) -> web.Response:
        p = convert(await read_body(request), UwbParams)
        return await forward(request, "calibrate_uwb", {"pairs": p.pairs, "degree": p.degree})

    async def get_calibration(request: web.Request) -> web.Response:
        return await forward(request, "calibration", {})

    r = app.router
    r.add_post("/api/heading", post_heading)
    r.add_post("/api/calibration/magnetometer", post_magnetometer)
    r.add_post("/api/calibration/uwb", post_uwb)
    r.add_get("/api/calibration", get_calibration)
