"""/metrics: fed from snapshots and events, parsed back with prometheus_client's own parser."""

from __future__ import annotations

import doctest

import aiohttp
import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

import server.gateway.observability.metrics
from server.gateway.observability import Metrics, metrics_handler
from server.gateway.observability.metrics import MAX_LABEL_VALUES
from tests.server.gateway.recording.synthetic import snapshot


def test_doctests():
    assert doctest.testmod(server.gateway.observability.metrics).failed == 0


def samples(metrics: Metrics) -> dict[tuple[str, tuple], float]:
    out = {}
    for family in text_string_to_metric_families(metrics.render().decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_snapshot_and_events_become_metrics():
    m = Metrics()
    snap = snapshot(100, 1_800_000_000.0)
    snap["loop"].update({"ticks": 5000, "missed": 7, "overruns": 3})
    m.update_from_snapshot(snap)
    m.update_loop_histogram({"buckets_us": [20, 100, 5000, 1e9], "counts": [1, 1, 1, 0], "ticks": 3})
    m.update_from_event({"kind": "safety", "trigger": "link_loss", "state_before": "running", "state_after": "estop"})
    m.update_from_event({"kind": "safety", "trigger": "link_loss", "state_before": "running", "state_after": "estop"})
    m.update_from_event({"kind": "safety", "trigger": "obstacle", "state_before": "running", "state_after": "stopping"})
    m.update_from_event({"kind": "info", "trigger": "outputs_zero", "state_before": "estop", "state_after": "estop"})
    m.set_clients("telemetry", 3)
    m.set_clients("video", 1)
    m.set_stream("video", fps=29.5, dropped_total=12, sent_total=1000)
    m.update_recorder({"state": "recording", "total_bytes": 123456, "bytes": 2048, "lag_s": 0.05, "queue": 4,
                       "dropped": 2})
    m.update_driver_health({"ok": True, "link": {"rx_frames": 991, "crc_errors": 2, "port": "/dev/ttyUSB0"}},
                           driver="firmata")
    s = samples(m)
    assert s[("teleop_loop_ticks_total", ())] == 5000
    assert s[("teleop_loop_deadlines_missed_total", ())] == 7
    assert s[("teleop_loop_overruns_total", ())] == 3
    assert s[("teleop_loop_rate_hertz", ())] == 100.0
    assert s[("teleop_loop_jitter_p99_seconds", ())] == pytest.approx(80e-6)
    assert s[("teleop_loop_jitter_seconds_bucket", (("le", "0.0001"),))] == 2
    assert s[("teleop_loop_jitter_seconds_bucket", (("le", "+Inf"),))] == 3
    assert s[("teleop_stops_total", (("trigger", "link_loss"),))] == 2
    assert s[("teleop_stops_total", (("trigger", "obstacle"),))] == 1
    assert ("teleop_stops_total", (("trigger", "outputs_zero"),)) not in s
    assert s[("teleop_events_total", (("kind", "safety"),))] == 3
    assert s[("teleop_state", (("teleop_state", "running"),))] == 1
    assert s[("teleop_state", (("teleop_state", "idle"),))] == 0
    assert s[("teleop_clients", (("kind", "telemetry"),))] == 3
    assert s[("teleop_stream_fps", (("stream", "video"),))] == 29.5
    assert s[("teleop_stream_dropped_frames_total", (("stream", "video"),))] == 12
    assert s[("teleop_recorder_written_bytes_total", ())] == 123456
    assert s[("teleop_recorder_lag_seconds", ())] == 0.05
    assert s[("teleop_recorder_recording", ())] == 1
    assert s[("teleop_driver_health", (("driver", "firmata"), ("key", "link.crc_errors")))] == 2
    assert s[("teleop_driver_health", (("driver", "firmata"), ("key", "ok")))] == 1
    assert not any(k[0] == "teleop_driver_health" and ("key", "link.port") in k[1] for k in s)
    assert s[("teleop_link_age_seconds", ())] == 0.01


@pytest.mark.parametrize("hist", [{"buckets_us": [10, 5, 1e9], "counts": [1, 1, 1]},
                                  {"buckets_us": [10, 1e9], "counts": [1]},
                                  {"buckets_us": [10, 1e9], "counts": [1, -1]},
                                  {"buckets_us": [10, 1e9], "counts": ["1", 2]},
                                  {"buckets_us": list(range(1, 1000)), "counts": [0] * 999},
                                  {"buckets_us": [10, float("nan")], "counts": [1, 1]}, [1, 2], {}])
def test_a_malformed_loop_histogram_is_ignored(hist):
    m = Metrics()
    m.update_loop_histogram({"buckets_us": [10, 1e9], "counts": [4, 1]})
    m.update_loop_histogram(hist)
    s = samples(m)
    assert s[("teleop_loop_jitter_seconds_bucket", (("le", "+Inf"),))] == 5  # the last good one stays


def test_the_loop_histogram_carries_a_sum_when_the_runtime_keeps_one():
    m = Metrics()
    m.update_loop_histogram({"buckets_us": [10, 1e9], "counts": [4, 1], "sum_us": 250.0})
    s = samples(m)
    assert s[("teleop_loop_jitter_seconds_count", ())] == 5
    assert s[("teleop_loop_jitter_seconds_sum", ())] == pytest.approx(250e-6)


def test_counters_follow_a_runtime_restart_as_a_reset():
    m = Metrics()
    m.update_from_snapshot({"state": "idle", "loop": {"ticks": 9000}})
    m.update_from_snapshot({"state": "idle", "loop": {"ticks": 12}})
    assert samples(m)[("teleop_loop_ticks_total", ())] == 12


def test_hostile_label_values_are_bounded():
    m = Metrics()
    for k in range(500):
        m.update_from_event({"kind": "safety", "trigger": f"t{k}" + "x" * 500, "state_before": "running",
                             "state_after": "estop"})
    m.update_driver_health({f"k{k}": k for k in range(10_000)}, driver="d" * 1000)
    m.update_from_snapshot({"state": "<script>", "loop": {"ticks": float("inf"), "missed": "many"}})
    s = samples(m)
    triggers = {dict(k[1])["trigger"] for k in s if k[0] == "teleop_stops_total"}
    assert len(triggers) == MAX_LABEL_VALUES + 1 and "other" in triggers
    assert all(len(t) <= 64 for t in triggers)
    assert sum(1 for k in s if k[0] == "teleop_driver_health") <= 256
    assert s[("teleop_state", (("teleop_state", "unknown"),))] == 1
    assert ("teleop_loop_ticks_total", ()) not in s


async def test_metrics_route_serves_the_text_format():
    m = Metrics()
    m.update_from_snapshot(snapshot(1, 1.0))
    m.update_loop_histogram({"buckets_us": [10, 1e9], "counts": [4, 1]})
    app = web.Application()
    app.router.add_get("/metrics", metrics_handler(m))
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    try:
        async with aiohttp.ClientSession() as s:
            r = await s.get(f"http://127.0.0.1:{port}/metrics")
            assert r.status == 200 and r.headers["Content-Type"].startswith("text/plain; version=")
            names = {f.name for f in text_string_to_metric_families(await r.text())}
    finally:
        await runner.cleanup()
    assert {"teleop_loop_ticks", "teleop_state", "teleop_loop_jitter_seconds", "teleop_stops"} <= names
