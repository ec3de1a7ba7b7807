"""Thread → event loop, latest wins: the one slot the capture thread writes and the loop reads.

The capture thread must never wait on the loop and the loop must never see a backlog: a value
the loop has not taken yet is *replaced* (counted as ``coalesced``), never queued, and at most one
``call_soon_threadsafe`` is outstanding however fast the writer goes.

This is the seam for issue 19's shared latest-slot writer (telemetry, overlays and video through
one writer): the video service uses only :meth:`LatestSlot.put` (any thread) and the ``on_take``
callback (the loop); swapping this class for the shared one changes nothing else.

>>> import asyncio
>>> async def demo():
...     got = []
...     slot = LatestSlot(asyncio.get_running_loop(), got.append)
...     slot.put(1); slot.put(2)        # the loop has not run yet: 2 replaces 1
...     await asyncio.sleep(0)
...     return got, slot.coalesced
>>> asyncio.run(demo())
([2], 1)
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Callable


class LatestSlot:
    """One value handed from any thread to ``on_take(value)`` on ``loop``; newer values replace older."""

    __slots__ = ("_loop", "_on_take", "_lock", "_pending", "_has", "_scheduled", "coalesced")

    def __init__(self, loop: asyncio.AbstractEventLoop | None, on_take: Callable[[Any], None]) -> None:
        self._loop = loop
        self._on_take = on_take
        self._lock = threading.Lock()
        self._pending: Any = None
        self._has = False
        self._scheduled = False
        self.coalesced = 0

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def put(self, value: Any) -> None:
        """Offer ``value`` (any thread): taken on the loop soon, unless a newer one replaces it first."""
        with self._lock:
            if self._has:
                self.coalesced += 1
            self._pending, self._has = value, True
            if self._scheduled:
                return
            self._scheduled = True
        loop = self._loop
        if loop is None:
            return
        try:
            loop.call_soon_threadsafe(self._take)
        except RuntimeError:  # loop closed during shutdown
            pass

    def pending(self) -> bool:
        with self._lock:
            return self._has

    def _take(self) -> None:
        with self._lock:
            value, has = self._pending, self._has
            self._pending, self._has, self._scheduled = None, False, False
        if has:
            self._on_take(value)
