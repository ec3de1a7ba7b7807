"""Reading recordings: listing, time ranges, CSV export, recent events, hostile files."""

from __future__ import annotations

import csv
import io
import math
import struct

import orjson
import pytest

from server.gateway.recording import Recorder, Recording, RecordingConfig, RecordingError, list_recordings, recent_events
from tests.server.gateway.recording.synthetic import ROBOT, event, record_run, snapshot

T0 = 1_800_000_000.0


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """Two recordings of 1000 snapshots each (20 s at 50 Hz), 10 events each."""
    d = tmp_path_factory.mktemp("rec")
    rec = Recorder(RecordingConfig(dir=str(d), queue_size=100_000), robot=ROBOT)
    rec.start()
    rec.start_recording("first")
    record_run(rec, 1000, T0)
    rec.start_recording("second")
    record_run(rec, 1000, T0 + 100)
    rec.close()
    return d


def test_list_gives_times_sizes_robot_and_counts(recorded):
    listed = list_recordings(recorded)
    assert [r["name"] for r in listed] == ["second", "first"]  # newest first
    first = listed[1]
    assert first["start_t"] == pytest.approx(T0) and first["end_t"] == pytest.approx(T0 + 999 * 0.02)
    assert first["duration_s"] == pytest.approx(19.98)
    assert first["robot"] == "test rover" and first["profile"] == "rover" and first["complete"]
    assert first["counts"] == {"/teleop/telemetry": 1000, "/teleop/events": 10, "/teleop/state": 10,
                               "/teleop/commands": 10}
    assert first["size_bytes"] == (recorded / first["file"]).stat().st_size


def test_messages_in_a_time_range_are_half_open_and_ordered(recorded):
    (path,) = [recorded / r["file"] for r in list_recordings(recorded) if r["name"] == "first"]
    with Recording(path) as rec:
        snaps = list(rec.snapshots(T0 + 1.0, T0 + 2.0))
        assert [s["seq"] for _t, s in snaps] == list(range(50, 100))
        assert all(T0 + 1.0 <= t < T0 + 2.0 for t, _s in snaps)
        newest_first = [m.t for m in rec.messages("/teleop/telemetry", T0 + 1.0, T0 + 2.0, reverse=True)]
        assert newest_first == sorted(newest_first, reverse=True)
        with pytest.raises(RecordingError, match="before start"):
            list(rec.messages(None, T0 + 2.0, T0 + 1.0))


def test_csv_export_of_chosen_channels_and_paths(recorded):
    (path,) = [recorded / r["file"] for r in list_recordings(recorded) if r["name"] == "first"]
    out = io.StringIO()
    with Recording(path) as rec:
        rows = rec.export_csv(out, ["battery_v", "range_left_m", "state", "setpoint.linear"], T0, T0 + 0.2)
    assert rows == 10
    table = list(csv.reader(io.StringIO(out.getvalue())))
    assert table[0] == ["t", "battery_v", "range_left_m", "state", "setpoint.linear"]
    for i, row in enumerate(table[1:]):
        expected = snapshot(i, T0 + i * 0.02)
        assert float(row[0]) == pytest.approx(T0 + i * 0.02, abs=1e-6)
        assert float(row[1]) == expected["values"]["battery_v"]
        assert row[2] == ("" if expected["values"]["range_left_m"] is None else "1.5")
        assert row[3] == expected["state"]
        assert float(row[4]) == expected["setpoint"]["linear"]


@pytest.mark.parametrize("columns,message", [
    (["no_such_channel"], "unknown channel 'no_such_channel'"),
    (["nothing.here"], "unknown column 'nothing.here'"),
    ([], "at least one column"),
])
def test_csv_export_refuses_unknown_columns(recorded, columns, message):
    (path,) = [recorded / r["file"] for r in list_recordings(recorded) if r["name"] == "first"]
    out = io.StringIO()
    with Recording(path) as rec, pytest.raises(RecordingError, match=message):
        rec.export_csv(out, columns)
    assert out.getvalue() == ""


def test_recent_events_span_files_newest_last(recorded):
    events = recent_events(recorded, 15)
    assert len(events) == 15
    times = [e["wall_t"] for e in events]
    assert times == sorted(times)
    assert times[-1] == pytest.approx(T0 + 100 + 950 * 0.02)  # the newest event of the second recording
    assert times[0] == pytest.approx(T0 + 550 * 0.02)  # reaches back into the first one
    assert recent_events(recorded, 0) == []
    assert len(recent_events(recorded, 1000)) == 20


def test_recent_events_include_the_file_being_written(tmp_path):
    rec = Recorder(RecordingConfig(dir=str(tmp_path), flush_s=0.05), robot=ROBOT)
    rec.start()
    rec.start_recording("open")
    rec.record_event(event(1, T0))
    from tests.conftest import wait_until
    wait_until(lambda: rec.status()["flushed_messages"] >= 2, 5, "flush")
    assert [e["trigger"] for e in recent_events(tmp_path, 5)] == ["rule_1"]
    rec.close()


def test_hostile_files_are_listed_with_an_error_not_a_crash(tmp_path):
    (tmp_path / "20260101T000000Z_auto_000.mcap").write_bytes(b"garbage" * 100)
    # a valid magic followed by a record claiming to be 1 TiB long
    (tmp_path / "20260101T000001Z_auto_000.mcap").write_bytes(
        b"\x89MCAP0\r\n" + bytes([0x01]) + struct.pack("<Q", 1 << 40) + b"x" * 100)
    # a valid magic at both ends but nothing sensible in between
    (tmp_path / "20260101T000002Z_auto_000.mcap").write_bytes(b"\x89MCAP0\r\n" + b"\xff" * 64 + b"\x89MCAP0\r\n")
    listed = {r["file"]: r for r in list_recordings(tmp_path)}
    assert "error" in listed["20260101T000000Z_auto_000.mcap"]
    assert listed["20260101T000001Z_auto_000.mcap"].get("counts", {}) == {}
    assert listed["20260101T000002Z_auto_000.mcap"].get("counts", {}) == {}
    assert recent_events(tmp_path, 10) == []
    with pytest.raises(RecordingError, match="not an MCAP file"):
        Recording(tmp_path / "20260101T000000Z_auto_000.mcap")


def test_csv_streams_in_chunks_that_add_up_to_the_export(recorded):
    (path,) = [recorded / r["file"] for r in list_recordings(recorded) if r["name"] == "first"]
    with Recording(path) as rec:
        out = io.StringIO()
        rows = rec.export_csv(out, ["battery_v", "state"])
        chunks = list(rec.iter_csv(["battery_v", "state"], batch_rows=64))
        limited = "".join(rec.iter_csv(["battery_v"], max_rows=10))
    assert rows == 1000 and len(chunks) == 1000 // 64 + 1
    assert "".join(chunks) == out.getvalue()
    assert limited.count("\n") == 11


def test_corrupted_bytes_give_a_recording_error_or_partial_data_never_a_crash(recorded, tmp_path):
    """Flip bytes all over a finished file: reading, listing, events and recovery either work on what
    is intact or raise RecordingError; nothing else escapes."""
    from server.gateway.recording.recovery import recover_file
    (src,) = [recorded / r["file"] for r in list_recordings(recorded) if r["name"] == "first"]
    data = bytearray(src.read_bytes())
    rng = __import__("random").Random(11)
    for k in range(40):
        bad = bytearray(data)
        for _ in range(3):
            pos = rng.randrange(8, len(bad) - 8)
            bad[pos] ^= 0xFF
        d = tmp_path / f"c{k}"
        d.mkdir()
        path = d / "20260101T000000Z_auto_000.mcap"
        path.write_bytes(bytes(bad))
        try:
            with Recording(path) as rec:
                rec.info()
                sum(1 for _ in rec.snapshots())
                rec.export_csv(io.StringIO(), ["battery_v"])
        except RecordingError:
            pass
        list_recordings(d)
        recent_events(d, 5)
        recover_file(path)


@pytest.mark.parametrize("compression", ["zstd", "lz4", "none"])
def test_messages_are_those_the_mcap_reader_gives_even_out_of_order_across_chunks(tmp_path, compression):
    """The reader's own chunk merge gives exactly what ``mcap``'s ``iter_messages`` gives (log-time order,
    file order among equal times), on small chunks whose time ranges overlap (stamps that jump back)."""
    from mcap.reader import make_reader

    rec = Recorder(RecordingConfig(dir=str(tmp_path), queue_size=100_000, chunk_bytes=4096, compression=compression),
                   robot=ROBOT)
    rec.start()
    file = rec.start_recording("jumpy")
    for i in range(1500):
        t = T0 + i * 0.02 + (0.7 if i % 97 == 0 else 0.0) - (0.5 if i % 131 == 0 else 0.0)
        rec.record_snapshot(orjson.dumps(snapshot(i, t)), t)
        if i % 100 == 3:
            rec.record_event(event(i, t - 0.3))  # an event stamped before the snapshots around it
    rec.close()
    path = tmp_path / file
    seen = 0
    for topics in (None, "/teleop/telemetry", ["/teleop/events", "/teleop/state"]):
        for start_t, end_t in ((None, None), (T0 + 3.0, T0 + 17.01), (T0 + 29.99, None), (None, T0)):
            with Recording(path) as r:
                ours = [(m.log_time_ns, m.topic, m.data) for m in r.messages(topics, start_t, end_t)]
            with open(path, "rb") as f:
                theirs = [(m.log_time, c.topic, m.data) for _s, c, m in make_reader(f).iter_messages(
                    topics=[topics] if isinstance(topics, str) else topics,
                    starting_at=None if start_t is None else math.floor(start_t * 1e9),
                    ending_before=None if end_t is None else math.ceil(end_t * 1e9))]
            assert ours == theirs, (topics, start_t, end_t)
            seen += len(ours)
    assert seen > 4000
