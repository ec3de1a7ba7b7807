"""Metrics and health checks wired into the gateway: ``/metrics``, ``/healthz`` and their feeds.

Everything is fed from what the gateway already has, on its event loop:

* each snapshot (``Hooks.on_snapshot``): the health monitor's loop-rate window and staleness
  (a deque append). The snapshot is parsed once for every consumer: the runtime client caches
  the parse of its newest snapshot (``RuntimeClient.latest_snapshot``), which the recorder's
  hook uses too (bench/bench_recording.py measures the whole per-snapshot cost);
* each event (``Hooks.on_event``): stops by cause, events by kind, and the gateway's own
  ``runtime_down`` event, which fails ``/healthz`` at once;
* a 1 Hz sampler: clients by kind, telemetry and video stream counters, the driver's
  ``health()`` counters (the snapshot's ``driver`` field), the runtime connection, and the
  loop's tick-lateness histogram (runtime API ``loop_stats``: the runtime counts every tick
  into fixed buckets since it started; the gateway mirrors the counts, so nothing is sampled
  and a restarted runtime shows as a counter reset);
* the mirrored loop counters and the state are read from the newest snapshot when
  ``/metrics`` is scraped (they are latest values: nothing to do per snapshot).

Other features add their own figures through :data:`METRICS` (the recorder's bytes and lag,
the Foxglove live view's clients): see ``server.gateway.recording.setup``.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from typing import Any, Callable

import orjson
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from server.errors import ApiError
from server.gateway.hooks import HOOKS
from server.gateway.observability.health import HEALTH, HealthMonitor, healthz_handler
from server.gateway.observability.metrics import Metrics
from server.runtime_api.client import DOWN_MESSAGE, RuntimeClient
from server.gateway.telemetry import TelemetryHub
from server.gateway.video import VIDEO_KEY

log = logging.getLogger(__name__)

METRICS = web.AppKey("metrics", Metrics)
SAMPLE_PERIOD_S = 1.0


def parsed_snapshot(runtime: RuntimeClient, data: bytes) -> dict[str, Any]:
    """The snapshot ``data`` as a dict, parsed once whoever asks: the runtime client caches the
    parse of its newest snapshot; anything else (the gateway's own ``fault`` snapshots while the
    runtime is down, once a second) is parsed here."""
    if data is runtime.latest:
        return runtime.latest_snapshot()
    try:
        snap = orjson.loads(data)
    except orjson.JSONDecodeError:
        return {}
    return snap if isinstance(snap, dict) else {}


def driver_health(driver: Any) -> tuple[bool | None, str]:
    """``(healthy, detail)`` from the snapshot's ``driver`` field (its state plus the driver's ``health()``):
    a fault or a lost link is unhealthy; a driver that reports nothing is ``None`` (not judged).

    >>> driver_health({"state": "active", "connected": True, "fault": None})
    (True, '')
    >>> driver_health({"state": "active", "connected": False, "fault": None})
    (False, 'driver link lost')
    >>> driver_health({"state": "inactive", "fault": "overcurrent on axis 2"})
    (False, 'driver fault: overcurrent on axis 2')
    >>> driver_health(None)
    (None, '')
    """
    if not isinstance(driver, dict):
        return None, ""
    if driver.get("fault"):
        return False, f"driver fault: {str(driver['fault'])[:200]}"
    if driver.get("connected") is False:
        return False, "driver link lost"
    if driver.get("state") == "closed":
        return False, "driver closed"
    return True, ""


class ClientTotals:
    """Sent and dropped totals over clients that come and go (each keeps its own counts), so the
    exported counters never go back when a client leaves.

    >>> class C: sent = dropped = 0
    >>> a, b, totals = C(), C(), ClientTotals()
    >>> a.sent, b.sent, b.dropped = 5, 3, 1
    >>> totals.update([a, b])
    (8, 1)
    >>> a.sent = 7
    >>> totals.update([a])   # b left: its counts stay in the totals
    (10, 1)
    """

    def __init__(self) -> None:
        self.sent = self.dropped = 0
        self._seen: weakref.WeakKeyDictionary[Any, tuple[int, int]] = weakref.WeakKeyDictionary()

    def update(self, clients: list[Any]) -> tuple[int, int]:
        for c in clients:
            sent0, dropped0 = self._seen.get(c, (0, 0))
            self.sent += c.sent - sent0
            self.dropped += c.dropped - dropped0
            self._seen[c] = (c.sent, c.dropped)
        return self.sent, self.dropped


class Observability:
    """The gateway's metrics and health monitor plus what feeds them (see the module docstring)."""

    def __init__(self, app: web.Application, runtime: RuntimeClient, hub: TelemetryHub,
                 snapshot: Callable[[], dict[str, Any]], metrics: Metrics, health: HealthMonitor) -> None:
        self.app = app
        self.runtime = runtime
        self.hub = hub
        self.snapshot = snapshot
        self.metrics = metrics
        self.health = health
        self._loop_stats_failed = False
        self._connects = -1
        self._telemetry_totals = ClientTotals()
        self._video_totals = ClientTotals()

    # ------------------------------------------------------------------ per snapshot and event (event loop)
    def on_snapshot(self, data: bytes) -> None:
        rt = self.runtime
        if rt.connects != self._connects and rt.connected:  # a (new) runtime: healthy again without waiting 1 s
            self._connects = rt.connects
            self.health.set_runtime(True)
        self.health.update_from_snapshot(parsed_snapshot(rt, data))

    def on_event(self, event: dict[str, Any]) -> None:
        self.metrics.update_from_event(event)
        if event.get("trigger") == "runtime_down":
            self.health.set_runtime(False, DOWN_MESSAGE)

    # ------------------------------------------------------------------ scrape
    async def get_metrics(self, request: web.Request) -> web.Response:
        self.metrics.update_from_snapshot(self.snapshot())
        return web.Response(body=self.metrics.render(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    # ------------------------------------------------------------------ 1 Hz
    async def sample(self) -> None:
        """One round of the slow feeds (called every :data:`SAMPLE_PERIOD_S`)."""
        rt, m = self.runtime, self.metrics
        # the client's ``down``, not the raw link: a link being re-established while the runtime lives is not a
        # runtime down (issue 18), and /healthz failed for up to LINK_GRACE_S during such a gap
        self.health.set_runtime(not rt.down, "" if not rt.down else DOWN_MESSAGE)
        snap = rt.latest_snapshot() if not rt.down else {}
        ok, detail = driver_health(snap.get("driver"))
        self.health.set_driver_health(ok, detail)
        if isinstance(snap.get("driver"), dict):
            m.update_driver_health(snap["driver"], driver=str((rt.description or {}).get("driver", "driver")))
        clients = list(self.hub.clients)
        m.set_clients("telemetry", len(clients))
        sent, dropped = self._telemetry_totals.update(clients)
        m.set_stream("telemetry", dropped_total=dropped, sent_total=sent)
        m.set_commands_dropped(self.hub.commands_dropped)
        video = self.app.get(VIDEO_KEY)
        if video is not None:
            viewers = video.clients()
            m.set_clients("video", len(viewers))
            sent, dropped = self._video_totals.update(viewers)
            m.set_stream("video", fps=video.counters()["fps_measured"], dropped_total=dropped, sent_total=sent)
        if rt.connected:
            await self.poll_loop_stats()

    async def poll_loop_stats(self) -> None:
        try:
            hist = await self.runtime.request("loop_stats", timeout_s=2.0)
        except ApiError as err:
            if not self._loop_stats_failed:  # say it once, not every second
                log.warning("no loop histogram from the runtime (%s): teleop_loop_jitter_seconds is missing", err)
                self._loop_stats_failed = True
            return
        self._loop_stats_failed = False
        if hist:
            self.metrics.update_loop_histogram(hist)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(SAMPLE_PERIOD_S)
            try:
                await self.sample()
            except Exception:  # a bug in a feed must not end the sampler
                log.exception("observability sampler failed")


def setup_observability(app: web.Application, profile: Any, runtime: RuntimeClient, hub: TelemetryHub,
                        snapshot: Callable[[], dict[str, Any]]) -> Observability:
    """Add ``/healthz`` (and ``/metrics`` when ``[observability] metrics`` is on) to ``app`` and feed
    them. ``snapshot()`` is the gateway's current snapshot (a ``fault`` one while the runtime is down)."""
    cfg = profile.observability
    metrics = Metrics()
    health = HealthMonitor(cfg.healthz_stale_s, cfg.healthz_min_rate_ratio, cfg.healthz_rate_window_s)
    obs = Observability(app, runtime, hub, snapshot, metrics, health)
    app[METRICS] = metrics
    app[HEALTH] = health
    hooks = app[HOOKS]
    hooks.on_snapshot.append(obs.on_snapshot)
    hooks.on_event.append(obs.on_event)
    app.router.add_get("/healthz", healthz_handler(health))
    if cfg.metrics:
        app.router.add_get("/metrics", obs.get_metrics)

    async def sampler_ctx(app: web.Application):
        task = asyncio.create_task(obs.run(), name="observability-sampler")
        yield
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    app.cleanup_ctx.append(sampler_ctx)
    return obs


__all__ = ["HEALTH", "METRICS", "Observability", "driver_health", "parsed_snapshot", "setup_observability"]
