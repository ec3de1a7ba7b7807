"""The floor cue against the simulator's geometry: the fraction of the band ahead whose line of sight
reaches plain floor, and the distance to the first blocked slice."""

from __future__ import annotations

import math
import time

import cv2
import numpy as np
import pytest

from server.gateway.vision import VisionWorker
from sim.camera import CameraIntrinsics, CameraMount, render
from tests.server.gateway.vision.scene import K, WORLD, ground_truth_free, pipeline, process, truth_clear

pytestmark = pytest.mark.timeout(60)

SCENES = [
    ({"x": 3.0, "y": 2.0, "yaw": 0.0}, "open floor"),
    ({"x": 3.4, "y": 1.1, "yaw": 0.0}, "box ahead, partly in the corridor"),
    ({"x": 3.8, "y": 1.3, "yaw": 0.0}, "box close, off to the right"),
    ({"x": 4.7, "y": 2.0, "yaw": 0.0}, "wall at the far end of the band"),
    ({"x": 5.0, "y": 3.0, "yaw": 0.3}, "wall at an angle"),
    ({"x": 1.0, "y": 3.3, "yaw": 0.0}, "the other box, close"),
    ({"x": 2.0, "y": 2.3, "yaw": math.pi / 2}, "box straight ahead"),
    ({"x": 2.0, "y": 1.0, "yaw": 0.0}, "ramps ahead (another colour: not plain floor)"),
    ({"x": 1.5, "y": 2.2, "yaw": -1.9}, "ramp off to one side"),
]


@pytest.fixture(scope="module")
def pipe():
    p = pipeline()
    process(p, SCENES[0][0])  # learn the floor on open ground
    return p


@pytest.mark.parametrize("pose, what", SCENES, ids=[w for _, w in SCENES])
def test_free_fraction_and_clear_distance_match_the_geometry(pipe, pose, what):
    r = process(pipe, pose)
    band = pipe.floor.band(pipe.camera, (640, 480))
    free = ground_truth_free(pose, band)
    assert r.floor.band_pixels == len(free) > 500
    assert r.floor.free_fraction == pytest.approx(free.mean(), abs=0.06), what
    assert r.floor.clear_m == pytest.approx(truth_clear(band, free, 0.6, 1.5), abs=0.1 + 1e-9), what


def test_an_obstacle_reaching_the_reference_strip_is_not_learned_as_floor():
    p = pipeline()
    clear, blocked = {"x": 3.0, "y": 2.0, "yaw": 0.0}, {"x": 3.7, "y": 1.0, "yaw": 0.0}
    assert process(p, clear).floor.free_fraction == 1.0
    for _ in range(30):  # the box stands in the reference strip for 3 s at 10 Hz
        r = process(p, blocked)
        assert not r.floor.reference_ok and r.floor.free_fraction < 0.25
    assert process(p, clear).floor.free_fraction == 1.0  # the box's colour never became floor


def test_an_obstacle_in_part_of_the_reference_strip_does_not_creep_into_the_model():
    # the box covers 18 % of the strip: the strip still counts as floor and is learned from, but not
    # along the box's edge, whose blended colours would otherwise pull the model into the box's
    p = pipeline()
    process(p, {"x": 3.0, "y": 2.0, "yaw": 0.0})
    pose = {"x": 3.6, "y": 1.25, "yaw": 0.0}  # (without that care the box is all "floor" in 60 frames)
    band = p.floor.band(p.camera, (640, 480))
    truth = ground_truth_free(pose, band).mean()
    for _ in range(60):
        r = process(p, pose)
        assert r.floor.reference_ok
        assert r.floor.free_fraction == pytest.approx(truth, abs=0.06)


def test_slow_change_of_light_is_followed():
    p = pipeline()
    pose = {"x": 3.0, "y": 2.0, "yaw": 0.0}
    img = render(WORLD, pose, K, 0.0, 0).astype(np.float32)
    worker = VisionWorker(p, 10.0)
    frees = []
    for k in range(25):  # 3 % darker each frame: half as bright at the end
        frees.append(worker.run_once((img * 0.97 ** k).astype(np.uint8), time.time()).floor.free_fraction)
    assert min(frees) > 0.95
    # the same drop in one step is beyond the model
    fresh = pipeline()
    VisionWorker(fresh, 10.0).run_once(img.astype(np.uint8), time.time())
    assert VisionWorker(fresh, 10.0).run_once((img * 0.5).astype(np.uint8), time.time()).floor.free_fraction < 0.5


def test_pitched_camera_small_frames_and_sensor_noise():
    pose = {"x": 3.4, "y": 1.1, "yaw": 0.0}
    k = CameraIntrinsics(320, 240, math.radians(70.0), noise_sigma=4.0)
    mount = CameraMount(0.10, 0.25, math.radians(12.0))
    p = pipeline(mount_pitch_deg=12.0, floor_scale=2)
    worker = VisionWorker(p, 10.0)
    rng = np.random.default_rng(4)
    worker.run_once(render(WORLD, {"x": 3.0, "y": 2.0}, k, 0.0, 0, rng, mount=mount), time.time())
    img = render(WORLD, pose, k, 0.0, 0, rng, mount=mount)
    ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 70])
    r = worker.run_once(buf.tobytes(), time.time())
    band = p.floor.band(p.camera, (320, 240))
    free = ground_truth_free(pose, band)
    assert r.floor.free_fraction == pytest.approx(free.mean(), abs=0.08)


def test_band_out_of_view_reads_nan():
    p = pipeline(mount_pitch_deg=-40.0)  # looking up: no floor in the picture
    r = process(p, {"x": 3.0, "y": 2.0, "yaw": 0.0})
    assert r.floor.band_pixels == 0 and math.isnan(r.channels["vision_floor_free"])
    assert math.isnan(r.channels["vision_clear_m"])
