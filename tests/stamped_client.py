"""A ``/ws/telemetry`` client that stamps its commands as the dashboard does (issue 20: ``seq``, ``sent_t``) and
answers the server's clock-sync exchange, for the tests and ``bench/bench_link.py``.

Its clock is ``time.monotonic() + clock_offset_s`` (a client whose clock is an hour off: ``clock_offset_s=3600``);
``age_s`` stamps a command as sent that long ago (a command that sat in a queue). Everything it reads is kept:
snapshots with their arrival time, acks and errors by id, events.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from typing import Any

import aiohttp


class StampedClient:
    def __init__(self, ws: aiohttp.ClientWebSocketResponse, clock_offset_s: float = 0.0, *,
                 answer_sync: bool = True) -> None:
        self.ws = ws
        self.clock_offset_s = clock_offset_s
        self.answer_sync = answer_sync
        self.seq = itertools.count(1)
        self.ids = itertools.count(1)
        self.replies: dict[Any, dict] = {}
        self.reply_t: dict[Any, float] = {}
        self.sent: dict[Any, dict] = {}  # id -> the message
        self.snapshots: list[tuple[float, dict]] = []  # (arrival, wall clock; the snapshot)
        self.events: list[tuple[float, dict]] = []
        self.syncs = 0
        self.anonymous_errors: list[dict] = []  # errors to a message whose id could not be read
        self._waiters: dict[Any, asyncio.Future] = {}
        self.changed = asyncio.Event()  # set on every message read
        self._reader = asyncio.ensure_future(self._read())

    def now(self) -> float:
        return time.monotonic() + self.clock_offset_s

    async def _read(self) -> None:
        try:
            await self._read_all()
        finally:
            self.changed.set()  # a waiter sees the socket closed

    async def _read_all(self) -> None:
        async for msg in self.ws:
            if msg.type != aiohttp.WSMsgType.TEXT:
                continue
            arrived = time.time()
            data = json.loads(msg.data)
            self.changed.set()
            kind = data.get("type")
            if kind == "sync" and self.answer_sync:
                t2 = self.now()
                await self.ws.send_json({"type": "sync", "t1": data["t1"], "t2": t2, "t3": self.now()})
                self.syncs += 1
            elif kind == "telemetry":
                self.snapshots.append((arrived, data["data"]))
            elif kind == "event":
                self.events.append((arrived, data["data"]))
            elif kind == "error" and data.get("id") is None:
                self.anonymous_errors.append(data)
            elif kind in ("ack", "error") and data.get("id") is not None:
                self.replies[data["id"]] = data
                self.reply_t[data["id"]] = time.monotonic()
                fut = self._waiters.pop(data["id"], None)
                if fut is not None and not fut.done():
                    fut.set_result(data)

    async def until(self, predicate: Any, timeout_s: float = 30.0) -> None:
        """Wait, reading, until ``predicate()`` holds; fails at once, saying why, once the socket has closed (nothing
        more can come), and on the deadline with what was read."""
        try:
            async with asyncio.timeout(timeout_s):
                while not predicate():
                    if self._reader.done():
                        raise AssertionError(f"the socket closed before the condition held: {self.describe()}")
                    self.changed.clear()
                    await self.changed.wait()
        except TimeoutError:
            raise AssertionError(f"the condition did not hold within {timeout_s:g} s: {self.describe()}") from None

    def describe(self) -> str:
        """What this client saw, for a failure message."""
        missing = [i for i in self.sent if i not in self.replies and self.sent[i]["type"] != "sync"]
        return (f"close code {self.ws.close_code}, {len(self.sent)} sent, {len(self.replies)} replies, "
                f"{len(missing)} unanswered (first {missing[:5]}), {len(self.snapshots)} snapshots, "
                f"anonymous errors {self.anonymous_errors[-3:]}, events {[e for _, e in self.events][-3:]}")

    async def reply(self, msg_id: Any, timeout_s: float = 30.0) -> dict:
        await self.until(lambda: msg_id in self.replies, timeout_s)
        return self.replies[msg_id]

    async def synced(self, timeout_s: float = 30.0, samples: int = 3) -> None:
        await self.until(lambda: self.syncs >= samples, timeout_s)
        await asyncio.sleep(0.1)  # the last answer has reached the server

    async def send(self, kind: str, *, age_s: float = 0.0, seq: int | None = None, stamp: bool | None = None,
                   **fields: Any) -> Any:
        """Send a command (stamped as the dashboard does: speed and heartbeats, unless ``stamp`` says); returns
        its id."""
        msg_id = next(self.ids)
        msg: dict[str, Any] = {"type": kind, "id": msg_id, **fields}
        if stamp if stamp is not None else kind in ("speed", "heartbeat"):
            msg["seq"] = next(self.seq) if seq is None else seq
            msg["sent_t"] = self.now() - age_s
        self.sent[msg_id] = msg
        await self.ws.send_json(msg)
        return msg_id

    async def call(self, kind: str, timeout_s: float = 30.0, **kw: Any) -> dict:
        """Send and wait for the ack or error."""
        msg_id = await self.send(kind, **kw)
        fut = self._waiters[msg_id] = asyncio.get_running_loop().create_future()
        if msg_id in self.replies:
            return self.replies[msg_id]
        return await asyncio.wait_for(fut, timeout_s)

    async def close(self) -> None:
        self._reader.cancel()
        await asyncio.gather(self._reader, return_exceptions=True)
