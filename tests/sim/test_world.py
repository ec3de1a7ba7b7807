"""sim.world: the field, boxes, ramps, ray casting and clearance."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sim.world import MARKER_DICTIONARIES, Box, Marker, Ramp, World

FIELD = {"size_m": [4.0, 3.0]}


def world_with_box(**box) -> World:
    return World.from_config({**FIELD, "boxes": [{"center": [2.0, 1.5], "size": [0.4, 0.2], **box}]})


# ---------------------------------------------------------------- construction
def test_from_config_encloses_the_field_with_four_walls():
    w = World.from_config(FIELD)
    assert (w.width_m, w.height_m) == (4.0, 3.0)
    assert len(w.walls) == 4
    assert w.all_segments().shape == (4, 4)


def test_from_config_default_field_is_6_by_4():
    w = World.from_config({})
    assert (w.width_m, w.height_m) == (6.0, 4.0)


def test_from_config_adds_walls_boxes_and_ramps_in_radians():
    w = World.from_config({
        **FIELD,
        "walls": [{"from": [1.0, 0.0], "to": [1.0, 1.0]}],
        "boxes": [{"center": [3.0, 2.0], "size": [0.5, 0.5], "yaw_deg": 90}],
        "ramps": [{"center": [2.0, 1.0], "size": [1.0, 0.5], "slope_deg": 10, "cross_slope_deg": -5}],
    })
    assert len(w.walls) == 5 and len(w.boxes) == 1 and len(w.ramps) == 1
    assert w.all_segments().shape == (5 + 4, 4)
    assert w.boxes[0].yaw == pytest.approx(math.pi / 2)
    assert w.ramps[0].slope_rad == pytest.approx(math.radians(10))
    assert w.ramps[0].cross_slope_rad == pytest.approx(math.radians(-5))


def test_box_corners_are_counter_clockwise_around_the_centre():
    k = Box(1.0, 2.0, 0.4, 0.2, yaw=0.3).corners()
    area2 = sum(k[i, 0] * k[(i + 1) % 4, 1] - k[(i + 1) % 4, 0] * k[i, 1] for i in range(4))
    assert area2 / 2 == pytest.approx(0.4 * 0.2)  # positive: counter-clockwise
    assert k.mean(axis=0) == pytest.approx([1.0, 2.0])


# ---------------------------------------------------------------- raycast
@pytest.mark.parametrize(
    "origin, angle, expected",
    [
        ((1.0, 1.5), 0.0, 3.0),  # east wall
        ((1.0, 1.5), math.pi, 1.0),  # west wall
        ((1.0, 1.5), math.pi / 2, 1.5),  # north wall
        ((1.0, 1.5), -math.pi / 2, 1.5),  # south wall
        ((1.0, 1.0), math.pi / 4, math.sqrt(2) * 2.0),  # diagonal to the north wall at (3, 3)
    ],
)
def test_raycast_hits_the_field_walls(origin, angle, expected):
    assert World.from_config(FIELD).raycast(origin, angle, 10.0) == pytest.approx(expected)


def test_raycast_beyond_max_range_is_inf():
    assert World.from_config(FIELD).raycast((1.0, 1.5), 0.0, 2.5) == math.inf


def test_raycast_stops_at_the_nearest_box_face():
    w = world_with_box()
    assert w.raycast((0.5, 1.5), 0.0, 10.0) == pytest.approx(2.0 - 0.2 - 0.5)


def test_raycast_sees_a_rotated_box():
    w = world_with_box(yaw_deg=90)  # now 0.2 wide along x
    assert w.raycast((0.5, 1.5), 0.0, 10.0) == pytest.approx(2.0 - 0.1 - 0.5)


def test_raycast_through_a_shared_corner_does_not_slip_between_edges():
    w = world_with_box(yaw_deg=33)
    rng = np.random.default_rng(3)
    for _ in range(300):
        ox, oy = rng.uniform(0.05, 3.95), rng.uniform(0.05, 2.95)
        if w.inside_obstacle(ox, oy):
            continue
        for cx, cy in w.boxes[0].corners():
            true = math.hypot(cx - ox, cy - oy)
            assert w.raycast((ox, oy), math.atan2(cy - oy, cx - ox), 10.0) <= true + 1e-9


def test_raycast_in_an_empty_world_is_inf():
    assert World(4.0, 3.0).raycast((1.0, 1.0), 0.0, 10.0) == math.inf


# ---------------------------------------------------------------- clearance and inside_obstacle
@pytest.mark.parametrize(
    "point, expected",
    [((1.0, 1.5), 1.0), ((2.0, 0.25), 0.25), ((3.9, 2.9), 0.1), ((0.5, 1.5), 0.5)],
)
def test_clearance_is_the_distance_to_the_nearest_wall(point, expected):
    assert World.from_config(FIELD).clearance(*point) == pytest.approx(expected)


def test_clearance_to_a_box_corner_is_euclidean():
    w = world_with_box()
    # the box's north-east corner is (2.2, 1.6)
    assert w.clearance(2.5, 2.0) == pytest.approx(math.hypot(0.3, 0.4))


def test_clearance_in_an_empty_world_is_inf():
    assert World(4.0, 3.0).clearance(1.0, 1.0) == math.inf


@pytest.mark.parametrize(
    "point, inside",
    [
        ((2.0, 1.5), True),  # box centre
        ((2.19, 1.59), True),  # just inside the box
        ((2.21, 1.5), False),  # just outside
        ((1.0, 1.0), False),  # free floor
        ((-0.01, 1.0), True),  # outside the field
        ((4.01, 1.0), True),
        ((1.0, 3.01), True),
    ],
)
def test_inside_obstacle(point, inside):
    assert world_with_box().inside_obstacle(*point) is inside


def test_inside_obstacle_follows_the_box_yaw():
    w = world_with_box(yaw_deg=90)  # 0.2 along x, 0.4 along y
    assert w.inside_obstacle(2.0, 1.68)
    assert not w.inside_obstacle(2.15, 1.5)


# ---------------------------------------------------------------- ramps
def test_ground_is_flat_outside_ramps():
    w = World.from_config({**FIELD, "ramps": [{"center": [2.0, 1.5], "size": [1.0, 1.0], "slope_deg": 10}]})
    assert w.ground_gradient(0.5, 0.5) == (0.0, 0.0)


def test_ramp_rises_along_its_local_x():
    w = World.from_config({**FIELD, "ramps": [{"center": [2.0, 1.5], "size": [1.0, 1.0], "slope_deg": 10}]})
    gx, gy = w.ground_gradient(2.0, 1.5)
    assert gx == pytest.approx(math.tan(math.radians(10)))
    assert gy == pytest.approx(0.0)


def test_ramp_yawed_90_degrees_rises_to_the_north():
    w = World.from_config({**FIELD, "ramps": [{"center": [2.0, 1.5], "size": [1.0, 0.6], "yaw_deg": 90,
                                              "slope_deg": 10}]})
    gx, gy = w.ground_gradient(2.0, 1.9)  # 0.4 north of the centre: inside (local x spans ±0.5)
    assert gx == pytest.approx(0.0, abs=1e-12)
    assert gy == pytest.approx(math.tan(math.radians(10)))
    assert w.ground_gradient(2.4, 1.5) == (0.0, 0.0)  # local y spans only ±0.3


def test_ramp_cross_slope_rises_along_local_y():
    r = Ramp(0.0, 0.0, 1.0, 1.0, yaw=0.0, slope_rad=0.0, cross_slope_rad=0.1)
    assert r.gradient() == pytest.approx((0.0, math.tan(0.1)))


def test_ramp_gradient_is_the_directional_derivative_in_any_direction():
    r = Ramp(0.0, 0.0, 2.0, 2.0, yaw=0.7, slope_rad=0.2, cross_slope_rad=-0.1)
    gx, gy = r.gradient()
    # moving along the ramp's local +x rises by tan(slope) per metre
    assert gx * math.cos(0.7) + gy * math.sin(0.7) == pytest.approx(math.tan(0.2))
    assert -gx * math.sin(0.7) + gy * math.cos(0.7) == pytest.approx(math.tan(-0.1))


# ---------------------------------------------------------------- markers
MARKER = {"id": 3, "position": [4.0, 1.5, 0.25], "yaw_deg": 180, "size_m": 0.2}


def test_markers_are_parsed_in_radians_with_the_default_dictionary():
    w = World.from_config({**FIELD, "markers": [MARKER, {**MARKER, "id": 4, "dictionary": "DICT_APRILTAG_36h11"}]})
    m = w.markers[0]
    assert (m.id, m.x, m.y, m.z, m.size_m, m.dictionary) == (3, 4.0, 1.5, 0.25, 0.2, "DICT_4X4_50")
    assert m.yaw == pytest.approx(math.pi)
    assert w.marker(4, "DICT_APRILTAG_36h11").id == 4
    with pytest.raises(KeyError):
        w.marker(4)


def test_marker_corners_are_in_opencv_order_around_the_centre_facing_its_yaw():
    m = Marker(0, 1.0, 2.0, 0.3, math.radians(30.0), 0.2)
    k = m.corners()
    assert k.mean(axis=0) == pytest.approx([1.0, 2.0, 0.3])
    assert np.linalg.norm(k[1] - k[0]) == pytest.approx(0.2)
    assert k[0, 2] == k[1, 2] > k[2, 2] == k[3, 2]  # top edge first
    # marker x (TL → TR) × marker y (BL → TL) is z, out of the face, along the normal
    n = np.cross(k[1] - k[0], k[0] - k[3])
    assert n / np.linalg.norm(n) == pytest.approx(m.normal)
    assert m.axes[:, 2] == pytest.approx(m.normal)
    assert np.linalg.det(m.axes) == pytest.approx(1.0)


def test_marker_dictionaries_match_opencv():
    cv2 = pytest.importorskip("cv2")
    for name, (bits, n_ids) in MARKER_DICTIONARIES.items():
        d = cv2.aruco.getPredefinedDictionary(getattr(cv2.aruco, name))
        assert (d.markerSize, len(d.bytesList)) == (bits, n_ids), name


@pytest.mark.parametrize("bad, message", [
    ({"id": 50}, r"id must be an integer in \[0, 49\]"),
    ({"id": -1}, "id must be"),
    ({"id": True}, "id must be"),
    ({"id": 1.0}, "id must be"),
    ({"position": [1.0, 2.0]}, "position must be"),
    ({"position": [1.0, 2.0, math.nan]}, "position must be"),
    ({"position": "here"}, "position must be"),
    ({"size_m": 0.0}, "size_m must be"),
    ({"size_m": 11.0}, "size_m must be"),
    ({"yaw_deg": math.inf}, "yaw_deg must be"),
    ({"dictionary": "DICT_3X3_9"}, "dictionary 'DICT_3X3_9' is not one of"),
    ({"colour": "red"}, r"unknown key\(s\) colour"),
])
def test_fail__marker(bad, message):
    with pytest.raises(ValueError, match=message):
        World.from_config({**FIELD, "markers": [{**MARKER, **bad}]})


def test_fail__markers_not_a_list_or_an_id_used_twice():
    with pytest.raises(ValueError, match="list of tables"):
        World.from_config({**FIELD, "markers": {"id": 1}})
    with pytest.raises(ValueError, match=r"markers\[1\]: id 3 \(DICT_4X4_50\) is used twice"):
        World.from_config({**FIELD, "markers": [MARKER, dict(MARKER)]})
    with pytest.raises(ValueError, match=r"markers\[0\] must be a table"):
        World.from_config({**FIELD, "markers": [3]})


# ---------------------------------------------------------------- radio paths through boxes (UWB NLOS)
def _one_box(**box):
    return World.from_config({"size_m": [6.0, 4.0], "boxes": [{"center": [3.0, 2.0], "size": [0.4, 0.4], **box}]})


def test_penetration_straight_through_a_box_is_its_width():
    assert _one_box().penetration_m([1.0, 2.0, 0.1], [5.0, 2.0, 0.1]) == pytest.approx(0.4)


def test_penetration_over_a_low_box_or_beside_it_is_zero():
    w = _one_box(height_m=0.5)
    assert w.penetration_m([1.0, 2.0, 0.1], [5.0, 2.0, 2.0]) == 0.0  # climbs over it
    assert w.penetration_m([1.0, 3.0, 0.1], [5.0, 3.0, 0.1]) == 0.0  # passes beside it


def test_penetration_of_a_diagonal_and_of_a_rotated_box():
    w = _one_box()
    assert w.penetration_m([2.0, 1.0, 0.1], [4.0, 3.0, 0.1]) == pytest.approx(0.4 * math.sqrt(2.0))
    turned = _one_box(yaw_deg=45.0)  # its diagonal now lies along x
    assert turned.penetration_m([1.0, 2.0, 0.1], [5.0, 2.0, 0.1]) == pytest.approx(0.4 * math.sqrt(2.0))


def test_penetration_partly_through_the_top_of_a_box():
    w = _one_box(height_m=0.5)
    # from z 0 at x=1 up to z 1 at x=5: inside where z <= 0.5, i.e. x <= 3, over the box's x in [2.8, 3.2]
    assert w.penetration_m([1.0, 2.0, 0.0], [5.0, 2.0, 1.0]) == pytest.approx(0.2 * math.hypot(4.0, 1.0) / 4.0)


def test_penetration_ends_inside_a_box():
    assert _one_box().penetration_m([1.0, 2.0, 0.1], [3.0, 2.0, 0.1]) == pytest.approx(0.2)
