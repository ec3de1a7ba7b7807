"""The SCARA controller (issue 13 items 5 and 7): its checks as ok/fail tables, its reference ramp inside the
soft limits, the tool jog at the singular band, and — on the real control loop with the real simulated arm,
ticks driven by hand — refusals that change nothing and the joint-limit rules that e-stop."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from robotics.kinematics.scara import Scara
from server.config import ConfigError, load_config
from server.errors import ValidationError
from server.runtime.controllers.scara import ScaraController
from server.runtime.robot import Robot
from server.runtime.supervisor import OutputMode, Refused
from server.runtime_api.params import Hold, ScaraFollow, ScaraJog, ScaraJoints, ScaraTool, ScaraToolJog

LIMITS = (np.radians([-170.0, -150.0]), np.radians([170.0, 150.0]))
MARGIN = math.radians(2.0)
BEHIND = Scara(0.3, 0.2).forward((math.radians(175.0), math.radians(60.0)))


def controller(**kw) -> ScaraController:
    return ScaraController(Scara(0.3, 0.2, *LIMITS), (2.0, 3.0), (10.0, 15.0), margin_rad=MARGIN, **kw)


def run(c: ScaraController, sp, ticks: int, dt: float = 0.01, mode: OutputMode = OutputMode.TRACK) -> dict:
    cmd = {}
    for _ in range(ticks):
        cmd = c.update(dt, mode, sp)
    return cmd


# ---------------------------------------------------------------------- checks
OK = [
    ScaraJoints(q1_rad=0.5, q2_rad=-1.0),
    ScaraJoints(q1_rad=LIMITS[1][0] - MARGIN, q2_rad=0.0),  # exactly on the soft limit
    ScaraJog(q1_rad_s=2.0, q2_rad_s=-3.0),
    ScaraTool(x_m=0.3, y_m=0.2, elbow=1),
    ScaraTool(x_m=0.3, y_m=0.2, elbow=-1),
    ScaraTool(x_m=0.5, y_m=0.0),  # full stretch: a position target may be singular
    ScaraFollow(q1_rad=0.1, q2_rad=0.2),
    ScaraToolJog(),  # zero: asks for nothing
    Hold(),
]

FAIL = [
    (ScaraJoints(q1_rad=3.0, q2_rad=0.0), "beyond_limits", "q1_rad=3 (171.9°) is beyond the limits"),
    (ScaraJoints(q1_rad=0.0, q2_rad=-2.6), "beyond_limits", "q2_rad=-2.6"),
    (ScaraJoints(q1_rad=math.nan, q2_rad=0.0), "not_finite", "q1_rad must be a finite number"),
    (ScaraJog(q1_rad_s=2.5), "beyond_limits", "q1_rad_s=2.5"),
    (ScaraTool(x_m=0.6, y_m=0.0), "unreachable", "0.6 m from the base, outside the reach [0.1, 0.5] m"),
    (ScaraTool(x_m=0.05, y_m=0.0), "unreachable", "outside the reach"),
    # q1 = 175° with the elbow up is beyond the soft ±168°; the other elbow reaches the point
    (ScaraTool(x_m=BEHIND[0], y_m=BEHIND[1], elbow=1), "beyond_limits", "elbow=-1 reaches it"),
    (ScaraToolJog(vx_m_s=0.3), "beyond_limits", "tool speed"),
    (ScaraToolJog(vx_m_s=0.1), "singular", "the arm is stretched (q2 = 0.0°"),
]


@pytest.mark.parametrize("sp", OK, ids=[type(s).__name__ for s in OK])
def test_ok__setpoints_within_the_arm(sp) -> None:
    c = controller()
    c.ramp.sync((0.0, 1.0))  # elbow bent: a tool jog is defined
    c.check(sp)


@pytest.mark.parametrize("sp, code, text", FAIL, ids=[f"{type(s).__name__}-{code}" for s, code, _ in FAIL])
def test_fail__setpoints_refused_with_their_reason(sp, code: str, text: str) -> None:
    c = controller()  # the reference at (0, 0): stretched
    with pytest.raises(ValidationError) as err:
        c.check(sp)
    assert err.value.code == code and err.value.status == 422
    assert text in err.value.message


def test_tool_jog_is_refused_folded_too_and_allowed_once_bent() -> None:
    c = ScaraController(Scara(0.3, 0.2, (-3.0, -3.13), (3.0, 3.13)))
    c.ramp.sync((0.0, math.radians(178.0)))
    with pytest.raises(ValidationError, match="folded"):
        c.check(ScaraToolJog(vy_m_s=0.05))
    c.ramp.sync((0.0, math.radians(10.0)))
    c.check(ScaraToolJog(vy_m_s=0.05))


# ---------------------------------------------------------------------- the reference
def test_joint_target_is_reached_within_the_speed_limits() -> None:
    c = controller()
    prev = c.ramp.pos.copy()
    for _ in range(400):
        cmd = c.update(0.01, OutputMode.TRACK, ScaraJoints(q1_rad=1.0, q2_rad=-2.0))
        step = np.abs(c.ramp.pos - prev)
        assert np.all(step <= np.array([2.0, 3.0]) * 0.01 + 1e-12)
        prev = c.ramp.pos.copy()
    assert cmd == pytest.approx({"q1_target_rad": 1.0, "q2_target_rad": -2.0}, abs=1e-12)
    assert c.stopped


def test_tool_target_puts_the_tool_there_with_the_chosen_elbow() -> None:
    c = controller()
    for elbow in (1, -1):
        cmd = run(c, ScaraTool(x_m=0.25, y_m=0.2, elbow=elbow), 400)
        q = (cmd["q1_target_rad"], cmd["q2_target_rad"])
        assert c.arm.forward(q) == pytest.approx((0.25, 0.2), abs=1e-9)
        assert np.sign(q[1]) == elbow


def test_jog_brakes_on_the_soft_limit_and_never_passes_it() -> None:
    c = controller()
    hi = LIMITS[1][0] - MARGIN
    for _ in range(500):
        cmd = c.update(0.01, OutputMode.TRACK, ScaraJog(q1_rad_s=2.0))
        assert cmd["q1_target_rad"] <= hi + 1e-12
    assert cmd["q1_target_rad"] == pytest.approx(hi, abs=1e-9) and c.ramp.vel[0] == 0.0


def test_follow_never_leaves_the_soft_limits_nor_outruns_the_speed() -> None:
    c = controller()
    cmd = c.update(0.01, OutputMode.TRACK, ScaraFollow(q1_rad=3.1, q2_rad=0.0))
    assert cmd["q1_target_rad"] == pytest.approx(0.02)  # 2 rad/s for 10 ms
    run(c, ScaraFollow(q1_rad=3.1, q2_rad=0.0), 300)
    assert c.ramp.pos[0] == pytest.approx(LIMITS[1][0] - MARGIN)


def test_tool_jog_moves_the_tool_straight_then_stops_at_the_singular_band_with_an_event() -> None:
    c = controller()
    c.ramp.sync((0.3, 1.2))
    x0, y0 = c.arm.forward(c.ramp.pos)
    run(c, ScaraToolJog(vx_m_s=0.05, vy_m_s=0.0), 20)
    x1, y1 = c.arm.forward(c.ramp.pos)
    assert x1 > x0 and y1 == pytest.approx(y0, abs=2e-4)  # along x (the ramp-up bends it a little)
    assert c.take_events() == []
    jog = ScaraToolJog(vx_m_s=0.2, vy_m_s=0.0)  # outward: the arm stretches toward q2 = 0
    run(c, jog, 600)
    assert c.ramp.pos[1] >= math.radians(5.0) - 1e-9 and c.stopped
    events = c.take_events()
    assert [e[0] for e in events] == ["tool_jog_stopped"] and "singular band" in events[0][1]


def test_controlled_stop_decelerates_to_rest_and_a_cut_follows_the_measurement() -> None:
    c = controller()
    run(c, ScaraJog(q1_rad_s=2.0), 50)
    assert c.ramp.vel[0] == pytest.approx(2.0)
    ticks = 0
    while not c.stopped:
        c.update(0.01, OutputMode.RAMP, ScaraJog(q1_rad_s=2.0))
        ticks += 1
    assert ticks == pytest.approx(20, abs=2)  # 2 rad/s at 10 rad/s²
    c.motion({"q1_rad": -0.4, "q2_rad": 0.7})
    cmd = c.update(0.01, OutputMode.CUT, ScaraJog(q1_rad_s=2.0))
    assert cmd == {"q1_target_rad": -0.4, "q2_target_rad": 0.7}


def test_motion_of_a_setpoint() -> None:
    c = controller()
    assert not c.motion_of(Hold()).moving and not c.motion_of(ScaraJog()).moving
    assert c.motion_of(ScaraJog(q2_rad_s=0.1)).moving and c.motion_of(ScaraJoints(q1_rad=0, q2_rad=0)).moving


# ---------------------------------------------------------------------- on the control loop
class Ticker:
    """The runtime's robot with its loop ticked by hand (10 ms of robot time a tick, as fast as it goes) on the
    real monotonic clock, which the simulated drivers stamp their samples with."""

    def __init__(self, overrides: dict) -> None:
        self.profile = load_config(None, overrides=overrides)
        self.robot = Robot(self.profile)
        self.robot.driver.open()
        self.loop = self.robot.loop
        self.now = time.monotonic()
        self.loop.clock = lambda: self.now
        self.tick(3)

    def tick(self, n: int = 1) -> None:
        for _ in range(n):
            self.now = time.monotonic()
            self.loop.run_tick(self.now, 0.0, 0.01, 0)

    def state(self) -> dict:
        s = self.loop.snapshot()
        return {k: s[k] for k in ("state", "cause", "setpoint")}


SCARA = {"robot": {"profile": "scara"}, "driver": {"name": "sim-scara", "start_q_deg": [0.0, 90.0]},
         "safety": {"command_timeout_s": 60.0}}


def test_on_the_loop_a_refused_setpoint_changes_nothing() -> None:
    t = Ticker(SCARA)
    t.loop.start_robot()
    t.loop.set_setpoint(ScaraJoints(q1_rad=0.3, q2_rad=1.0))
    t.tick(5)
    before = t.state()
    for sp in (ScaraTool(x_m=0.7, y_m=0.0), ScaraJoints(q1_rad=3.1, q2_rad=0.0), ScaraJog(q2_rad_s=9.0)):
        with pytest.raises(ValidationError):
            t.loop.set_setpoint(sp)
        assert t.state() == before
    t.tick(200)
    assert t.loop.snapshot()["values"]["q1_rad"] == pytest.approx(0.3, abs=1e-6)


def test_on_the_loop_a_joint_on_its_end_stop_is_an_estop_and_blocks_the_reset() -> None:
    t = Ticker(SCARA)
    names = [r["name"] for r in t.robot.describe()["safety"]["rules"]]
    assert {"q1_at_limit", "q2_at_limit", "q1_below_limit", "q2_above_limit"} <= set(names)
    t.loop.start_robot()
    t.loop.set_setpoint(ScaraJoints(q1_rad=0.5, q2_rad=1.0))
    t.tick(100)
    assert t.loop.snapshot()["state"] == "running"
    # an obstacle the controller does not know of: joint 2's end stop is now at 1.1 rad
    t.robot.driver.sim.joints.upper[1] = 1.1
    t.loop.set_setpoint(ScaraJoints(q1_rad=0.5, q2_rad=1.3))
    t.tick(100)
    snap = t.loop.snapshot()
    assert snap["state"] == "estop" and snap["cause"]["rule"] == "q2_at_limit"
    assert snap["values"]["q2_rad"] == pytest.approx(1.1)
    with pytest.raises(Refused, match="q2_at_limit"):
        t.loop.supervisor.request_reset(t.now)


def test_a_driver_without_joint_actuators_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="needs a position actuator for joint 1"):
        Robot(load_config(None, overrides={"robot": {"profile": "scara"}}))  # the rover's sim driver


# ---------------------------------------------------------------------- the latency governor's cap (issue 20 §3)
@pytest.mark.parametrize("sp, axis, free", [
    (ScaraJog(q1_rad_s=1.5, q2_rad_s=0.0), 0, 1.5),        # a joint jog: its speed
    (ScaraJoints(q1_rad=1.5, q2_rad=1.0), 0, 2.0),          # a move to a target: the joint's v_max
])
def test_the_governor_caps_joint_speed_of_jogs_and_moves(sp, axis: int, free: float) -> None:
    c = controller()
    c.ramp.sync([0.0, 1.0])
    run(c, sp, 30)  # accelerated (a_max 10 rad/s²: 0.2 s to 2 rad/s)
    assert math.isclose(abs(c.ramp.vel[axis]), free, rel_tol=1e-6)
    c.govern(0.3)
    run(c, sp, 30)
    assert math.isclose(abs(c.ramp.vel[axis]), 0.3 * free, rel_tol=1e-6), c.ramp.vel  # speed times the scale
    c.govern(1.0)
    run(c, sp, 30)
    assert math.isclose(abs(c.ramp.vel[axis]), free, rel_tol=1e-6) or not np.any(c.ramp.vel)  # (a move may land)


def test_the_governor_caps_tool_speed_and_keeps_the_tool_direction() -> None:
    c = controller()
    c.ramp.sync([0.3, 1.2])
    jog = ScaraToolJog(vx_m_s=0.1, vy_m_s=0.05)
    run(c, jog, 50)
    free = c.arm.forward_velocity(c.ramp.pos, c.ramp.vel)
    c.govern(0.5)
    run(c, jog, 50)
    capped = c.arm.forward_velocity(c.ramp.pos, c.ramp.vel)
    assert math.isclose(math.hypot(*capped), 0.5 * math.hypot(*free), rel_tol=0.05), (free, capped)
    assert math.isclose(math.atan2(capped[1], capped[0]), math.atan2(0.05, 0.1), abs_tol=0.02)
    assert np.all(np.abs(c.ramp.vel) <= c.ramp.v_max * 0.5 + 1e-9)


def test_the_governor_never_slows_a_brake() -> None:
    """A stop must not take longer because the link is slow: braking ignores the cap."""
    a, b = controller(), controller()
    for c in (a, b):
        c.ramp.sync([0.0, 1.0])
        run(c, ScaraJog(q1_rad_s=1.5, q2_rad_s=0.0), 30)
    b.govern(0.1)
    for c in (a, b):
        run(c, Hold(), 1, mode=OutputMode.RAMP)
    assert a.ramp.vel[0] == b.ramp.vel[0]
