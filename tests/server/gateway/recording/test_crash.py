"""Crash safety on real processes and real file systems: kill -9 mid-recording, disk full, file-size limit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from mcap.exceptions import McapError
from mcap.reader import make_reader
from mcap.records import Message
from mcap.stream_reader import StreamReader

from server.gateway.recording import Recorder, RecordingConfig, list_recordings, recent_events
from server.gateway.recording.recovery import recover_directory
from tests.conftest import wait_until
from tests.server.gateway.recording.synthetic import ROBOT, snapshot_bytes

REPO = Path(__file__).resolve().parents[4]

# The child records as fast as it can and reports each flush on stdout: "flushed <messages>".
CHILD = textwrap.dedent("""
    import sys, time
    from server.gateway.recording import Recorder, RecordingConfig
    from tests.server.gateway.recording.synthetic import ROBOT, snapshot_bytes, event
    rec = Recorder(RecordingConfig(dir=sys.argv[1], flush_s=0.1, queue_size=100000), robot=ROBOT)
    rec.start()
    rec.start_recording("crash")
    t0 = 1_800_000_000.0
    reported = 0
    i = 0
    while True:
        t = t0 + i * 0.02
        rec.record_snapshot(snapshot_bytes(i, t), t)
        if i % 50 == 25:
            rec.record_event(event(i, t))
        i += 1
        flushed = rec.status()["flushed_messages"]
        if flushed != reported:
            reported = flushed
            print("flushed", flushed, flush=True)
        time.sleep(0.0005)
""")


def stream_read(path: Path) -> tuple[list[Message], str | None]:
    """What the mcap stream reader returns from an unfinished file, and how it ended."""
    msgs = []
    with open(path, "rb") as f:
        try:
            for rec in StreamReader(f).records:
                if isinstance(rec, Message):
                    msgs.append(rec)
        except McapError as err:  # the cut tail
            return msgs, type(err).__name__
    return msgs, None


def run_child(directory: Path, until_flushed: int) -> int:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(directory)], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    last = 0
    deadline = time.monotonic() + 60
    try:
        for line in proc.stdout:
            if line.startswith("flushed "):
                last = int(line.split()[1])
                if last >= until_flushed:
                    break
            assert time.monotonic() < deadline, "child never flushed enough"
        else:
            pytest.fail(f"child exited early: {proc.wait()} {proc.stderr.read()}")
        os.kill(proc.pid, signal.SIGKILL)  # mid-run, with messages in the queue and an open chunk
    finally:
        proc.kill()
        proc.wait(10)
        proc.stdout.close()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    return last


def test_kill_9_mid_recording_reads_to_the_last_flush_then_is_repaired(tmp_path):
    d = tmp_path / "rec"
    flushed = run_child(d, until_flushed=300)
    (path,) = d.glob("*.mcap")
    # 1. the raw file reads back with the mcap stream reader up to (at least) the last reported flush
    msgs, ending = stream_read(path)
    assert len(msgs) >= flushed
    with open(path, "rb") as f:
        with pytest.raises(McapError):  # no footer, so the seeking reader cannot find a summary
            make_reader(f).get_summary()

    # 2. the next start repairs it and says so
    rec = Recorder(RecordingConfig(dir=str(d)), robot=ROBOT)
    report = rec.start()
    rec.close()
    assert report == [{"file": path.name, "action": "repaired", "messages": len(msgs),
                       "bytes_before": report[0]["bytes_before"], "bytes_after": path.stat().st_size}]
    with open(path, "rb") as f:
        reader = make_reader(f)
        summary = reader.get_summary()
        assert summary is not None and summary.statistics.message_count == len(msgs)
        repaired = [m for _s, _c, m in reader.iter_messages(log_time_order=False)]
        md = {m.name: m.metadata for m in reader.iter_metadata()}
    assert [(m.log_time, m.data) for m in repaired] == [(m.log_time, m.data) for m in msgs]
    assert md["teleop"]["name"] == "crash"
    (info,) = list_recordings(d)
    assert info["complete"] and info["counts"]["/teleop/telemetry"] > 0

    # 3. the event log survives: the last events are read back from the recording
    events = recent_events(d, 3)
    assert len(events) == 3 and events == sorted(events, key=lambda e: e["wall_t"])
    assert events[-1]["trigger"] == f"rule_{max(int(e['trigger'][5:]) for e in events)}"


def test_recovery_removes_an_empty_unfinished_file_and_quarantines_garbage(tmp_path):
    d = tmp_path
    (d / "20260101T000000Z_auto_000.mcap").write_bytes(b"\x89MCAP0\r\n\x01\x00\x00")  # header cut short
    (d / "20260101T000001Z_auto_000.mcap").write_bytes(b"this is not mcap at all")
    (d / "20260101T000002Z_auto_000.mcap.recovering").write_bytes(b"left by a crash during recovery")
    reports = {r["file"]: r["action"] for r in recover_directory(d)}
    assert reports == {"20260101T000000Z_auto_000.mcap": "removed_empty",
                       "20260101T000001Z_auto_000.mcap": "quarantined"}
    assert sorted(p.name for p in d.iterdir()) == ["20260101T000001Z_auto_000.mcap.corrupt"]


def test_recovery_of_a_file_cut_at_every_length_never_raises(tmp_path):
    """Truncate a finished recording at many points: recovery keeps what is whole and never fails."""
    src = tmp_path / "src"
    rec = Recorder(RecordingConfig(dir=str(src), chunk_bytes=4096, queue_size=100000), robot=ROBOT)
    rec.start()
    rec.start_recording("cut")
    for i in range(300):
        rec.record_snapshot(snapshot_bytes(i, 1e9 + i * 0.02), 1e9 + i * 0.02)
    rec.close()
    (whole,) = src.glob("*.mcap")
    data = whole.read_bytes()
    work = tmp_path / "work"
    work.mkdir()
    kept = []
    for cut in range(8, len(data), max(1, len(data) // 60)):
        target = work / "20260101T000000Z_auto_000.mcap"
        target.write_bytes(data[:cut])
        (report,) = recover_directory(work) or [{"action": "ok", "messages": None}]
        assert report["action"] in ("repaired", "removed_empty")
        kept.append(report["messages"])
        for p in work.iterdir():
            p.unlink()
    assert kept == sorted(kept)  # a longer prefix never keeps fewer messages
    assert kept[-1] > 250


def _mount_tmpfs(path: Path, size: str) -> bool:
    if os.geteuid() != 0:
        return False
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
    return r.returncode == 0


def test_disk_full_on_a_small_tmpfs_is_a_status_not_a_crash(tmp_path):
    mnt = tmp_path / "small"
    mnt.mkdir()
    if not _mount_tmpfs(mnt, "256k"):
        pytest.skip("cannot mount a tmpfs here (not root, or no mount permission); see the RLIMIT_FSIZE test")
    try:
        rec = Recorder(RecordingConfig(dir=str(mnt / "rec"), flush_s=0.05, chunk_bytes=4096, compression="none"),
                       robot=ROBOT)
        rec.start()
        rec.start_recording("full")
        i = 0
        deadline = time.monotonic() + 60

        def feed_until_error():
            nonlocal i
            for _ in range(50):
                rec.record_snapshot(snapshot_bytes(i, 1e9 + i * 0.02), 1e9 + i * 0.02)
                i += 1
            return rec.status()["state"] == "error"

        wait_until(feed_until_error, 60, "the disk-full error")
        assert time.monotonic() < deadline
        st = rec.status()
        assert "disk full" in st["error"] and "ENOSPC" in st["error"]
        assert st["recording"] is False and st["queue"] == 0
        # the caller is never refused with an exception and never waits: calls return False now
        assert rec.record_snapshot(snapshot_bytes(i, 1e9), 1e9) is False
        assert rec.record_event({"wall_t": 1e9, "state_before": "idle", "state_after": "idle"}) is False
        rec.close()
        assert rec.status()["state"] == "closed"
        # what was flushed before the disk filled reads back
        (path,) = (mnt / "rec").glob("*.mcap")
        msgs, _ending = stream_read(path)
        assert len(msgs) > 10
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


FSIZE_CHILD = textwrap.dedent("""
    import json, resource, signal, sys, time
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # then write() fails with EFBIG instead of killing us
    resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))
    from server.gateway.recording import Recorder, RecordingConfig
    from tests.server.gateway.recording.synthetic import ROBOT, snapshot_bytes
    rec = Recorder(RecordingConfig(dir=sys.argv[1], flush_s=0.05, chunk_bytes=4096, compression="none"), robot=ROBOT)
    rec.start()
    rec.start_recording("fsize")
    i = 0
    deadline = time.monotonic() + 60
    while rec.status()["state"] != "error" and time.monotonic() < deadline:
        rec.record_snapshot(snapshot_bytes(i, 1e9 + i * 0.02), 1e9 + i * 0.02)
        i += 1
        if i % 50 == 0:
            time.sleep(0.01)
    after = [rec.record_snapshot(snapshot_bytes(i, 1e9), 1e9) for _ in range(10)]
    rec.close()
    print(json.dumps({"status": rec.status(), "after": after, "handed": i}))
""")


def test_file_size_limit_in_a_child_is_a_status_not_a_crash(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", FSIZE_CHILD, str(tmp_path / "rec")], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=90)
    assert out.returncode == 0, out.stderr
    import json
    result = json.loads(out.stdout.strip().splitlines()[-1])
    st = result["status"]
    assert st["state"] == "closed" and "file too large" in st["error"] and "EFBIG" in st["error"]
    assert result["after"] == [False] * 10
    (path,) = (tmp_path / "rec").glob("*.mcap")
    assert path.stat().st_size <= 200_000
    msgs, _ = stream_read(path)
    assert len(msgs) > 10
