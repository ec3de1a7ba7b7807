"""Observability on the real server (``python -m server``): ``/metrics`` read with prometheus_client's
own parser, ``/healthz`` through a runtime crash, JSON log lines, and the Foxglove live view reached
through the gateway's ``/foxglove`` relay by a client speaking the Foxglove protocol."""

from __future__ import annotations

import json
import os
import signal
import struct

import pytest
from prometheus_client.parser import text_string_to_metric_families
from websockets.sync.client import connect

from tests.conftest import ServerProc

pytestmark = pytest.mark.timeout(120)


def scrape(srv: ServerProc) -> dict[tuple[str, tuple], float]:
    code, text = srv.get("/metrics")
    assert code == 200
    assert isinstance(text, bytes)  # not JSON: the Prometheus text format
    out = {}
    for family in text_string_to_metric_families(text.decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_metrics_are_prometheus_text_fed_by_the_runtime_and_the_gateway(server_factory, tmp_path, wait_for):
    srv = server_factory({"recording": {"dir": str(tmp_path / "rec"), "always_on": True}})
    with connect(srv.ws_url + "/ws/telemetry") as ws:
        ws.recv(5)
        # the loop's histogram comes with the runtime's periodic loop_stats, not at once (a loaded machine scraped
        # before the first)
        m = wait_for(lambda: (s := scrape(srv)).get(("teleop_clients", (("kind", "telemetry"),))) == 1
                     and ("teleop_recorder_recording", ()) in s
                     and ("teleop_loop_jitter_seconds_bucket", (("le", "+Inf"),)) in s and s, 10,
                     "the client, the recorder and the loop's histogram counted")
    assert m[("teleop_state", (("teleop_state", "idle"),))] == 1
    assert m[("teleop_loop_rate_hertz", ())] == 100.0
    ticks = m[("teleop_loop_ticks_total", ())]
    assert ticks > 0
    # the lateness histogram counts every tick the runtime ran (mirrored from its loop_stats)
    inf = m[("teleop_loop_jitter_seconds_bucket", (("le", "+Inf"),))]
    assert 0 < inf <= ticks + 200
    buckets = sorted((float(dict(k[1])["le"]), v) for k, v in m.items() if k[0] == "teleop_loop_jitter_seconds_bucket")
    assert [v for _le, v in buckets] == sorted(v for _le, v in buckets)  # cumulative
    assert m[("teleop_recorder_recording", ())] == 1 and m[("teleop_recorder_error", ())] == 0
    assert m[("teleop_recorder_written_bytes_total", ())] > 0

    assert srv.post("/api/start")[0] == 200
    assert srv.post("/api/estop")[0] == 200
    # the state comes with the next snapshot, the stop's count with its event: wait for both
    m = wait_for(lambda: (s := scrape(srv)).get(("teleop_state", (("teleop_state", "estop"),))) == 1
                 and any(k[0] == "teleop_stops_total" and v for k, v in s.items()) and s, 10,
                 "the e-stop in the metrics")
    stops = {dict(k[1])["trigger"]: v for k, v in m.items() if k[0] == "teleop_stops_total"}
    assert sum(stops.values()) == 1, stops
    assert m[("teleop_events_total", (("kind", "safety"),))] >= 1


def test_healthz_fails_while_the_runtime_is_down(server: ServerProc, wait_for):
    code, body = wait_for(lambda: (r := server.get("/healthz"))[0] == 200 and r, 15, "healthy")
    assert body["status"] == "ok" and set(body["checks"]) == {"runtime", "driver", "loop_rate", "users_file"}
    runtime = server.get("/api/telemetry")[1]["runtime"]["pid"]
    os.kill(runtime, signal.SIGKILL)
    code, body = wait_for(lambda: (r := server.get("/healthz"))[0] == 503 and r, 10, "503 while down")
    assert body["status"] == "fail" and not body["checks"]["runtime"]["ok"]
    assert "runtime down" in body["checks"]["runtime"]["detail"]
    wait_for(lambda: server.get("/healthz")[0] == 200, 40, "healthy again once the runtime is back")


def test_json_logs(server_factory, wait_for):
    srv = server_factory({"observability": {"log_format": "json"}})
    def gateway_lines() -> list[dict]:
        return [json.loads(line) for line in srv.output if line.startswith("{") and '"logger":"server.' in line]

    # the runtime client (server.runtime_api.client) logs the connection once the runtime answers
    lines = wait_for(lambda: (lines := gateway_lines()) and any(
        rec["msg"].startswith("connected to the robot runtime") for rec in lines) and lines, 20, "connected line")
    assert all({"ts", "level", "logger", "msg"} <= set(rec) for rec in lines)
    assert any(rec["logger"].startswith("server.gateway") for rec in lines)


def test_a_foxglove_client_subscribes_through_the_relay_and_receives_snapshots(server_factory, wait_for):
    srv = server_factory({"observability": {"foxglove_live": True, "foxglove_port": 0}})
    wait_for(lambda: any("foxglove live view on ws://127.0.0.1:" in line for line in srv.output), 15, "live view")
    with connect(srv.ws_url + "/foxglove", subprotocols=["foxglove.sdk.v1"], max_size=2 ** 24) as ws:
        assert ws.subprotocol == "foxglove.sdk.v1"
        channels: dict[str, dict] = {}
        while "/teleop/telemetry" not in channels:
            msg = json.loads(ws.recv(10))
            if msg["op"] == "advertise":
                channels.update({c["topic"]: c for c in msg["channels"]})
        tele = channels["/teleop/telemetry"]
        assert tele["schemaName"] == "teleop.Telemetry" and tele["encoding"] == "json"
        assert "battery_v" in json.loads(tele["schema"])["properties"]["values"]["properties"]
        ws.send(json.dumps({"op": "subscribe", "subscriptions": [{"id": 1, "channelId": tele["id"]}]}))
        seqs = []
        while len(seqs) < 3:
            frame = ws.recv(10)
            if isinstance(frame, bytes) and frame[0] == 0x01:
                _op, sub_id, log_time = struct.unpack_from("<BIQ", frame)
                snap = json.loads(frame[13:])
                assert sub_id == 1 and log_time == round(snap["t"] * 1e9)
                seqs.append(snap["seq"])
        assert seqs == sorted(seqs)
        assert wait_for(lambda: scrape(srv).get(("teleop_clients", (("kind", "foxglove"),))) == 1, 10,
                        "the subscription counted")
