"""Quality tiers: one encoder per (tier, codec) with viewers, shared by all of them; each viewer's stream.

A *tier* is a size, a frame rate and a bitrate range (``[[video.tiers]]``, best first). The rate
controller of each viewer (:mod:`server.gateway.video.ratecontrol`) picks its tier and asks for a
bitrate within it; the tier's encoder runs at the **lowest** bitrate any of its viewers asks for
(a viewer that can take more moves up a tier instead: that is what the ladder is for).

Each viewer has a :class:`Subscription`: its own queue of packets, in order (packets are a chain: a
P-frame without its predecessor is garbage), with two rules that keep it fresh:

- a packet older than ``max_frame_age_s`` at the head of the queue flushes the queue; the stream
  then waits for the next keyframe (asked for, merged with everybody else's requests) — a slow
  viewer skips, it never lags (``dropped_stale``). Only a packet that has itself waited here for
  half the budget counts: one that arrives already old (a starved machine: capture, encoder and
  loop late together) is still the freshest picture there is, and dropping it helps no one — on
  ``make run`` at load 20–27 every packet reached the loop over 0.25 s old, each was flushed, and
  the dashboard showed one frame in 50 s (``late_sent`` counts those sent anyway);
- a tier change takes effect at a keyframe of the new tier: the viewer keeps the old tier's
  packets until then, so a switch never shows garbage or a freeze.

Encoders start when their first viewer comes and stop ``idle_stop_s`` after the last one left (a
viewer bouncing between two tiers does not restart an encoder each time).

**The ladder fits the capture.** A tier never encodes more than the camera gives: a tier bigger
than the capture (or faster) is scaled down to fit it (its aspect kept, even sizes) with its bitrate
range scaled by the same pixel rate (the tier's bits per pixel kept), tiers that end up the same size
and rate merge (the one configured at that size wins), and every tier's range is kept under the one
above it (:func:`fit_ladder`). Before, a 320×240 capture was encoded at 480×360 and 640×480 with
the 640×480 tiers' 0.7 Mbit/s floor: upscaled pixels, and bits spent on them. The capture's size
changes at run time (``PUT /api/video``): :meth:`TierSet.set_capture` refits the ladder, restarts
encoders whose size changed and tells the viewers' controllers (``on_ladder``).

``native`` is the camera's own H.264 when it delivers it (hardware encoders, RTSP cameras): its
access units go to viewers as they are, no decode, no encode. Its bitrate is the camera's; viewers
whose path is too thin for it move down to the encoded tiers.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import math
import re
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from server.gateway.video.encoder import EncodedPacket, EncoderSettings, TierEncoder

log = logging.getLogger(__name__)

NATIVE = "native"
MAX_QUEUE = 90  # packets; far beyond any age budget at 30 fps


@dataclass(frozen=True)
class Tier:
    """One rung of the ladder."""

    name: str
    width: int
    height: int
    fps: int
    min_bitrate_bit_s: int
    max_bitrate_bit_s: int

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "width": self.width, "height": self.height, "fps": self.fps,
                "min_bitrate_bit_s": self.min_bitrate_bit_s, "max_bitrate_bit_s": self.max_bitrate_bit_s}


_SIZE_NAME = re.compile(r"^\d+x\d+@\d+$")


def fit_tier(t: Tier, width: int, height: int, fps: int) -> Tier:
    """``t`` scaled down to fit a ``width``×``height``@``fps`` capture (unchanged when it fits).

    >>> fit_tier(Tier("640x480@30", 640, 480, 30, 700_000, 1_500_000), 320, 240, 30)
    Tier(name='320x240@30', width=320, height=240, fps=30, min_bitrate_bit_s=175000, max_bitrate_bit_s=375000)
    """
    f = min(1.0, width / t.width, height / t.height)
    w, h = (max(2, int(n * f + 1e-6) // 2 * 2) for n in (t.width, t.height))
    r = min(t.fps, fps)
    if (w, h, r) == (t.width, t.height, t.fps):
        return t
    share = (w * h * r) / (t.width * t.height * t.fps)
    name = f"{w}x{h}@{r}" if _SIZE_NAME.match(t.name) else t.name
    lo = max(20_000, round(t.min_bitrate_bit_s * share))
    return Tier(name, w, h, r, lo, max(lo, round(t.max_bitrate_bit_s * share)))


def fit_ladder(tiers: Sequence[Tier], width: int, height: int, fps: int) -> list[Tier]:
    """The configured ladder fitted to the capture (module docstring): no tier larger or faster than it.

    >>> ladder = [Tier("640x480@30", 640, 480, 30, 700_000, 1_500_000),
    ...           Tier("480x360@15", 480, 360, 15, 220_000, 500_000),
    ...           Tier("320x240@10", 320, 240, 10, 60_000, 280_000)]
    >>> [(t.name, t.min_bitrate_bit_s, t.max_bitrate_bit_s) for t in fit_ladder(ladder, 320, 240, 30)]
    [('320x240@30', 175000, 375000), ('320x240@15', 97778, 222222), ('320x240@10', 60000, 222222)]
    """
    fitted = [fit_tier(t, width, height, fps) for t in tiers]
    chosen: dict[tuple[int, int, int], int] = {}
    for i, (t, f) in enumerate(zip(tiers, fitted)):
        key = (f.width, f.height, f.fps)
        j = chosen.get(key)
        if j is None or (fitted[j] is not tiers[j] and f is t):  # the tier configured at this size wins
            chosen[key] = i
    out: list[Tier] = []
    for i in sorted(chosen.values()):
        t = fitted[i]
        if out:  # under the one above, yet able to lift a viewer back to it (1.1 × its floor)
            above = out[-1]
            hi = max(min(t.max_bitrate_bit_s, above.max_bitrate_bit_s),
                     min(above.max_bitrate_bit_s, math.ceil(1.1 * above.min_bitrate_bit_s)))
            t = dataclasses.replace(t, min_bitrate_bit_s=min(t.min_bitrate_bit_s, hi), max_bitrate_bit_s=hi)
        out.append(t)
    return out


class Subscription:
    """One viewer's encoded stream: a queue of packets on the event loop, fresh and in order."""

    def __init__(self, tiers: "TierSet", codec: str, tier: str, max_age_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._tiers = tiers
        self.codec = codec
        self.tier = tier
        self.pending_tier: str | None = None
        self.max_age_s = max_age_s
        self.clock = clock
        self.queue: collections.deque[EncodedPacket] = collections.deque()
        self._arrived: collections.deque[float] = collections.deque()  # clock() at push, per queued packet
        self.ready = asyncio.Event()
        self.waiting_key = True
        self.wanted_bitrate: int | None = None
        self.closed = False
        self.counters = {"packets": 0, "keyframes": 0, "skipped_until_key": 0, "dropped_stale": 0,
                         "late_sent": 0, "tier_switches": 0, "bytes": 0}

    # ---------------------------------------------------------------- from the tier set (loop)
    def push(self, pkt: EncodedPacket) -> None:
        if self.closed or pkt.codec != self.codec:
            return
        if pkt.tier == self.pending_tier and pkt.keyframe:
            old = self.tier
            self.tier, self.pending_tier = pkt.tier, None
            self._clear()
            self.waiting_key = False
            self.counters["tier_switches"] += 1
            self._tiers.release(self, old)
        elif pkt.tier != self.tier:
            return
        if self.waiting_key:
            if not pkt.keyframe:
                self.counters["skipped_until_key"] += 1
                return
            self.waiting_key = False
        if self.queue and (self._stale(self.queue[0], self._arrived[0]) or len(self.queue) >= MAX_QUEUE):
            self.drop_all()
            if not pkt.keyframe:
                self.counters["skipped_until_key"] += 1
                return
            self.waiting_key = False
        self.queue.append(pkt)
        self._arrived.append(self.clock())
        self.ready.set()

    def _stale(self, pkt: EncodedPacket, arrived: float) -> bool:
        """Past the age budget, and it got there by waiting in this queue (module docstring)."""
        now = self.clock()
        return now - pkt.capture_t > self.max_age_s and now - arrived > self.max_age_s / 2

    def _clear(self) -> None:
        self.queue.clear()
        self._arrived.clear()

    def _pop(self) -> EncodedPacket | None:
        """The head if it is fresh enough to send (counted), else None after flushing the queue."""
        pkt, arrived = self.queue[0], self._arrived[0]
        if self._stale(pkt, arrived):
            self.drop_all()
            return None
        self.queue.popleft()
        self._arrived.popleft()
        if self.clock() - pkt.capture_t > self.max_age_s:
            self.counters["late_sent"] += 1
        self.counters["packets"] += 1
        self.counters["bytes"] += len(pkt.data)
        if pkt.keyframe:
            self.counters["keyframes"] += 1
        return pkt

    def drop_all(self) -> None:
        """The viewer fell behind the budget: flush, and start again at the next keyframe (asked for)."""
        self.counters["dropped_stale"] += len(self.queue)
        self._clear()
        self.waiting_key = True
        self._tiers.request_keyframe(self.tier, self.codec)

    # ---------------------------------------------------------------- for the viewer (loop)
    async def get(self) -> EncodedPacket:
        """The next packet, fresh (one that waited here past the budget is never returned)."""
        while True:
            if self.queue:
                pkt = self._pop()
                if pkt is not None:
                    return pkt
            self.ready.clear()
            if self.closed:
                raise asyncio.CancelledError("subscription closed")
            await self.ready.wait()

    def get_nowait(self) -> EncodedPacket | None:
        """The next fresh packet, or None (the websocket sender's "latest" path)."""
        return self._pop() if self.queue else None

    def switch(self, tier: str) -> None:
        """Move to ``tier`` at its next keyframe (asked for at once)."""
        if tier == self.tier and self.pending_tier is None:
            return
        if tier == self.tier:
            old, self.pending_tier = self.pending_tier, None
            if old is not None:
                self._tiers.release(self, old)
            return
        if self.pending_tier is not None and self.pending_tier != tier:
            self._tiers.release(self, self.pending_tier)
        self.pending_tier = tier
        self._tiers.attach(self, tier)

    def set_bitrate(self, bit_s: int | None) -> None:
        self.wanted_bitrate = bit_s
        self._tiers.retarget(self.tier)
        if self.pending_tier:
            self._tiers.retarget(self.pending_tier)

    def request_keyframe(self) -> None:
        self._tiers.request_keyframe(self.tier, self.codec)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.ready.set()
        self._tiers.release(self, self.tier)
        if self.pending_tier:
            self._tiers.release(self, self.pending_tier)

    def to_json(self) -> dict[str, Any]:
        return {"codec": self.codec, "tier": self.tier, "pending_tier": self.pending_tier,
                "queued": len(self.queue), "wanted_bitrate_bit_s": self.wanted_bitrate, **self.counters}


class TierSet:
    """The ladder, its running encoders and their subscriptions. Control on the loop; ``offer`` from the
    capture thread."""

    def __init__(self, tiers: list[Tier], settings: EncoderSettings, *, idle_stop_s: float = 5.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not tiers:
            raise ValueError("at least one tier is needed")
        self.configured = list(tiers)
        self.tiers = list(tiers)  # fitted to the capture: set_capture
        self.by_name = {t.name: t for t in tiers}
        #: called on the loop with the new ladder when the capture's size changes (viewers' controllers)
        self.on_ladder: set[Callable[[list[Tier]], None]] = set()
        self.settings = settings
        self.idle_stop_s = idle_stop_s
        self.clock = clock
        self._loop: asyncio.AbstractEventLoop | None = None
        self._encoders: dict[tuple[str, str], TierEncoder] = {}  # touched under the GIL from both sides
        self._subs: dict[tuple[str, str], set[Subscription]] = {}
        self._stop_timers: dict[tuple[str, str], asyncio.TimerHandle] = {}
        self.native: Tier | None = None  # set when the camera delivers its own H.264
        self._native_key_requests = 0
        #: a viewer of ``native`` needs a keyframe: forwarded to the camera (the capture thread asks it)
        self.on_native_keyframe: Callable[[], None] = lambda: None
        self.encoders_started = 0
        self.on_demand: Callable[[], None] = lambda: None  # a first subscriber: wake the capture thread

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    # ---------------------------------------------------------------- ladder
    def ladder(self) -> list[Tier]:
        """Best first; the camera's own stream on top when it has one."""
        return ([self.native] if self.native is not None else []) + self.tiers

    def set_capture(self, width: int, height: int, fps: int) -> bool:
        """Fit the ladder to a ``width``×``height``@``fps`` capture; True when it changed. Encoders whose
        tier changed size restart (their viewers get a keyframe of the new size); encoders of a tier that
        is gone stop when their viewers have moved (``on_ladder`` tells them)."""
        ladder = fit_ladder(self.configured, width, height, fps)
        if ladder == self.tiers:
            return False
        self.tiers, self.by_name = ladder, {t.name: t for t in ladder}
        log.info("video tiers fitted to the %dx%d@%d capture: %s", width, height, fps,
                 ", ".join(t.name for t in ladder))
        for key, enc in list(self._encoders.items()):
            t = self.by_name.get(key[0])
            if t is not None and (enc.width, enc.height, enc.fps) == (t.width, t.height, float(t.fps)):
                continue
            del self._encoders[key]
            self._stop_encoder(enc)
            if t is not None and self._subs.get(key):
                self._start_encoder(key)
        for cb in list(self.on_ladder):
            cb(self.ladder())
        return True

    def _start_encoder(self, key: tuple[str, str]) -> None:
        t = self.tier(key[0])
        enc = TierEncoder(t.name, key[1], t.width, t.height, t.fps, t.max_bitrate_bit_s, t.max_bitrate_bit_s,
                          self.settings, self._from_thread, clock=self.clock)
        self._encoders[key] = enc
        enc.start()
        self.encoders_started += 1
        log.info("video encoder %s/%s started (%dx%d@%d)", t.name, key[1], t.width, t.height, t.fps)
        self.retarget(t.name)
        enc.request_keyframe()

    def _stop_encoder(self, enc: TierEncoder) -> None:
        if self._loop is not None:
            self._loop.run_in_executor(None, enc.stop)
        else:
            enc.stop()

    def tier(self, name: str) -> Tier:
        if self.native is not None and name == NATIVE:
            return self.native
        return self.by_name[name]

    def wanted(self) -> bool:
        return any(self._subs.values())

    # ---------------------------------------------------------------- subscriptions (loop)
    def subscribe(self, codec: str, tier: str | None = None) -> Subscription:
        tier = tier or self.ladder()[0].name
        sub = Subscription(self, codec, tier, self.settings.max_frame_age_s, self.clock)
        self.attach(sub, tier)
        return sub

    def attach(self, sub: Subscription, tier: str) -> None:
        key = (tier, sub.codec)
        self._subs.setdefault(key, set()).add(sub)
        timer = self._stop_timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        if tier != NATIVE and key not in self._encoders and tier in self.by_name:
            self._start_encoder(key)
        self.retarget(tier)
        self.request_keyframe(tier, sub.codec)
        self.on_demand()

    def release(self, sub: Subscription, tier: str) -> None:
        key = (tier, sub.codec)
        subs = self._subs.get(key)
        if subs is None:
            return
        subs.discard(sub)
        if subs:
            self.retarget(tier)
            return
        if key in self._encoders and key not in self._stop_timers and self._loop is not None:
            self._stop_timers[key] = self._loop.call_later(self.idle_stop_s, self._stop_idle, key)

    def _stop_idle(self, key: tuple[str, str]) -> None:
        self._stop_timers.pop(key, None)
        if self._subs.get(key):
            return
        enc = self._encoders.pop(key, None)
        if enc is not None:
            log.info("video encoder %s/%s stopped (no viewer)", *key)
            self._stop_encoder(enc)

    def retarget(self, tier: str) -> None:
        """The tier's bitrate: the lowest any of its viewers asks for, within the tier's range."""
        if tier not in self.by_name:
            return  # native, or a tier the ladder lost (its viewers are moving)
        t = self.tier(tier)
        for (name, codec), enc in self._encoders.items():
            if name != tier:
                continue
            wants = [s.wanted_bitrate for s in self._subs.get((name, codec), ()) if s.wanted_bitrate and s.tier == name]
            rate = min(wants) if wants else t.max_bitrate_bit_s
            enc.set_bitrate(max(t.min_bitrate_bit_s, min(rate, t.max_bitrate_bit_s)))

    def request_keyframe(self, tier: str, codec: str) -> None:
        enc = self._encoders.get((tier, codec))
        if enc is not None:
            enc.request_keyframe()
        elif tier == NATIVE:
            self._native_key_requests += 1
            self.on_native_keyframe()  # the camera makes it (merged there: one per frame at most)

    # ---------------------------------------------------------------- frames in (capture thread)
    def offer(self, frame_bgr: np.ndarray, capture_t: float, seq: int) -> None:
        for enc in list(self._encoders.values()):
            enc.offer(frame_bgr, capture_t, seq)

    def offer_native(self, pkt: EncodedPacket) -> None:
        """An access unit the camera encoded itself (capture thread)."""
        self._from_thread(pkt)

    # ---------------------------------------------------------------- packets out (encoder threads → loop)
    def _from_thread(self, pkt: EncodedPacket) -> None:
        loop = self._loop
        if loop is None:
            return
        try:
            loop.call_soon_threadsafe(self._deliver, pkt)
        except RuntimeError:  # loop closed during shutdown
            pass

    def _deliver(self, pkt: EncodedPacket) -> None:
        for key in ((pkt.tier, pkt.codec),):
            for sub in list(self._subs.get(key, ())):
                sub.push(pkt)

    # ---------------------------------------------------------------- lifecycle and status
    def stop(self) -> None:
        """Stop every encoder (blocking: from a worker thread)."""
        for timer in self._stop_timers.values():
            timer.cancel()
        self._stop_timers.clear()
        encs, self._encoders = list(self._encoders.values()), {}
        for enc in encs:
            enc.stop()

    def encoders(self) -> list[TierEncoder]:
        return list(self._encoders.values())

    def to_json(self) -> dict[str, Any]:
        return {"ladder": [t.to_json() for t in self.ladder()],
                "encoders": [e.to_json() for e in self._encoders.values()],
                "viewers": {f"{t}/{c}": len(s) for (t, c), s in self._subs.items() if s},
                "native_keyframe_requests": self._native_key_requests, "encoders_started": self.encoders_started}
