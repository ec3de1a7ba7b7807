"""The vision routes: ``GET /api/vision``, ``POST /api/go_to_marker``, ``GET /ws/vision`` (overlays) and,
with ``[debug] routes``, ``POST /api/debug/vision`` (pause the pipeline: tests of stale vision).

The routes exist whether or not vision runs (the permission table and the docs list every route);
while it is off they say why: ``GET /api/vision`` in ``reason``, the overlay socket with 409
``unavailable`` before the upgrade, ``go_to_marker`` with the runtime's 409 (the runtime owns that
decision: it knows whether measurements arrive and which markers are in view).

``/ws/vision`` (server → client only): ``{"type": "vision_status", "data": {...}}`` on connect (the
marker map, the rate), then ``{"type": "vision", "data": <VisionResult.to_json()>}`` per processed
frame, latest wins per client (docs/vision.md). Messages from the client are not expected: each
is answered with an error, and a client that floods is closed (1008).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiohttp import WSCloseCode, WSMsgType, web

from server.config import Profile
from server.errors import ApiError, ConflictError
from server.gateway.admission import ADMISSION, admission
from server.gateway.auth.permissions import LEASE
from server.gateway.http import read_body
from server.gateway.registry import Command, Context
from server.gateway.ratelimit import TokenBucket
from server.runtime_api.client import RuntimeClient
from server.gateway.telemetry import dumps as _dumps
from server.gateway.video.settings import viewer_slots
from server.gateway.vision.service import VisionService
from server.runtime_api.params import GoToMarkerParams
from server.validation import check_range, convert

log = logging.getLogger(__name__)

VISION_KEY = web.AppKey("vision", VisionService)

def go_to_marker_params(body: dict[str, Any], description: dict[str, Any] | None) -> dict[str, Any]:
    """Validate a go-to-marker body at the edge (the runtime checks again, and decides what is in view)."""
    p = convert(body, GoToMarkerParams)  # marker_id, standoff_m and lost_s ranged by the struct
    if p.speed_m_s is not None:
        lo_hi = ((description or {}).get("limits") or {}).get("linear_m_s") or [-20.0, 20.0]
        check_range("speed_m_s", p.speed_m_s, 0.02, float(lo_hi[1]))
    return {"marker_id": p.marker_id, "standoff_m": p.standoff_m, "speed_m_s": p.speed_m_s, "lost_s": p.lost_s}


async def parse_go_to_marker(body: dict[str, Any], ctx: Context) -> dict[str, Any]:
    return go_to_marker_params(body, ctx.description)


async def go_to_marker(ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
    return await ctx.request("go_to_marker", params)


#: driving to a marker (docs/vision.md): a command of the registry; the runtime decides what is in view
COMMANDS: tuple[Command, ...] = (
    Command("go_to_marker", "/api/go_to_marker", LEASE, parse_go_to_marker, go_to_marker, body=GoToMarkerParams,
            reply="result", doc="drive to a marker and stop short of it"),
)


def setup_vision(app: web.Application, profile: Profile, runtime: RuntimeClient, video: Any | None) -> None:
    """Build the vision service, register its routes (reads and the overlay socket; ``go_to_marker`` is
    :data:`COMMANDS`) and tie it to the app's lifetime."""
    service = VisionService(profile.vision, profile.video, runtime, video,
                            writer_stall_s=profile.server.writer_stall_s)
    app[VISION_KEY] = service
    # overlays are drawn over the video: as many as its viewers, by the same rules, counted apart
    admission(app).add_pool("overlay", "vision overlay sockets", viewer_slots(profile.video), "video",
                            "max_viewers")

    async def get_vision(request: web.Request) -> web.Response:
        return web.json_response(service.status(), dumps=_dumps)

    async def ws_vision(request: web.Request) -> web.StreamResponse:
        if not service.running:
            raise ConflictError(service.reason or "vision is starting (waiting for the robot runtime)",
                                code="unavailable")
        request.app[ADMISSION].admit(request, "overlay")  # 503 busy beyond the overlay limits
        ws = web.WebSocketResponse(heartbeat=10.0, max_msg_size=1024)
        await ws.prepare(request)
        client = service.add_client(ws, request.transport)
        await ws.send_str(_dumps({"type": "vision_status", "data": {
            "rate_hz": service.config.rate_hz, "markers": service.map_json(),
            "dictionary": service.config.dictionary}}))
        writer = asyncio.create_task(client.writer(), name="vision-overlay-writer")
        bucket = TokenBucket(5.0, 10)
        try:
            async for msg in ws:
                if msg.type in (WSMsgType.TEXT, WSMsgType.BINARY):
                    if not bucket.take() and bucket.flooding:
                        await ws.close(code=WSCloseCode.POLICY_VIOLATION, message=b"rate limit exceeded")
                        break
                    client.offer(_dumps({"type": "error", "error": {
                        "code": "unknown_type", "message": "this socket only sends: nothing is accepted on it"}}))
                await asyncio.sleep(0)
        finally:
            service.remove_client(client)
            writer.cancel()
            await asyncio.gather(writer, return_exceptions=True)
        return ws

    async def debug_vision(request: web.Request) -> web.Response:
        body = await read_body(request, allow_empty=False)
        paused = body.get("paused")
        if not isinstance(paused, bool) or set(body) - {"paused"}:
            raise ApiError('expected {"paused": true | false}', code="invalid", status=422)
        service.paused = paused
        log.warning("vision pipeline %s (debug route)", "paused" if paused else "resumed")
        return web.json_response({"ok": True, "paused": service.paused})

    async def ctx(app: web.Application):
        await service.start()
        try:
            yield
        finally:
            await service.stop()

    async def on_shutdown(app: web.Application) -> None:
        await service.close_clients()

    r = app.router
    r.add_get("/api/vision", get_vision)
    r.add_get("/ws/vision", ws_vision)
    if profile.debug.routes:
        r.add_post("/api/debug/vision", debug_vision)
    app.cleanup_ctx.append(ctx)
    app.on_shutdown.append(on_shutdown)


__all__ = ["COMMANDS", "VISION_KEY", "go_to_marker_params", "setup_vision"]
