"""The video routes: ``/ws/video`` (credit flow control), ``/video.mjpeg``, snapshots and settings."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
import weakref
from typing import Awaitable, Callable

from aiohttp import WSCloseCode, WSMsgType, web

from server.errors import ApiError
from server.gateway.hooks import HOOKS, Hooks
from server.gateway.http import error_response, read_body
from server.gateway.ratelimit import TokenBucket
from server.gateway.video.service import VideoService, VideoViewer
from server.gateway.video.settings import validate_runtime_settings
from server.validation import parse_object

log = logging.getLogger(__name__)

VIDEO_KEY = web.AppKey("video", VideoService)
_SOCKETS_KEY = web.AppKey("video_sockets", weakref.WeakSet)
_CLOSING_KEY = web.AppKey("video_closing", asyncio.Event)
_STALL_KEY = web.AppKey("video_writer_stall_s", float)


# --------------------------------------------------------------------------- HTTP and websockets


def _api(handler: Callable[[web.Request], Awaitable[web.StreamResponse]]):
    """Map :class:`ApiError` to the JSON error shape even without the app's error middleware."""

    @functools.wraps(handler)
    async def wrapped(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except ApiError as err:
            return error_response(err)

    return wrapped


@_api
async def _get_video(request: web.Request) -> web.Response:
    return web.json_response(request.app[VIDEO_KEY].describe())


@_api
async def _put_video(request: web.Request) -> web.Response:
    service = request.app[VIDEO_KEY]
    changes = validate_runtime_settings(await read_body(request, allow_empty=False))
    service.update_settings(changes)
    if HOOKS in request.app:
        Hooks.call(request.app[HOOKS].on_settings, "video", service.runtime_settings(), request)
    return web.json_response(service.describe())


@_api
async def _snapshot(request: web.Request) -> web.Response:
    service = request.app[VIDEO_KEY]
    f = service.latest
    fresh_s = 2.0 / max(1, service.runtime_settings()["fps"])
    if f is None or time.time() - f.capture_t > fresh_s:  # idle camera: wake it, wait for a new frame
        service.want_frames()
        deadline = time.monotonic() + 3.0
        old = f.seq if f is not None else 0
        while time.monotonic() < deadline and (service.latest is None or service.latest.seq <= old):
            if service.status()["state"] == "failed":
                break
            await asyncio.sleep(0.02)
        f = service.latest
    if f is None:
        st = service.status()
        detail = f": {st['error']}" if st["error"] else ""
        raise ApiError(f"no video frame (camera {st['state']}{detail})", code="no_frame", status=503)
    return web.Response(
        body=bytes(f.jpeg),
        content_type="image/jpeg",
        headers={"Cache-Control": "no-store", "X-Frame-Seq": str(f.seq), "X-Capture-Time": f"{f.capture_t:.6f}"},
    )


def _admit(service: "VideoService", kind: str) -> None:
    """Refuse a viewer beyond ``video.max_viewers`` (503 busy, before the upgrade)."""
    limit = service.settings["max_viewers"]
    if len(service.clients()) >= limit:
        raise ApiError(f"too many video viewers (max {limit}); try again later", code="busy", status=503)


@_api
async def _ws_video(request: web.Request) -> web.WebSocketResponse:
    app = request.app
    service = app[VIDEO_KEY]
    _admit(service, "ws")
    # compress=False: JPEG does not deflate, and per-client compression would undo "encode once"
    ws = web.WebSocketResponse(heartbeat=10.0, compress=False, max_msg_size=4 * 1024)
    await ws.prepare(request)
    app[_SOCKETS_KEY].add(ws)
    client = service.add_client("ws", request.remote)
    client.transport = request.transport
    client.status_dirty = True
    # acks come at most once per frame: allow twice the frame rate, and a burst of a second's worth
    fps = service.runtime_settings()["fps"]
    bucket = TokenBucket(2.0 * fps + 10.0, 2 * fps + 20)
    sender = asyncio.create_task(_ws_sender(ws, client, service), name=f"video-ws-{client.id}")
    try:
        async for msg in ws:
            if not bucket.take():
                if bucket.flooding:
                    log.warning("video viewer %d keeps flooding: closing it", client.id)
                    await ws.close(code=WSCloseCode.POLICY_VIOLATION, message=b"rate limit exceeded")
                    break
                _ws_error(client, "rate_limited", "too many messages: send one ack per frame")
            elif msg.type == WSMsgType.TEXT:
                _ws_receive(msg.data, client, service)
            elif msg.type == WSMsgType.BINARY:
                _ws_error(client, "malformed", "binary messages are not accepted")
            await asyncio.sleep(0)  # a flooding reader yields to every other task
    finally:
        sender.cancel()
        await asyncio.gather(sender, return_exceptions=True)
        service.remove_client(client)
        app[_SOCKETS_KEY].discard(ws)
    return ws


def _ws_error(client: VideoViewer, code: str, message: str) -> None:
    if len(client.outbox) == client.outbox.maxlen:
        client.replies_dropped += 1  # the oldest reply goes: the client is not reading them anyway
    client.outbox.append(json.dumps({"type": "error", "error": {"code": code, "message": message}}))
    client.wake.set()


def _ws_receive(data: str, client: VideoViewer, service: VideoService) -> None:
    try:
        msg = parse_object(data, max_bytes=4 * 1024)
    except ApiError as err:
        _ws_error(client, err.code, err.message)
        return
    if msg.get("type") != "ack":
        _ws_error(client, "unknown_type", 'expected {"type": "ack", "seq": n}')
        return
    seq = msg.get("seq")
    if isinstance(seq, bool) or not isinstance(seq, int):
        _ws_error(client, "wrong_type", "seq must be an integer")
        return
    service.ack(client, seq)


async def _ws_sender(ws: web.WebSocketResponse, client: VideoViewer, service: VideoService) -> None:
    """The only writer of ``ws``: status and errors, then at most one unacked frame."""

    async def send(data: str | bytes) -> None:
        client.send_since = time.monotonic()
        await (ws.send_str(data) if isinstance(data, str) else ws.send_bytes(data))
        client.send_since = None

    try:
        while not ws.closed:
            await client.wake.wait()
            client.wake.clear()
            while client.outbox:
                await send(client.outbox.popleft())
            if client.status_dirty:
                client.status_dirty = False
                await send(service.status_message())
            if client.in_flight is not None:
                continue  # no credit: frames replaced meanwhile count as ``dropped``
            f = service.latest
            if f is None or f.seq <= client.last_seq:
                continue
            client.in_flight = client.last_seq = f.seq
            client.in_flight_since = time.monotonic()
            await send(f.message)
            client.sent += 1
    except (ConnectionError, RuntimeError) as err:  # peer went away mid-send
        log.debug("video websocket %d: %s", client.id, err)


@_api
async def _mjpeg(request: web.Request) -> web.StreamResponse:
    app = request.app
    service = app[VIDEO_KEY]
    _admit(service, "mjpeg")
    closing = app[_CLOSING_KEY]
    resp = web.StreamResponse(
        headers={
            "Content-Type": "multipart/x-mixed-replace; boundary=frame",
            "Cache-Control": "no-cache, no-store, must-revalidate",
            "Pragma": "no-cache",
            "X-Accel-Buffering": "no",
        }
    )
    await resp.prepare(request)
    client = service.add_client("mjpeg", request.remote)
    client.transport = request.transport
    try:
        while not closing.is_set():
            transport = request.transport
            if transport is None or transport.is_closing():
                break
            try:
                # wake at least once a second so a viewer that left is noticed while the camera is down
                await asyncio.wait_for(client.wake.wait(), 1.0)
            except asyncio.TimeoutError:
                continue
            client.wake.clear()
            f = service.latest
            if f is None or f.seq <= client.last_seq:
                continue
            if transport.get_write_buffer_size() > 0:
                continue  # the previous frame has not drained: skip it (counted as dropped when replaced)
            client.last_seq = f.seq
            client.send_since = time.monotonic()
            await resp.write(f.mjpeg_part)
            client.send_since = None
            client.sent += 1
    except (ConnectionError, RuntimeError) as err:
        log.debug("mjpeg viewer %d left: %s", client.id, err)
    finally:
        service.remove_client(client)
    return resp


def setup_video(app: web.Application, service: VideoService, writer_stall_s: float = 10.0) -> None:
    """Register the video routes on ``app`` and tie the capture thread to the app's lifetime.

    Routes: ``GET /ws/video``, ``GET /video.mjpeg``, ``GET /api/video/snapshot.jpg``,
    ``GET /api/video``, ``PUT /api/video``.
    """
    app[VIDEO_KEY] = service
    app[_STALL_KEY] = writer_stall_s
    app[_SOCKETS_KEY] = weakref.WeakSet()
    app[_CLOSING_KEY] = asyncio.Event()
    app.router.add_get("/ws/video", _ws_video)
    app.router.add_get("/video.mjpeg", _mjpeg)
    app.router.add_get("/api/video/snapshot.jpg", _snapshot)
    app.router.add_get("/api/video", _get_video)
    app.router.add_put("/api/video", _put_video)
    app.on_shutdown.append(_on_shutdown)
    app.cleanup_ctx.append(_video_ctx)


async def _on_shutdown(app: web.Application) -> None:
    # before the runner waits for handlers: end the long-lived ones now
    app[_CLOSING_KEY].set()
    for c in app[VIDEO_KEY].clients():
        c.wake.set()
    for ws in list(app[_SOCKETS_KEY]):
        await ws.close(code=WSCloseCode.GOING_AWAY, message=b"server shutdown")


async def _sweep_stuck_viewers(app: web.Application, stall_s: float) -> None:
    """Close every viewer that has blocked progress for ``stall_s``: a send it does not read, or a
    frame it does not ack (it would hold a viewer slot forever, whatever it sends)."""
    service = app[VIDEO_KEY]
    while True:
        await asyncio.sleep(min(1.0, stall_s / 2))
        now = time.monotonic()
        for c in service.clients():
            if c.stuck_for(now) > stall_s:
                log.warning("video viewer %d (%s) made no progress for %.1f s: closing it", c.id, c.kind,
                            c.stuck_for(now))
                service.remove_client(c)
                if c.transport is not None:
                    c.transport.abort()


async def _video_ctx(app: web.Application):
    service = app[VIDEO_KEY]
    service.start()
    sweeper = asyncio.create_task(_sweep_stuck_viewers(app, app[_STALL_KEY]), name="video-sweeper")
    yield
    sweeper.cancel()
    await asyncio.gather(sweeper, return_exceptions=True)
    await asyncio.to_thread(service.stop)
