"""Per-viewer rate control: from what the receiver reports to a tier and a bitrate.

Why our own (notes/networks.md): aiortc 1.16 applies the receiver's REMB and nothing else — no
loss reaction, no transport-cc, no pacer — and rebuilds the libx264 context (an IDR) on every
change over 10 %. Here the encoder reconfigures in place (:mod:`~server.gateway.video.encoder`),
so the controller can step as often as reports come.

Inputs, whichever the transport has:

- **WebRTC**: RTCP receiver reports (fraction lost, RTT, jitter; about one a second from
  Chromium) and REMB (Chromium's delay-based estimate, several a second);
- **H.264 over the websocket**: the ack of each frame (bytes, send → ack time): delivery rate over
  a window, and round-trip inflation over the minimum as the queueing signal.

What it does:

1. *Path estimate*: REMB when there is one (a lower REMB only after ``startup_s``: Chromium's
   estimator reports its 300 kbit/s start value until it has measured the incoming rate, about
   5 s), else the measured delivery rate; the loss reaction of
   Google's congestion control (RFC 8698's companion draft-ietf-rmcat-gcc §6): over 10 % loss the
   estimate drops by half the loss, under 2 % it may grow 5 % a report, in between it holds.
   A queueing delay (RTT over its minimum by more than ``queue_delay_s``) cuts it by 15 %.
2. *Target* = ``share`` × estimate (≤ 70 % of the path by default: headroom so the bottleneck
   queue stays empty and a keyframe fits).
3. *Ladder*: the bitrate first (within the tier's range), then the tier below (fewer frames a
   second, then fewer pixels) when the target stays under the tier's floor for ``down_hold_s``;
   one tier up only after the target has cleared the better tier's floor by ``up_margin`` for
   ``up_hold_s``, and never within ``cooldown_s`` of stepping down (hysteresis: no flapping, and
   every switch is a keyframe). Sustained loss over ``lossy`` also steps down: on a lossy path a
   frame of fewer packets is less likely to wait for a retransmission.
4. *A congested path, or a starved end?* Every delay signal above also grows when a CPU is
   starved rather than the path: on a loopback at load 10–14 here the gateway's packets left
   50–300 ms after capture, Chromium's network and decoder threads ran late, REMB fell to 0.85 ×
   what arrived and the acks' round trip grew by the decode queue, so the controller walked down
   to the lowest tier on a path with no queue at all. So the ends' own lateness is measured and
   taken out:

   - the *sender's* lateness: each packet's age when it is handed to the transport
     (:meth:`on_sent`'s ``age_s``: capture → encoder → event loop → socket), its 75th percentile over
     the last second above its minimum over the last minute (the encode time a healthy machine needs);
   - the *receiver's*: what the browser says of itself (:meth:`on_health`: its event loop's lag;
     an ack's ``hold_s``, message arrival → decoded → ack).

   The queueing delay is the round trip over its minimum **less** that lateness; only it counts
   (the websocket's cut, the RTT rule). A lower REMB is taken at its word while both ends keep
   time; while one is *starved* (lateness over ``starved_s``) it lowers the estimate only with
   evidence from the path itself — loss of 2 % or more, or a queueing delay left over after the
   lateness is taken out — and is otherwise counted (``held_starved``), not obeyed. Loss still
   acts as before: a starved CPU does not drop packets on a path, a full queue does.

5. *An app-limited sender probes a clean path.* Chromium's REMB is at most 1.5 × what it receives,
   so once the controller has stepped down, a sender that sends under its target (a starved camera:
   at load 17 here the sim camera made a few frames a second; a still scene) gets a REMB that only
   reflects what it sent, and the controller stayed at the lowest tier on a 100 Mbit/s ``lan`` after
   a ``bad`` spell (REMB 0.13 Mbit/s, no loss, for minutes: tests/linkemu/test_webrtc_adapts.py). So
   while the sender is app-limited (it sends under 0.8 × the bitrate it may use, and REMB is over
   1.2 × what it sent, or an end is starved: at load 20 Chromium's REMB fell to 8 kbit/s on that
   clean ``lan``, a starved receiver's word, not the path's) and the path is clean (loss under
   2 %, no queue the ends' lateness does not explain), the estimate grows ``probe_step`` (5 %) every
   ``probe_interval_s`` (0.5 s) up to what the top tier needs (``probes``). A path that is really
   thin shows it as soon as the sender fills it: loss or a queue, and a REMB near what was sent.

Pure: times are passed in (``now`` in seconds, any monotonic clock), nothing is read from the
system, so the tests drive it with tables of reports.

>>> from server.gateway.video.tiers import Tier
>>> ladder = [Tier("hi", 640, 480, 30, 700_000, 1_500_000), Tier("lo", 320, 240, 10, 80_000, 300_000)]
>>> rc = RateController(ladder, now=0.0)
>>> rc.tier, rc.bitrate_bit_s
('hi', 1500000)
>>> for t in range(10):
...     _ = rc.on_remb(400_000, now=6.0 + t * 0.1)   # the path shrank to 0.4 Mbit/s
>>> rc.tier, rc.bitrate_bit_s                        # down a tier, 70 % of the path
('lo', 280000)
"""

from __future__ import annotations

import collections
import math
from dataclasses import dataclass, field
from typing import Any, Sequence

from server.gateway.video.tiers import Tier


@dataclass
class RateSettings:
    """Tunables of :class:`RateController` (the ``[video]`` table's ``rate_*`` keys)."""

    share: float = 0.7
    down_hold_s: float = 0.4
    up_hold_s: float = 4.0
    up_margin: float = 1.15
    cooldown_s: float = 8.0
    queue_delay_s: float = 0.1
    lossy: float = 0.04
    lossy_hold_s: float = 3.0
    startup_s: float = 5.0
    #: an end whose own lateness exceeds this is starved: its delay signals are not the path's
    starved_s: float = 0.05
    #: an app-limited sender on a clean path raises its estimate this much per ``probe_interval_s`` (item 5)
    probe_step: float = 0.05
    probe_interval_s: float = 0.5


@dataclass
class Decision:
    """What changed after an input: the tier to move to and the bitrate to ask for."""

    tier: str
    bitrate_bit_s: int
    tier_changed: bool
    reason: str


@dataclass
class _Window:
    """Delivered bytes over a sliding time window (for the ack-timed path)."""

    span_s: float = 2.0
    samples: collections.deque = field(default_factory=collections.deque)

    def add(self, t: float, nbytes: int) -> None:
        self.samples.append((t, nbytes))
        while self.samples and t - self.samples[0][0] > self.span_s:
            self.samples.popleft()

    def rate_bit_s(self) -> float | None:
        if len(self.samples) < 4:
            return None
        t0, t1 = self.samples[0][0], self.samples[-1][0]
        if t1 - t0 < 0.25:
            return None
        return 8.0 * sum(n for _, n in list(self.samples)[1:]) / (t1 - t0)


class RateController:
    """One viewer's controller. Feed it reports; read ``tier`` and ``bitrate_bit_s``."""

    def __init__(self, ladder: Sequence[Tier], *, now: float, settings: RateSettings | None = None,
                 start_tier: int = 0) -> None:
        if not ladder:
            raise ValueError("the ladder is empty")
        self.ladder = list(ladder)
        self.s = settings or RateSettings()
        self.index = min(max(0, start_tier), len(self.ladder) - 1)
        self.started = now
        self.estimate_bit_s: float = float(self.ladder[self.index].max_bitrate_bit_s) / self.s.share
        self.remb_bit_s: float | None = None
        self.loss: float = 0.0
        self.rtt_s: float | None = None
        self.rtt_min_s: float | None = None
        self.jitter_s: float | None = None
        self.bitrate_bit_s = self._clamp(self.target_bit_s())
        self._below_since: float | None = None
        self._above_since: float | None = None
        self._lossy_since: float | None = None
        self._last_down = -math.inf
        self._delivered = _Window()
        self._sent = _Window()
        self._last_cut = -math.inf
        self.switches = {"down": 0, "up": 0}
        self.last_reason = "start"
        self._ages: collections.deque[tuple[float, float]] = collections.deque()  # (t, handoff age s), 60 s
        self._receiver_lag: tuple[float, float] | None = None  # (t, s)
        self.held_starved = 0
        self.probes = 0
        self._last_probe = -math.inf
        self._now = now

    def set_ladder(self, ladder: Sequence[Tier], *, now: float) -> Decision:
        """A new ladder (the capture's size changed, tiers.py's ``fit_ladder``): the same tier if it is
        still there, else the same rung (clamped); the hold timers start again."""
        if not ladder:
            raise ValueError("the ladder is empty")
        names = [t.name for t in ladder]
        old = self.tier
        self.ladder = list(ladder)
        self.index = names.index(old) if old in names else min(self.index, len(self.ladder) - 1)
        self._below_since = self._above_since = None
        d = self._decide(now, "ladder")
        return Decision(d.tier, d.bitrate_bit_s, d.tier_changed or self.tier != old, d.reason)

    # ---------------------------------------------------------------- state
    @property
    def tier(self) -> str:
        return self.ladder[self.index].name

    def target_bit_s(self) -> float:
        return self.s.share * self.estimate_bit_s

    def _clamp(self, bit_s: float) -> int:
        t = self.ladder[self.index]
        return int(max(t.min_bitrate_bit_s, min(bit_s, t.max_bitrate_bit_s)))

    def sender_late_s(self, now: float) -> float:
        """How late this end is: the 75th percentile of the last second's handoff ages over their minimum
        of the last minute (0: on time). A percentile, not the mean: a late stretch shows within a few
        packets, before the receiver's estimator has reacted to it."""
        recent = sorted(a for t, a in self._ages if now - t <= 1.0)
        if not recent:
            return 0.0
        floor = min(a for _, a in self._ages)
        return max(0.0, recent[(3 * len(recent)) // 4] - floor)

    def receiver_late_s(self, now: float) -> float:
        """What the receiver last said of its own lag (forgotten after 3 s)."""
        if self._receiver_lag is None or now - self._receiver_lag[0] > 3.0:
            return 0.0
        return self._receiver_lag[1]

    def starved(self, now: float) -> bool:
        """One end is late by itself: its delay signals say nothing about the path."""
        return max(self.sender_late_s(now), self.receiver_late_s(now)) > self.s.starved_s

    def queue_delay_s(self, now: float, hold_s: float = 0.0) -> float | None:
        """The round trip over its minimum, less what the two ends' own lateness explains."""
        if self.rtt_s is None or self.rtt_min_s is None:
            return None
        late = self.sender_late_s(now) + max(self.receiver_late_s(now), hold_s)
        return max(0.0, self.rtt_s - self.rtt_min_s - late)

    def to_json(self) -> dict[str, Any]:
        now = self._now
        return {"tier": self.tier, "bitrate_bit_s": self.bitrate_bit_s, "estimate_bit_s": round(self.estimate_bit_s),
                "remb_bit_s": self.remb_bit_s, "loss": round(self.loss, 4),
                "rtt_ms": None if self.rtt_s is None else round(self.rtt_s * 1e3, 1),
                "rtt_min_ms": None if self.rtt_min_s is None else round(self.rtt_min_s * 1e3, 1),
                "jitter_ms": None if self.jitter_s is None else round(self.jitter_s * 1e3, 1),
                "sender_late_ms": round(self.sender_late_s(now) * 1e3, 1),
                "receiver_late_ms": round(self.receiver_late_s(now) * 1e3, 1),
                "starved": self.starved(now), "held_starved": self.held_starved, "probes": self.probes,
                "switches": dict(self.switches), "reason": self.last_reason}

    # ---------------------------------------------------------------- inputs
    def on_remb(self, bit_s: float, *, now: float) -> Decision:
        """Chromium's receiver estimate of the path (REMB)."""
        if bit_s > 0 and math.isfinite(bit_s):
            self.remb_bit_s = float(bit_s)
            sent = self._sent.rate_bit_s()
            # REMB is at most 1.5 × what the receiver got: from a sender that had little to send (a still
            # scene) a low REMB says nothing about the path. Lower only when it is near what we sent.
            app_limited = sent is not None and bit_s > 1.2 * sent
            if bit_s >= self.estimate_bit_s:
                self.estimate_bit_s = float(bit_s)
            elif now - self.started >= self.s.startup_s and not app_limited:
                if self.starved(now) and not self._path_evidence(now):
                    self.held_starved += 1  # a starved end's delay, not the path's: counted, not obeyed
                else:
                    self.estimate_bit_s = float(bit_s)
            # under 0.8 × the bitrate it may use, and REMB above what it sent (or not to be trusted: a starved
            # end, no sign of a full path): the sender is the limit, not the path
            undershoots = (sent is not None and sent < 0.8 * self.bitrate_bit_s
                           and (app_limited or self.starved(now)))
            if undershoots and self._clean(now) and now - self._last_probe >= self.s.probe_interval_s:
                # REMB is at most 1.5 × what arrives: from a sender that sends less than it may (a starved
                # camera, a still scene) it is a floor of the path, never its size; a clean path is probed
                self._last_probe = now
                top = self.ladder[0].max_bitrate_bit_s / self.s.share
                probed = min(top, max(self.estimate_bit_s, bit_s) * (1.0 + self.s.probe_step))
                if probed > self.estimate_bit_s:
                    self.estimate_bit_s = probed
                    self.probes += 1
        return self._decide(now, "remb")

    def _clean(self, now: float) -> bool:
        """No sign of a full path: loss under 2 %, no queue beyond what the ends' lateness explains."""
        return not self._path_evidence(now)

    def _path_evidence(self, now: float) -> bool:
        """Loss, or queueing the ends' lateness does not explain: the path itself is full."""
        queue = self.queue_delay_s(now)
        return self.loss >= 0.02 or (queue is not None and queue > self.s.queue_delay_s)

    def on_report(self, *, now: float, fraction_lost: float | None = None, rtt_s: float | None = None,
                  jitter_s: float | None = None) -> Decision:
        """An RTCP receiver report (fraction lost 0–1, RTT and jitter in s)."""
        if fraction_lost is not None and math.isfinite(fraction_lost):
            self.loss = min(1.0, max(0.0, fraction_lost))
            if self.loss > 0.10:
                self.estimate_bit_s *= 1.0 - 0.5 * self.loss
            elif self.loss < 0.02 and self.remb_bit_s is None:
                self.estimate_bit_s *= 1.05
        if rtt_s is not None and math.isfinite(rtt_s) and rtt_s >= 0:
            self._note_rtt(rtt_s)
        if jitter_s is not None and math.isfinite(jitter_s):
            self.jitter_s = jitter_s
        return self._decide(now, "report")

    def on_sent(self, *, now: float, nbytes: int, age_s: float | None = None) -> None:
        """Bytes handed to the transport (what we really sent: a still scene sends far under the target),
        ``age_s`` after the frame's capture (the sender's own lateness, item 4 of the module docstring)."""
        self._now = now
        self._sent.add(now, nbytes)
        if age_s is not None and math.isfinite(age_s) and age_s >= 0:
            self._ages.append((now, age_s))
            while self._ages and now - self._ages[0][0] > 60.0:
                self._ages.popleft()

    def on_health(self, *, now: float, lag_s: float) -> Decision:
        """The receiver's own lag (its event loop's, as it measured it)."""
        if math.isfinite(lag_s) and lag_s >= 0:
            self._receiver_lag = (now, lag_s)
        return self._decide(now, "health")

    def on_ack(self, *, now: float, nbytes: int, rtt_s: float, hold_s: float = 0.0) -> Decision:
        """The websocket path: a frame of ``nbytes`` acked ``rtt_s`` after it was sent; the receiver held it
        ``hold_s`` itself (arrival → decoded → ack)."""
        self._delivered.add(now, nbytes)
        self._note_rtt(rtt_s)
        rate = self._delivered.rate_bit_s()
        hold_s = hold_s if math.isfinite(hold_s) and hold_s > 0 else 0.0
        queue = self.queue_delay_s(now, hold_s)
        queued = queue is not None and queue > self.s.queue_delay_s
        top = self.ladder[0].max_bitrate_bit_s / self.s.share
        if queued and now - self._last_cut >= max(0.2, self.rtt_min_s or 0.0):
            # frames queue in the path: what got through is the path's rate (once per round trip)
            self.estimate_bit_s = min(self.estimate_bit_s, rate or self.estimate_bit_s) * 0.85
            self._last_cut = now
        elif not queued:
            self.estimate_bit_s = min(top, self.estimate_bit_s * 1.01)
        return self._decide(now, "ack")

    def _note_rtt(self, rtt_s: float) -> None:
        self.rtt_s = rtt_s
        if self.rtt_min_s is None or rtt_s < self.rtt_min_s:
            self.rtt_min_s = rtt_s

    # ---------------------------------------------------------------- the ladder
    def _decide(self, now: float, why: str) -> Decision:
        self._now = now
        target = self.target_bit_s()
        cur = self.ladder[self.index]
        changed = False
        reason = why
        lossy = self.loss >= self.s.lossy
        if lossy:
            self._lossy_since = now if self._lossy_since is None else self._lossy_since
        else:
            self._lossy_since = None
        if target < cur.min_bitrate_bit_s and self.index < len(self.ladder) - 1:
            self._below_since = now if self._below_since is None else self._below_since
            if now - self._below_since >= self.s.down_hold_s:
                changed, reason = self._step(+1, now), f"{why}: target {target / 1e3:.0f} kbit/s under {cur.name}"
        elif (self._lossy_since is not None and now - self._lossy_since >= self.s.lossy_hold_s
              and self.index < len(self.ladder) - 1):
            changed, reason = self._step(+1, now), f"{why}: {self.loss:.0%} loss"
            self._lossy_since = now
        else:
            self._below_since = None
        if not changed and self.index > 0 and not lossy:
            better = self.ladder[self.index - 1]
            if target >= better.min_bitrate_bit_s * self.s.up_margin and now - self._last_down >= self.s.cooldown_s:
                self._above_since = now if self._above_since is None else self._above_since
                if now - self._above_since >= self.s.up_hold_s:
                    changed, reason = self._step(-1, now), f"{why}: target {target / 1e3:.0f} kbit/s fits {better.name}"
            else:
                self._above_since = None
        self.bitrate_bit_s = self._clamp(target)
        if changed:
            self.last_reason = reason
        return Decision(self.tier, self.bitrate_bit_s, changed, reason)

    def _step(self, direction: int, now: float) -> bool:
        self.index += direction
        self._below_since = self._above_since = None
        if direction > 0:
            self._last_down = now
            self.switches["down"] += 1
        else:
            self.switches["up"] += 1
        return True
