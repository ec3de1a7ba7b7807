"""Prometheus metrics of the gateway and the robot, in their own ``CollectorRegistry``.

Two kinds of figures:

* **Owned here**: stops by cause and events by kind (counted from the event stream), the robot state.
* **Mirrored**: totals that another component already keeps (the runtime's tick, miss and
  overrun counters in each snapshot, its whole-run tick-lateness histogram from the runtime
  API's ``loop_stats``, the telemetry hub's drops, the recorder's bytes, a driver's
  ``health()`` counters). They are stored as the latest values and exposed
  by a custom collector at scrape time, so nothing is double-counted and a restarted
  runtime shows up as a counter reset, which Prometheus' ``rate()`` handles.

Label values from outside (stop triggers, health keys, stream names) are bounded in
number and length, so a misbehaving driver cannot blow up the series count.
"""

from __future__ import annotations

import math
import threading
from typing import Any, Iterable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Enum, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

STATES = ["idle", "running", "stopping", "estop", "fault", "unknown"]
MAX_LABEL_VALUES = 64
#: a lateness histogram with more buckets than this is not mirrored (hostile or broken input)
MAX_BUCKETS = 64
MAX_LABEL_LEN = 64
MAX_HEALTH_KEYS = 256


def _label(value: Any, seen: set[str]) -> str:
    """A bounded label value: at most MAX_LABEL_VALUES distinct per family, the rest are ``other``."""
    s = str(value)[:MAX_LABEL_LEN]
    if s in seen:
        return s
    if len(seen) >= MAX_LABEL_VALUES:
        return "other"
    seen.add(s)
    return s


def _number(v: Any) -> float | None:
    if isinstance(v, bool):
        return 1.0 if v else 0.0
    if isinstance(v, (int, float)) and math.isfinite(v):
        return float(v)
    return None


def histogram_buckets(hist: dict[str, Any]) -> tuple[list[tuple[str, float]], float | None] | None:
    """The runtime's ``loop_stats`` (``buckets_us``: upper edges, ``counts``: ticks per bucket, the last
    edge a catch-all) as Prometheus buckets in seconds, cumulative, ending with ``+Inf``; and the sum in
    seconds if the runtime keeps one (``sum_us``). ``None`` for anything malformed.

    >>> histogram_buckets({"buckets_us": [10, 100, 1e9], "counts": [5, 3, 1]})
    ([('1e-05', 5.0), ('0.0001', 8.0), ('+Inf', 9.0)], None)
    >>> histogram_buckets({"buckets_us": [10, 5], "counts": [1, 1]}) is None
    True
    """
    edges, counts = hist.get("buckets_us"), hist.get("counts")
    if (not isinstance(edges, list) or not isinstance(counts, list) or not 1 <= len(edges) <= MAX_BUCKETS
            or len(edges) != len(counts)):
        return None
    nums = [_number(v) for v in (*edges, *counts)]
    if any(n is None or n < 0 for n in nums) or isinstance(edges[0], bool):
        return None
    edges_f, counts_f = nums[:len(edges)], nums[len(edges):]
    if any(b >= a for a, b in zip(edges_f[1:], edges_f)):  # edges must increase
        return None
    out, total = [], 0.0
    for i, (edge, n) in enumerate(zip(edges_f, counts_f)):
        total += n
        out.append(("+Inf" if i == len(edges_f) - 1 else repr(edge / 1e6), total))
    sum_us = _number(hist.get("sum_us"))
    return out, (sum_us / 1e6 if sum_us is not None else None)


def flatten_health(health: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """Numeric leaves of a (nested) ``health()`` dict as ``{"a.b": value}``; booleans are 0/1,
    strings and non-finite numbers are left out.

    >>> flatten_health({"ok": True, "link": {"rx_frames": 10, "crc_errors": 0, "port": "/dev/ttyUSB0"}})
    {'ok': 1.0, 'link.rx_frames': 10.0, 'link.crc_errors': 0.0}
    """
    out: dict[str, float] = {}
    for k, v in health.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten_health(v, key + "."))
        else:
            n = _number(v)
            if n is not None:
                out[key] = n
        if len(out) >= MAX_HEALTH_KEYS:
            break
    return out


class _Mirror(Collector):
    """Latest values of totals kept elsewhere, exposed at scrape time."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.loop: dict[str, float] = {}
        self.link_age_s: float | None = None
        self.last_snapshot_t: float | None = None
        self.clients: dict[str, float] = {}
        self.streams: dict[str, dict[str, float]] = {}
        self.commands_dropped: dict[str, int] = {}
        self.recorder: dict[str, Any] = {}
        self.health: dict[str, dict[str, float]] = {}
        self.jitter: tuple[list[tuple[str, float]], float | None] | None = None

    def collect(self) -> Iterable[Any]:
        with self.lock:
            loop = dict(self.loop)
            clients = dict(self.clients)
            streams = {k: dict(v) for k, v in self.streams.items()}
            commands_dropped = dict(self.commands_dropped)
            rec = dict(self.recorder)
            health = {k: dict(v) for k, v in self.health.items()}
            link_age, last_t = self.link_age_s, self.last_snapshot_t
            jitter = self.jitter
        if jitter is not None:
            yield HistogramMetricFamily("teleop_loop_jitter_seconds", "Tick lateness of the control loop "
                                        "(start - deadline), every tick since the runtime started",
                                        buckets=jitter[0], sum_value=jitter[1])
        for key, name, doc in (("ticks", "teleop_loop_ticks", "Control loop ticks since the runtime started"),
                               ("missed", "teleop_loop_deadlines_missed", "Deadlines skipped by late ticks"),
                               ("overruns", "teleop_loop_overruns", "Ticks that landed a whole period late")):
            if key in loop:
                yield CounterMetricFamily(name, doc, value=loop[key])
        for key, name, doc in (
                ("rate_hz", "teleop_loop_rate_hertz", "Configured control loop rate"),
                ("measured_hz", "teleop_loop_measured_rate_hertz", "Measured control loop rate (runtime's figure)"),
                ("jitter_p99_s", "teleop_loop_jitter_p99_seconds", "p99 tick lateness over the runtime's window"),
                ("jitter_max_s", "teleop_loop_jitter_max_seconds", "Largest tick lateness over the runtime's window")):
            if key in loop:
                yield GaugeMetricFamily(name, doc, value=loop[key])
        if link_age is not None:
            yield GaugeMetricFamily("teleop_link_age_seconds", "Time since the operator's last command or heartbeat",
                                    value=link_age)
        if last_t is not None:
            yield GaugeMetricFamily("teleop_last_snapshot_timestamp_seconds", "Unix time of the newest snapshot",
                                    value=last_t)
        g = GaugeMetricFamily("teleop_clients", "Connected clients by kind", labels=["kind"])
        for kind, n in clients.items():
            g.add_metric([kind], n)
        yield g
        fps = GaugeMetricFamily("teleop_stream_fps", "Frames or snapshots per second sent, by stream", labels=["stream"])
        dropped = CounterMetricFamily("teleop_stream_dropped_frames", "Frames or snapshots dropped (latest wins)",
                                      labels=["stream"])
        sent = CounterMetricFamily("teleop_stream_sent_frames", "Frames or snapshots sent", labels=["stream"])
        for stream, v in streams.items():
            if "fps" in v:
                fps.add_metric([stream], v["fps"])
            if "dropped" in v:
                dropped.add_metric([stream], v["dropped"])
            if "sent" in v:
                sent.add_metric([stream], v["sent"])
        yield fps
        yield dropped
        yield sent
        stale = CounterMetricFamily("teleop_commands_dropped", "Stamped commands the runtime dropped, not applied: "
                                    "too old (stale) or out of order (reordered)", labels=["reason"])
        for reason in ("stale", "reordered"):
            stale.add_metric([reason], commands_dropped.get(reason, 0))
        yield stale
        if rec:
            yield CounterMetricFamily("teleop_recorder_written_bytes", "Bytes written to recordings",
                                      value=rec.get("total_bytes", 0))
            yield GaugeMetricFamily("teleop_recorder_file_bytes", "Size of the current recording file",
                                    value=rec.get("bytes", 0))
            yield GaugeMetricFamily("teleop_recorder_lag_seconds", "Age of the oldest message not yet written",
                                    value=rec.get("lag_s", 0.0))
            yield GaugeMetricFamily("teleop_recorder_queue", "Messages waiting for the writer", value=rec.get("queue", 0))
            yield CounterMetricFamily("teleop_recorder_dropped", "Messages dropped by the recorder (queue full or error)",
                                      value=rec.get("dropped", 0))
            yield GaugeMetricFamily("teleop_recorder_recording", "1 while a recording is being written",
                                    value=1.0 if rec.get("state") == "recording" else 0.0)
            yield GaugeMetricFamily("teleop_recorder_error", "1 after an I/O error stopped the recording",
                                    value=1.0 if rec.get("state") == "error" else 0.0)
        h = GaugeMetricFamily("teleop_driver_health", "Numeric fields of the driver's health() (link counters, ...)",
                              labels=["driver", "key"])
        for driver, values in health.items():
            for key, v in values.items():
                h.add_metric([driver, key], v)
        yield h


class Metrics:
    """The metrics of one gateway. Update from the event loop (or any thread); scrape with :meth:`render`."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.stops = Counter("teleop_stops", "Stops by trigger (e-stops, link loss, rules, faults)", ["trigger"],
                             registry=r)
        self.events = Counter("teleop_events", "Events by kind", ["kind"], registry=r)
        self.state = Enum("teleop_state", "The robot's state", states=STATES, registry=r)
        self.state.state("unknown")
        self._mirror = _Mirror()
        r.register(self._mirror)
        self._triggers: set[str] = set()
        self._kinds: set[str] = set()
        self._client_kinds: set[str] = set()
        self._streams: set[str] = set()
        self._drivers: set[str] = set()

    # ------------------------------------------------------------------ feeds
    def update_loop_histogram(self, hist: dict[str, Any]) -> None:
        """The runtime's whole-run lateness histogram (runtime API ``loop_stats``); malformed input is ignored."""
        buckets = histogram_buckets(hist) if isinstance(hist, dict) else None
        if buckets is not None:
            with self._mirror.lock:
                self._mirror.jitter = buckets

    def update_from_snapshot(self, snap: dict[str, Any]) -> None:
        """Mirror the loop counters, state and link age of a snapshot (docs/api.md)."""
        state = snap.get("state")
        self.state.state(state if state in STATES else "unknown")
        loop = snap.get("loop") or {}
        mirrored: dict[str, float] = {}
        for key in ("ticks", "missed", "overruns", "rate_hz", "measured_hz"):
            n = _number(loop.get(key))
            if n is not None:
                mirrored[key] = n
        for key, out in (("jitter_p99_us", "jitter_p99_s"), ("jitter_max_us", "jitter_max_s")):
            n = _number(loop.get(key))
            if n is not None:
                mirrored[out] = n * 1e-6
        link = snap.get("link") or {}
        with self._mirror.lock:
            self._mirror.loop = mirrored
            self._mirror.link_age_s = _number(link.get("age_s"))
            self._mirror.last_snapshot_t = _number(snap.get("t"))

    def update_from_event(self, event: dict[str, Any]) -> None:
        """Count an event; a safety event that leaves the robot stopping, e-stopped or faulted counts as a stop."""
        kind = event.get("kind", "info")
        self.events.labels(_label(kind, self._kinds)).inc()
        if kind == "safety" and event.get("state_after") in ("estop", "stopping", "fault") \
                and event.get("state_before") != event.get("state_after"):
            self.stops.labels(_label(event.get("trigger", "unknown"), self._triggers)).inc()

    def set_clients(self, kind: str, n: int) -> None:
        """Connected clients of a kind (``telemetry``, ``video``, ``foxglove``, ...)."""
        with self._mirror.lock:
            self._mirror.clients[_label(kind, self._client_kinds)] = float(n)

    def set_stream(self, stream: str, *, fps: float | None = None, dropped_total: int | None = None,
                   sent_total: int | None = None) -> None:
        """Totals of a stream (``video``, ``telemetry``): frames per second, dropped and sent so far."""
        with self._mirror.lock:
            v = self._mirror.streams.setdefault(_label(stream, self._streams), {})
            for key, val in (("fps", fps), ("dropped", dropped_total), ("sent", sent_total)):
                n = _number(val)
                if n is not None:
                    v[key] = n

    def set_commands_dropped(self, totals: dict[str, int]) -> None:
        """The gateway's totals of stamped commands the runtime dropped, by reason."""
        with self._mirror.lock:
            self._mirror.commands_dropped = dict(totals)

    def update_recorder(self, status: dict[str, Any]) -> None:
        """``Recorder.status()``."""
        with self._mirror.lock:
            self._mirror.recorder = {k: status.get(k) for k in ("total_bytes", "bytes", "lag_s", "queue", "dropped",
                                                                  "state")}

    def update_driver_health(self, health: dict[str, Any], driver: str = "driver") -> None:
        """A driver's ``health()`` dict: numeric leaves become ``teleop_driver_health{driver, key}``."""
        flat = flatten_health(health)
        with self._mirror.lock:
            self._mirror.health[_label(driver, self._drivers)] = flat

    # ------------------------------------------------------------------ exposition
    def render(self) -> bytes:
        """The Prometheus text exposition of everything above."""
        return generate_latest(self.registry)


def metrics_handler(metrics: Metrics):
    """``GET /metrics``: Prometheus text format (a few hundred lines; cheap enough for the event loop)."""

    async def get_metrics(request: web.Request) -> web.Response:
        return web.Response(body=metrics.render(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    return get_metrics
