"""/healthz: runtime up, driver healthy, loop rate held; 200 or 503 with the failing checks."""

from __future__ import annotations

import doctest

import aiohttp
import pytest
from aiohttp import web

import server.gateway.observability.config
import server.gateway.observability.health
from server.gateway.observability import HealthMonitor, healthz_handler


@pytest.mark.parametrize("module", [server.gateway.observability.health, server.gateway.observability.config])
def test_doctests(module):
    assert doctest.testmod(module).failed == 0


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def feed(h: HealthMonitor, clock: Clock, seconds: float, rate_hz: float, measured_hz: float, state="running",
         ticks0=0, t0=None) -> int:
    """Snapshots at 50 Hz for ``seconds``, the loop ticking at ``measured_hz``."""
    t0 = clock.t if t0 is None else t0
    n = int(seconds * 50)
    ticks = ticks0
    for i in range(n + 1):
        clock.t = t0 + i / 50
        ticks = ticks0 + int(i / 50 * measured_hz)
        h.update_from_snapshot({"t": clock.t, "state": state, "cause": None,
                                "loop": {"ticks": ticks, "rate_hz": rate_hz, "measured_hz": rate_hz}})
    return ticks


def test_ok_when_everything_holds():
    clock = Clock(1000.0)
    h = HealthMonitor(clock=clock)
    h.set_runtime(True)
    feed(h, clock, 6, 100.0, 100.0)
    ok, body = h.check()
    assert ok and body["status"] == "ok"
    assert body["checks"]["loop_rate"]["measured_hz"] == pytest.approx(100.0, rel=0.02)


@pytest.mark.parametrize("case,failing", [
    ("runtime_down", "runtime"),
    ("stale", "runtime"),
    ("fault", "driver"),
    ("driver_unhealthy", "driver"),
    ("slow_loop", "loop_rate"),
    ("no_snapshot", "runtime"),
])
def test_fail_cases(case, failing):
    clock = Clock(1000.0)
    h = HealthMonitor(clock=clock)
    h.set_runtime(True)
    if case != "no_snapshot":
        feed(h, clock, 6, 100.0, 50.0 if case == "slow_loop" else 100.0, state="fault" if case == "fault" else "idle")
    if case == "runtime_down":
        h.set_runtime(False, "robot runtime down (exit code -9)")
    if case == "stale":
        clock.t += 5.0
    if case == "driver_unhealthy":
        h.set_driver_health(False, "serial link lost")
    ok, body = h.check()
    assert not ok and body["status"] == "fail"
    assert body["checks"][failing]["ok"] is False
    if case == "runtime_down":
        assert "exit code -9" in body["checks"]["runtime"]["detail"]
    if case == "driver_unhealthy":
        assert body["checks"]["driver"]["detail"] == "serial link lost"


def test_slowdown_shows_within_the_window_despite_a_good_average():
    clock = Clock(1000.0)
    h = HealthMonitor(clock=clock, window_s=5.0)
    h.set_runtime(True)
    ticks = feed(h, clock, 60, 100.0, 100.0)
    assert h.check()[0]
    feed(h, clock, 10, 100.0, 60.0, ticks0=ticks, t0=clock.t + 0.02)
    ok, body = h.check()
    assert not ok and body["checks"]["loop_rate"]["measured_hz"] == pytest.approx(60.0, rel=0.05)


def test_a_runtime_restart_starts_the_rate_window_over():
    clock = Clock(1000.0)
    h = HealthMonitor(clock=clock)
    h.set_runtime(True)
    feed(h, clock, 6, 100.0, 100.0, ticks0=100000)
    feed(h, clock, 6, 100.0, 100.0, ticks0=0, t0=clock.t + 0.02)  # counter went back to 0
    assert h.check()[0]


async def test_healthz_route_answers_200_then_503():
    clock = Clock(1000.0)
    h = HealthMonitor(clock=clock)
    h.set_runtime(True)
    feed(h, clock, 6, 100.0, 100.0)
    app = web.Application()
    app.router.add_get("/healthz", healthz_handler(h))
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    try:
        async with aiohttp.ClientSession() as s:
            r = await s.get(f"http://127.0.0.1:{port}/healthz")
            assert r.status == 200 and (await r.json())["status"] == "ok"
            h.set_runtime(False)
            r = await s.get(f"http://127.0.0.1:{port}/healthz")
            body = await r.json()
            assert r.status == 503 and body["checks"]["runtime"]["ok"] is False
    finally:
        await runner.cleanup()
