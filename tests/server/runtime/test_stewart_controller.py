"""The Stewart controller (issue 13 items 5 and 7): pose targets refused out of the stroke (at the target and
on the way there) or at a singular pose, saturation reported when the profile saturates, legs never commanded
outside the stroke, and — on the real control loop with the real simulated platform — the stroke rules."""

from __future__ import annotations

import math

import numpy as np
import pytest

from robotics.kinematics.stewart import StewartPlatform
from server.errors import ValidationError
from server.runtime.controllers.stewart import StewartController
from server.runtime.supervisor import OutputMode
from server.runtime_api.params import Hold, StewartFollow, StewartPose
from tests.server.runtime.test_scara_controller import Ticker, run

PLATFORM = StewartPlatform.symmetric()
HOME_Z = float(PLATFORM.home[0][2])


def controller(**kw) -> StewartController:
    return StewartController(PLATFORM, margin_m=0.002, **kw)


OK = [
    StewartPose(z_m=HOME_Z),
    StewartPose(z_m=0.55, x_m=0.05, roll_rad=0.2, yaw_rad=-0.3),
    StewartFollow(z_m=0.5),
    Hold(),
]

FAIL = [
    (StewartPose(z_m=0.8), "out_of_stroke", "leg 1 at 0.8661 m is 118.1 mm above its maximum 0.7480 m"),
    (StewartPose(z_m=0.3), "out_of_stroke", "below its minimum 0.4520 m"),
    (StewartPose(z_m=0.5, roll_rad=1.2), "out_of_stroke", "outside their stroke"),
    (StewartPose(z_m=5.0), "beyond_limits", "z_m=5 is beyond the limits"),
    (StewartPose(z_m=0.5, pitch_rad=2.0), "beyond_limits", "pitch_rad=2"),
    (StewartPose(z_m=math.inf), "not_finite", "z_m must be a finite number"),
]


@pytest.mark.parametrize("sp", OK, ids=[type(s).__name__ for s in OK])
def test_ok__poses_within_the_stroke(sp) -> None:
    controller().check(sp)


@pytest.mark.parametrize("sp, code, text", FAIL, ids=[f"{code}-{i}" for i, (_, code, _t) in enumerate(FAIL)])
def test_fail__poses_refused_with_the_legs_named(sp, code: str, text: str) -> None:
    with pytest.raises(ValidationError) as err:
        controller().check(sp)
    assert err.value.code == code and text in err.value.message


def test_fail__a_target_whose_straight_way_leaves_the_stroke() -> None:
    c = controller()
    # found by a random search: both ends low and tilted, their mean beyond the stroke (not convex)
    a = StewartPose(x_m=0.081, y_m=0.132, z_m=0.445, roll_rad=0.043, pitch_rad=0.065, yaw_rad=-0.084)
    b = StewartPose(x_m=-0.187, y_m=-0.091, z_m=0.452, roll_rad=-0.561, pitch_rad=0.488, yaw_rad=0.207)
    for sp in (a, b):  # each end is within the stroke on its own
        c.ramp.sync([getattr(sp, k) for k in c.axes])
        c.check(sp)
    with pytest.raises(ValidationError, match=r"leaves the stroke \d+ % of the way") as err:
        c.check(a)  # from b
    assert err.value.code == "out_of_stroke"


def test_fail__a_singular_pose() -> None:
    # a platform whose legs are all vertical: no stiffness against a twist (singular Jacobian)
    ring = np.array([[0.3 * math.cos(a), 0.3 * math.sin(a), 0.0] for a in np.radians([0, 60, 120, 180, 240, 300])])
    c = StewartController(StewartPlatform(ring, ring, 0.4, 0.8))
    with pytest.raises(ValidationError, match="singular") as err:
        c.check(StewartPose(z_m=0.6))
    assert err.value.code == "singular"


def test_pose_target_is_reached_and_the_legs_are_its_inverse_kinematics() -> None:
    c = controller()
    target = StewartPose(z_m=0.55, x_m=0.03, pitch_rad=-0.1, yaw_rad=0.2)
    cmd = run(c, target, 300)
    pose = np.array([getattr(target, k) for k in c.axes])
    assert c.ramp.pos == pytest.approx(pose, abs=1e-12)
    legs = PLATFORM.leg_lengths(pose[:3], pose[3:])
    assert [cmd[f"leg{i}_target_m"] for i in range(1, 7)] == pytest.approx(legs.tolist(), abs=1e-12)
    assert c.saturated_legs() == () and c.take_events() == []


def test_saturating_profile_accepts_saturates_and_reports() -> None:
    c = controller(saturate=True)
    c.check(StewartPose(z_m=0.8))  # accepted
    for _ in range(400):
        cmd = c.update(0.01, OutputMode.TRACK, StewartPose(z_m=0.8))
        assert all(0.452 - 1e-12 <= v <= 0.748 + 1e-12 for v in cmd.values())  # never out of the soft stroke
    assert c.saturated_legs() == (1, 2, 3, 4, 5, 6)
    assert c.command_json()["saturated_legs"] == [1, 2, 3, 4, 5, 6] and c.command_json()["saturated_ticks"] > 0
    events = c.take_events()
    assert [e[0] for e in events] == ["saturation"] and events[0][3]["legs"] == [1, 2, 3, 4, 5, 6]
    assert "above its maximum 0.7480 m" in events[0][1]
    run(c, StewartPose(z_m=HOME_Z), 400)
    assert [e[0] for e in c.take_events()] == ["saturation_end"] and c.saturated_legs() == ()


def test_limit_rules_cover_each_leg_and_the_pose() -> None:
    names = {r.name for r in controller().limit_rules({f"leg{i}_saturated" for i in range(1, 7)}
                                                      | {f"leg{i}_m" for i in range(1, 7)} | {"pose_valid"})}
    assert {"leg1_at_stroke_end", "leg6_below_stroke", "leg3_above_stroke", "pose_lost"} <= names
    assert len(names) == 19


STEWART = {"robot": {"profile": "stewart"}, "driver": {"name": "sim-stewart"}, "safety": {"command_timeout_s": 60.0}}


def test_on_the_loop_a_refused_pose_changes_nothing_and_an_accepted_one_is_reached() -> None:
    t = Ticker(STEWART)
    t.loop.start_robot()
    t.loop.set_setpoint(StewartPose(z_m=0.55, roll_rad=0.1))
    t.tick(5)
    before = t.state()
    with pytest.raises(ValidationError, match="out_of_stroke|outside their stroke"):
        t.loop.set_setpoint(StewartPose(z_m=0.9))
    assert t.state() == before
    t.tick(300)
    v = t.loop.snapshot()["values"]
    assert (v["z_m"], v["roll_rad"]) == pytest.approx((0.55, 0.1), abs=1e-6) and v["pose_valid"] == 1.0


def test_on_the_loop_saturation_is_an_event_and_in_the_snapshot() -> None:
    t = Ticker({**STEWART, "robot": {"profile": "stewart", "saturate": True}})
    t.loop.start_robot()
    t.loop.set_setpoint(StewartPose(z_m=0.8))
    t.tick(150)
    snap = t.loop.snapshot()
    assert snap["state"] == "running" and snap["command"]["saturated_legs"] == [1, 2, 3, 4, 5, 6]
    assert snap["values"]["z_m"] == pytest.approx(float(PLATFORM.forward([0.748] * 6)[0][2]), abs=1e-6)
    sat = [e for e in t.loop.events if e.trigger == "saturation"]
    assert len(sat) == 1 and sat[0].kind == "warning" and sat[0].values["legs"] == [1, 2, 3, 4, 5, 6]


def test_on_the_loop_a_leg_at_its_stroke_end_is_an_estop() -> None:
    # no margin: the saturated legs run onto their end stops, which the stroke rules take for a breach
    t = Ticker({**STEWART, "robot": {"profile": "stewart", "saturate": True, "stroke_margin_m": 0.0}})
    t.loop.start_robot()
    t.loop.set_setpoint(StewartPose(z_m=0.8))
    t.tick(200)
    snap = t.loop.snapshot()
    assert snap["state"] == "estop" and snap["cause"]["rule"].endswith("_at_stroke_end")


def test_the_governor_caps_the_pose_rate() -> None:
    """Issue 20 §3: the platform's pose rate under the latency governor's cap (the ramp's axes are the pose's)."""
    free, capped = controller(), controller()
    capped.govern(0.25)
    target = StewartPose(z_m=HOME_Z + 0.05)
    peaks = []
    for c in (free, capped):
        peak = 0.0
        for _ in range(100):
            c.update(0.01, OutputMode.TRACK, target)
            peak = max(peak, abs(float(c.ramp.vel[2])))  # z
        peaks.append(peak)
    v_z = float(capped.ramp.v_max[2])
    assert math.isclose(peaks[1], 0.25 * v_z, rel_tol=1e-6) and peaks[0] > 0.5 * v_z, (peaks, v_z)
