"""The gateway's connection to the robot runtime (docs/runtime-api.md).

One connection over the runtime's Unix socket, kept up by :meth:`RuntimeClient.run`: it
connects (retrying with backoff while the runtime starts or restarts), reads the hello
(the robot's description), subscribes to snapshots and events, and hands each snapshot's
bytes on untouched (the runtime serialised it once; the gateway forwards it). Requests
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
        self._writer: asyncio.StreamWriter | None = None
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
        while True:
            try:
                reader, writer = await asyncio.open_unix_connection(self.socket_path)
            except OSError:
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
                continue
            delay = 0.05
            try:
                await self._session(reader, writer)
            except (OSError, asyncio.IncompleteReadError, protocol.ProtocolError) as err:
                log.debug("runtime connection ended: %r", err)
            finally:
                self._lost(writer)

    async def _session(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        header, _ = await asyncio.wait_for(protocol.read_frame(reader), 10.0)
        if header.get("type") != "hello" or header.get("version") != protocol.VERSION:
            raise protocol.ProtocolError(f"not a teleop runtime of API version {protocol.VERSION}: {header}")
        writer.write(protocol.encode({"type": "hello", "version": protocol.VERSION, "client": "gateway"}))
        self._writer = writer
        self.description = header.get("robot")
        self.runtime_pid = header.get("pid")
        self.shutting_down = False
        reader_task = asyncio.create_task(self._read(reader))
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
            await reader_task
        finally:
            reader_task.cancel()

    async def _read(self, reader: asyncio.StreamReader) -> None:
        while True:
            header, payload = await protocol.read_frame(reader)
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

    def _lost(self, writer: asyncio.StreamWriter) -> None:
        writer.close()
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


__all__ = ["DOWN_MESSAGE", "RuntimeClient"]
