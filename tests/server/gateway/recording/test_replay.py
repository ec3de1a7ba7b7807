"""Replay on an injected clock: play, pause, seek, speed, end; the recorded bytes come back unchanged."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from server.gateway.recording import Recorder, RecordingConfig, RecordingError
from server.gateway.recording.replay import FakeClock, ReplaySource, decode_image
from tests.server.gateway.recording.synthetic import ROBOT, record_run

T0 = 1_800_000_000.0


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    d = tmp_path_factory.mktemp("rec")
    rec = Recorder(RecordingConfig(dir=str(d), queue_size=100_000, video_frames=True, video_fps=1000.0), robot=ROBOT)
    rec.start()
    rec.start_recording("replay")
    sent = record_run(rec, 500, T0)  # 10 s at 50 Hz
    rec.record_frame(b"\xff\xd8frame", T0 + 5.0)
    rec.close()
    (path,) = d.glob("*.mcap")
    return path, sent


def seqs(msgs):
    return [orjson.loads(m.data)["seq"] for m in msgs if m.topic == "/teleop/telemetry"]


def test_nothing_plays_until_play(recording):
    path, _ = recording
    clock = FakeClock(100.0)
    src = ReplaySource(path, clock=clock)
    clock.advance(5.0)
    assert seqs(src.due()) == [0]  # only what is at the start instant
    assert src.status()["playing"] is False
    src.close()


def test_play_at_speed_one_follows_the_clock_and_returns_the_recorded_bytes(recording):
    path, sent = recording
    clock = FakeClock(100.0)
    src = ReplaySource(path, clock=clock)
    src.play()
    clock.advance(1.0)
    msgs = src.due()
    assert seqs(msgs) == list(range(51))  # t0 .. t0 + 1.0 inclusive
    assert [m.data for m in msgs if m.topic == "/teleop/telemetry"] == sent["snapshots"][:51]
    assert src.due() == []  # nothing new until the clock moves
    clock.advance(0.5)
    assert seqs(src.due()) == list(range(51, 76))
    assert src.status()["position_t"] == pytest.approx(T0 + 1.5)
    src.close()


def test_speed_pause_and_resume(recording):
    path, _ = recording
    clock = FakeClock(0.0)
    src = ReplaySource(path, clock=clock)
    src.set_speed(4.0)
    src.play()
    clock.advance(0.5)  # 2 s of recording
    assert seqs(src.due())[-1] == 100
    src.pause()
    clock.advance(10.0)
    assert src.due() == [] and src.status()["position_t"] == pytest.approx(T0 + 2.0)
    src.set_speed(0.5)
    src.play()
    clock.advance(1.0)  # half a second of recording
    assert seqs(src.due()) == list(range(101, 126))
    src.close()


def test_seek_shows_the_moment_then_plays_on(recording):
    path, _ = recording
    clock = FakeClock(0.0)
    src = ReplaySource(path, clock=clock)
    assert src.seek(T0 + 6.01) == pytest.approx(T0 + 6.01)
    assert seqs(src.due()) == [300]  # the newest snapshot before the seek point, even while paused
    src.play()
    clock.advance(0.1)
    assert seqs(src.due()) == [301, 302, 303, 304, 305]
    src.seek(T0 + 1.0)  # backwards
    assert seqs(src.due())[:1] == [49]
    assert src.seek(T0 - 100) == T0 and src.seek(T0 + 1e6) == pytest.approx(T0 + 499 * 0.02)
    src.close()


def test_plays_to_the_end_then_stops_and_play_restarts(recording):
    path, _ = recording
    clock = FakeClock(0.0)
    src = ReplaySource(path, clock=clock, max_batch=100000)
    src.play()
    clock.advance(60.0)
    msgs = src.due()
    assert seqs(msgs) == list(range(500))
    assert [m.topic for m in msgs].count("/teleop/events") == 5
    images = [m for m in msgs if m.topic == "/camera/image"]
    assert decode_image(images[0].data) == (b"\xff\xd8frame", T0 + 5.0, "jpeg")
    st = src.status()
    assert st["ended"] and not st["playing"] and st["progress"] == 1.0
    src.play()
    clock.advance(0.02)
    assert seqs(src.due())[:2] == [0, 1]
    src.close()


def test_batches_are_bounded(recording):
    path, _ = recording
    clock = FakeClock(0.0)
    src = ReplaySource(path, clock=clock, max_batch=64)
    src.play()
    clock.advance(100.0)
    sizes = []
    while msgs := src.due():
        sizes.append(len(msgs))
    assert max(sizes) == 64 and sum(sizes) == 500 + 5 + 1
    src.close()


@pytest.mark.parametrize("bad", [0, -1, 101, float("nan"), float("inf"), "2", True])
def test_bad_speed_is_refused_and_changes_nothing(recording, bad):
    path, _ = recording
    src = ReplaySource(path, clock=FakeClock())
    with pytest.raises(ValueError, match="speed"):
        src.set_speed(bad)
    assert src.status()["speed"] == 1.0
    src.close()


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), "1", None])
def test_bad_seek_is_refused(recording, bad):
    path, _ = recording
    src = ReplaySource(path, clock=FakeClock())
    with pytest.raises(ValueError, match="seek"):
        src.seek(bad)
    src.close()


def test_robot_description_comes_with_the_recording(recording):
    path, _ = recording
    src = ReplaySource(path, clock=FakeClock())
    assert src.robot["name"] == "test rover" and src.robot["geometry"]["track_m"] == 0.3
    src.close()


def test_an_empty_recording_cannot_be_replayed(tmp_path):
    rec = Recorder(RecordingConfig(dir=str(tmp_path)), robot=ROBOT)
    rec.start()
    rec.start_recording("empty")
    rec.record_command("start", None, accepted=True, t=T0)
    rec.close()
    (path,) = tmp_path.glob("*.mcap")
    with pytest.raises(RecordingError, match="no messages to replay"):
        ReplaySource(path)


async def test_run_forwards_due_messages_until_cancelled(recording):
    path, _ = recording
    clock = FakeClock(0.0)
    src = ReplaySource(path, clock=clock)
    got = []
    enough = asyncio.Event()
    src.play()

    def emit(m):
        got.append(m)
        if len(seqs(got)) >= 100:
            enough.set()

    async def fake_sleep(_s):
        clock.advance(0.2)
        await asyncio.sleep(0)

    task = asyncio.create_task(src.run(emit, sleep=fake_sleep))
    await asyncio.wait_for(enough.wait(), 30)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert seqs(got)[:100] == list(range(100))
    src.close()
