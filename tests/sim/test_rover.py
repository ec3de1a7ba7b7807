"""sim.rover: the differential-drive rover's physics and sensors."""

from __future__ import annotations

import math

import msgspec
import numpy as np
import pytest

from sim.battery import open_circuit_v
from sim.rover import RangerParams, RoverParams, RoverSim, attitude_from_gradient, rotation_zyx
from sim.world import World

DT = 0.01
P = RoverParams().without_noise()
R, TRACK = P.wheel_radius_m, P.track_m
HALF_L, HALF_W = P.length_m / 2, P.width_m / 2


def field(**extra) -> World:
    return World.from_config({"size_m": [4.0, 3.0], **extra})


def rover(world: World | None = None, pose=(1.0, 1.5, 0.0), params: RoverParams = P, seed: int = 0) -> RoverSim:
    return RoverSim(params, world or field(), np.random.default_rng(seed), pose)


def run(r: RoverSim, seconds: float, left: float, right: float, dt: float = DT) -> None:
    for _ in range(round(seconds / dt)):
        r.step(dt, left, right)


def footprint_corners(r: RoverSim) -> np.ndarray:
    c, s = math.cos(r.yaw), math.sin(r.yaw)
    local = np.array([[HALF_L, HALF_W], [HALF_L, -HALF_W], [-HALF_L, -HALF_W], [-HALF_L, HALF_W]])
    return local @ np.array([[c, s], [-s, c]]) + [r.x, r.y]


# ---------------------------------------------------------------- driving
def test_straight_line_reaches_the_commanded_speed_and_covers_speed_times_time():
    r = rover(World.from_config({"size_m": [10.0, 3.0]}))
    run(r, 5.0, 10.0, 10.0)
    v = 10.0 * R  # 0.5 m/s
    assert r.linear_m_s == pytest.approx(v)
    assert r.angular_rad_s == pytest.approx(0.0)
    # a first-order lag of tau trails the ideal ramp by v·tau (the acceleration limit adds a little)
    assert r.x - 1.0 == pytest.approx(v * (5.0 - P.tau_s), abs=0.01)
    assert r.y == pytest.approx(1.5) and r.yaw == pytest.approx(0.0)
    assert r.sim_time_s == pytest.approx(5.0)


def test_driving_backwards_moves_west_when_facing_east():
    r = rover(pose=(3.0, 1.5, 0.0))
    run(r, 2.0, -10.0, -10.0)
    assert r.linear_m_s == pytest.approx(-0.5)
    assert r.x < 2.1


def test_heading_north_moves_north():
    r = rover(pose=(2.0, 0.5, math.pi / 2))
    run(r, 2.0, 10.0, 10.0)
    assert r.x == pytest.approx(2.0, abs=1e-9)
    assert r.y > 1.3


def test_turning_in_place_spins_at_r_dw_over_track_without_moving():
    r = rover(pose=(2.0, 1.5, 0.0))
    run(r, 1.0, -5.0, 5.0)
    assert r.angular_rad_s == pytest.approx(R * 10.0 / TRACK, rel=1e-4)  # 1.667 rad/s, counter-clockwise
    assert r.linear_m_s == pytest.approx(0.0)
    assert (r.x, r.y) == pytest.approx((2.0, 1.5), abs=1e-12)
    assert r.yaw == pytest.approx(R * 10.0 / TRACK * (1.0 - P.tau_s), abs=0.01)


def test_yaw_wraps_to_plus_minus_pi():
    r = rover(pose=(2.0, 1.5, 0.0))
    run(r, 5.0, 5.0, -5.0)
    assert -math.pi <= r.yaw < math.pi


def test_a_constant_arc_ends_on_the_circle():
    r = rover(World.from_config({"size_m": [10.0, 10.0]}), pose=(5.0, 5.0, 0.0))
    run(r, 1.0, 8.0, 12.0)  # let the wheels settle
    x0, y0, yaw0 = r.pose
    radius = r.linear_m_s / r.angular_rad_s
    cx, cy = x0 - radius * math.sin(yaw0), y0 + radius * math.cos(yaw0)
    run(r, 2.0, 8.0, 12.0)
    assert math.hypot(r.x - cx, r.y - cy) == pytest.approx(radius, rel=1e-6)


def test_one_big_step_equals_many_small_ones():
    a, b = rover(), rover()
    a.step(0.2, 10.0, 7.0)
    for _ in range(20):
        b.step(0.01, 10.0, 7.0)
    assert a.pose == pytest.approx(b.pose, abs=1e-12)
    assert a.wheel_speeds == pytest.approx(b.wheel_speeds, abs=1e-12)


def test_commands_are_clipped_to_the_wheel_speed_limit():
    r = rover(World.from_config({"size_m": [20.0, 3.0]}))
    run(r, 2.0, 1000.0, 1000.0)
    assert r.command == (P.max_wheel_speed_rad_s, P.max_wheel_speed_rad_s)
    assert r.wheel_speeds == pytest.approx((P.max_wheel_speed_rad_s,) * 2)


@pytest.mark.parametrize("dt", [-0.01, math.nan, math.inf])
def test_fail__bad_dt_is_refused(dt):
    with pytest.raises(ValueError):
        rover().step(dt, 0.0, 0.0)


def test_fail__non_finite_command_is_refused():
    with pytest.raises(ValueError):
        rover().step(DT, math.nan, 0.0)


def test_zero_dt_changes_nothing():
    r = rover()
    r.step(0.0, 10.0, 10.0)
    assert r.pose == (1.0, 1.5, 0.0) and r.sim_time_s == 0.0


# ---------------------------------------------------------------- motors
def test_first_order_response_reaches_63_percent_at_tau():
    r = rover()
    cmd = 5.0  # 5 / 0.08 = 62.5 rad/s² at the start: under the 100 rad/s² limit
    run(r, P.tau_s, cmd, cmd)
    assert r.wheel_speeds[0] == pytest.approx(cmd * (1.0 - math.exp(-1.0)), rel=1e-9)


def test_acceleration_limit_is_respected():
    r = rover(World.from_config({"size_m": [20.0, 3.0]}))
    prev = r.wheel_speeds
    limited = False
    for _ in range(100):
        r.step(DT, 20.0, -20.0)
        now = r.wheel_speeds
        for a, b in zip(prev, now):
            dv = abs(b - a)
            assert dv <= P.max_wheel_accel_rad_s2 * DT + 1e-9
            limited |= dv >= P.max_wheel_accel_rad_s2 * DT - 1e-9
        prev = now
    assert limited  # the limit was the binding constraint at some point


def test_motor_current_grows_with_speed_and_is_zero_at_rest():
    r = rover(World.from_config({"size_m": [20.0, 3.0]}), pose=(1.0, 1.5, 0.0))
    r.step(DT, 0.0, 0.0)
    assert r.motor_currents == (0.0, 0.0)
    run(r, 2.0, 5.0, 5.0)
    slow = r.motor_currents[0]
    run(r, 2.0, 15.0, 15.0)
    fast = r.motor_currents[0]
    assert slow == pytest.approx(P.motor_i0_a + P.motor_k_speed_a * 5.0, rel=1e-3)
    assert fast == pytest.approx(P.motor_i0_a + P.motor_k_speed_a * 15.0, rel=1e-3)


# ---------------------------------------------------------------- encoders
def test_encoder_ticks_match_the_distance_rolled():
    r = rover(World.from_config({"size_m": [10.0, 3.0]}))
    run(r, 3.0, 10.0, 10.0)
    distance = r.x - 1.0
    per_tick = 2.0 * math.pi * R / P.ticks_per_rev
    for ticks in r.encoder_ticks:
        assert isinstance(ticks, int)
        assert ticks * per_tick == pytest.approx(distance, abs=per_tick)


def test_encoder_ticks_are_signed_and_cumulative():
    r = rover(pose=(2.0, 1.5, 0.0))
    run(r, 1.0, -5.0, 5.0)
    left, right = r.encoder_ticks
    assert left < 0 < right
    assert left == pytest.approx(-right, abs=1)
    run(r, 2.0, 5.0, -5.0)  # back past zero
    left2, right2 = r.encoder_ticks
    assert left2 > 0 > right2


# ---------------------------------------------------------------- rangers
def test_ranger_reads_the_distance_to_the_wall_exactly_without_noise():
    r = rover(pose=(1.0, 1.5, 0.0))
    r.step(DT, 0.0, 0.0)
    assert r.ranges["front"] == pytest.approx(4.0 - 1.0 - 0.15)
    assert r.range_valid["front"]


def test_ranger_follows_the_heading():
    r = rover(pose=(1.0, 1.5, math.pi))
    r.step(DT, 0.0, 0.0)
    assert r.ranges["front"] == pytest.approx(1.0 - 0.15)


def test_ranger_cone_sees_an_obstacle_off_axis():
    # a box 1 m ahead, 0.2 m to the side: outside the axis, inside the ±15° cone
    world = field(boxes=[{"center": [2.3, 1.75], "size": [0.2, 0.2]}])
    r = rover(world, pose=(1.0, 1.5, 0.0))
    r.step(DT, 0.0, 0.0)
    assert world.raycast((1.15, 1.5), 0.0, 4.0) == pytest.approx(4.0 - 1.15)  # the axis misses it
    assert r.ranges["front"] < 1.3


def test_side_ranger_uses_its_mount_pose():
    params = msgspec.structs.replace(P, rangers=(RangerParams("left", x_m=0.0, y_m=0.125, yaw_rad=math.pi / 2, noise_m=0.0),))
    r = rover(pose=(1.0, 1.0, 0.0), params=params)
    r.step(DT, 0.0, 0.0)
    assert r.ranges == {"left": pytest.approx(3.0 - 1.0 - 0.125)}


def test_ranger_out_of_range_reports_max_range_and_invalid():
    r = rover(World.from_config({"size_m": [6.0, 4.0]}), pose=(0.5, 2.0, 0.0))
    r.step(DT, 0.0, 0.0)
    assert r.ranges["front"] == P.rangers[0].max_range_m
    assert not r.range_valid["front"]


def test_ranger_too_close_reports_min_range_and_invalid():
    r = rover(pose=(4.0 - HALF_L - 0.01, 1.5, 0.0))  # sensor 1 cm from the wall: under the 2 cm minimum
    r.step(DT, 0.0, 0.0)
    assert r.ranges["front"] == P.rangers[0].min_range_m
    assert not r.range_valid["front"]


def test_rays_are_cast_again_only_when_the_pose_changes(monkeypatch):
    r = rover(pose=(1.0, 1.5, 0.0))
    casts = []
    real = r._raycast
    monkeypatch.setattr(r, "_raycast", lambda: casts.append(1) or real())
    for _ in range(50):  # at rest: the distances of the last cast
        r.step(DT, 0.0, 0.0)
    assert casts == [] and r.ranges["front"] == pytest.approx(4.0 - 1.0 - 0.15)
    r.teleport(2.0, 1.5, 0.0)
    r.step(DT, 0.0, 0.0)
    assert len(casts) == 1 and r.ranges["front"] == pytest.approx(4.0 - 2.0 - 0.15)
    run(r, 0.5, 10.0, 10.0)  # driving: a cast every step, and the range shrinks as the wall comes nearer
    assert len(casts) == 1 + 50 and r.ranges["front"] < 4.0 - 2.0 - 0.15 - 0.1


def test_ranger_noise_has_the_configured_sigma_and_stays_in_range():
    params = msgspec.structs.replace(P, rangers=(RangerParams("front", noise_m=0.01),))
    r = rover(params=params)
    samples = []
    for _ in range(2000):
        r.step(0.0, 0.0, 0.0)
        samples.append(r.ranges["front"])
    samples = np.array(samples)
    assert samples.mean() == pytest.approx(2.85, abs=0.002)
    assert samples.std() == pytest.approx(0.01, rel=0.1)
    assert ((samples >= 0.02) & (samples <= 4.0)).all()


# ---------------------------------------------------------------- battery
def test_battery_sags_with_current_and_recovers_at_rest():
    r = rover(World.from_config({"size_m": [20.0, 3.0]}))
    r.step(DT, 0.0, 0.0)
    rest_v = r.battery_v
    run(r, 2.0, 20.0, 20.0)
    drive_v = r.battery_v
    total_a = P.battery.idle_current_a + sum(r.motor_currents)
    assert drive_v < rest_v - 0.1
    assert drive_v == pytest.approx(open_circuit_v(P.battery, r.soc) - total_a * P.battery.internal_resistance_ohm)
    run(r, 2.0, 0.0, 0.0)
    assert r.battery_v > drive_v + 0.1


def test_state_of_charge_integrates_the_current():
    r = rover()
    soc0 = r.soc
    run(r, 36.0, 0.0, 0.0)  # idle draw only: 0.35 A × 36 s = 0.0035 Ah
    assert soc0 - r.soc == pytest.approx(P.battery.idle_current_a * 36.0 / 3600.0 / P.battery.capacity_ah)


def test_forced_battery_voltage_is_reported_exactly_and_released():
    r = rover(params=RoverParams())  # with noise
    r.battery.force_voltage(10.0)
    r.step(DT, 0.0, 0.0)
    assert r.battery_v == 10.0
    r.battery.force_voltage(None)
    r.step(DT, 0.0, 0.0)
    assert r.battery_v > 12.0


# ---------------------------------------------------------------- determinism and speed
def drive_pattern(seed: int) -> list:
    r = rover(params=RoverParams(), seed=seed)
    out = []
    for i in range(300):
        r.step(DT, 8.0 + 4.0 * math.sin(i / 30.0), 8.0)
        out.append(r.reading())
    return out


def test_same_seed_same_run():
    assert drive_pattern(7) == drive_pattern(7)


def test_another_seed_changes_only_the_noise():
    a, b = drive_pattern(7), drive_pattern(8)
    assert a[-1].ranges != b[-1].ranges
    assert (a[-1].x, a[-1].y, a[-1].yaw) == (b[-1].x, b[-1].y, b[-1].yaw)


def test_a_minute_of_sim_time_runs_without_sleeping():
    r = rover(World.from_config({"size_m": [6.0, 4.0], "boxes": [{"center": [4.5, 1.0], "size": [0.4, 0.4]}]}),
              pose=(1.0, 2.0, 0.0), params=RoverParams())
    for i in range(6000):
        r.step(DT, 12.0, 10.0 + 3.0 * math.sin(i / 200.0))
    assert r.sim_time_s == pytest.approx(60.0)
    assert not any(r.world.inside_obstacle(x, y) for x, y in footprint_corners(r))


# ---------------------------------------------------------------- collisions
def test_driving_into_a_wall_stops_at_contact_and_never_passes_through():
    r = rover(pose=(2.5, 1.5, 0.0))
    for _ in range(500):
        r.step(DT, 20.0, 20.0)
        assert r.x + HALF_L <= 4.0 + 1e-9
    assert r.x + HALF_L == pytest.approx(4.0, abs=1e-5)
    assert r.collided and r.collisions == 1
    assert r.contact_point == pytest.approx((4.0, 1.5), abs=1e-3)
    assert r.wheel_speeds == (0.0, 0.0)
    # pushing on: the motors stall
    assert r.motor_currents == pytest.approx((P.motor_stall_a, P.motor_stall_a))


def test_a_contact_is_counted_once_and_clears_when_backing_away():
    r = rover(pose=(3.5, 1.5, 0.0))
    run(r, 2.0, 10.0, 10.0)
    assert r.collided and r.collisions == 1
    run(r, 1.0, 0.0, 0.0)  # resting against the wall is still the same contact
    assert r.collided and r.collisions == 1
    run(r, 1.0, -10.0, -10.0)
    assert not r.collided and r.collisions == 1
    run(r, 3.0, 10.0, 10.0)
    assert r.collided and r.collisions == 2


def test_a_fast_large_step_does_not_tunnel_through_a_thin_wall():
    world = field(walls=[{"from": [2.5, 0.0], "to": [2.5, 3.0]}])
    r = rover(world, pose=(1.0, 1.5, 0.0))
    for _ in range(20):
        r.step(0.25, 20.0, 20.0)  # 0.25 m per step at full speed
    assert r.x + HALF_L <= 2.5 + 1e-9 and r.collided


def test_turning_against_a_box_stops_the_corner_at_the_face():
    world = field(boxes=[{"center": [2.0, 1.5], "size": [0.4, 0.4]}])
    r = rover(world, pose=(2.0 - 0.2 - HALF_L - 0.01, 1.5, 0.0))
    run(r, 1.0, 5.0, -5.0)  # spinning: a front corner swings into the box
    assert r.collided
    assert not any(world.inside_obstacle(x, y) for x, y in footprint_corners(r))


def test_fail__start_or_teleport_into_an_obstacle():
    world = field(boxes=[{"center": [2.0, 1.5], "size": [0.4, 0.4]}])
    with pytest.raises(ValueError):
        rover(world, pose=(2.0, 1.5, 0.0))
    with pytest.raises(ValueError):
        rover(world, pose=(0.1, 1.5, 0.0))  # the back pokes through the west wall
    r = rover(world, pose=(1.0, 1.5, 0.0))
    with pytest.raises(ValueError):
        r.teleport(2.0 - 0.2 - HALF_L + 0.01, 1.5, 0.0)
    assert r.pose == (1.0, 1.5, 0.0)


def test_teleport_moves_and_stops_the_rover():
    r = rover()
    run(r, 1.0, 10.0, 10.0)
    r.teleport(2.0, 2.0, math.pi / 2)
    assert r.pose == (2.0, 2.0, math.pi / 2) and r.wheel_speeds == (0.0, 0.0)


# ---------------------------------------------------------------- attitude on ramps
RAMP = {"ramps": [{"center": [2.0, 1.5], "size": [1.0, 1.0], "slope_deg": 10}]}


def test_facing_up_a_ramp_is_nose_up_which_is_negative_pitch():
    r = rover(field(**RAMP), pose=(2.0, 1.5, 0.0))
    assert r.pitch == pytest.approx(-math.radians(10))
    assert r.roll == pytest.approx(0.0)


def test_facing_down_a_ramp_is_positive_pitch():
    r = rover(field(**RAMP), pose=(2.0, 1.5, math.pi))
    assert r.pitch == pytest.approx(math.radians(10))


def test_ramp_rising_to_the_left_is_positive_roll():
    r = rover(field(**RAMP), pose=(2.0, 1.5, -math.pi / 2))  # facing south: east (uphill) is on the left
    assert r.roll == pytest.approx(math.radians(10))
    assert r.pitch == pytest.approx(0.0, abs=1e-12)


def test_flat_ground_is_level():
    r = rover(field(**RAMP), pose=(0.5, 0.5, 0.3))
    assert (r.roll, r.pitch) == (0.0, 0.0)


def test_climbing_a_ramp_raises_z_by_the_slope():
    r = rover(field(**RAMP), pose=(1.0, 1.5, 0.0))
    while r.x < 1.9:
        r.step(DT, 5.0, 5.0)
    on_ramp = r.x - 1.5
    assert r.z == pytest.approx(on_ramp * math.tan(math.radians(10)), abs=0.002)
    # on the slope the wheels roll further than the horizontal advance
    per_tick = 2.0 * math.pi * R / P.ticks_per_rev
    rolled = r.encoder_ticks[0] * per_tick
    assert rolled > (r.x - 1.0) + 0.5 * on_ramp * (1.0 / math.cos(math.radians(10)) - 1.0)


def test_pose3d_body_z_is_the_ground_normal():
    r = rover(field(ramps=[{"center": [2.0, 1.5], "size": [1.0, 1.0], "yaw_deg": 30, "slope_deg": 8,
                            "cross_slope_deg": 4}]), pose=(2.0, 1.5, 1.1))
    position, rot = r.pose3d()
    gx, gy = r.world.ground_gradient(2.0, 1.5)
    normal = np.array([-gx, -gy, 1.0]) / math.sqrt(1 + gx * gx + gy * gy)
    assert rot @ [0.0, 0.0, 1.0] == pytest.approx(normal)
    assert rot.T @ rot == pytest.approx(np.eye(3))
    assert position.tolist() == [2.0, 1.5, 0.0]


@pytest.mark.parametrize("yaw", [0.0, 0.4, 2.0, -2.5])
def test_attitude_from_gradient_puts_body_x_and_y_on_the_ground_plane(yaw):
    gx, gy = 0.15, -0.08
    roll, pitch = attitude_from_gradient(gx, gy, yaw)
    rot = rotation_zyx(roll, pitch, yaw)
    for axis in (rot[:, 0], rot[:, 1]):
        assert axis[2] == pytest.approx(gx * axis[0] + gy * axis[1])  # tangent to z = gx·x + gy·y
    assert math.atan2(rot[1, 0], rot[0, 0]) == pytest.approx(yaw)  # the heading is kept


# ---------------------------------------------------------------- configuration
def test_params_from_config_converts_degrees_and_rejects_unknown_keys():
    p = RoverParams.from_config({"rangers": [{"name": "left", "yaw_deg": 90, "half_angle_deg": 10}]})
    assert p.rangers[0].yaw_rad == pytest.approx(math.pi / 2)
    assert p.rangers[0].half_angle_rad == pytest.approx(math.radians(10))
    with pytest.raises(ValueError, match="trak_m"):
        RoverParams.from_config({"trak_m": 0.3})
    with pytest.raises(ValueError, match="capacity"):
        RoverParams.from_config({"battery": {"capacity": 2.0}})


@pytest.mark.parametrize(
    "table, field",
    [({"wheel_radius_m": 0.0}, "wheel_radius_m"), ({"tau_s": -1.0}, "tau_s"), ({"ticks_per_rev": 0}, "ticks_per_rev"),
     ({"contact_skin_m": -0.1}, "contact_skin_m"), ({"battery": {"initial_soc": 1.5}}, "battery.initial_soc"),
     ({"rangers": [{"name": "a"}, {"name": "a"}]}, "unique")],
)
def test_fail__invalid_params(table, field):
    """Ranges are Meta constraints on the struct that owns them, checked on conversion; the message names the field."""
    with pytest.raises(ValueError, match=field):
        RoverParams.from_config(table)


@pytest.mark.parametrize(
    "kwargs",
    [{"name": "Front"}, {"name": "front", "min_range_m": 5.0}, {"name": "front", "half_angle_rad": 2.0}],
)
def test_fail__invalid_ranger(kwargs):
    with pytest.raises(ValueError):
        RangerParams.from_config(kwargs)


# ---------------------------------------------------------------- wheel slip (issue 23: the field's grass)
def _turned(params: RoverParams, seconds: float = 3.0, seed: int = 0) -> tuple[float, float]:
    """(the body's turn, the encoders' turn) in rad after turning in place."""
    r = rover(params=params, seed=seed)
    start = r.yaw
    k = 2.0 * math.pi / params.ticks_per_rev * params.wheel_radius_m / params.track_m
    turned = 0.0
    last = r.yaw
    for _ in range(round(seconds / DT)):
        r.step(DT, -5.0, 5.0)
        turned += (r.yaw - last + math.pi) % (2 * math.pi) - math.pi
        last = r.yaw
    el, er = r.encoder_ticks
    assert start == pytest.approx(0.0)
    return turned, (er - el) * k


def test_without_slip_the_body_turns_what_the_encoders_count():
    body, encoders = _turned(P)
    assert body == pytest.approx(encoders, abs=0.002)


def test_a_mean_turn_slip_loses_that_fraction_of_the_turn():
    body, encoders = _turned(msgspec.structs.replace(P, slip_turn=0.05))
    assert body / encoders == pytest.approx(0.95, abs=0.001)


def test_linear_slip_shortens_the_run_but_not_the_encoder_count():
    r = rover(params=msgspec.structs.replace(P, slip_linear=0.02), pose=(1.0, 1.5, 0.0))
    run(r, 2.0, 8.0, 8.0)
    el, er = r.encoder_ticks
    wheel = 0.5 * (el + er) * 2.0 * math.pi / P.ticks_per_rev * P.wheel_radius_m
    assert (r.x - 1.0) / wheel == pytest.approx(0.98, abs=0.002)


def test_random_slip_varies_between_turns_and_is_seeded():
    params = msgspec.structs.replace(P, slip_turn=0.02, slip_turn_sigma=0.02, slip_tau_s=0.5)
    a, b = _turned(params, seed=1), _turned(params, seed=1)
    c = _turned(params, seed=2)
    assert a == b and a != c
    assert 0.9 < a[0] / a[1] < 1.0
