"""``python -m server replay FILE`` as a real process: the gateway's routes and websocket driven by a
recording of a real run, every robot command refused (409 ``replay``), play/pause/seek/speed."""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
from websockets.sync.client import connect

from server.gateway.recording import Recording
from tests.conftest import REPO, wait_until
from tests.server.gateway.recording.real_run import ReplayProc, record_driven_run, write_config

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    return record_driven_run(tmp_path_factory.mktemp("run"), drive_s=3.0)


@pytest.fixture
def replay(recording, tmp_path):
    """A fresh replay server, paused at the start, for a test that plays, seeks or watches the stream."""
    proc = ReplayProc(recording, write_config(tmp_path, {}), "--paused").start()
    yield proc
    proc.kill()


@pytest.fixture(scope="module")
def refusing(recording, tmp_path_factory):
    """One paused replay server for the refusal tables: a refused command changes nothing (each row checks so),
    so the rows need no server of their own."""
    proc = ReplayProc(recording, write_config(tmp_path_factory.mktemp("replay"), {}), "--paused").start()
    yield proc
    proc.kill()


def recorded_events(path) -> list[dict]:
    with Recording(path) as rec:
        return rec.events()


@pytest.mark.parametrize("method,path,body", [
    ("POST", "/api/start", None), ("POST", "/api/stop", None), ("POST", "/api/reset", None),
    ("POST", "/api/heartbeat", None), ("POST", "/api/speed", {"linear": 0.1, "angular": 0.0}),
    ("PUT", "/api/acquisition", {"rate_hz": 50, "channels": []}),
    ("POST", "/api/heading", {"heading_deg": 90}), ("POST", "/api/calibration/magnetometer", None),
    ("POST", "/api/debug/driver", {"battery_v": 10}),
])
def test_every_robot_command_is_refused(refusing, method, path, body):
    code, reply = refusing.request(method, path, body=body if body is not None else {})
    assert code == 409 and reply["error"]["code"] == "replay", reply
    assert path in reply["error"]["message"]


@pytest.mark.parametrize("body", [None, {"reason": "replayed"}])
def test_the_http_estop_is_answered_200_with_the_refusal_as_its_warning(refusing, body):
    """Issue 18: it was 409 ``replay``; docs/api.md says the e-stop is never refused, and the websocket's is not."""
    code, reply = refusing.request("POST", "/api/estop", body=body if body is not None else {})
    assert code == 200 and reply["ok"] is True, reply
    assert reply["latch"] == "unconfirmed" and "replay" in reply["warning"], reply


def test_websocket_commands_are_refused_and_the_recorded_snapshots_flow(replay, recording):
    with Recording(recording) as rec:
        info = rec.info()
        robot = rec.robot
    with connect(replay.ws_url + "/ws/telemetry") as ws:
        hello = json.loads(ws.recv(10))
        assert hello["type"] == "hello"
        assert hello["robot"]["replay"]["file"] == recording.name
        assert hello["robot"]["channels"] == robot["channels"]  # the recorded description
        assert hello["state"]["t"] >= info["start_t"]
        for i, msg in enumerate(({"type": "start"}, {"type": "speed", "linear": 0.1, "angular": 0.0},
                                 {"type": "heartbeat"}, {"type": "reset"})):
            ws.send(json.dumps({**msg, "id": i}))
            reply = wait_until(lambda: (m := json.loads(ws.recv(10))).get("type") == "error" and m, 10, "a refusal")
            assert reply["error"]["code"] == "replay", reply
        ws.send(json.dumps({"type": "estop", "id": 99}))
        ack = wait_until(lambda: (m := json.loads(ws.recv(10))).get("id") == 99 and m, 10, "the e-stop's answer")
        assert ack["type"] == "ack" and "replay" in ack["warning"]  # never refused, and says nothing happened
        assert replay.post("/api/replay/play")[1]["playing"] is True
        snaps = []
        while len(snaps) < 20:
            m = json.loads(ws.recv(10))
            if m["type"] == "telemetry":
                snaps.append(m["data"])
    ts = [s["t"] for s in snaps]
    assert ts == sorted(ts) and info["start_t"] <= ts[0] and ts[-1] <= info["end_t"]


def test_play_pause_seek_and_speed(replay, recording, wait_for):
    st = replay.get("/api/replay")[1]
    assert st["file"] == recording.name and st["playing"] is False and st["speed"] == 1.0
    assert st["duration_s"] > 3.0
    st = replay.post("/api/replay/seek", {"offset_s": 2.0})[1]
    assert st["position_t"] == pytest.approx(st["start_t"] + 2.0)
    wait_for(lambda: abs(replay.state()["t"] - (st["start_t"] + 2.0)) < 0.1, 10, "the snapshot at the seek point")
    paused_at = replay.get("/api/replay")[1]["position_t"]
    assert replay.get("/api/replay")[1]["position_t"] == paused_at  # paused: time does not move
    assert replay.post("/api/replay/speed", {"speed": 10})[1]["speed"] == 10.0
    replay.post("/api/replay/play")
    wait_for(lambda: replay.get("/api/replay")[1]["ended"], 20, "the end at 10x")
    st = replay.get("/api/replay")[1]
    assert st["position_t"] == st["end_t"] and st["playing"] is False
    # every recorded event has been served, in order, by /api/events now that the end is reached
    served = replay.get("/api/events?limit=1000")[1]["events"]
    assert served == recorded_events(recording)
    assert any(e["state_after"] == "estop" for e in served)
    replay.post("/api/replay/seek", {"offset_s": 0.0})
    early = replay.get("/api/events?limit=1000")[1]["events"]
    assert len(early) < len(served)


@pytest.mark.parametrize("path,body,code", [
    ("/api/replay/seek", {"offset_s": "x"}, "wrong_type"), ("/api/replay/seek", {"t": 1, "offset_s": 1}, "unknown_field"),
    ("/api/replay/seek", {}, "missing_field"), ("/api/replay/speed", {"speed": 0}, "out_of_limits"),
    ("/api/replay/speed", {"speed": 1000}, "out_of_limits"), ("/api/replay/speed", {"fast": 1}, "unknown_field"),
])
def test_bad_controls_are_refused_and_change_nothing(refusing, path, body, code):
    before = refusing.get("/api/replay")[1]
    status, reply = refusing.post(path, body)
    assert status in (400, 422) and reply["error"]["code"] == code, reply
    after = refusing.get("/api/replay")[1]
    assert (after["speed"], after["position_t"], after["playing"]) == \
        (before["speed"], before["position_t"], before["playing"])


def test_no_recorder_in_replay_mode(replay, recording):
    code, body = replay.post("/api/recordings/start", {"name": "x"})
    assert code == 409 and body["error"]["code"] == "no_recorder"
    listed = replay.get("/api/recordings")[1]
    assert listed["status"] is None and listed["replay_file"] == recording.name
    assert recording.name in [r["file"] for r in listed["recordings"]]
    code, body = replay.request("DELETE", f"/api/recordings/{recording.name}")
    assert code == 409 and body["error"]["code"] == "recording_active"
    assert replay.get("/healthz")[0] in (200, 503)  # answers; the replayed loop rate decides


@pytest.mark.parametrize("content", [None, b"not an mcap file at all"])
def test_a_file_that_cannot_be_replayed_is_a_clear_error(tmp_path, content):
    path = tmp_path / "bad.mcap"
    if content is not None:
        path.write_bytes(content)
    out = subprocess.run([sys.executable, "-m", "server", "replay", str(path), "--port", "0"], cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "cannot replay" in out.stderr and "bad.mcap" in out.stderr and "Traceback" not in out.stderr


def test_replay_without_users_refuses_to_listen_beyond_loopback(recording, tmp_path):
    # a recording shows the robot's runs and its camera's place: same bind rule as the live server
    out = subprocess.run([sys.executable, "-m", "server", "replay", str(recording), "--config",
                          str(write_config(tmp_path, {})), "--host", "0.0.0.0", "--port", "0"], cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr
    assert "refusing to listen on 0.0.0.0" in out.stderr and "Traceback" not in out.stderr


def test_replay_serves_over_tls_as_the_live_server_does(recording, tmp_path):
    # replay and the live gateway are put on the network by one serve_app() (server/gateway/serve.py): the same
    # [auth] TLS keys give a replay on https, its self-signed certificate made on first use
    cert, key = tmp_path / "tls" / "cert.pem", tmp_path / "tls" / "key.pem"
    config = write_config(tmp_path, {"auth": {"tls_cert": str(cert), "tls_key": str(key), "tls_self_signed": True}})
    replay = ReplayProc(recording, config, "--paused").start()  # its output read by a thread, with a deadline
    try:
        url = replay.log_line("teleop listening on ").split()[-1]
        assert url.startswith("https://"), "".join(replay.output)
        assert cert.exists() and oct(key.stat().st_mode & 0o777) == "0o600"
        context = ssl.create_default_context(cafile=str(cert))
        context.check_hostname = False  # the certificate names the machine; the test reaches it on 127.0.0.1
        with urllib.request.urlopen(url + "/api/replay", context=context, timeout=30) as resp:
            assert resp.status == 200 and resp.headers["Strict-Transport-Security"].startswith("max-age=")
            assert json.loads(resp.read())["playing"] is False  # --paused
        with pytest.raises((urllib.error.URLError, ConnectionError)):  # no plain http beside it (closed)
            urllib.request.urlopen(url.replace("https://", "http://") + "/api/replay", timeout=30)
    finally:
        replay.stop()
