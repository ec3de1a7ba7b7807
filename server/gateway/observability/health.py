"""``/healthz``: is the robot runtime up, its driver healthy and its loop holding its rate?

Fed by the same snapshots the dashboard gets (no extra request to the runtime), plus
what only the gateway knows (whether its connection to the runtime is up). The loop
rate is measured here over a sliding window from the snapshots' tick counter and
their time stamps, so a loop that slowed down a minute ago is not hidden by the
runtime's since-start average.

>>> h = HealthMonitor(clock=lambda: 100.0)
>>> h.set_runtime(True)
>>> for i in range(11):
...     h.update_from_snapshot({"t": 99.0 + i * 0.1, "state": "idle", "loop": {"ticks": i * 10, "rate_hz": 100.0}})
>>> ok, body = h.check()
>>> ok, body["checks"]["loop_rate"]["measured_hz"]
(True, 100.0)

Other parts of the gateway add checks of their own (:meth:`HealthMonitor.add_check`): the trust
layer's ``users_file`` (its users file was deleted, emptied or made invalid while it runs, and it
keeps the users it had). Such a check does not say the robot is down: while it fails the answer is
200 with ``"status": "degraded"`` (a probe must not restart a server that is safe but needs its
operator's attention), unless a check above fails too (503, ``fail``).

>>> h.add_check("users_file", lambda: (False, "the users file was deleted"))
>>> ok, body = h.check()
>>> ok, body["status"], body["checks"]["users_file"]
(True, 'degraded', {'ok': False, 'detail': 'the users file was deleted'})
"""

from __future__ import annotations

import collections
import logging
import math
import time
from typing import Any, Callable

from aiohttp import web

log = logging.getLogger(__name__)


class HealthMonitor:
    """Keeps what ``/healthz`` needs; :meth:`check` returns ``(ok, body)``."""

    def __init__(self, stale_s: float = 2.0, min_rate_ratio: float = 0.9, window_s: float = 5.0,
                 clock: Callable[[], float] = time.time) -> None:
        self.stale_s = stale_s
        self.min_rate_ratio = min_rate_ratio
        self.window_s = window_s
        self.clock = clock  # unix time, like the snapshots' ``t``
        self._samples: collections.deque[tuple[float, float]] = collections.deque()
        self._last: dict[str, Any] = {}
        self._last_seen: float | None = None
        self._runtime_up = False
        self._runtime_detail = "no connection to the robot runtime yet"
        self._driver_ok: bool | None = None
        self._driver_detail = ""
        self._checks: dict[str, Callable[[], tuple[bool, str]]] = {}

    def add_check(self, name: str, check: Callable[[], tuple[bool, str]]) -> None:
        """A check of another part of the gateway: ``check()`` → ``(ok, detail)``, called per request
        (cheap, on the event loop). Failing, it makes the answer ``degraded``, not ``fail``."""
        self._checks[name] = check

    def set_runtime(self, up: bool, detail: str = "") -> None:
        """The gateway's view of its runtime connection (``detail`` says why it is down)."""
        self._runtime_up = up
        self._runtime_detail = detail or ("connected" if up else "robot runtime down")
        if not up:
            self._samples.clear()

    def set_driver_health(self, healthy: bool | None, detail: str = "") -> None:
        """From the driver's ``health()`` (e.g. its ``ok`` field); ``None`` = not reported."""
        self._driver_ok, self._driver_detail = healthy, detail

    def update_from_snapshot(self, snap: dict[str, Any]) -> None:
        t, loop = snap.get("t"), snap.get("loop") or {}
        self._last = {"state": snap.get("state"), "cause": snap.get("cause"), "rate_hz": loop.get("rate_hz"),
                      "measured_hz": loop.get("measured_hz")}
        self._last_seen = self.clock()
        ticks = loop.get("ticks")
        if isinstance(t, (int, float)) and isinstance(ticks, (int, float)) and math.isfinite(t):
            if self._samples and (ticks < self._samples[-1][1] or t <= self._samples[-1][0]):
                self._samples.clear()  # the runtime restarted (or the clock stepped back): start over
            self._samples.append((float(t), float(ticks)))
            while len(self._samples) > 2 and self._samples[-1][0] - self._samples[1][0] >= self.window_s:
                self._samples.popleft()

    def measured_rate_hz(self) -> float | None:
        if len(self._samples) < 2:
            return None
        (t0, n0), (t1, n1) = self._samples[0], self._samples[-1]
        return (n1 - n0) / (t1 - t0) if t1 > t0 else None

    def check(self) -> tuple[bool, dict[str, Any]]:
        now = self.clock()
        age = now - self._last_seen if self._last_seen is not None else None
        runtime_ok = self._runtime_up and age is not None and age <= self.stale_s
        runtime = {"ok": runtime_ok, "detail": self._runtime_detail if not self._runtime_up else
                   ("no snapshot yet" if age is None else f"newest snapshot {age:.2f} s old"),
                   "snapshot_age_s": None if age is None else round(age, 3)}
        state = self._last.get("state")
        driver_ok = runtime_ok and state != "fault" and self._driver_ok is not False
        cause = self._last.get("cause") or {}
        driver = {"ok": driver_ok, "state": state,
                  "detail": self._driver_detail or (cause.get("message", "fault") if state == "fault" else "")}
        target = self._last.get("rate_hz")
        measured = self.measured_rate_hz()
        span = self._samples[-1][0] - self._samples[0][0] if len(self._samples) >= 2 else 0.0
        if measured is None or span < min(1.0, self.window_s / 2):
            measured = self._last.get("measured_hz")  # too little data yet: the runtime's own figure
        rate_ok = (runtime_ok and isinstance(target, (int, float)) and isinstance(measured, (int, float))
                   and measured >= self.min_rate_ratio * target)
        loop = {"ok": rate_ok, "rate_hz": target, "measured_hz": None if measured is None else round(measured, 2),
                "min_ratio": self.min_rate_ratio, "window_s": round(span, 3)}
        ok = runtime_ok and driver_ok and rate_ok
        checks: dict[str, Any] = {"runtime": runtime, "driver": driver, "loop_rate": loop}
        degraded = False
        for name, check in self._checks.items():
            try:
                good, detail = check()
            except Exception as err:  # noqa: BLE001 - a broken check is a failing one, not a 500
                log.exception("health check %s failed", name)
                good, detail = False, f"the check itself failed: {err}"
            checks[name] = {"ok": bool(good), "detail": detail}
            degraded = degraded or not good
        status = "fail" if not ok else "degraded" if degraded else "ok"
        return ok, {"status": status, "t": now, "checks": checks}


HEALTH = web.AppKey("health", HealthMonitor)


def healthz_handler(monitor: HealthMonitor):
    """``GET /healthz``: 200 with ``{"status": "ok" | "degraded", "checks": {...}}`` or 503 with the failing checks."""

    async def get_healthz(request: web.Request) -> web.Response:
        ok, body = monitor.check()
        return web.json_response(body, status=200 if ok else 503)

    return get_healthz
