"""The vision worker thread: latest frame wins, its own rate, says what rate it holds, survives bad frames;
fed by the real video service's frame listeners with the sim camera."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest

from drivers.camera.sim import SimCamera
from server.gateway.video import VideoService
from server.gateway.vision import VisionWorker
from tests.conftest import wait_until
from tests.server.gateway.vision.scene import WORLD, frame, pipeline

pytestmark = pytest.mark.timeout(60)

START = {"x": 3.0, "y": 2.0, "yaw": 0.0}


class Gate:
    """Holds the pipeline inside ``process`` until released: the worker is busy, frames pile up."""

    def __init__(self, pipe) -> None:
        self.entered, self.release = threading.Event(), threading.Event()
        self.inner = pipe.process
        pipe.process = self.process
        self.calls = 0

    def process(self, *args, **kw):
        self.calls += 1
        self.entered.set()
        self.release.wait(10)
        return self.inner(*args, **kw)


def test_frames_offered_while_busy_are_superseded_and_only_the_newest_is_processed():
    pipe = pipeline()
    gate = Gate(pipe)
    results = []
    worker = VisionWorker(pipe, 50.0, results.append)
    jpeg = frame(START)
    worker.start()
    try:
        worker.offer_raw(np.zeros((480, 640, 3), np.uint8), time.monotonic(), seq=1)
        assert gate.entered.wait(10)
        for seq in range(2, 12):  # ten frames while frame 1 is in the pipeline
            worker._put(jpeg, time.time(), seq)
        gate.release.set()
        wait_until(lambda: len(results) == 2, 10, "frames 1 and 11 processed")
        assert [r.seq for r in results] == [1, 11]
        stats = worker.stats()
        # every frame is accounted for: processed or superseded, none left pending
        assert stats["offered"] == 11 and stats["superseded"] == 9 and stats["processed"] == 2
    finally:
        worker.stop()
    assert not worker.running


def test_the_worker_runs_no_faster_than_its_rate():
    results = []
    worker = VisionWorker(pipeline(), 5.0, results.append)
    jpeg = frame(START)
    stop = threading.Event()

    def camera():  # offers as fast as it can
        seq = 0
        while not stop.is_set():
            seq += 1
            worker._put(jpeg, time.time(), seq)
            time.sleep(0.002)

    cam = threading.Thread(target=camera, daemon=True)
    worker.start()
    cam.start()
    try:
        wait_until(lambda: len(results) >= 6, 20, "six results")
    finally:
        stop.set()
        cam.join(5)
        worker.stop()
    # frames the pipeline had no time for were superseded, not queued (a count, not a timing: the rate itself is
    # bench/bench_vision.py's to measure)
    assert worker.stats(window_s=60.0)["superseded"] > 10 * len(results)


def test_a_pipeline_slower_than_the_rate_is_reported_as_not_keeping_up():
    pipe = pipeline()
    inner = pipe.process

    def slow(*args, **kw):
        time.sleep(0.1)
        return inner(*args, **kw)

    pipe.process = slow
    worker = VisionWorker(pipe, 30.0)
    jpeg = frame(START)
    stop = threading.Event()

    def camera():
        while not stop.is_set():
            worker._put(jpeg, time.time(), 0)
            time.sleep(1 / 30)

    worker.start()
    threading.Thread(target=camera, daemon=True).start()
    try:
        wait_until(lambda: worker.stats()["processed"] >= 12, 20, "a dozen slow frames")
        stats = worker.stats()
    finally:
        stop.set()
        worker.stop()
    assert not stats["keeping_up"] and stats["rate_hz_held"] > 0


def test_bad_frames_are_counted_and_the_thread_keeps_going():
    results = []
    worker = VisionWorker(pipeline(), 50.0, results.append)
    worker.start()
    try:
        worker._put(b"not a jpeg", time.time(), 1)
        wait_until(lambda: worker.stats()["errors"] == 1, 10, "error counted")
        worker._put(frame(START), time.monotonic(), 2)
        wait_until(lambda: results, 10, "the next good frame")
    finally:
        worker.stop()
    assert results[0].seq == 2 and [m.id for m in results[0].markers] == [0]


def test_a_failing_consumer_does_not_stop_the_worker():
    calls = []

    def consumer(result):
        calls.append(result.seq)
        raise RuntimeError("consumer bug")

    worker = VisionWorker(pipeline(), 50.0, consumer)
    worker.start()
    try:
        for seq in (1, 2):
            worker._put(frame(START), time.monotonic(), seq)
            wait_until(lambda: seq in calls, 10, f"frame {seq}")
    finally:
        worker.stop()


async def test_frames_from_the_video_service_reach_the_worker_through_its_frame_listener():
    """The real capture thread (sim camera rendering in its own process, JPEG encoder) → the worker."""
    pose = dict(START)
    results = []
    got = threading.Event()

    def on_result(r):
        results.append(r)
        got.set()

    worker = VisionWorker(pipeline(), 10.0, on_result)
    cam_settings = {"source": "sim", "width": 640, "height": 480, "fps": 30}
    service = VideoService(lambda s: SimCamera(s, WORLD, lambda: dict(pose), None), cam_settings)
    service.frame_listeners.append(worker.offer)
    worker.start()
    service.start()
    try:
        await asyncio.to_thread(got.wait, 30)
        r = results[-1]
        assert [m.id for m in r.markers] == [0]
        assert r.channels["marker_0_range_m"] == pytest.approx(3.0, abs=0.1)
        assert 0.0 <= r.latency_s < 30.0 and r.sample_t <= r.done_t
    finally:
        await asyncio.to_thread(service.stop)
        await asyncio.to_thread(worker.stop)
    stats = worker.stats(window_s=60.0)
    assert stats["errors"] == 0 and stats["offered"] >= stats["processed"] >= 1
