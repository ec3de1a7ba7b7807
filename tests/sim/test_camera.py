"""The synthetic first-person camera: geometry conventions, clipping, determinism, noise."""

from __future__ import annotations

import math

import numpy as np
import pytest

from drivers.camera.base import CameraError
from drivers.camera.sim import SimCamera
from sim.camera import CameraIntrinsics, CameraMount, camera_pose, render
from sim.world import World

K = CameraIntrinsics(640, 480, math.radians(70.0))
F = K.focal_px
CX, CY = 320.0, 240.0


def big_world() -> World:
    """Walls 200 m away: their tops sit within a pixel of the true horizon."""
    return World.from_config({"size_m": [400.0, 400.0]})


def horizon_row(img: np.ndarray, col: int) -> int:
    """First row from the top that is not sky (sky and haze are the only colours with blue > 200)."""
    rows = np.nonzero(img[:, col, 0] <= 200)[0]
    assert len(rows), "no ground in this column"
    return int(rows[0])


def box_mask(img: np.ndarray) -> np.ndarray:
    """Pixels of the (orange) boxes: red well above blue."""
    return img[:, :, 2].astype(int) - img[:, :, 0].astype(int) > 50


# --------------------------------------------------------------------------- horizon


@pytest.mark.parametrize("pitch", [0.0, 0.1, -0.15, 0.3])
def test_horizon_moves_up_when_the_nose_goes_down(pitch):
    img = render(big_world(), {"x": 200.0, "y": 200.0, "pitch": pitch}, K, 0.0, 0, overlay=False)
    expected = CY - F * math.tan(pitch)
    for col in (100, 320, 540):
        assert horizon_row(img, col) == pytest.approx(expected, abs=2.0)


def test_mount_pitch_tilts_the_view_like_body_pitch():
    w = big_world()
    body = render(w, {"x": 200.0, "y": 200.0, "pitch": 0.1}, K, 0.0, 0, overlay=False, mount=CameraMount(0.0, 0.25, 0.0))
    mount = render(w, {"x": 200.0, "y": 200.0}, K, 0.0, 0, overlay=False, mount=CameraMount(0.0, 0.25, 0.1))
    assert horizon_row(body, 320) == horizon_row(mount, 320) == pytest.approx(CY - F * math.tan(0.1), abs=2.0)


@pytest.mark.parametrize("roll", [0.1, -0.2])
def test_horizon_tilts_with_roll_right_side_down_raises_its_right_end(roll):
    img = render(big_world(), {"x": 200.0, "y": 200.0, "roll": roll}, K, 0.0, 0, overlay=False)
    for col in (80, 320, 560):
        assert horizon_row(img, col) == pytest.approx(CY - (col - CX) * math.tan(roll), abs=2.0)


def test_looking_straight_up_shows_only_sky():
    img = render(big_world(), {"x": 200.0, "y": 200.0, "pitch": -math.pi / 2 + 0.01}, K, 0.0, 0, overlay=False)
    assert (img[:, :, 0] > 200).all()


# --------------------------------------------------------------------------- frames and objects


def test_camera_pose_follows_rep103():
    centre, R = camera_pose({"x": 1.0, "y": 2.0, "yaw": math.pi / 2}, CameraMount(0.1, 0.25, 0.0))
    assert centre == pytest.approx([1.0, 2.1, 0.25])  # forward of the body is north at yaw = 90°
    assert R[:, 0] == pytest.approx([0.0, 1.0, 0.0], abs=1e-12)  # looks north
    assert R[:, 1] == pytest.approx([-1.0, 0.0, 0.0], abs=1e-12)  # left is west


@pytest.mark.parametrize("x, y, yaw, side", [(2.0, 3.0, 0.0, "left"), (3.0, 2.0, math.pi / 2, "right")])
def test_box_appears_on_the_side_rep103_predicts(x, y, yaw, side):
    # the box at (4, 4) is 2 m ahead and 1 m to the side: facing east, north is left;
    # facing north, east is right
    w = World.from_config({"size_m": [8.0, 8.0], "boxes": [{"center": [4.0, 4.0], "size": [0.5, 0.5]}]})
    img = render(w, {"x": x, "y": y, "yaw": yaw}, K, 0.0, 0, overlay=False)
    cols = np.nonzero(box_mask(img))[1]
    assert len(cols) > 100
    assert (cols.mean() < CX) == (side == "left")


def test_box_just_ahead_fills_the_view():
    w = World.from_config({"size_m": [6.0, 4.0], "boxes": [{"center": [3.0, 2.0], "size": [0.5, 0.5]}]})
    img = render(w, {"x": 2.55, "y": 2.0}, K, 0.0, 0, overlay=False)  # camera 0.10 m from the face
    assert box_mask(img).all()


def test_wall_reaching_behind_the_camera_is_clipped_not_folded():
    # a wall on the robot's right running from behind it to 1.9 m ahead
    base = {"size_m": [6.0, 4.0]}
    w_with = World.from_config({**base, "walls": [{"from": [1.0, 1.0], "to": [5.0, 1.0]}]})
    w_without = World.from_config(base)
    pose = {"x": 3.0, "y": 1.2, "yaw": 0.0}
    a = render(w_with, pose, K, 0.0, 0, overlay=False)
    b = render(w_without, pose, K, 0.0, 0, overlay=False)
    cols = np.nonzero((a != b).any(axis=2))[1]
    assert len(cols) > 1000
    # every wall point is ≥ 0.2 m right at ≤ 1.9 m depth, so u ≥ cx + f·0.2/1.9; a vertex behind
    # the camera projected without clipping would land on the left
    assert cols.min() >= CX + F * 0.2 / 1.9 - 2


def test_objects_behind_the_camera_are_not_drawn():
    base = {"size_m": [8.0, 4.0]}
    w_box = World.from_config({**base, "boxes": [{"center": [1.0, 2.0], "size": [0.5, 0.5]}]})
    pose = {"x": 4.0, "y": 2.0, "yaw": 0.0}  # looking east, box 3 m behind
    assert (render(w_box, pose, K, 0.0, 0) == render(World.from_config(base), pose, K, 0.0, 0)).all()


# --------------------------------------------------------------------------- determinism and noise


def test_same_inputs_same_image_and_overlay_shows_the_frame():
    w = World.from_config({"size_m": [6.0, 4.0], "boxes": [{"center": [4.5, 1.0], "size": [0.4, 0.4]}]})
    pose = {"x": 1.0, "y": 1.0, "yaw": 0.2, "pitch": 0.02, "roll": -0.03}
    a = render(w, pose, K, 1.5, 45)
    assert (a == render(w, pose, K, 1.5, 45)).all()
    changed = (a != render(w, pose, K, 1.5, 46)).any(axis=2)
    rows, cols = np.nonzero(changed)
    assert len(rows) and rows.max() < 40 and cols.max() < 320  # only the overlay text differs


def test_noise_is_seeded_and_has_the_configured_sigma():
    w = World.from_config({"size_m": [6.0, 4.0]})
    k = CameraIntrinsics(320, 240, math.radians(70.0), noise_sigma=4.0)
    pose = {"x": 1.0, "y": 2.0}
    clean = render(w, pose, k, 0.0, 0)
    assert (clean == render(w, pose, k, 0.0, 0, rng=None)).all()  # no rng, no noise
    a = render(w, pose, k, 0.0, 0, rng=np.random.default_rng(7))
    assert (a == render(w, pose, k, 0.0, 0, rng=np.random.default_rng(7))).all()
    assert (a != render(w, pose, k, 0.0, 0, rng=np.random.default_rng(8))).any()
    d = a.astype(float) - clean
    inside = (clean > 20) & (clean < 235)  # away from saturation
    assert d[inside].std() == pytest.approx(4.0, rel=0.1)
    assert abs(d[inside].mean()) < 0.2


@pytest.mark.parametrize("bad", [dict(width=4), dict(hfov_rad=0.0), dict(hfov_rad=math.pi), dict(noise_sigma=-1.0)])
def test_fail__intrinsics(bad):
    with pytest.raises(ValueError):
        CameraIntrinsics(**{"width": 64, "height": 48, **bad})


# --------------------------------------------------------------------------- the SimCamera source


def test_sim_camera_renders_the_pose_at_the_settings_size():
    poses = iter([{"x": 200.0, "y": 200.0, "pitch": 0.0}, {"x": 200.0, "y": 200.0, "pitch": 0.1}])
    cam = SimCamera({"width": 640, "height": 480, "fps": 30}, big_world(), lambda: next(poses), clock=lambda: 123.5)
    with cam:
        f0, t0 = cam.read()
        f1, _ = cam.read()
    assert f0.shape == (480, 640, 3) and t0 == 123.5
    assert horizon_row(f1, 600) < horizon_row(f0, 600) - 40
    assert cam.frame_no == 2


def test_sim_camera_mount_settings_are_in_degrees():
    cam = SimCamera({"width": 640, "height": 480, "mount_pitch_deg": math.degrees(0.1)}, big_world(),
                    lambda: {"x": 200.0, "y": 200.0})
    with cam:
        frame, _ = cam.read()
    assert horizon_row(frame, 600) == pytest.approx(CY - F * math.tan(0.1), abs=2.0)


def test_sim_camera_apply_changes_the_frame_size():
    cam = SimCamera({"width": 160, "height": 120}, big_world(), lambda: {"x": 1.0, "y": 1.0})
    with cam:
        assert cam.read()[0].shape == (120, 160, 3)
        cam.apply(96, 64, 10)
        assert cam.read()[0].shape == (64, 96, 3)
        assert cam.settings.fps == 10.0


def test_sim_camera_failures_are_camera_errors():
    def broken_pose():
        raise KeyError("x")

    cam = SimCamera({"width": 64, "height": 48}, big_world(), broken_pose)
    with pytest.raises(CameraError, match="not open"):
        cam.read()
    cam.open()
    with pytest.raises(CameraError, match="pose unavailable"):
        cam.read()
    cam.close()
    cam.close()  # twice is fine


# --------------------------------------------------------------------------- fiducial markers
import cv2  # noqa: E402 - only the marker tests decode markers

MARKER_WORLD = {"size_m": [8.0, 6.0]}


def marker_world(**extra) -> World:
    m = {"id": 5, "position": [8.0, 3.0, 0.3], "yaw_deg": 180, "size_m": 0.16, **extra}
    return World.from_config({**MARKER_WORLD, "markers": [m]})


def project(points: np.ndarray, pose: dict, mount: CameraMount = CameraMount()) -> np.ndarray:
    """The pinhole projection written out (u = cx − f·left/depth, v = cy − f·up/depth)."""
    c, R = camera_pose(pose, mount)
    cam = (points - c) @ R
    return np.stack((CX - F * cam[:, 1] / cam[:, 0], CY - F * cam[:, 2] / cam[:, 0]), axis=1)


def detect(img: np.ndarray, dictionary: str = "DICT_4X4_50"):
    params = cv2.aruco.DetectorParameters()
    params.cornerRefinementMethod = cv2.aruco.CORNER_REFINE_SUBPIX
    det = cv2.aruco.ArucoDetector(cv2.aruco.getPredefinedDictionary(getattr(cv2.aruco, dictionary)), params)
    corners, ids, _ = det.detectMarkers(cv2.cvtColor(img, cv2.COLOR_BGR2GRAY))
    return {} if ids is None else {int(i): c.reshape(4, 2) for i, c in zip(ids.ravel(), corners)}


@pytest.mark.parametrize("dictionary", ["DICT_4X4_50", "DICT_APRILTAG_36h11"])
@pytest.mark.parametrize("pose", [
    {"x": 7.0, "y": 3.0},                                           # 0.9 m, square on
    {"x": 6.0, "y": 2.5, "yaw": 0.2},                               # off to the side
    {"x": 4.0, "y": 3.5, "yaw": -0.1, "pitch": 0.05, "roll": 0.03},  # 4 m, tilted body
    {"x": 6.5, "y": 1.5, "yaw": 0.6},                               # oblique
])
def test_marker_is_decoded_with_its_corners_where_the_projection_puts_them(dictionary, pose):
    w = marker_world(dictionary=dictionary)
    img = render(w, pose, K, 0.0, 0, overlay=False)
    found = detect(img, dictionary)
    assert list(found) == [5]
    err = np.linalg.norm(found[5] - project(w.markers[0].corners(), pose), axis=1)
    assert err.max() < 0.75  # px: sub-pixel, from the anti-aliased edges


def test_marker_seen_from_behind_or_behind_the_camera_is_not_drawn():
    plain = World.from_config(MARKER_WORLD)
    # a free-standing marker at (4, 3) facing east, seen from its west side: the back
    w = World.from_config({**MARKER_WORLD, "markers": [{"id": 1, "position": [4.0, 3.0, 0.3], "yaw_deg": 0,
                                                        "size_m": 0.3}]})
    for pose in ({"x": 2.0, "y": 3.0}, {"x": 6.0, "y": 3.0, "yaw": 0.0}):  # from behind; behind the camera
        assert (render(w, pose, K, 0.0, 0) == render(plain, pose, K, 0.0, 0)).all()
    assert (render(w, {"x": 6.0, "y": 3.0, "yaw": math.pi}, K, 0.0, 0) != render(plain, {"x": 6.0, "y": 3.0,
                                                                                        "yaw": math.pi}, K, 0.0, 0)).any()


def test_box_in_front_hides_a_marker_on_the_wall_and_a_marker_on_a_box_shows():
    boxes = [{"center": [6.0, 3.0], "size": [0.4, 0.6]}]
    on_wall = {"id": 5, "position": [8.0, 3.0, 0.25], "yaw_deg": 180, "size_m": 0.16}
    on_box = {"id": 6, "position": [5.8, 3.0, 0.25], "yaw_deg": 180, "size_m": 0.16}  # the box's west face
    w = World.from_config({**MARKER_WORLD, "boxes": boxes, "markers": [on_wall, on_box]})
    pose = {"x": 4.0, "y": 3.0}
    found = detect(render(w, pose, K, 0.0, 0, overlay=False))
    assert list(found) == [6]
    err = np.linalg.norm(found[6] - project(w.markers[1].corners(), pose), axis=1)
    assert err.max() < 0.75
    # from the side the wall marker is in view past the box
    assert 5 in detect(render(w, {"x": 5.0, "y": 4.5, "yaw": -0.45}, K, 0.0, 0, overlay=False))


@pytest.mark.parametrize("pose", [
    {"x": 4.2, "y": 5.5},
    {"x": 4.2, "y": 5.5, "roll": 0.5},                 # rolled: the plane's vanishing line crosses the box
    {"x": 4.2, "y": 5.5, "yaw": 0.3, "roll": -0.6},    # around the clipped part
    {"x": 4.2, "y": 5.6, "yaw": 0.8, "roll": 0.7, "pitch": 0.3},
])
def test_marker_crossing_the_near_plane_is_clipped_not_folded(pose):
    # a big marker on the north wall running from behind the camera to ahead of it, on its left
    w = World.from_config({**MARKER_WORLD, "markers": [{"id": 2, "position": [4.0, 6.0, 0.25], "yaw_deg": -90,
                                                        "size_m": 3.0}]})
    m = w.markers[0]
    a = render(w, pose, K, 0.0, 0, overlay=False)
    b = render(World.from_config(MARKER_WORLD), pose, K, 0.0, 0, overlay=False)
    v, u = np.nonzero((a != b).any(axis=2))
    assert len(u) > 1000
    # every changed pixel's ray must meet the wall (y = 6) in front of the camera, inside the marker
    # with its quiet zone (4 m square); a part behind the camera drawn unclipped lands elsewhere
    c, R = camera_pose(pose, CameraMount())
    rays = np.stack((np.ones(len(u)), -(u - CX) / F, -(v - CY) / F), axis=1) @ R.T
    t = (6.0 - c[1]) / rays[:, 1]
    local = (c + t[:, None] * rays - (m.x, m.y, m.z)) @ m.axes
    slack = 0.01 + 2.0 * np.abs(t) / F  # a pixel or two of the anti-aliased edge
    inside = (t > 0) & (np.abs(local[:, 0]) <= 2.0 + slack) & (np.abs(local[:, 1]) <= 2.0 + slack)
    assert inside.all()


def test_markers_are_deterministic_and_survive_sensor_noise():
    w = marker_world()
    k = CameraIntrinsics(640, 480, math.radians(70.0), noise_sigma=6.0)
    pose = {"x": 5.0, "y": 2.8, "yaw": 0.1}
    a = render(w, pose, k, 0.0, 0, np.random.default_rng(1))
    assert (a == render(w, pose, k, 0.0, 0, np.random.default_rng(1))).all()
    found = detect(a)
    assert list(found) == [5]
    assert np.linalg.norm(found[5] - project(w.markers[0].corners(), pose), axis=1).max() < 1.0
