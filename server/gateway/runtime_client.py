"""The gateway's connection to the robot runtime (docs/runtime-api.md).

One connection over the runtime's Unix socket, kept up by :meth:`RuntimeClient.run`: it
connects (retrying with backoff while the runtime starts or restarts), reads the hello
(the robot's description), subscribes to snapshots and events, and hands each snapshot's
bytes on untouched (the runtime serialised it once; the gateway forwards it). Frames are
handled in the socket protocol's ``data_received``, so a snapshot reaches the telemetry
fan-out in the same event-loop step that read it (no task in between). Requests
are matched to their responses by id; while the runtime is down every request fails at
once with 503 ``runtime_down`` and the state the gateway shows is ``fault``.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from typing import Any, Callable

import orjson

from server import protocol
from server.errors import ApiError, RuntimeDownError

log = logging.getLogger(__name__)

DOWN_MESSAGE = "robot runtime down: it is being restarted, and comes back idle"


class RuntimeClient:
    def __init__(self, socket_path: str, *, request_timeout_s: float = 5.0,
                 on_snapshot: Callable[[bytes], None] | None = None,
                 on_event: Callable[[dict[str, Any]], None] | None = None,
                 on_link: Callable[[bool], None] | None = None) -> None:
        self.socket_path = socket_path
        self.request_timeout_s = request_timeout_s
        self.on_snapshot = on_snapshot or (lambda data: None)
        self.on_event = on_event or (lambda ev: None)
        self.on_link = on_link or (lambda up: None)
        self.description: dict[str, Any] | None = None
        self.runtime_pid: int | None = None
        self.connected = False
        self.connects = 0
        self.down_since: float | None = time.monotonic()
        self.shutting_down = False  # set when the runtime announced its shutdown (not a crash)
        self.latest: bytes | None = None  # the newest snapshot, as the runtime serialised it
        self._latest_parsed: tuple[bytes, dict[str, Any]] | None = None
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future] = {}
        self._writer: asyncio.Transport | None = None
        self._connected_event = asyncio.Event()
        self._task: asyncio.Task | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        self._task = asyncio.create_task(self.run(), name="runtime-client")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._writer is not None:
            self._writer.close()

    async def wait_connected(self, timeout_s: float) -> bool:
        try:
            await asyncio.wait_for(self._connected_event.wait(), timeout_s)
            return True
        except asyncio.TimeoutError:
            return False

    async def run(self) -> None:
        delay = 0.05
        loop = asyncio.get_running_loop()
        while True:
            try:
                transport, conn = await loop.create_unix_connection(_Connection, self.socket_path)
            except OSError:
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
                continue
            delay = 0.05
            try:
                await self._session(transport, conn)
            except (OSError, protocol.ProtocolError) as err:
                log.debug("runtime connection ended: %r", err)
            finally:
                self._lost(transport)

    async def _session(self, transport: asyncio.Transport, conn: "_Connection") -> None:
        header, _ = await asyncio.wait_for(conn.next_frame(), 10.0)
        if header.get("type") != "hello" or header.get("version") != protocol.VERSION:
            raise protocol.ProtocolError(f"not a teleop runtime of API version {protocol.VERSION}: {header}")
        transport.write(protocol.encode({"type": "hello", "version": protocol.VERSION, "client": "gateway"}))
        self._writer = transport
        self.description = header.get("robot")
        self.runtime_pid = header.get("pid")
        self.shutting_down = False
        conn.deliver_to(self._on_frame)  # from here every frame is handled as it arrives, in data_received
        try:
            await self.request("subscribe", {"topics": ["snapshot", "event"]})
            snap = await self.request("state")
            if snap:
                self._set_latest(orjson.dumps(snap, option=orjson.OPT_SERIALIZE_NUMPY))
            self.connected = True
            self.connects += 1
            self.down_since = None
            self._connected_event.set()
            log.info("connected to the robot runtime (pid %s)", self.runtime_pid)
            self.on_link(True)
            await conn.closed
        finally:
            conn.on_frame = None

    def _on_frame(self, header: dict[str, Any], payload: bytes) -> None:
        kind = header.get("type")
        if kind == "snapshot":
            self._set_latest(payload)
            self.on_snapshot(payload)
        elif kind == "event":
            data = header.get("data") or {}
            if data.get("trigger") == "shutdown":
                self.shutting_down = True
            self.on_event(data)
        elif kind == "response":
            fut = self._pending.pop(header.get("id"), None)
            if fut is not None and not fut.done():
                fut.set_result(header)
        elif kind == "error":
            log.error("runtime refused the connection: %s", header.get("error"))

    def _lost(self, transport: asyncio.Transport) -> None:
        transport.close()
        self._writer = None
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(RuntimeDownError(DOWN_MESSAGE))
        self._pending.clear()
        if self.connected:
            self.connected = False
            self.down_since = time.monotonic()
            self._connected_event.clear()
            if self.shutting_down:
                log.info("the robot runtime shut down")
            else:
                log.error("lost the robot runtime (pid %s): %s", self.runtime_pid, DOWN_MESSAGE)
            self.on_link(False)

    # ------------------------------------------------------------------ snapshots
    def _set_latest(self, data: bytes) -> None:
        self.latest = data

    def latest_snapshot(self) -> dict[str, Any]:
        """The newest snapshot parsed (cached per snapshot; ``{}`` before the first)."""
        data = self.latest
        if data is None:
            return {}
        cached = self._latest_parsed
        if cached is not None and cached[0] is data:
            return cached[1]
        parsed = orjson.loads(data)
        self._latest_parsed = (data, parsed)
        return parsed

    # ------------------------------------------------------------------ requests
    async def request(self, method: str, params: dict[str, Any] | None = None,
                      timeout_s: float | None = None) -> Any:
        """The method's result; raises the runtime's :class:`ApiError`, or 503 ``runtime_down``."""
        writer = self._writer
        if writer is None or writer.is_closing():
            raise RuntimeDownError(DOWN_MESSAGE)
        req_id = next(self._ids)
        fut = asyncio.get_running_loop().create_future()
        self._pending[req_id] = fut
        writer.write(protocol.encode({"type": "request", "id": req_id, "method": method, "params": params or {}}))
        try:
            reply = await asyncio.wait_for(fut, timeout_s or self.request_timeout_s)
        except asyncio.TimeoutError:
            self._pending.pop(req_id, None)
            raise ApiError(f"the robot runtime did not answer {method} within "
                           f"{timeout_s or self.request_timeout_s:g} s", code="runtime_timeout", status=503) from None
        if "error" in reply:
            raise ApiError.from_wire(reply["error"])
        return reply.get("result")

    def notify(self, method: str, params: dict[str, Any] | None = None) -> bool:
        """A request that wants no answer (heartbeats); False when the runtime is down."""
        writer = self._writer
        if writer is None or writer.is_closing():
            return False
        writer.write(protocol.encode({"type": "notify", "method": method, "params": params or {}}))
        return True


class _Connection(asyncio.Protocol):
    """The runtime socket's frames, handed to ``on_frame`` in ``data_received`` (no task switch between a
    snapshot arriving and its fan-out); until ``on_frame`` is set (the hello), they wait in a queue."""

    def __init__(self) -> None:
        self.frames = protocol.FrameBuffer()
        self.on_frame: Callable[[dict[str, Any], bytes], None] | None = None
        self._early: asyncio.Queue[tuple[dict[str, Any], bytes]] = asyncio.Queue()
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            frames = self.frames.feed(data)
        except protocol.ProtocolError as err:
            self._close(err)
            return
        for header, payload in frames:
            if self.on_frame is not None:
                self.on_frame(header, payload)
            else:
                self._early.put_nowait((header, payload))

    def deliver_to(self, on_frame: Callable[[dict[str, Any], bytes], None]) -> None:
        """Hand every frame to ``on_frame`` from now on, those that came with the hello first."""
        while not self._early.empty():
            on_frame(*self._early.get_nowait())
        self.on_frame = on_frame

    async def next_frame(self) -> tuple[dict[str, Any], bytes]:
        """The next frame before ``on_frame`` is set; raises when the connection ends first."""
        get = asyncio.ensure_future(self._early.get())
        done, _ = await asyncio.wait({get, self.closed}, return_when=asyncio.FIRST_COMPLETED)
        if get in done:
            return get.result()
        get.cancel()
        return self.closed.result()  # type: ignore[return-value]  # raises: closed only ever fails

    def connection_lost(self, exc: Exception | None) -> None:
        self._close(exc or ConnectionResetError("the runtime closed the connection"))

    def _close(self, err: BaseException) -> None:
        if not self.closed.done():
            self.closed.set_exception(err)
            self.closed.exception()  # retrieved: a connection that ends unawaited is not an error to log
        if self.transport is not None:
            self.transport.close()


__all__ = ["DOWN_MESSAGE", "RuntimeClient"]
