"""The recorder on real files: round trip through the mcap reader, queue limits, rotation, pruning."""

from __future__ import annotations

import doctest
import json
import time
from typing import Any

import orjson
import pytest
from mcap.reader import make_reader

import server.gateway.recording.config
import server.gateway.recording.files
import server.gateway.recording.replay
import server.gateway.recording.topics
from server.gateway.recording import Recorder, RecordingConfig, list_recordings
from server.gateway.recording.files import prune
from tests.conftest import wait_until
from tests.server.gateway.recording.synthetic import ROBOT, record_run, snapshot_bytes


@pytest.mark.parametrize("module", [server.gateway.recording.config, server.gateway.recording.files, server.gateway.recording.topics,
                                    server.gateway.recording.replay])
def test_doctests(module):
    assert doctest.testmod(module).failed == 0


class FakeClock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def make(tmp_path, **kw) -> Recorder:
    """A started recorder; the queue is large enough that these tests never drop (drops are tested apart)."""
    kw.setdefault("queue_size", 200_000)
    rec = Recorder(RecordingConfig(dir=str(tmp_path / "rec"), **kw), robot=ROBOT)
    rec.start()
    return rec


def read_all(path):
    with open(path, "rb") as f:
        reader = make_reader(f)
        summary = reader.get_summary()
        msgs = [(ch.topic, m.log_time, m.data) for _s, ch, m in reader.iter_messages()]
        schemas = {ch.topic: (summary.schemas[ch.schema_id].name, summary.schemas[ch.schema_id].encoding,
                              ch.message_encoding) for ch in summary.channels.values()}
    return summary, msgs, schemas


def test_round_trip_through_the_mcap_reader(tmp_path):
    rec = make(tmp_path, video_frames=True, video_fps=1000.0)
    file = rec.start_recording("round-trip")
    t0 = 1_800_000_000.0
    sent = record_run(rec, 500, t0)
    assert rec.record_settings("acquisition", {"rate_hz": 50.0, "channels": ["battery_v"]}, principal="bob", t=t0 + 3)
    assert rec.record_frame(b"\xff\xd8fake-jpeg\xff\xd9", t0 + 4)
    rec.stop_recording()
    rec.close()
    assert rec.status()["error"] is None
    files = list((tmp_path / "rec").glob("*.mcap"))
    assert [f.name for f in files] == [file]

    summary, msgs, schemas = read_all(files[0])
    topics = [m[0] for m in msgs]
    assert topics.count("/teleop/telemetry") == 500
    assert topics.count("/teleop/events") == len(sent["events"]) == 5
    assert topics.count("/teleop/state") == 5  # every event here changes the state
    assert topics.count("/teleop/commands") == sent["commands"]
    assert topics.count("/teleop/settings") == 1
    assert topics.count("/camera/image") == 1
    assert schemas["/teleop/telemetry"] == ("teleop.Telemetry", "jsonschema", "json")
    assert schemas["/teleop/events"] == ("teleop.Event", "jsonschema", "json")
    assert schemas["/camera/image"] == ("foxglove.CompressedImage", "jsonschema", "json")
    # the telemetry bytes are the caller's, unchanged, in order
    assert [m[2] for m in msgs if m[0] == "/teleop/telemetry"] == sent["snapshots"]
    # every event is there, with its values
    events = [json.loads(m[2]) for m in msgs if m[0] == "/teleop/events"]
    assert events == sent["events"]
    command = json.loads(next(m[2] for m in msgs if m[0] == "/teleop/commands"))
    assert command["principal"] == "alice" and command["accepted"] is False
    assert command["error"]["code"] == "estop_latched"
    image = json.loads(next(m[2] for m in msgs if m[0] == "/camera/image"))
    assert image["format"] == "jpeg" and image["timestamp"] == {"sec": 1_800_000_004, "nsec": 0}
    # schemas are valid JSON Schema objects that the messages satisfy
    jsonschema = pytest.importorskip("jsonschema")
    validators: dict[int, Any] = {}  # one a schema, checked once (jsonschema.validate checks the schema every call:
    with open(files[0], "rb") as f:  # ~15 ms a message, seconds of CPU for 500 snapshots)
        reader = make_reader(f)
        for schema, channel, message in reader.iter_messages():
            if schema.id not in validators:
                doc = json.loads(schema.data)
                cls = jsonschema.validators.validator_for(doc)
                cls.check_schema(doc)
                validators[schema.id] = cls(doc)
            validators[schema.id].validate(json.loads(message.data))
    # metadata carries the robot
    with open(files[0], "rb") as f:
        md = {m.name: m.metadata for m in make_reader(f).iter_metadata()}
    assert md["teleop"]["robot"] == "test rover" and md["teleop"]["name"] == "round-trip"
    assert json.loads(md["teleop"]["robot_json"])["geometry"]["track_m"] == 0.3


def test_nothing_is_recorded_until_a_recording_starts(tmp_path):
    rec = make(tmp_path)
    assert rec.record_snapshot(snapshot_bytes(0, 1.0), 1.0) is False
    assert rec.status()["state"] == "idle"
    rec.close()
    assert list((tmp_path / "rec").glob("*.mcap")) == []


def test_always_on_records_from_start_and_resumes_after_a_named_recording(tmp_path):
    rec = make(tmp_path, always_on=True)
    t0 = 1_800_000_000.0
    record_run(rec, 20, t0)
    rec.start_recording("named")
    wait_until(lambda: rec.status()["name"] == "named", 5, "named recording open")
    record_run(rec, 30, t0 + 10)
    rec.stop_recording()
    wait_until(lambda: rec.status()["name"] is None and rec.status()["state"] == "recording", 5, "auto resumed")
    record_run(rec, 10, t0 + 20)
    rec.close()
    listed = list_recordings(tmp_path / "rec")
    assert sorted((r["name"], r["counts"]["/teleop/telemetry"]) for r in listed) == [
        ("auto", 10), ("auto", 20), ("named", 30)]


def test_bad_names_are_refused_and_change_nothing(tmp_path):
    rec = make(tmp_path)
    for bad in ["", "../x", "a/b", ".hidden", "x" * 65, "auto", "spa ce"]:
        with pytest.raises(ValueError):
            rec.start_recording(bad)
    assert rec.status()["state"] == "idle"
    rec.close()
    assert list((tmp_path / "rec").glob("*.mcap")) == []


def test_full_queue_drops_snapshots_keeps_events_and_never_waits(tmp_path):
    """The writer is not started yet, so nothing drains: the limits are hit deterministically."""
    rec = Recorder(RecordingConfig(dir=str(tmp_path / "rec"), queue_size=16), robot=ROBOT)
    rec.start_recording("burst")  # one control item in the queue
    accepted = sum(rec.record_snapshot(snapshot_bytes(i, 1e9 + i), 1e9 + i) for i in range(100))
    assert accepted == 15
    assert rec.status()["dropped"] == 85 and rec.status()["dropped_by_topic"] == {"/teleop/telemetry": 85}
    assert all(rec.record_event({"wall_t": 1e9 + k, "trigger": "x", "state_before": "idle", "state_after": "idle"})
               for k in range(10))  # events have their own reserve
    rec.start()
    rec.stop_recording()
    rec.close()
    (path,) = (tmp_path / "rec").glob("*.mcap")
    _summary, msgs, _ = read_all(path)
    assert [m[0] for m in msgs].count("/teleop/telemetry") == 15
    assert [m[0] for m in msgs].count("/teleop/events") == 10


def test_queue_byte_limit_drops_big_frames(tmp_path):
    rec = Recorder(RecordingConfig(dir=str(tmp_path / "rec"), video_frames=True, video_fps=1000.0,
                                   queue_bytes=1024 * 1024), robot=ROBOT)
    rec.start_recording("frames")
    frame = b"\xff\xd8" + bytes(300_000)
    results = [rec.record_frame(frame, 1e9 + k) for k in range(10)]
    assert results == [True] * 3 + [False] * 7
    assert rec.status()["dropped_by_topic"] == {"/camera/image": 7}
    rec.start()
    rec.close()


def test_video_frames_are_decimated_to_video_fps(tmp_path):
    rec = make(tmp_path, video_frames=True, video_fps=5.0)
    rec.start_recording("video")
    kept = sum(rec.record_frame(b"\xff\xd8x", 1e9 + k / 30.0) for k in range(60))  # 2 s at 30 fps
    assert kept == 10
    assert rec.status()["dropped"] == 0  # skipped by the rate limit, not dropped
    rec.close()


def test_video_frames_off_by_default(tmp_path):
    rec = make(tmp_path)
    rec.start_recording("novideo")
    assert rec.record_frame(b"\xff\xd8x", 1e9) is False
    rec.close()
    (path,) = (tmp_path / "rec").glob("*.mcap")
    _s, _m, schemas = read_all(path)
    assert "/camera/image" not in schemas


def test_flush_makes_data_visible_before_the_file_is_finished(tmp_path):
    rec = make(tmp_path, flush_s=0.1)
    rec.start_recording("live")
    record_run(rec, 50, 1e9)
    wait_until(lambda: rec.status()["flushed_messages"] >= 50, 5, "a flush")
    st = rec.status()
    assert st["state"] == "recording" and st["bytes"] > 0 and st["last_flush_t"] is not None
    from server.gateway.recording import Recording
    with Recording(tmp_path / "rec" / st["file"]) as r:
        assert not r.complete
        assert r.info()["counts"]["/teleop/telemetry"] == 50
    rec.close()


def test_rotation_by_size_splits_one_recording_into_parts(tmp_path):
    rec = make(tmp_path, rotate_bytes=64 * 1024, chunk_bytes=8192)
    rec.start_recording("long")
    record_run(rec, 3000, 1_800_000_000.0)
    rec.close()
    listed = sorted(list_recordings(tmp_path / "rec"), key=lambda r: r["part"])
    assert len(listed) >= 3
    assert [r["part"] for r in listed] == list(range(len(listed)))
    assert len({r["session"] for r in listed}) == 1 and all(r["complete"] for r in listed)
    seqs = []
    from server.gateway.recording import Recording
    for r in listed:
        with Recording(tmp_path / "rec" / r["file"]) as f:
            seqs += [s["seq"] for _t, s in f.snapshots()]
    assert seqs == list(range(3000))  # nothing lost or repeated at the seams


def test_rotation_by_time(tmp_path):
    clock = FakeClock(1_800_000_000.0)
    rec = Recorder(RecordingConfig(dir=str(tmp_path / "rec"), rotate_s=60.0, flush_s=0.1), robot=ROBOT, clock=clock)
    rec.start()
    rec.start_recording("timed")
    record_run(rec, 10, clock.t)
    wait_until(lambda: rec.status()["flushed_messages"] >= 10, 5, "first part written")
    clock.t += 61.0
    record_run(rec, 10, clock.t)
    wait_until(lambda: rec.status()["file"].endswith("_001.mcap"), 5, "second part")
    rec.close()
    parts = sorted(r["part"] for r in list_recordings(tmp_path / "rec"))
    assert parts == [0, 1]


def touch(path, size):
    path.write_bytes(b"\0" * size)
    return path


def names(deleted: list[dict]) -> list[str]:
    return [d["file"] for d in deleted]


def test_prune_deletes_named_files_first_then_the_oldest_and_never_the_active_one(tmp_path):
    d = tmp_path
    old_auto = touch(d / "20260101T000000Z_auto_000.mcap", 400)
    named = touch(d / "20260101T010000Z_experiment_000.mcap", 400)
    new_auto = touch(d / "20260102T000000Z_auto_000.mcap", 400)
    active = touch(d / "20260103T000000Z_auto_000.mcap", 400)
    deleted = prune(d, 900, keep={active})
    assert names(deleted) == [named.name, old_auto.name]
    assert deleted[0] == {"file": named.name, "bytes": 400, "named": True, "safety_events": 0}
    assert new_auto.exists() and active.exists()


def test_prune_automatic_files_first_with_keep_named(tmp_path):
    d = tmp_path
    named = touch(d / "20260101T000000Z_experiment_000.mcap", 400)
    auto = touch(d / "20260102T000000Z_auto_000.mcap", 400)
    assert names(prune(d, 500, keep_named=True)) == [auto.name]
    assert named.exists()


@pytest.mark.parametrize("budget, keep_named, expected", [
    (1300, False, ["named_old", "named_new"]),                          # the incident outlives every named file
    (900, False, ["named_old", "named_new", "auto_plain"]),
    (500, False, ["named_old", "named_new", "auto_plain", "named_incident"]),  # only when nothing else is left
    (900, True, ["auto_plain", "named_old", "named_new"]),              # keep_named: automatic ones first, still
    (100, True, ["auto_plain", "named_old", "named_new", "auto_incident", "named_incident"]),  # incidents last
])
def test_prune_keeps_files_with_safety_events_over_files_without(tmp_path, budget, keep_named, expected):
    d = tmp_path
    files = {
        "auto_incident": touch(d / "20260101T000000Z_auto_000.mcap", 400),
        "named_old": touch(d / "20260101T010000Z_left-turns_000.mcap", 400),
        "named_incident": touch(d / "20260101T020000Z_fill_000.mcap", 400),
        "auto_plain": touch(d / "20260101T030000Z_auto_000.mcap", 400),
        "named_new": touch(d / "20260101T040000Z_fill_001.mcap", 400),
    }
    incidents = {files["auto_incident"]: 1, files["named_incident"]: 2}
    deleted = prune(d, budget, keep_named=keep_named, safety_events=lambda p: incidents.get(p, 0))
    by_path = {p.name: k for k, p in files.items()}
    assert [by_path[f] for f in names(deleted)] == expected
    assert all(p.exists() != (k in expected) for k, p in files.items())


def test_recorder_stays_within_the_budget(tmp_path):
    rec = make(tmp_path, always_on=True, rotate_bytes=64 * 1024, chunk_bytes=8192, budget_bytes=1024 * 1024)
    t0 = 1_800_000_000.0
    for k in range(6):
        record_run(rec, 1000, t0 + k * 20)
    rec.close()
    files = list((tmp_path / "rec").glob("*.mcap"))
    total = sum(f.stat().st_size for f in files)
    assert total <= 1024 * 1024
    assert rec.status()["pruned_files"] > 0
    # what remains is the newest data
    newest = max(r["end_t"] for r in list_recordings(tmp_path / "rec"))
    assert newest == pytest.approx(t0 + 5 * 20 + 999 * 0.02)


def test_second_recorder_on_the_same_directory_is_refused(tmp_path):
    rec = make(tmp_path)
    other = Recorder(RecordingConfig(dir=str(tmp_path / "rec")))
    with pytest.raises(RuntimeError, match="another recorder"):
        other.start()
    rec.close()
    other.start()  # free again once the first has closed
    other.close()


def test_status_reports_counts_and_no_error(tmp_path):
    rec = make(tmp_path, flush_s=0.1)
    rec.start_recording("status")
    record_run(rec, 100, 1e9)
    wait_until(lambda: rec.status()["messages"] >= 102, 5, "all written")
    st = rec.status()
    assert st["recording"] and st["name"] == "status" and st["error"] is None
    assert st["messages_by_topic"]["/teleop/telemetry"] == 100
    assert st["dropped"] == 0 and st["lag_s"] >= 0.0
    assert orjson.dumps(st)  # JSON-ready for the dashboard
    rec.close()
    assert rec.status()["state"] == "closed"


def test_start_reports_nothing_to_recover_on_a_clean_directory(tmp_path):
    rec = Recorder(RecordingConfig(dir=str(tmp_path / "rec")))
    assert rec.start() == []
    rec.close()


def test_event_serialised_at_call_time(tmp_path):
    """A caller that reuses its event dict after the call does not change what was recorded."""
    rec = make(tmp_path)
    rec.start_recording("mutate")
    ev = {"wall_t": 1e9, "trigger": "a", "state_before": "idle", "state_after": "idle", "values": {"x": 1}}
    rec.record_event(ev)
    ev["values"]["x"] = 2
    rec.close()
    (path,) = (tmp_path / "rec").glob("*.mcap")
    _s, msgs, _ = read_all(path)
    assert json.loads(next(m[2] for m in msgs if m[0] == "/teleop/events"))["values"] == {"x": 1}


def test_record_calls_return_quickly_even_under_load(tmp_path):
    """Not a timing assertion: the calls complete while the writer is busy, and the counts add up."""
    rec = make(tmp_path, queue_size=64)
    rec.start_recording("load")
    ok = dropped = 0
    deadline = time.monotonic() + 30
    for i in range(20000):
        if rec.record_snapshot(snapshot_bytes(i, 1e9 + i * 0.001), 1e9 + i * 0.001):
            ok += 1
        else:
            dropped += 1
        assert time.monotonic() < deadline
    rec.close()
    assert rec.status()["dropped"] == dropped
    (path,) = (tmp_path / "rec").glob("*.mcap")
    _s, msgs, _ = read_all(path)
    assert len(msgs) == ok
