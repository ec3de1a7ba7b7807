"""``/ws/webrtc``: the signalling socket of the WebRTC transport, and its setup on the gateway.

Why a socket of its own and not message types on ``/ws/telemetry``: the data channels' commands must
be authorised against the socket that made the peer (its session, role and lease, its address for
the rate limit), the answer carries an SDP the telemetry socket's ``ack`` cannot, and the peer must
die with a socket the trust layer ends with the session. A feature's ``/ws/telemetry`` command
(``WS_COMMANDS``) gets neither the request nor a reply of its own, so using it would have meant
changing that dispatcher while it is being rebuilt. This socket follows the telemetry socket's
rules all the same: route rule ``STREAM`` (a logged-in viewer; Origin checked on the upgrade for
cookie sessions; ended with its session), a viewer slot of the video pool (a WebRTC viewer is a
video viewer), and its messages carry the telemetry socket's permission rules
(:func:`~server.gateway.webrtc.commands.mirror_permissions`): no unauthenticated endpoint, no second
set of rules.

Protocol (JSON text both ways):

- server → ``{"type": "webrtc_config", "data": {"ice_servers", "ice_transport_policy", "codecs",
  "jitter_buffer_target_ms"}}`` on connect (the browser needs no configuration of its own);
- client → ``{"type": "offer", "sdp": "..."}`` with every candidate gathered (no trickle); server →
  ``{"type": "answer", "sdp": "..."}``. A new offer replaces the peer (an ICE restart is a new peer);
- server → ``{"type": "rate", "data": {...}}`` (tier, bitrate, loss, RTT; on every tier change and
  every second), ``{"type": "webrtc_state", "data": {"state"}}``, ``{"type": "error", "error":
  {"code", "message"}}``;
- client → ``{"type": "ping"}`` → ``{"type": "pong"}``;
- client → ``{"type": "health", "lag_ms": n}`` about once a second: the browser's own event-loop lag,
  so the rate controller does not read a starved receiver as a congested path.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from aiohttp import WSCloseCode, WSMsgType, web

from server.errors import ApiError
from server.gateway.admission import ADMISSION
from server.gateway.ratelimit import TokenBucket
from server.gateway.video import VIDEO_KEY
from server.gateway.webrtc.commands import mirror_permissions
from server.gateway.webrtc.config import WebRtcConfig
from server.gateway.webrtc.ice import host_addresses_for, use_host_addresses
from server.gateway.webrtc.peer import Peer, PlainPeer
from server.validation import parse_object

log = logging.getLogger(__name__)

PATH = "/ws/webrtc"
WEBRTC_KEY = web.AppKey("webrtc_config", WebRtcConfig)
_PEERS_KEY = web.AppKey("webrtc_peers", set)
_DEBUG_KEY = web.AppKey("webrtc_debug", bool)
MAX_SDP = 64 * 1024


def config_message(cfg: WebRtcConfig) -> str:
    return json.dumps({"type": "webrtc_config", "data": {
        "ice_servers": [s.to_json() for s in cfg.ice_servers], "ice_transport_policy": cfg.ice_transport_policy,
        "codecs": list(cfg.codecs), "jitter_buffer_target_ms": cfg.jitter_buffer_target_ms}})


async def ws_webrtc(request: web.Request) -> web.StreamResponse:
    app = request.app
    cfg = app[WEBRTC_KEY]
    service = app[VIDEO_KEY]
    plain = request.query.get("peer") == "aiortc"
    if plain and not app[_DEBUG_KEY]:
        raise ApiError("peer=aiortc (the bench's plain aiortc sender) needs [debug] routes = true",
                       code="forbidden", status=403)
    app[ADMISSION].admit(request, "video")  # a WebRTC viewer takes a viewer slot like any other
    ws = web.WebSocketResponse(heartbeat=10.0, max_msg_size=MAX_SDP)
    await ws.prepare(request)
    outbox: asyncio.Queue[str] = asyncio.Queue(maxsize=64)

    def notify(msg: dict[str, Any]) -> None:
        if outbox.full():
            return  # a client that does not read loses reports, never grows the server
        outbox.put_nowait(json.dumps(msg))

    async def writer() -> None:
        try:
            while not ws.closed:
                await ws.send_str(await outbox.get())
        except (ConnectionError, RuntimeError):
            pass

    viewer = service.add_client("webrtc", request.remote)
    viewer.transport = request.transport
    peer: Peer | None = None
    app[_PEERS_KEY].add(ws)
    bucket = TokenBucket(5.0, 20)
    notify(json.loads(config_message(cfg)))
    write_task = asyncio.create_task(writer(), name="webrtc-signalling-writer")
    try:
        async for msg in ws:
            if msg.type != WSMsgType.TEXT:
                if msg.type == WSMsgType.BINARY:
                    notify({"type": "error", "error": {"code": "malformed", "message": "binary messages are not accepted"}})
                continue
            if not bucket.take():
                if bucket.flooding:
                    await ws.close(code=WSCloseCode.POLICY_VIOLATION, message=b"rate limit exceeded")
                    break
                notify({"type": "error", "error": {"code": "rate_limited", "message": "too many signalling messages"}})
                continue
            try:
                body = parse_object(msg.data, max_bytes=MAX_SDP)
                kind = body.get("type")
                if kind == "ping":
                    notify({"type": "pong"})
                elif kind == "health":
                    lag = body.get("lag_ms")
                    if isinstance(lag, bool) or not isinstance(lag, (int, float)) or not 0 <= lag <= 60_000:
                        raise ApiError("health needs lag_ms, a number of ms in [0, 60000]", code="wrong_type",
                                       status=422)
                    if set(body) - {"type", "lag_ms"}:
                        raise ApiError(f"unknown field(s): {', '.join(sorted(set(body) - {'type', 'lag_ms'}))}",
                                       code="unknown_field", status=422)
                    if peer is not None:
                        peer.health(lag / 1e3)
                elif kind == "offer":
                    sdp = body.get("sdp")
                    if not isinstance(sdp, str) or not sdp.startswith("v=0"):
                        raise ApiError("offer needs an sdp string (v=0 ...)", code="wrong_type", status=422)
                    if set(body) - {"type", "sdp", "id"}:
                        raise ApiError(f"unknown field(s): {', '.join(sorted(set(body) - {'type', 'sdp', 'id'}))}",
                                       code="unknown_field", status=422)
                    if peer is not None:
                        await peer.close()
                    peer = (PlainPeer if plain else Peer)(app, request, service, cfg, notify)
                    try:
                        answer = await peer.answer(sdp)
                    except ValueError as err:
                        await peer.close()
                        peer = None
                        raise ApiError(f"cannot answer this offer: {err}", code="unsupported", status=422) from err
                    viewer.stream = peer.sub
                    viewer.peer = peer
                    notify({"type": "answer", "sdp": answer, "codec": peer.codec})
                else:
                    raise ApiError(f"unknown message type {kind!r}: expected offer, health or ping", code="unknown_type",
                                   status=422)
            except ApiError as err:
                notify({"type": "error", "error": err.to_json()})
            await asyncio.sleep(0)
    finally:
        if peer is not None:
            await peer.close()
        service.remove_client(viewer)
        app[_PEERS_KEY].discard(ws)
        write_task.cancel()
    return ws


def setup_webrtc(app: web.Application, cfg: WebRtcConfig, bound_host: str, debug: bool = False) -> None:
    """Register ``/ws/webrtc`` (after the trust layer: its rules go into the permission table) when video
    and WebRTC are on."""
    if not cfg.enabled or VIDEO_KEY not in app:
        return
    from server.gateway.auth import AUTH_KEY
    from server.gateway.auth.permissions import STREAM

    app[WEBRTC_KEY] = cfg
    app[_PEERS_KEY] = set()
    app[_DEBUG_KEY] = debug
    use_host_addresses(host_addresses_for(bound_host, list(cfg.host_addresses)))
    if AUTH_KEY in app:
        table = app[AUTH_KEY].permissions
        table.route("GET", PATH, STREAM)
        mirror_permissions(table, PATH)
    app.router.add_get(PATH, ws_webrtc)

    async def on_shutdown(app: web.Application) -> None:
        for ws in list(app[_PEERS_KEY]):
            await ws.close(code=WSCloseCode.GOING_AWAY, message=b"server shutdown")

    app.on_shutdown.append(on_shutdown)
