"""Live view in Foxglove: the recorded channels served with the Foxglove WebSocket protocol.

Uses ``foxglove-sdk`` (a Rust server behind a Python API, its own threads): the same
topics and JSON schemas as the recordings (``/teleop/telemetry``, ``/teleop/events``,
``/teleop/state``, ``/teleop/commands``, ``/teleop/settings``, ``/camera/image``), so a
layout made on a recording works on the live robot and back. The SDK 0.30 speaks the
``foxglove.sdk.v1`` subprotocol (Foxglove's app does; older clients that only offer
``foxglove.websocket.v1`` are refused at the handshake).

Authentication: the SDK's server has no hook for it. It offers TLS (``tls_cert`` /
``tls_key``) and callbacks on subscribe/unsubscribe, but nothing sees the HTTP upgrade
request, so it cannot check a token or a cookie, nor refuse a client. Hence
:class:`FoxgloveLive` binds to a loopback address only (anything else is refused), and
remote users reach it through :func:`proxy_handler`, an aiohttp websocket route in
the gateway that runs the gateway's own ``authorize(request)`` on the upgrade and
then relays frames both ways to the loopback server.

Publishing costs a call into the SDK per message (it serialises nothing: the caller's
JSON bytes go out as they are); with no client subscribed, the SDK drops them at once.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import socket
import threading
from typing import Any, Awaitable, Callable

import orjson
from aiohttp import ClientSession, WSMsgType, web

from server.gateway.recording import topics

log = logging.getLogger(__name__)

SUBPROTOCOL = "foxglove.sdk.v1"


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False



def set_listener_nodelay(port: int) -> int:
    """Set ``TCP_NODELAY`` on this process's TCP listener on ``port``; returns how many it found.

    foxglove-sdk 0.30's websocket server (Rust, tokio-tungstenite) never sets it on the sockets it
    accepts (``accept_connections`` in ``websocket/server.rs``; ``strace`` of the peer shows no
    ``setsockopt`` at all), so Nagle's algorithm holds a 1.7 kB message while the previous one is
    unacknowledged; the client, which only reads, acknowledges by its delayed-ACK timer (40 ms at
    least on Linux), i.e. ~20 ms after the next 50 Hz message was due: every few messages waited
    20–30 ms, which made the p99 24–28 ms at every N whatever the load. aiohttp
    (the gateway and bench/'s aiohttp peer) sets ``TCP_NODELAY`` on every connection, as
    foxglove's own C++ ROS bridge does (ros-foxglove-bridge#24: "always makes sense in this
    context"). Linux copies a listener's ``TCP_NODELAY`` to the sockets it accepts, so setting it
    once on the SDK's listener gives every client connection what the other servers have."""
    found = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if not os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                continue
            sock = socket.socket(fileno=int(fd))
        except OSError:  # closed meanwhile, or not a socket we may wrap
            continue
        try:
            if (sock.type == socket.SOCK_STREAM and sock.family in (socket.AF_INET, socket.AF_INET6)
                    and sock.getsockname()[1] == port):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                found += 1
        finally:
            sock.detach()  # the descriptor stays the SDK's
    return found

class FoxgloveLive:
    """A Foxglove WebSocket server publishing the robot's channels (start with :meth:`start`)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 8765, robot: dict[str, Any] | None = None,
                 *, name: str = "teleop", video_frames: bool = True) -> None:
        if not _is_loopback(host):
            raise ValueError(f"foxglove live server host {host!r} is not a loopback address: foxglove-sdk cannot "
                             "authenticate clients, so it binds to loopback only; reach it through the gateway's "
                             "authenticated proxy route")
        if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535:
            raise ValueError(f"foxglove live server port must be in [0, 65535], not {port!r}")
        self.host, self.requested_port, self.name = host, port, name
        self.robot = dict(robot or {})
        self.video_frames = video_frames
        self._server = None
        self._ctx = None
        self._channels: dict[str, Any] = {}
        self._subscriptions = 0
        self._sub_lock = threading.Lock()

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> int:
        """Start the server; returns the port it listens on (``port=0`` picks a free one)."""
        import foxglove  # optional at import time of this module: only the live view needs it

        # keep the context referenced: when its Python object is collected, the channels lose the server
        self._ctx = ctx = foxglove.Context()
        channel_names = [c["name"] if isinstance(c, dict) else c for c in self.robot.get("channels", []) or []]
        for topic in topics.TOPICS:
            if topic == topics.IMAGE and not self.video_frames:
                continue
            schema_name, schema = topics.schema_for(topic, channel_names)
            self._channels[topic] = foxglove.Channel(
                topic, message_encoding="json", context=ctx,
                schema=foxglove.Schema(name=schema_name, encoding="jsonschema", data=orjson.dumps(schema)))
        live = self

        class Listener:
            def on_subscribe(self, client: Any, channel: Any) -> None:
                with live._sub_lock:
                    live._subscriptions += 1

            def on_unsubscribe(self, client: Any, channel: Any) -> None:
                with live._sub_lock:
                    live._subscriptions = max(0, live._subscriptions - 1)

        self._server = foxglove.start_server(name=self.name, host=self.host, port=self.requested_port,
                                             context=ctx, server_listener=Listener())
        if set_listener_nodelay(self._server.port) != 1:  # 20–30 ms Nagle stalls on the relay hop otherwise
            log.warning("foxglove live view: no listener on port %d to set TCP_NODELAY on", self._server.port)
        log.info("foxglove live view on ws://%s:%d (loopback only)", self.host, self._server.port)
        return self._server.port

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None
        for ch in self._channels.values():
            ch.close()
        self._channels.clear()
        self._ctx = None

    @property
    def port(self) -> int | None:
        return self._server.port if self._server is not None else None

    @property
    def subscriptions(self) -> int:
        """Channel subscriptions held by clients now (a gauge for ``/metrics``)."""
        return self._subscriptions

    # ------------------------------------------------------------------ publishing
    def _log(self, topic: str, data: bytes, t: float | None) -> None:
        ch = self._channels.get(topic)
        if ch is not None:
            ch.log(data, log_time=int(t * 1e9) if t is not None else None)

    def publish_snapshot(self, data: bytes | str, t: float | None = None) -> None:
        self._log(topics.TELEMETRY, data.encode() if isinstance(data, str) else data, t)

    def publish_event(self, event: dict[str, Any]) -> None:
        t = event.get("wall_t")
        self._log(topics.EVENTS, orjson.dumps(event, option=orjson.OPT_SERIALIZE_NUMPY), t)
        if event.get("state_before") != event.get("state_after"):
            self._log(topics.STATE, orjson.dumps({"t": t, "state": event.get("state_after"),
                                                  "previous": event.get("state_before"),
                                                  "trigger": event.get("trigger"),
                                                  "message": event.get("message")}), t)

    def publish_command(self, record: dict[str, Any]) -> None:
        """The same dict the recorder writes to ``/teleop/commands``."""
        self._log(topics.COMMANDS, orjson.dumps(record, option=orjson.OPT_SERIALIZE_NUMPY), record.get("t"))

    def publish_frame(self, jpeg: bytes, t: float, frame_id: str = "camera", fmt: str = "jpeg") -> None:
        """A camera frame (base64-encodes it: call from a worker thread at high frame rates)."""
        if topics.IMAGE in self._channels and self._channels[topics.IMAGE].has_sinks():
            self._log(topics.IMAGE, topics.encode_image(jpeg, int(t * 1e9), frame_id, fmt), t)


# ---------------------------------------------------------------------- authenticated relay
Authorize = Callable[[web.Request], Awaitable[None]]


def proxy_handler(live: FoxgloveLive | Callable[[], FoxgloveLive | None], authorize: Authorize | None = None,
                  max_msg_bytes: int = 64 * 1024 * 1024):
    """An aiohttp handler (``GET /foxglove``) relaying the Foxglove protocol to the loopback server.

    ``live`` is the server, or a callable returning it (``None`` while it is not running: the
    route can be added before the server starts). ``authorize(request)`` is the gateway's
    check: it raises (``web.HTTPUnauthorized``, ``HTTPForbidden`` or the gateway's
    ``ApiError``) to refuse before the upgrade. Point Foxglove at ``ws(s)://<gateway>/foxglove``."""
    current = live if callable(live) and not isinstance(live, FoxgloveLive) else (lambda: live)

    async def handle(request: web.Request) -> web.StreamResponse:
        if authorize is not None:
            await authorize(request)
        live = current()
        port = live.port if live is not None else None
        if port is None:
            raise web.HTTPServiceUnavailable(reason="foxglove live view is not running")
        ws = web.WebSocketResponse(protocols=(SUBPROTOCOL,), max_msg_size=max_msg_bytes, heartbeat=20.0)
        await ws.prepare(request)
        async with ClientSession() as session:
            try:
                upstream = await session.ws_connect(f"ws://{live.host}:{port}", protocols=(SUBPROTOCOL,),
                                                    max_msg_size=max_msg_bytes)
            except OSError as err:
                log.warning("foxglove relay: upstream unreachable: %s", err)
                await ws.close(code=1011, message=b"live view unavailable")
                return ws

            async def pump(src, dst) -> None:
                async for msg in src:
                    if msg.type == WSMsgType.TEXT:
                        await dst.send_str(msg.data)
                    elif msg.type == WSMsgType.BINARY:
                        await dst.send_bytes(msg.data)
                    else:
                        break

            tasks = [asyncio.create_task(pump(ws, upstream)), asyncio.create_task(pump(upstream, ws))]
            try:
                await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                await upstream.close()
                await ws.close()
        return ws

    return handle
