"""The vision pipeline against the simulator's ground truth: marker ranges, bearings and pose fixes in
the default profile's world, through the same JPEG path as the video service; calibrated and
distorted cameras; hostile frames."""

from __future__ import annotations

import math
import time

import cv2
import numpy as np
import pytest

from robotics.angles import wrap_pi
from server.gateway.vision import CameraModel, VisionPipeline, VisionWorker, parse_vision_config
from server.gateway.vision.worker import jpeg_size
from sim.camera import CameraIntrinsics, CameraMount, render
from tests.server.gateway.vision.scene import K, WORLD, WORLD_CFG, frame, pipeline, process, sweep_poses, truth

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def sweep():
    pipe = pipeline()
    return [(pose, process(pipe, pose)) for pose in sweep_poses()]


# ---------------------------------------------------------------- ground truth
def test_every_marker_decoded_in_the_sweep_is_a_real_one_where_the_world_puts_it(sweep):
    n, rel = 0, []
    for pose, result in sweep:
        for m in result.markers:
            assert m.known, f"marker {m.id} decoded at {pose}: not in the world"
            true_range, true_bearing = truth(pose, WORLD.marker(m.id))
            assert abs(wrap_pi(m.bearing_rad - true_bearing)) < math.radians(0.2), (pose, m.id)
            sigma_r = m.sigmas[0]
            assert abs(m.range_m - true_range) < max(3.0 * sigma_r, 0.02), (pose, m.id, m.range_m, true_range)
            rel.append((m.range_m - true_range) / true_range)
            n += 1
    assert n > 150  # most of the six markers are seen from most places
    # the corners come out ~0.15 px inside the square (sub-pixel refinement on soft edges): ranges
    # run ~1 % long; bench/bench_vision.py prints the figures
    assert abs(np.mean(rel)) < 0.025


@pytest.mark.parametrize("pose, expected", [
    ({"x": 3.0, "y": 2.0, "yaw": 0.0}, {0}),                 # the start pose: the east wall's marker
    ({"x": 1.0, "y": 2.5, "yaw": -0.3}, {0, 3, 4}),          # east wall, south wall, the box's face
    ({"x": 3.0, "y": 1.5, "yaw": math.pi / 2}, {1}),          # north wall
    ({"x": 1.6, "y": 2.2, "yaw": math.pi * 0.75}, {2}),       # west wall
    ({"x": 3.0, "y": 2.0, "yaw": math.pi}, {2}),              # west wall, 3 m away
    ({"x": 2.5, "y": 1.5, "yaw": -math.pi / 2}, set()),       # the south wall's marker is 45° off to the left
])
def test_the_markers_in_view_are_found(pose, expected):
    assert {m.id for m in process(pipeline(), pose).markers} == expected


def test_fixes_in_the_sweep_land_within_three_sigma_of_the_true_pose(sweep):
    fixes = [(pose, r.fix) for pose, r in sweep if r.fix is not None]
    assert len(fixes) > 40
    for pose, fix in fixes:
        err = math.hypot(fix.x - pose["x"], fix.y - pose["y"])
        assert err < 3.0 * fix.position_sigma_m + 0.01, (pose, fix)
        assert fix.position_sigma_m <= 0.5  # vaguer fixes are not published
    errors = [math.hypot(f.x - p["x"], f.y - p["y"]) for p, f in fixes]
    assert np.sqrt(np.mean(np.square(errors))) < 0.1  # m, rms (bench/bench_vision.py prints them by count)


def test_channels_of_a_result_carry_the_markers_and_the_fix():
    r = process(pipeline(), {"x": 1.0, "y": 2.5, "yaw": -0.3})
    c = r.channels
    assert c["vision_markers"] == 3.0
    assert c["vision_marker_id"] == 4.0  # the nearest of the map
    assert c["marker_4_range_m"] == c["vision_marker_range_m"]
    assert math.isnan(c["marker_1_range_m"]) and math.isnan(c["marker_5_bearing_rad"])
    assert (c["vision_fix_x_m"], c["vision_fix_y_m"]) == pytest.approx((1.0, 2.5), abs=0.05)
    assert c["vision_fix_yaw_rad"] == pytest.approx(-0.3, abs=0.02)
    assert c["vision_latency_s"] == pytest.approx(r.latency_s) and c["vision_latency_s"] >= 0
    assert set(c) == {s.name for s in pipeline().channel_specs()}
    data = r.to_json()
    assert [m["id"] for m in data["markers"]] == [4, 3, 0] and len(data["markers"][0]["corners"]) == 4


def test_without_a_marker_map_markers_are_measured_but_there_is_no_fix():
    cfg = parse_vision_config({"marker_size_m": 0.15})
    pipe = VisionPipeline(cfg, pipeline().camera, [])
    r = process(pipe, {"x": 1.0, "y": 2.5, "yaw": -0.3})
    assert {m.id for m in r.markers} == {0, 3, 4} and not any(m.known for m in r.markers)
    assert r.fix is None and math.isnan(r.channels["vision_marker_id"])
    assert "vision_fix_x_m" not in r.channels


# ---------------------------------------------------------------- cameras
def test_smaller_frames_and_a_pitched_mount_keep_the_geometry():
    # the operator halves the video size; the camera looks 10° down
    k = CameraIntrinsics(320, 240, math.radians(70.0))
    mount = CameraMount(0.10, 0.25, math.radians(10.0))
    pose = {"x": 4.3, "y": 2.1, "yaw": 0.05}
    img = render(WORLD, pose, k, 0.0, 0, mount=mount)
    pipe = pipeline(mount_pitch_deg=10.0)
    r = VisionWorker(pipe, 10.0).run_once(img, time.time())
    (m,) = r.markers
    true_range, true_bearing = truth(pose, WORLD.marker(0))
    assert m.id == 0 and m.range_m == pytest.approx(true_range, abs=3 * m.sigmas[0])
    assert m.bearing_rad == pytest.approx(true_bearing, abs=math.radians(0.4))


def distort(img: np.ndarray, K: np.ndarray, dist: np.ndarray) -> np.ndarray:
    """What a lens with distortion ``dist`` would have shown instead of the ideal pinhole image."""
    h, w = img.shape[:2]
    grid = np.stack(np.meshgrid(np.arange(w, dtype=np.float32), np.arange(h, dtype=np.float32)), -1)
    ideal = cv2.undistortPoints(grid.reshape(-1, 1, 2), K, dist, P=K).reshape(h, w, 2)
    return cv2.remap(img, ideal[..., 0], ideal[..., 1], cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)


def test_a_calibrated_camera_with_lens_distortion_measures_right_and_an_uncorrected_one_does_not():
    pinhole = pipeline().camera
    dist = np.array([-0.28, 0.09, 0.0, 0.0, 0.0])  # barrel distortion of a wide webcam lens
    # the east wall's marker at (6, 2) seen 0.5 rad left of the axis, near the image's left edge
    pose = {"x": 4.3, "y": 2.8, "yaw": math.atan2(2.0 - 2.8, 6.0 - 4.3) - 0.5}
    img = distort(render(WORLD, pose, K, 0.0, 0), pinhole.K, dist)
    true_range, true_bearing = truth(pose, WORLD.marker(0))
    calibrated = pipeline(camera_matrix=pinhole.K.tolist(), dist_coeffs=dist.tolist(), calibration_size=[640, 480])
    m = VisionWorker(calibrated, 10.0).run_once(img, time.time()).markers[0]
    assert m.bearing_rad == pytest.approx(true_bearing, abs=math.radians(0.3))
    assert m.range_m == pytest.approx(true_range, abs=3 * m.sigmas[0])
    naive = VisionWorker(pipeline(), 10.0).run_once(img, time.time()).markers[0]
    assert abs(naive.bearing_rad - true_bearing) > math.radians(1.0)  # the test can tell


def test_a_calibration_made_at_another_size_is_scaled_to_the_frames():
    cam = CameraModel(np.array([[914.0, 0.0, 639.5], [0.0, 914.0, 479.5], [0.0, 0.0, 1.0]]), np.zeros(5), (1280, 960))
    assert cam.for_size(640, 480).K[:2].tolist() == [[457.0, 0.0, 319.5], [0.0, 457.0, 239.5]]


@pytest.mark.parametrize("bad, message", [
    ({"camera_matrix": [[1, 0, 0], [0, 1, 0]]}, "camera_matrix"),
    ({"camera_matrix": [[500, 0, 320], [0, 500, 240], [0, 0, 2]]}, "camera_matrix must be"),
    ({"dist_coeffs": [0, 0, 0, 0, 0]}, "needs a camera_matrix"),
    ({"camera_matrix": [[500, 0, 320], [0, 500, 240], [0, 0, 1]], "dist_coeffs": [0, 0, 0, 0, 0, 0]},
     "4, 5, 8, 12 or 14"),
    ({"markers": [{"id": 50, "position": [0, 0, 0]}]}, "id 50 is not in DICT_4X4_50"),
    ({"markers": [{"id": 1, "position": [0, 0, 0]}, {"id": 1, "position": [1, 0, 0]}]}, "given twice"),
    ({"markers": [{"id": 1, "position": [0, 0]}]}, "markers"),
    ({"floor_near_m": 2.0, "floor_far_m": 1.0}, "floor_far_m must be greater"),
    ({"rate_hz": 0}, "rate_hz"),
    ({"rate_hz": 1000}, "rate_hz"),
    ({"colour": "red"}, "colour"),
])
def test_fail__vision_config(bad, message):
    with pytest.raises(ValueError, match=message):
        parse_vision_config(bad)


# ---------------------------------------------------------------- hostile frames
def jpeg(img: np.ndarray) -> bytes:
    return cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 70])[1].tobytes()


@pytest.mark.parametrize("img", [
    np.zeros((480, 640, 3), np.uint8),
    np.full((480, 640, 3), 255, np.uint8),
    np.random.default_rng(1).integers(0, 256, (480, 640, 3), dtype=np.uint8),
    np.random.default_rng(2).integers(0, 2, (480, 640, 3), dtype=np.uint8) * 255,
], ids=["black", "white", "noise", "salt-and-pepper"])
def test_blank_and_noise_frames_give_no_markers_and_no_fix(img):
    worker = VisionWorker(pipeline(), 10.0)
    r = worker.run_once(jpeg(img), time.time())
    assert r is not None and r.markers == [] and r.fix is None
    assert math.isnan(r.channels["vision_fix_x_m"]) and r.channels["vision_markers"] == 0.0
    assert 0.0 <= r.channels["vision_floor_free"] <= 1.0 or math.isnan(r.channels["vision_floor_free"])


def many_markers(n_side: int = 10) -> np.ndarray:
    """A 640×480 sheet of n_side² markers (ids 0-49, repeated)."""
    d = cv2.aruco.getPredefinedDictionary(cv2.aruco.DICT_4X4_50)
    img = np.full((480, 640), 255, np.uint8)
    cell = min(640, 480) // n_side
    side = int(cell * 0.75)
    for k in range(n_side * n_side):
        r, c = divmod(k, n_side)
        img[r * cell + 4:r * cell + 4 + side, c * cell + 4:c * cell + 4 + side] = \
            cv2.aruco.generateImageMarker(d, k % 50, side)
    return cv2.cvtColor(img, cv2.COLOR_GRAY2BGR)


def test_a_frame_full_of_markers_poses_only_the_largest_few():
    pipe = pipeline(max_markers=8)
    r = VisionWorker(pipe, 10.0).run_once(jpeg(many_markers()), time.time())
    assert r.n_decoded >= 90 and len(r.markers) == 8
    # the same id at several places cannot be one marker of the map: the fix refuses (or is vague)
    assert r.fix is None or r.fix.chi2 / max(r.fix.dof, 1) <= 25.0


@pytest.mark.parametrize("data, message", [
    (b"", "not a JPEG"),
    (b"garbage" * 1000, "not a JPEG"),
    (jpeg(np.zeros((48, 64, 3), np.uint8))[:200], "not a decodable JPEG"),  # truncated before the scan
    (jpeg(np.zeros((4, 4, 3), np.uint8)), "refused"),
])
def test_fail__undecodable_frames_are_counted_and_the_worker_goes_on(data, message):
    worker = VisionWorker(pipeline(), 10.0)
    assert worker.run_once(data, time.time()) is None
    stats = worker.stats()
    assert stats["errors"] == 1 and message in stats["last_error"]
    assert worker.run_once(frame({"x": 3.0, "y": 2.0, "yaw": 0.0}), time.monotonic()).markers
    assert worker.stats()["last_error"] is None


def test_a_jpeg_header_announcing_a_huge_image_is_refused_before_decoding():
    data = bytearray(jpeg(np.zeros((16, 16, 3), np.uint8)))
    w, h = jpeg_size(bytes(data))
    i = bytes(data).index(bytes([0xFF, 0xC0]))
    data[i + 5:i + 7] = (60000).to_bytes(2, "big")  # height
    data[i + 7:i + 9] = (60000).to_bytes(2, "big")  # width
    assert jpeg_size(bytes(data)) == (60000, 60000) and (w, h) == (16, 16)
    worker = VisionWorker(pipeline(), 10.0)
    assert worker.run_once(bytes(data), time.time()) is None
    assert "60000×60000 frame is refused" in worker.stats()["last_error"]


def test_a_raw_frame_of_the_wrong_shape_is_an_error_not_a_crash():
    worker = VisionWorker(pipeline(), 10.0)
    assert worker.run_once(np.zeros((480, 640), np.uint8), time.time()) is None
    assert "(H, W, 3) uint8" in worker.stats()["last_error"]


def test_world_markers_in_another_dictionary_are_not_in_the_map():
    cfg = {**WORLD_CFG, "markers": [{**WORLD_CFG["markers"][0], "dictionary": "DICT_APRILTAG_36h11"}]}
    assert pipeline(cfg).marker_ids == []
