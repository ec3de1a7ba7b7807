"""The control loop's timing: absolute deadlines, the sleep-then-spin wait, real-time priority,
garbage collection kept out of the tick, and the figures (lateness histogram, percentiles).

Why each piece (measured on this kind of 2-core VM, notes/performance.md §1):

* **Absolute deadlines, skipped when missed** (:class:`Schedule`): a relative ``sleep(period)``
  drifts (875 Hz achieved of 1 kHz); bursting to catch up after a stall would write several
  commands in a row. Deadlines advance by one period; a tick a whole period late skips and
  counts the deadlines it missed (ros2_control does the same).
* **Sleep, then spin the last ``spin_s``** (:meth:`Schedule.wait`): ``time.sleep`` alone wakes
  ~90 µs late at p50; with a 200 µs busy-wait tail the p50 is under 1 µs.
* **SCHED_FIFO and a 0.5 ms GIL switch interval** (:func:`try_realtime`): at normal priority the
  GIL's 5 ms switch interval pushes the p99 to 0.3–1 ms under load; with both, 2.5 µs. The runtime's
  other threads run at niceness -10 (:func:`raise_priority`): one that holds the GIL must get a CPU
  soon, or the control thread waits for it.
* **Garbage collection in the slack** (:class:`GcPolicy`): a full collection of the start-up
  heap took ~10 ms, ten periods at 1 kHz; frozen after start-up it is never scanned again, and
  the young generation is collected after a tick that left at least half a period.
* **Figures** (:class:`LoopStats`): a cumulative lateness histogram for the whole run
  (``loop_stats``, ``/metrics``, ``bench/bench_core.py``) and percentiles over the last
  :data:`JITTER_WINDOW` ticks by one partial sort (:func:`percentiles`: ~20 µs where three
  ``np.percentile`` calls took ~0.15 ms on the runtime's publishing thread).
"""

from __future__ import annotations

import bisect
import gc
import logging
import math
import os
import sys
import time
from typing import Any, Callable

import numpy as np

log = logging.getLogger(__name__)

JITTER_WINDOW = 2048
#: upper edges (µs) of the cumulative lateness histogram kept for the whole run (``loop_stats``)
JITTER_BUCKETS_US = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000, 1e9)


def percentiles(a: np.ndarray, qs: tuple[float, ...]) -> list[float]:
    """``np.percentile(a, qs)`` (linear interpolation) by one partial sort: ~20 µs for the 2048-tick window
    where three ``np.percentile`` calls took ~0.15 ms on the runtime's publishing thread.

    >>> a = np.array([5.0, 1.0, 4.0, 2.0, 3.0])
    >>> percentiles(a, (0, 50, 99, 100)) == [float(x) for x in np.percentile(a, [0, 50, 99, 100])]
    True
    """
    n = len(a)
    pos = [q / 100.0 * (n - 1) for q in qs]
    ks = sorted({int(math.floor(p)) for p in pos} | {min(int(math.floor(p)) + 1, n - 1) for p in pos})
    part = np.partition(a, ks)
    out = []
    for p in pos:
        lo = int(math.floor(p))
        hi = min(lo + 1, n - 1)
        out.append(float(part[lo] + (part[hi] - part[lo]) * (p - lo)))
    return out


class LoopStats:
    """Tick timing, written by the loop thread; read (approximately) by others."""

    def __init__(self, rate_hz: float) -> None:
        self.rate_hz = rate_hz
        self.ticks = 0
        self.missed = 0
        self.overruns = 0
        self.gc_collections = 0
        self.realtime = "not started"
        self.jitter_us = np.zeros(JITTER_WINDOW)
        self.exec_us = np.zeros(JITTER_WINDOW)
        self.jitter_counts = [0] * len(JITTER_BUCKETS_US)  # cumulative since start, per bucket
        self.jitter_sum_us = 0.0
        self.started_t = time.monotonic()
        self._cached_at = -1.0
        self._cached: dict[str, Any] | None = None

    def record(self, late_s: float, exec_s: float) -> None:
        i = self.ticks % JITTER_WINDOW
        late_us = late_s * 1e6
        self.jitter_us[i] = late_us
        self.exec_us[i] = exec_s * 1e6
        self.jitter_counts[bisect.bisect_left(JITTER_BUCKETS_US, late_us)] += 1
        self.jitter_sum_us += late_us
        self.ticks += 1

    def histogram(self) -> dict[str, Any]:
        """The whole run's lateness histogram (for benchmarks and ``/metrics``): bucket upper edges in µs
        and the count in each, plus ticks, missed and overruns."""
        return {"buckets_us": list(JITTER_BUCKETS_US), "counts": list(self.jitter_counts),
                "sum_us": round(self.jitter_sum_us, 1), "ticks": self.ticks,
                "missed": self.missed, "overruns": self.overruns, "gc_collections": self.gc_collections}

    def to_json(self) -> dict[str, Any]:
        """Figures over the last ticks; percentiles are recomputed at most every 0.5 s (they cost ~0.1 ms)."""
        now = time.monotonic()
        if now - self._cached_at < 0.5 and self._cached is not None:
            return {**self._cached, "ticks": self.ticks, "missed": self.missed, "overruns": self.overruns}
        self._cached_at = now
        self._cached = self._compute()
        return self._cached

    def _compute(self) -> dict[str, Any]:
        n = min(self.ticks, JITTER_WINDOW)
        window = self.jitter_us[:n] if n else np.zeros(1)
        p50, p99, top = percentiles(window, (50, 99, 100))
        elapsed = time.monotonic() - self.started_t
        return {
            "rate_hz": self.rate_hz,
            "measured_hz": round(self.ticks / elapsed, 2) if elapsed > 0 else 0.0,
            "ticks": self.ticks,
            "missed": self.missed,
            "overruns": self.overruns,
            "jitter_p50_us": round(p50, 1),
            "jitter_p99_us": round(p99, 1),
            "jitter_max_us": round(top, 1),
            "exec_p99_us": round(percentiles(self.exec_us[:n] if n else np.zeros(1), (99,))[0], 1),
            "gc_collections": self.gc_collections,
            "realtime": self.realtime,
        }


#: the niceness of the runtime's other threads (the event loop that publishes and answers the gateway)
RUNTIME_NICE = -10


def raise_priority(nice: int = RUNTIME_NICE) -> str:
    """Give the calling thread, and every thread it starts afterwards, niceness ``nice``; returns what was granted.

    The control thread runs SCHED_FIFO, but it needs the GIL, and a GIL held by the runtime's event-loop thread
    is released only when that thread runs again: at normal priority on a machine busy with other work (a
    browser, a video encoder, a test suite's other servers) it can wait in the run queue with the GIL, and the
    loop stops the robot for a stall (``loop.max_stall_s``). At niceness -10 it is ahead of ordinary programs.
    It narrows the window, it does not close it: a machine loaded far past its cores (three test workers and a
    browser benchmark beside them) still saw ticks 0.13-0.16 s late."""
    if not hasattr(os, "setpriority"):
        return "unsupported"
    try:
        os.setpriority(os.PRIO_PROCESS, 0, nice)  # Linux: the calling thread; threads started later inherit it
    except (PermissionError, OSError) as err:
        log.info("the runtime keeps normal priority (niceness %d refused: %s)", nice, err.strerror or err)
        return f"normal (niceness {nice} refused)"
    return f"nice {nice}"


def try_realtime(priority: int = 50) -> str:
    """Ask for SCHED_FIFO for the calling thread; returns what was granted."""
    if not hasattr(os, "sched_setscheduler"):
        return "unsupported"
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
    except (PermissionError, OSError) as err:
        log.warning("real-time priority refused (%s); the control loop runs at normal priority", err)
        return f"normal (SCHED_FIFO refused: {err.strerror or err})"
    # the GIL's default 5 ms switch interval would otherwise delay the loop thread (notes/performance.md §1)
    sys.setswitchinterval(5e-4)
    return f"SCHED_FIFO {priority}"


class Schedule:
    """Absolute deadlines, advanced one period at a time; a tick a whole period late skips (and
    counts) the deadlines it missed rather than bursting to catch up (ros2_control does the same).

    >>> s = Schedule(0.01, start=0.0)
    >>> s.due(0.0100), s.advance()
    ((0.0, 0.01, 0), None)
    >>> late, dt, skipped = s.due(0.0452)      # the deadline was 0.02: 25 ms late
    >>> round(late, 4), round(dt, 4), skipped
    (0.0252, 0.0352, 2)
    >>> s.advance(); round(s.next_t, 4)       # the next deadline after the skipped ones
    0.05
    """

    def __init__(self, period_s: float, start: float) -> None:
        self.period_s = period_s
        self.next_t = start + period_s
        self.last_t = start

    def due(self, now: float) -> tuple[float, float, int]:
        """(lateness of this tick, time since the previous tick, deadlines skipped)."""
        late = now - self.next_t
        skipped = 0
        if late >= self.period_s:
            skipped = int(late // self.period_s)
            self.next_t += skipped * self.period_s
        dt = now - self.last_t
        self.last_t = now
        return late, dt, skipped

    def advance(self) -> None:
        self.next_t += self.period_s

    def wait(self, clock: Callable[[], float], spin_s: float) -> float:
        """Sleep until ``spin_s`` before the next deadline, spin the rest; returns the time it woke at."""
        remaining = self.next_t - clock() - spin_s
        if remaining > 0:
            time.sleep(remaining)
        now = clock()
        while now < self.next_t:
            now = clock()
        return now


class GcPolicy:
    """Keep collections out of the tick.

    :meth:`freeze` (after start-up) moves everything alive to the permanent generation and
    turns automatic collection off; :meth:`collect` (loop thread, after a tick) collects the
    young generation when enough objects were allocated and at least half a period is left
    before the next deadline, and the older ones on a slow cadence. A 2-core VM measured a
    full collection of the start-up heap at ~10 ms: frozen, it is never scanned again.
    """

    def __init__(self, enabled: bool, young_threshold: int = 700, old_every_s: float = 10.0) -> None:
        self.enabled = enabled
        self.young_threshold = young_threshold
        self.old_every_s = old_every_s
        self._next_old_t = 0.0

    def freeze(self) -> None:
        if not self.enabled:
            return
        gc.collect()
        gc.freeze()
        gc.disable()

    def collect(self, now: float, slack_s: float, period_s: float) -> int:
        """Collect if it is due and fits in the slack; returns the generation collected, or -1."""
        if not self.enabled or slack_s < 0.5 * period_s:
            return -1
        if now >= self._next_old_t:
            self._next_old_t = now + self.old_every_s
            gc.collect(1)
            return 1
        if gc.get_count()[0] >= self.young_threshold:
            gc.collect(0)
            return 0
        return -1


__all__ = ["GcPolicy", "JITTER_BUCKETS_US", "JITTER_WINDOW", "LoopStats", "RUNTIME_NICE", "Schedule", "percentiles",
           "raise_priority", "try_realtime"]
