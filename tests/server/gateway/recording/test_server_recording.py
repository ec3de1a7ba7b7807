"""Recording on the real server (``python -m server``: launcher, runtime and gateway processes):
a driven run read back with the ``mcap`` reader, ``kill -9`` of the gateway and of the runtime
mid-recording, a full disk, and the event log across a restart of the whole server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from mcap.reader import make_reader
from websockets.sync.client import connect

from tests.conftest import ServerProc, wait_until
from tests.server.test_processes import children
from tests.server.test_stop_paths import Heartbeat

pytestmark = pytest.mark.timeout(120)


def recording_cfg(directory: Path, **extra) -> dict:
    # the link timeout out of the way (no test here is about link loss): a heartbeat thread's 0.5 s gap on a
    # loaded machine stops the robot mid-drive (it did so to the replay tests' recording, a fresh-clone run)
    return {"recording": {"dir": str(directory), "flush_s": 0.2, **extra}, "safety": {"command_timeout_s": 5.0}}


def status(srv: ServerProc) -> dict:
    code, body = srv.get("/api/recordings/status")
    assert code == 200, body
    return body


def read_file(path: Path) -> tuple[dict[str, str], list[tuple[str, bytes, int]]]:
    """(topic → schema name, [(topic, payload, log_time_ns)]) with the mcap library's own reader."""
    with open(path, "rb") as f:
        reader = make_reader(f)
        summary = reader.get_summary()
        schemas = {ch.topic: summary.schemas[ch.schema_id].name for ch in summary.channels.values()}
        msgs = [(ch.topic, m.data, m.log_time) for _s, ch, m in reader.iter_messages(log_time_order=True)]
    return schemas, msgs


def topic(msgs, name: str) -> list[dict]:
    return [json.loads(d) for t, d, _ in msgs if t == name]


def event_key(ev: dict) -> tuple:
    return ev["wall_t"], ev["trigger"], ev["message"]


def test_a_driven_run_is_recorded_whole(server_factory, tmp_path, wait_for):
    srv = server_factory(recording_cfg(tmp_path / "rec"))
    t_start = time.time()
    code, body = srv.post("/api/recordings/start", {"name": "drive"})
    assert code == 200, body
    file = body["file"]
    assert file.endswith("_drive_000.mcap")
    wait_for(lambda: status(srv)["state"] == "recording", 10, "recording")
    with Heartbeat(srv, 0.1):
        assert srv.post("/api/start")[0] == 200
        assert srv.post("/api/speed", {"linear": 0.3, "angular": 0.2})[0] == 200
        wait_for(lambda: srv.state()["values"]["linear_m_s"] > 0.1, 10, "moving")
        assert srv.post("/api/speed", {"linear": 50.0, "angular": 0.0})[0] == 422      # refused at the edge
        with connect(srv.ws_url + "/ws/telemetry") as ws:                              # one over the websocket
            ws.send(json.dumps({"type": "speed", "id": 7, "linear": 0.2, "angular": 0.0}))
            wait_until(lambda: json.loads(ws.recv(5)).get("id") == 7, 10, "the websocket ack")
        acq = srv.get("/api/acquisition")[1]
        assert srv.put("/api/acquisition", {"rate_hz": acq["rate_hz"], "channels": acq["channels"]})[0] == 200
        assert srv.post("/api/estop", {"reason": "end of the run"})[0] == 200
    wait_for(lambda: srv.state()["state"] == "estop", 10, "e-stopped")
    assert srv.post("/api/reset")[0] == 200
    wait_for(lambda: srv.state()["state"] == "idle", 10, "idle")
    t_end = time.time()
    expected_events = [e for e in srv.get("/api/events?limit=1000")[1]["events"] if t_start <= e["wall_t"] <= t_end]
    assert srv.post("/api/recordings/stop")[0] == 200
    st = wait_for(lambda: (s := status(srv))["state"] == "idle" and s, 10, "the file finished")
    assert st["dropped"] == 0 and st["error"] is None

    schemas, msgs = read_file(tmp_path / "rec" / file)
    assert schemas == {"/teleop/telemetry": "teleop.Telemetry", "/teleop/events": "teleop.Event",
                       "/teleop/state": "teleop.StateChange", "/teleop/commands": "teleop.Command",
                       "/teleop/settings": "teleop.Settings"}
    counts: dict[str, int] = {}
    for t, _d, _ in msgs:
        counts[t] = counts.get(t, 0) + 1
    assert counts == {k: v for k, v in st["messages_by_topic"].items() if v}  # every message the recorder took

    snaps = topic(msgs, "/teleop/telemetry")
    seqs = [s["seq"] for s in snaps]
    assert seqs == sorted(seqs)  # a command's reply snapshot may share its tick's seq; never out of order
    ts = [s["t"] for s in snaps]
    assert ts == sorted(ts) and len(set(ts)) == len(ts)
    assert {"idle", "running", "estop"} <= {s["state"] for s in snaps}
    log_times = [lt for t, _d, lt in msgs if t == "/teleop/telemetry"]
    assert log_times == [round(s["t"] * 1e9) for s in snaps]  # log time = the snapshot's own t

    recorded = {event_key(e) for e in topic(msgs, "/teleop/events")}
    assert expected_events and all(event_key(e) in recorded for e in expected_events), \
        [e for e in expected_events if event_key(e) not in recorded]
    changes = topic(msgs, "/teleop/state")
    assert ("running", "estop") in {(c["previous"], c["state"]) for c in changes}

    commands = [(c["command"], c["accepted"], c["source"], (c["error"] or {}).get("code"))
                for c in topic(msgs, "/teleop/commands")]
    assert commands == [("start", True, "http", None), ("speed", True, "http", None),
                        ("speed", False, "http", "out_of_limits"), ("speed", True, "websocket", None),
                        ("estop", True, "http", None), ("reset", True, "http", None)]
    assert all(c["principal"] == "local" for c in topic(msgs, "/teleop/commands"))  # local mode: the local admin
    settings = topic(msgs, "/teleop/settings")
    assert [s["kind"] for s in settings] == ["acquisition"] and settings[0]["settings"]["channels"] == acq["channels"]

    listed = {r["file"]: r for r in srv.get("/api/recordings")[1]["recordings"]}
    assert listed[file]["complete"] and listed[file]["counts"] == counts and listed[file]["name"] == "drive"


def test_kill_9_of_the_gateway_mid_recording_keeps_the_file_to_its_last_flush(server_factory, tmp_path, wait_for):
    rec = tmp_path / "rec"
    srv = server_factory(recording_cfg(rec, always_on=True))
    assert srv.post("/api/start")[0] == 200
    assert srv.post("/api/estop")[0] == 200
    st = wait_for(lambda: (s := status(srv))["flushed_messages"] >= 100 and s, 20, "a hundred messages flushed")
    file, flushed = st["file"], st["flushed_messages"]
    os.kill(children(srv)["gateway"], signal.SIGKILL)
    # the launcher starts a new gateway; its recorder repairs the file and records to a new one
    new = wait_for(lambda: (s := status(srv))["state"] == "recording" and s["file"] != file and s, 40,
                   "a new gateway recording to a new file")
    assert new["file"].endswith("_auto_000.mcap")
    info = srv.get(f"/api/recordings/{file}/info")[1]
    assert info["complete"], info
    assert sum(info["counts"].values()) >= flushed
    # the log line reaches the output through the launcher's pipe and our reader thread: wait for it
    wait_for(lambda: any("repaired unfinished recording" in line and file in line for line in srv.output), 20,
             "the repair's log line")
    _schemas, msgs = read_file(rec / file)  # the repaired file has an index: the mcap reader seeks it
    assert any(t == "/teleop/events" and json.loads(d)["state_after"] == "estop" for t, d, _ in msgs)


def test_kill_9_of_the_runtime_is_recorded_and_the_recording_goes_on(server_factory, tmp_path, wait_for):
    rec = tmp_path / "rec"
    srv = server_factory(recording_cfg(rec, always_on=True))
    before = wait_for(lambda: (s := status(srv))["messages"] > 20 and s, 20, "recording")
    runtime = srv.get("/api/telemetry")[1]["runtime"]["pid"]
    os.kill(runtime, signal.SIGKILL)
    wait_for(lambda: srv.state()["state"] == "fault", 10, "the fault shown")
    wait_for(lambda: srv.get("/api/telemetry")[1]["runtime"]["pid"] not in (None, runtime)
             and srv.state()["state"] == "idle", 40, "the runtime back, idle")
    back = status(srv)["messages_by_topic"]["/teleop/telemetry"]
    # the fault was shown once a second; the new runtime's snapshots come at 50 Hz
    after = wait_for(lambda: (s := status(srv))["messages_by_topic"]["/teleop/telemetry"] > back + 10 and s, 20,
                     "the new runtime's snapshots recorded")
    assert after["file"] == before["file"] and after["state"] == "recording"
    assert srv.post("/api/recordings/stop")[0] == 200
    wait_for(lambda: status(srv)["state"] == "idle", 10, "the file finished")
    _schemas, msgs = read_file(rec / before["file"])
    downs = [e for e in topic(msgs, "/teleop/events") if e["trigger"] == "runtime_down"]
    assert len(downs) == 1 and downs[0]["state_after"] == "fault"
    states = [(s["state"], (s.get("cause") or {}).get("trigger")) for s in topic(msgs, "/teleop/telemetry")]
    first_fault = states.index(("fault", "runtime_down"))
    assert ("idle", None) in states[first_fault:]  # the new runtime's snapshots follow in the same file


def _mount_tmpfs(path: Path, size: str) -> bool:
    if os.geteuid() != 0:
        return False
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True).returncode == 0


@pytest.fixture
def small_disk(tmp_path):
    mnt = tmp_path / "small"
    mnt.mkdir()
    if not _mount_tmpfs(mnt, "256k"):
        pytest.skip("cannot mount a tmpfs here (not root); tests/server/gateway/recording/test_crash.py "
                    "covers a full disk with RLIMIT_FSIZE")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_full_disk_is_a_status_and_the_robot_is_unaffected(server_factory, small_disk, wait_for):
    srv = server_factory(recording_cfg(small_disk / "rec", always_on=True, flush_s=0.05, chunk_bytes=4096,
                                       compression="none"))
    st = wait_for(lambda: (s := status(srv))["state"] == "error" and s, 60, "the disk full")
    assert "disk full" in st["error"] and "ENOSPC" in st["error"] and not st["recording"]
    seq = srv.state()["seq"]
    with Heartbeat(srv, 0.1):
        assert srv.post("/api/start")[0] == 200
        assert srv.post("/api/speed", {"linear": 0.2, "angular": 0.0})[0] == 200
        wait_for(lambda: srv.state()["values"]["linear_m_s"] > 0.1, 10, "moving with the disk full")
    assert srv.state()["seq"] > seq
    assert srv.get("/healthz")[0] == 200
    listed = srv.get("/api/recordings")[1]
    assert listed["status"]["state"] == "error"
    srv.log_line("disk full")
    # a new start retries (and fails the same way, cleanly: still no crash)
    assert srv.post("/api/recordings/start", {"name": "again"})[0] == 200
    wait_for(lambda: status(srv)["state"] == "error", 30, "the retry refused by the full disk")
    assert srv.get("/healthz")[0] == 200


def test_the_event_log_survives_a_restart_of_the_whole_server(server_factory, tmp_path, wait_for):
    cfg = recording_cfg(tmp_path / "rec", always_on=True)
    srv = server_factory(cfg)
    assert srv.post("/api/start")[0] == 200
    assert srv.post("/api/estop", {"reason": "before the restart"})[0] == 200
    earlier = wait_for(lambda: [e for e in srv.get("/api/events?limit=100")[1]["events"]
                                if e["state_after"] == "estop"], 10, "the e-stop event")
    wait_for(lambda: status(srv)["flushed_messages"] > 0, 10, "flushed")
    assert srv.stop() == 0
    again = server_factory(cfg)
    events = again.get("/api/events?limit=100")[1]["events"]
    keys = [event_key(e) for e in events]
    assert all(event_key(e) in keys for e in earlier), events
    assert len(keys) == len(set(keys))  # read back from the recording and not doubled
    assert again.get("/api/events?limit=1")[1]["events"][-1] == events[-1]


def test_camera_frames_are_recorded_only_while_recording(server_factory, tmp_path, wait_for):
    rec = tmp_path / "rec"
    srv = server_factory({**recording_cfg(rec, video_frames=True, video_fps=5.0),
                          "video": {"enabled": True, "width": 320, "height": 240, "fps": 15}})
    wait_for(lambda: srv.get("/api/video")[1]["status"]["state"] in ("ok", "retrying"), 20, "the camera opened")
    encoded = srv.get("/api/video")[1]["counters"]["encoded"]
    assert srv.get("/api/recordings/status")[1]["state"] == "idle"
    file = srv.post("/api/recordings/start", {"name": "frames"})[1]["file"]
    wait_for(lambda: status(srv)["messages_by_topic"].get("/camera/image", 0) >= 10, 30, "ten frames recorded")
    assert srv.get("/api/video")[1]["counters"]["encoded"] > encoded  # the recorder made the camera capture
    assert srv.post("/api/recordings/stop")[0] == 200
    st = wait_for(lambda: (s := status(srv))["state"] == "idle" and s, 10, "the file finished")
    schemas, msgs = read_file(rec / file)
    assert schemas["/camera/image"] == "foxglove.CompressedImage"
    frames = [(json.loads(d), lt) for t, d, lt in msgs if t == "/camera/image"]
    assert len(frames) == st["messages_by_topic"]["/camera/image"]
    import base64
    for frame, log_time in frames:
        assert frame["format"] == "jpeg" and frame["frame_id"] == "camera"
        assert base64.b64decode(frame["data"])[:2] == b"\xff\xd8"
        assert frame["timestamp"]["sec"] * 10**9 + frame["timestamp"]["nsec"] == log_time
    times = [lt / 1e9 for _f, lt in frames]
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert min(gaps) >= 1 / 5.0 - 1e-6  # at most video_fps, whatever the camera's rate
