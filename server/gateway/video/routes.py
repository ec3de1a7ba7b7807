"""The video routes: ``/ws/video`` (JPEG with one credit, or ``?codec=h264``: H.264 with a window),
``/video.mjpeg``, snapshots and settings."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
import weakref
from typing import Awaitable, Callable

from aiohttp import WSCloseCode, WSMsgType, web

from server.errors import ApiError, ValidationError
from server.gateway.admission import ADMISSION, admission
from server.gateway.hooks import HOOKS, Hooks
from server.gateway.http import error_response, read_body
from server.gateway.latest import StallSweeper
from server.gateway.ratelimit import TokenBucket
from server.gateway.video.frames import unix_time
from server.gateway.video.h264_ws import H264Viewer, h264_sender
from server.gateway.video.service import VideoService, VideoViewer
from server.gateway.video.jpeg_pacing import JpegPacer, delivery_rate_bytes_s, reencode
from server.gateway.video.key import VIDEO_KEY
from server.gateway.video.settings import validate_runtime_settings, viewer_slots
from server.validation import parse_object

log = logging.getLogger(__name__)

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
    if f is None or time.monotonic() - f.capture_t > fresh_s:  # idle camera: wake it, wait for a new frame
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
        headers={"Cache-Control": "no-store", "X-Frame-Seq": str(f.seq), "X-Capture-Time": f"{unix_time(f.capture_t):.6f}",
                 "X-Capture-Mono": f"{f.capture_t:.6f}"},
    )


@_api
async def _ws_video(request: web.Request) -> web.WebSocketResponse:
    app = request.app
    service = app[VIDEO_KEY]
    codec = request.query.get("codec", "jpeg")
    if codec not in ("jpeg", "h264"):
        raise ValidationError(f"codec must be jpeg or h264, not {codec[:40]!r}", code="out_of_limits")
    app[ADMISSION].admit(request, "video")  # 503 busy beyond the viewer limits (websocket and MJPEG together)
    # compress=False: JPEG and H.264 do not deflate, and per-client compression would undo "encode once"
    ws = web.WebSocketResponse(heartbeat=10.0, compress=False, max_msg_size=4 * 1024)
    await ws.prepare(request)
    app[_SOCKETS_KEY].add(ws)
    client = service.add_client("ws" if codec == "jpeg" else "h264", request.remote)
    client.transport = request.transport
    client.status_dirty = True
    # acks come at most once per frame: allow twice the frame rate, and a burst of a second's worth
    fps = service.runtime_settings()["fps"]
    if codec == "jpeg":
        client.pacer = jpeg_pacer(service, request)
    bucket = TokenBucket(2.0 * fps + 10.0, 2 * fps + 20)
    h264 = H264Viewer(service, client) if codec == "h264" else None
    sender = asyncio.create_task(_ws_sender(ws, client, service) if h264 is None else h264_sender(ws, h264),
                                 name=f"video-ws-{client.id}")
    try:
        async for msg in ws:
            if not bucket.take():
                if bucket.flooding:
                    log.warning("video viewer %d keeps flooding: closing it", client.id)
                    await ws.close(code=WSCloseCode.POLICY_VIOLATION, message=b"rate limit exceeded")
                    break
                _ws_error(client, "rate_limited", "too many messages: send one ack per frame")
            elif msg.type == WSMsgType.TEXT:
                _ws_receive(msg.data, client, service, h264)
            elif msg.type == WSMsgType.BINARY:
                _ws_error(client, "malformed", "binary messages are not accepted")
            await asyncio.sleep(0)  # a flooding reader yields to every other task
    finally:
        sender.cancel()
        await asyncio.gather(sender, return_exceptions=True)
        service.remove_client(client)
        if h264 is not None:
            h264.close()
        app[_SOCKETS_KEY].discard(ws)
    return ws


def jpeg_pacer(service: VideoService, request: web.Request) -> JpegPacer:
    """A JPEG viewer's pacer (issue 20 §5), reading its socket's throughput from the kernel."""
    cfg = service.settings
    sock = request.transport.get_extra_info("socket") if request.transport is not None else None
    rs = service.runtime_settings()
    return JpegPacer(cfg["jpeg_link_share"], rs["quality"], rs["fps"],
                     rate=(lambda: delivery_rate_bytes_s(sock)) if sock is not None else None,
                     enabled=cfg["jpeg_pacing"])


def _ws_error(client: VideoViewer, code: str, message: str) -> None:
    if len(client.outbox) == client.outbox.maxlen:
        client.replies_dropped += 1  # the oldest reply goes: the client is not reading them anyway
    client.outbox.append(json.dumps({"type": "error", "error": {"code": code, "message": message}}))
    client.wake.set()


def _ws_receive(data: str, client: VideoViewer, service: VideoService, h264: H264Viewer | None) -> None:
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
    timing = {}
    for key in ("hold_ms", "lag_ms"):
        value = msg.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 60_000:
            _ws_error(client, "wrong_type", f"{key} must be a number of ms in [0, 60000]")
            return
        timing[key] = value / 1e3
    if h264 is not None:
        h264.ack(seq, hold_s=timing.get("hold_ms", 0.0), lag_s=timing.get("lag_ms"))
    else:
        if client.pacer is not None and client.in_flight is not None and seq >= client.in_flight:
            client.pacer.acked()
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
            await client.flush_replies(send, service.status_message)
            if client.in_flight is not None:
                continue  # no credit: frames replaced meanwhile count as ``dropped``
            f = service.latest
            if f is None or f.seq <= client.last_seq:
                continue
            pacer = client.pacer
            if pacer is not None:
                wait_s = pacer.last_send_t + pacer.min_interval_s() - time.monotonic()
                if wait_s > 0:  # this rung's frame rate: the newest frame when it is time
                    await asyncio.sleep(wait_s)
                    client.wake.set()
                    continue
                rs = service.runtime_settings()
                pacer.quality, pacer.fps = rs["quality"], rs["fps"]
                if pacer.level > 0:  # its own encode, off the event loop
                    f = await asyncio.to_thread(reencode, f, pacer.frame_quality(), pacer.rung.size_scale)
            client.in_flight = client.last_seq = f.seq
            client.in_flight_since = time.monotonic()
            if pacer is not None:
                pacer.sent(len(f.message))
            await send(f.message)
            client.sent += 1
    except (ConnectionError, RuntimeError) as err:  # peer went away mid-send
        log.debug("video websocket %d: %s", client.id, err)


@_api
async def _mjpeg(request: web.Request) -> web.StreamResponse:
    app = request.app
    service = app[VIDEO_KEY]
    app[ADMISSION].admit(request, "video")
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
    admission(app).add_pool("video", "video viewers", viewer_slots(service.settings), "video", "max_viewers")
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


async def _video_ctx(app: web.Application):
    service = app[VIDEO_KEY]
    service.start()
    # a viewer that blocks progress (a send it does not read, a frame it does not ack) would hold a viewer slot
    # forever, whatever it sends: the one stall policy of the gateway's writers (server/gateway/latest.py)
    sweeper = StallSweeper(app[_STALL_KEY], service.clients, what="video viewer", on_abort=service.remove_client)
    sweeper.start()
    yield
    await sweeper.stop()
    await asyncio.to_thread(service.stop)
