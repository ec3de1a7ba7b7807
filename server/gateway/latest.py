"""One latest-wins slot per subscriber, the task that writes it, and one stall policy — for every stream the
gateway pushes faster than a slow client may read (telemetry, vision overlays; video can adopt it through
:class:`LatestWriter`'s ``send`` and :class:`StallSweeper`).

Issue 19 §5: there were three, each with its own rule for a client that stops reading — telemetry aborted a
send in progress for ``server.writer_stall_s`` (a sweeper), vision overlays cancelled the send after that
long (``wait_for``, which can leave half a frame on the wire before the abort), video swept its viewers
with its own timestamps. Here:

* a **slot** holds the newest item; an item offered before the previous one was sent replaces it and counts
  as ``dropped`` (the producer never waits on a client: notes/performance.md §3, a slow reader once held
  seconds of video in kernel buffers);
* **priority** messages (replies, events: small, bounded, never dropped silently — the oldest goes when the
  queue is full) are written before the next slot item;
* **age, not buffer size** (issue 20), for a writer given ``backlog`` and ``max_age_s``: a slot item is written
  only while the socket's own write buffer is empty (the backlog is checked before every send; with
  ``TCP_NOTSENT_LOWAT`` the kernel keeps little unsent, so a slow link's backlog shows there) — meanwhile newer
  items replace it — and an item older than ``max_age_s`` is never written (counted in ``expired``). On a
  2 Mbit/s link with a competing download the old rule (drop once ~128 KiB had queued) let telemetry age climb
  to 10 s; priority messages still go first, so replies and events never wait behind queued items;
* the **stall policy**: a writer whose send has not completed for ``stall_s`` — the peer holds the socket
  and does not read — is aborted at the transport by a :class:`StallSweeper` (a close frame could not reach
  a peer that does not read); the sweep reads one timestamp per writer, so it costs nothing per message.

>>> import asyncio
>>> async def demo():
...     sent = []
...     async def send(item): sent.append(item)
...     w = LatestWriter(send)
...     task = asyncio.ensure_future(w.run())
...     w.offer("a"); w.offer("b"); w.priority("reply")  # "a" never went out: dropped
...     await w.drained.wait()
...     task.cancel()
...     return sent, w.dropped
>>> asyncio.run(demo())
(['reply', 'b'], 1)
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from typing import Any, Awaitable, Callable, Generic, Iterable, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

#: how often a writer holding a slot item looks whether the socket's backlog drained, seconds
BACKLOG_POLL_S = 0.005
#: priority messages a writer keeps at most (replies and events; the oldest goes first when it is full)
MAX_PRIORITY = 256


class LatestWriter(Generic[T]):
    """A latest-wins slot and its writer task (:meth:`run`); ``send(item)`` writes one item (a slot item or a
    priority message), ``transport`` is what :meth:`abort` drops."""

    def __init__(self, send: Callable[[Any], Awaitable[None]], transport: Any = None, *, name: str = "client",
                 max_priority: int = MAX_PRIORITY, backlog: Callable[[], int] | None = None,
                 max_age_s: float = 0.0) -> None:
        self._send_item = send
        self.transport = transport
        self.name = name
        self.slot: T | None = None
        self.control: collections.deque[Any] = collections.deque(maxlen=max_priority)
        self.wake = asyncio.Event()
        self.drained = asyncio.Event()  # set while nothing is queued or being sent
        self.send_since: float | None = None  # monotonic start of the send in progress (None: not sending)
        self.dropped = 0
        self.sent = 0
        self.expired = 0  # slot items older than max_age_s when their turn came: never written
        self.held = 0  # times a slot item waited for the socket's backlog to drain
        self.backlog = backlog
        self.backlogged_since: float | None = None  # monotonic time the backlog was first seen undrained
        self.max_age_s = max_age_s
        self._aborted = False

    @property
    def closed(self) -> bool:
        """The connection ended (a subclass adds its socket's own state)."""
        return self._aborted

    def offer(self, item: T) -> None:
        """The newest item: replaces one not sent yet (counted in ``dropped``)."""
        if self.slot is not None:
            self.dropped += 1
        self.slot = item
        self.drained.clear()
        self.wake.set()

    def priority(self, message: Any) -> None:
        """A message written before the next slot item."""
        self.control.append(message)
        self.drained.clear()
        self.wake.set()

    def slot_message(self, item: T) -> Any:
        """What is written for a slot item (a subclass may wrap it, e.g. with the ``dropped`` count)."""
        return item

    async def _send(self, message: Any) -> None:
        self.send_since = time.monotonic()
        await self._send_item(message)
        self.send_since = None

    def item_age(self, item: T) -> float:
        """How old a slot item is, seconds (a subclass that bounds by age says; 0: never too old)."""
        return 0.0

    def backlogged(self) -> bool:
        """The socket still holds unsent data: a slot item waits (only with ``backlog``). Notes since when, for
        the stall policy: a peer that stops reading fills the socket, and this writer then never starts a send
        that could be seen stuck (:meth:`stuck_for`)."""
        if self.backlog is None:
            return False
        if self.backlog() > 0:
            if self.backlogged_since is None:
                self.backlogged_since = time.monotonic()
            return True
        self.backlogged_since = None
        return False

    async def run(self) -> None:
        """Write until the connection ends (``closed``, or the send raises)."""
        try:
            while not self.closed:
                if not self.control and (self.slot is None or self.backlogged()):
                    if self.slot is None:
                        await self.wake.wait()
                    else:  # the backlog drains on its own: look again shortly (newer items replace this one)
                        self.held += 1
                        await asyncio.sleep(BACKLOG_POLL_S)
                        self._expire_slot()
                    self.wake.clear()
                    continue
                self.wake.clear()
                while self.control and not self.closed:
                    await self._send(self.control.popleft())
                self._expire_slot()
                if self.slot is not None and self.backlogged():
                    continue  # the replies filled the buffer: the slot item waits for it
                item, self.slot = self.slot, None
                if item is not None and not self.closed:
                    await self._send(self.slot_message(item))
                    self.sent += 1
                if self.slot is None and not self.control:
                    self.drained.set()
        except (ConnectionResetError, RuntimeError, asyncio.CancelledError):
            pass

    def _expire_slot(self) -> None:
        """Forget the slot item if it is older than ``max_age_s``: it will never be written."""
        if self.slot is not None and self.max_age_s > 0 and self.item_age(self.slot) > self.max_age_s:
            self.slot = None
            self.expired += 1
            if not self.control:
                self.drained.set()

    def stuck_for(self, now: float) -> float:
        """How long the peer has not read: the send in progress has waited, or the socket's backlog has not
        drained (0 when neither; the backlog is looked at again here, so a socket that drained while nothing was
        published is not taken for a stuck one)."""
        since = self.send_since
        sending = 0.0 if since is None else now - since
        if self.backlogged_since is not None and not self.backlogged():
            return sending
        held = 0.0 if self.backlogged_since is None else now - self.backlogged_since
        return max(sending, held)

    def abort(self) -> None:
        """Drop the connection at once (a peer that does not read cannot be sent a close frame)."""
        self._aborted = True
        if self.transport is not None:
            self.transport.abort()


class StallSweeper:
    """The one stall policy: every ``min(1 s, stall_s / 2)``, abort each writer of ``writers()`` whose send has not
    completed for ``stall_s``, and forget it (``on_abort``)."""

    def __init__(self, stall_s: float, writers: Callable[[], Iterable[Any]], *, what: str = "client",
                 on_abort: Callable[[Any], None] | None = None) -> None:
        self.stall_s = stall_s
        self.writers = writers
        self.what = what
        self.on_abort = on_abort
        self.closed_stalled = 0
        self._task: asyncio.Task | None = None

    def sweep(self, now: float | None = None) -> int:
        """Abort every stuck writer now; returns how many."""
        now = time.monotonic() if now is None else now
        stuck = [w for w in list(self.writers()) if w.stuck_for(now) > self.stall_s]
        for w in stuck:
            log.warning("%s %s has not read for %.1f s: closing it", self.what, getattr(w, "label", None) or
                        getattr(w, "peer", None) or getattr(w, "name", "?"), w.stuck_for(now))
            if self.on_abort is not None:
                self.on_abort(w)
            w.abort()
        self.closed_stalled += len(stuck)
        return len(stuck)

    async def _forever(self) -> None:
        while True:
            await asyncio.sleep(min(1.0, self.stall_s / 2))
            self.sweep()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._forever(), name=f"{self.what}-sweeper")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


__all__ = ["LatestWriter", "MAX_PRIORITY", "StallSweeper"]
