"""The runtime's half of vision, without processes: the external-channel stage, its staleness in the
supervisor, marker fixes in the estimator, the go-to-marker behaviour and its runtime API methods.

Ticks are driven by hand (``ControlLoop.run_tick``) with ``now`` given, on the real sim driver,
supervisor and controllers (server/runtime/robot.py builds them from a profile)."""

from __future__ import annotations

import math
import time

import pytest

from drivers.base import ChannelSpec
from robotics.estimation.markers import MarkerObservation, observe
from server.config import RUNTIME_TABLES, ConfigError, load_config
from server.runtime.behaviours.marker import GoToMarkerBehavior, propagate
from server.runtime.estimation import ACC, GYRO, MAG, EstimationStage
from server.runtime.external import ExternalChannels, ExternalError, is_external
from server.runtime.robot import Robot
from server.runtime.service import RuntimeService
from server.runtime.supervisor import State

PERIOD = 0.01
VISION_RULE = {"name": "vision_clear", "channel": "vision_clear_m", "below": 0.3, "when": "running", "category": 0,
               "message": "vision: floor blocked ahead"}
SPECS = [ChannelSpec("vision_clear_m", "m", 0.0, 2.0), ChannelSpec("vision_markers", "", 0.0, 64.0),
         ChannelSpec("marker_0_range_m", "m", 0.0, 20.0), ChannelSpec("marker_0_bearing_rad", "rad", -4.0, 4.0),
         ChannelSpec("marker_1_range_m", "m", 0.0, 20.0), ChannelSpec("marker_1_bearing_rad", "rad", -4.0, 4.0)]
MAP = {0: (6.0, 2.0, math.pi), 1: (3.0, 4.0, -math.pi / 2)}


def declared(**kw) -> ExternalChannels:
    ext = ExternalChannels(max_age_s=0.5, **kw)
    ext.declare("vision", SPECS, MAP, gauges=["vision_clear_m"])
    return ext


# ---------------------------------------------------------------------- the stage
def test_values_carry_their_capture_time_and_turn_nan_when_older_than_the_limit() -> None:
    ext = declared()
    values: dict[str, float] = {}
    ext.process(values, PERIOD, 10.0)
    assert set(values) == {s.name for s in SPECS} and all(math.isnan(v) for v in values.values())
    assert ext.sample_times == {}  # no sample: nothing to stamp (NaN never refreshes a rule channel)
    ext.measure("vision", {"vision_clear_m": 1.2, "marker_0_range_m": None}, sample_t=10.0, now=10.08)
    for now in (10.1, 10.5):
        values = {}
        ext.process(values, PERIOD, now)
        assert values["vision_clear_m"] == 1.2 and math.isnan(values["marker_0_range_m"])
        assert ext.sample_times["vision_clear_m"] == 10.0
    values = {}
    ext.process(values, PERIOD, 10.51)
    assert math.isnan(values["vision_clear_m"]) and ext.sample_times["vision_clear_m"] == 10.0
    st = ext.status()
    assert st["vision"]["received"] == 1 and st["vision"]["latency_s"] == pytest.approx(0.08)


def test_declaring_again_drops_the_measurement_made_against_the_old_declaration() -> None:
    ext = declared()
    ext.measure("vision", {"vision_clear_m": 1.0}, sample_t=10.0, now=10.0)
    ext.declare("vision", [ChannelSpec("vision_floor_free")], {})
    values: dict[str, float] = {}
    ext.process(values, PERIOD, 10.01)
    assert ext.latest("vision") is None and list(values) == ["vision_floor_free"]
    assert math.isnan(values["vision_floor_free"])


def test_a_sample_time_a_little_ahead_is_clamped_to_its_arrival() -> None:
    ext = declared()
    ext.measure("vision", {"vision_clear_m": 1.0}, sample_t=10.03, now=10.0)
    assert ext.latest("vision").sample_t == 10.0


@pytest.mark.parametrize("source, specs, markers, message", [
    ("sonar", SPECS, {}, "unknown source 'sonar'"),
    ("vision", [ChannelSpec("range_front_m")], {}, "a vision channel is named vision_… or marker_…"),
    ("vision", [ChannelSpec("vision_Clear")], {}, "a vision channel is named"),
    ("vision", [ChannelSpec("vision_x"), ChannelSpec("vision_x")], {}, "declared twice"),
    ("vision", [ChannelSpec("vision_own")], {}, "is the robot's own"),
    ("vision", [ChannelSpec(f"vision_{i}") for i in range(257)], {}, "at most 256"),
    ("vision", SPECS, {3: (1.0, math.nan, 0.0)}, "marker 3: its pose must be three finite numbers"),
    ("vision", SPECS, {3: (1.0, 2.0)}, "marker 3: its pose must be three finite numbers"),
])
def test_fail__declaration(source, specs, markers, message) -> None:
    ext = ExternalChannels(max_age_s=0.5, reserved={"vision_own"})
    with pytest.raises(ExternalError, match=message):
        ext.declare(source, specs, markers)
    assert ext.declared(source) is None and ext.describe() == {}


@pytest.mark.parametrize("source, values, sample_t, obs, message", [
    ("other", {}, 10.0, (), "source 'other' has not declared"),
    ("vision", {"vision_nope": 1.0}, 10.0, (), "undeclared channel"),
    ("vision", {"range_front_m": 1.0}, 10.0, (), "undeclared channel"),
    ("vision", {"vision_clear_m": math.inf}, 10.0, (), "must be finite or null"),
    ("vision", {"vision_clear_m": 1.0}, math.nan, (), "sample_t must be a finite"),
    ("vision", {"vision_clear_m": 1.0}, 11.0, (), "in the runtime's future"),
    ("vision", {}, 10.0, (MarkerObservation(9, 2.0, 0.1),), "marker 9, which is not in the declared map"),
    ("vision", {}, 10.0, (MarkerObservation(0, 2.0, 0.1),) * 65, "at most 64"),
])
def test_fail__measurement_changes_nothing_and_is_counted(source, values, sample_t, obs, message) -> None:
    ext = declared()
    ext.measure("vision", {"vision_clear_m": 1.0}, sample_t=9.9, now=9.95)
    with pytest.raises(ExternalError, match=message):
        ext.measure(source, values, sample_t=sample_t, now=10.0, observations=obs)
    assert ext.latest("vision").sample_t == 9.9 and ext.latest("vision").values["vision_clear_m"] == 1.0
    if source == "vision":
        assert ext.status()["vision"]["refused"] == 1 and message.split()[0] in ext.status()["vision"]["last_error"]


def test_external_names_are_the_vision_prefixes_only() -> None:
    assert is_external("vision_floor_free") and is_external("marker_12_bearing_rad")
    assert not is_external("battery_v") and not is_external("tilt_rad") and not is_external("visionx")


# ---------------------------------------------------------------------- the robot and its supervisor
def robot(rules: list[dict], **over) -> Robot:
    profile = load_config(None, overrides={"safety": {"command_timeout_s": 60.0, "rules": rules},
                                           "driver": {"noise": False}, **over}, tables=RUNTIME_TABLES)
    r = Robot(profile)
    r.driver.open()
    return r


def run(r: Robot, now: float) -> None:
    r.loop.run_tick(now, 0.0, PERIOD, 0)


def declare(r: Robot) -> None:
    r.external.declare("vision", SPECS, MAP, gauges=["vision_clear_m", "vision_markers"])


def test_a_rule_may_name_a_vision_channel_but_not_an_unknown_one() -> None:
    r = robot([VISION_RULE])
    assert "vision_clear_m" not in r.loop.derived_sources  # its time comes with it, not from driver inputs
    assert r.rule_sources() == {}  # nothing of the driver must stay acquired for it
    with pytest.raises(ConfigError, match="range_frnt_m"):
        robot([{**VISION_RULE, "channel": "range_frnt_m"}])


def test_declared_channels_are_described_gauges_with_the_robot_all_under_external() -> None:
    r = robot([])
    declare(r)
    names = [c["name"] for c in r.channels()]
    assert names[-2:] == ["vision_clear_m", "vision_markers"] and "marker_0_range_m" not in names
    ext = r.describe()["external"]["vision"]
    assert [c["name"] for c in ext["channels"]] == [s.name for s in SPECS]
    assert ext["markers"][0] == {"id": 0, "x_m": 6.0, "y_m": 2.0, "yaw_rad": math.pi}


def test_a_rule_on_a_vision_channel_blocks_start_until_fresh_and_stops_the_robot_when_it_goes_stale() -> None:
    r = robot([VISION_RULE])
    declare(r)
    loop, sup = r.loop, r.supervisor
    t0 = time.monotonic()
    run(r, t0)
    refusal = pytest.raises(Exception, match="rule channel vision_clear_m is stale \\(no sample yet")
    with refusal:
        loop.start_robot()
    r.external.measure("vision", {"vision_clear_m": 1.5}, sample_t=t0, now=t0)
    run(r, t0 + 0.01)
    assert loop.start_robot() == "running"
    run(r, t0 + 0.45)  # 0.45 s after capture: fresh enough
    assert sup.state is State.RUNNING
    run(r, t0 + 0.55)  # no newer frame: the rule cannot be checked
    assert sup.state is State.ESTOP and sup.cause.trigger == "sensor_stale"
    assert sup.cause.values["channel"] == "vision_clear_m" and sup.cause.rule == "vision_clear"


def test_a_vision_value_crossing_its_rule_stops_the_robot() -> None:
    r = robot([VISION_RULE])
    declare(r)
    t0 = time.monotonic()
    r.external.measure("vision", {"vision_clear_m": 1.5}, sample_t=t0, now=t0)
    run(r, t0)
    r.loop.start_robot()
    r.external.measure("vision", {"vision_clear_m": 0.2}, sample_t=t0 + 0.05, now=t0 + 0.06)
    run(r, t0 + 0.07)
    assert r.supervisor.state is State.ESTOP and r.supervisor.cause.trigger == "rule"
    assert r.supervisor.cause.values["vision_clear_m"] == 0.2


def test_a_nan_vision_value_never_trips_its_rule_and_does_not_keep_it_fresh() -> None:
    r = robot([VISION_RULE])
    declare(r)
    t0 = time.monotonic()
    r.external.measure("vision", {"vision_clear_m": 1.5}, sample_t=t0, now=t0)
    run(r, t0)
    r.loop.start_robot()
    for k in range(1, 6):  # frames keep coming, but with nothing to say about the floor
        r.external.measure("vision", {"vision_clear_m": None}, sample_t=t0 + 0.1 * k, now=t0 + 0.1 * k)
        run(r, t0 + 0.1 * k + 0.01)
    assert r.supervisor.state is State.ESTOP and r.supervisor.cause.trigger == "sensor_stale"


# ---------------------------------------------------------------------- marker fixes in the estimator
def still_imu() -> dict[str, float]:
    return {**{c: 0.0 for c in ACC + GYRO}, "imu_acc_z_m_s2": 9.81}


def test_a_delayed_marker_fix_is_moved_by_the_odometry_since_its_capture() -> None:
    st = EstimationStage(available=ACC + GYRO + ("linear_m_s", "angular_rad_s"))
    marker = {0: (6.0, 0.0, math.pi)}

    def step(t: float) -> None:  # east at 0.5 m/s, dead reckoning from the origin
        st.process({**still_imu(), "linear_m_s": 0.5, "angular_rad_s": 0.0}, PERIOD, t)

    def seen_from(x: float) -> MarkerObservation:
        return observe((x, 0.0, 0.0), marker[0], 0, range_sigma_m=0.01, bearing_sigma_rad=0.002)

    step(0.0)
    assert st.update_markers([seen_from(float(st.position.pose.state[0]))], marker, 0.0, 0.0)  # starts the history
    for k in range(1, 101):
        step(k * PERIOD)
    x_now = float(st.position.pose.state[0])
    x_then = st.position._pose_at(0.8)[0]  # noqa: SLF001 - where the estimate was when the frame was taken
    assert x_now - x_then == pytest.approx(0.1, abs=0.006)
    # a frame 0.2 s old that agrees with the estimate of its time: no correction now (unshifted, it
    # would pull the estimate 0.1 m back towards where the rover was)
    assert st.update_markers([seen_from(x_then)], marker, 0.8, 1.0)
    assert abs(float(st.position.pose.state[0]) - x_now) < 2e-3
    assert st.status()["marker_fixes"] == {"accepted": 2, "gated": 0, "failed": 0}


def test_a_marker_fix_far_from_the_estimate_is_gated_out() -> None:
    st = EstimationStage(available=ACC + GYRO + MAG)
    facing_north = {**still_imu(), "mag_x_ut": 25.0, "mag_y_ut": 0.0, "mag_z_ut": -43.0}
    for k in range(3):
        st.process(facing_north, PERIOD, k * PERIOD)
    assert st.position.pose is not None and abs(st.attitude.yaw - math.pi / 2) < 0.01  # at the origin, heading known
    marker = {0: (0.0, 10.0, -math.pi / 2)}
    obs = MarkerObservation(0, 2.0, 0.0, range_sigma_m=0.01)
    assert not st.update_markers([obs], marker, 0.02, 0.03)  # says y = 8 while the estimate is at 0 ± 5 cm
    assert st.status()["marker_fixes"] == {"accepted": 0, "gated": 1, "failed": 0}
    assert st.status()["marker_fix"]["accepted"] is False


def test_the_stage_fuses_each_measurement_once() -> None:
    calls = []

    class Est:
        def update_markers(self, obs, markers, sample_t, now):
            calls.append((len(obs), sample_t))

    ext = declared()
    ext.estimation = Est()
    obs = (MarkerObservation(0, 2.0, 0.1),)
    ext.measure("vision", {}, sample_t=10.0, now=10.0, observations=obs)
    for now in (10.01, 10.02, 10.03):
        ext.process({}, PERIOD, now)
    ext.measure("vision", {}, sample_t=10.1, now=10.1)  # no marker in this frame: nothing to fuse
    ext.process({}, PERIOD, 10.11)
    ext.measure("vision", {}, sample_t=10.2, now=10.2, observations=obs)
    ext.process({}, PERIOD, 10.9)  # stale by the time it is processed: not fused
    assert calls == [(1, 10.0)]


# ---------------------------------------------------------------------- the behaviour on a point rover
class FakeExternal:
    """The stage as the behaviour reads it: the newest measurement of a marker seen from a moving point."""

    max_age_s = 0.5

    def __init__(self) -> None:
        self.m = None

    def latest(self, source):
        return self.m


class M:
    def __init__(self, seq, values, sample_t):
        self.seq, self.values, self.sample_t = seq, values, sample_t


def simulate(marker_xy, start, *, seen=lambda t: True, latency_s=0.1, steps=6000, standoff=0.6):
    """A rover that follows the setpoint exactly (no ramp), a camera at 10 Hz whose result arrives
    ``latency_s`` after capture; returns (behaviour, final pose, outcome)."""
    ext = FakeExternal()
    b = GoToMarkerBehavior(ext, 0, standoff, 0.25, max_rate_rad_s=1.0, brake_m_s2=0.4)
    x, y, yaw = start
    v = w = 0.0
    queue, seq = [], 0
    for k in range(steps):
        t = k * PERIOD
        if k % 10 == 0 and seen(t):  # capture
            dx, dy = marker_xy[0] - x, marker_xy[1] - y
            seq += 1
            queue.append((t + latency_s, M(seq, {"marker_0_range_m": math.hypot(dx, dy),
                                                 "marker_0_bearing_rad": math.atan2(dy, dx) - yaw}, t)))
        while queue and queue[0][0] <= t:
            ext.m = queue.pop(0)[1]
        sp = b.update({"linear_m_s": v, "angular_rad_s": w}, PERIOD, t)
        if sp is None:
            return b, (x, y, yaw)
        v, w = sp.linear, sp.angular
        x += v * math.cos(yaw) * PERIOD
        y += v * math.sin(yaw) * PERIOD
        yaw += w * PERIOD
    raise AssertionError("the behaviour did not end")


@pytest.mark.parametrize("start", [(3.0, 2.0, 0.0), (2.0, 1.0, 0.6), (4.0, 3.0, -0.4)])
def test_it_drives_to_the_marker_and_stops_at_the_standoff(start) -> None:
    b, (x, y, _) = simulate((6.0, 2.0), start)
    assert b.outcome.startswith("reached") and b.phase == "done"
    assert math.hypot(6.0 - x, 2.0 - y) == pytest.approx(0.6, abs=0.035)
    assert b.status()["progress"] == 1.0


def test_it_fails_when_the_marker_is_lost() -> None:
    b, (x, _, _) = simulate((6.0, 2.0), (3.0, 2.0, 0.0), seen=lambda t: t < 1.0)
    assert b.outcome.startswith("failed: marker 0 lost from view") and x < 5.0


def test_it_fails_when_the_marker_was_never_seen() -> None:
    b, _ = simulate((6.0, 2.0), (3.0, 2.0, 0.0), seen=lambda t: False)
    assert b.outcome == "failed: marker 0 not in view"


def test_propagation_is_exact_for_a_still_point() -> None:
    r, bearing = 2.0, 0.3
    for _ in range(100):  # 1 s of an arc: the point's body coordinates follow from the rigid motion
        r, bearing = propagate(r, bearing, 0.2, 0.1, 0.01)
    x0, y0 = 2.0 * math.cos(0.3), 2.0 * math.sin(0.3)
    # the rover's pose after 1 s on a circle of radius 2 m (v/w), turned 0.1 rad
    px, py, th = 2.0 * math.sin(0.1), 2.0 * (1 - math.cos(0.1)), 0.1
    dx, dy = x0 - px, y0 - py
    want = (math.cos(-th) * dx - math.sin(-th) * dy, math.sin(-th) * dx + math.cos(-th) * dy)
    assert r * math.cos(bearing) == pytest.approx(want[0], abs=1e-3)
    assert r * math.sin(bearing) == pytest.approx(want[1], abs=1e-3)


# ---------------------------------------------------------------------- the runtime API methods
def call(svc: RuntimeService, method: str, params: dict) -> dict:
    return svc._handle(None, {"type": "request", "id": 1, "method": method, "params": params})  # noqa: SLF001


def test_go_to_marker_refusals_say_why(tmp_path) -> None:
    r = robot([], server={"state_dir": str(tmp_path)})
    svc = RuntimeService(r, tmp_path / "rt.sock")
    t0 = time.monotonic()
    run(r, t0)
    r.loop.start_robot()
    err = call(svc, "go_to_marker", {})["error"]
    assert (err["status"], err["code"]) == (409, "unavailable") and "[vision] enabled" in err["message"]
    spec = lambda n: {"name": n, "unit": "m", "min": 0.0, "max": 20.0}  # noqa: E731
    reply = call(svc, "declare_channels", {"source": "vision", "channels": [
        spec("marker_0_range_m"), spec("marker_0_bearing_rad"), spec("marker_1_range_m"), spec("marker_1_bearing_rad")],
        "markers": [{"id": 0, "x_m": 6.0, "y_m": 2.0, "yaw_rad": 3.14}, {"id": 1, "x_m": 3.0, "y_m": 4.0, "yaw_rad": 0}]})
    assert reply["result"] == {"ok": True, "channels": 4, "markers": 2}
    err = call(svc, "go_to_marker", {"marker_id": 0})["error"]
    assert err["code"] == "unavailable" and "vision data is stale (none yet" in err["message"]
    now = time.monotonic()
    assert call(svc, "measurements", {"source": "vision", "sample_t": now, "channels": {
        "marker_0_range_m": 3.0, "marker_0_bearing_rad": 0.0, "marker_1_range_m": None}})["result"] == {"ok": True}
    err = call(svc, "go_to_marker", {"marker_id": 1})["error"]
    assert (err["status"], err["code"], err["message"]) == (409, "not_in_view", "marker 1 is not in view (in view: 0)")
    err = call(svc, "go_to_marker", {"marker_id": 7})["error"]
    assert (err["status"], err["code"]) == (422, "invalid") and "ids: 0, 1" in err["message"]
    err = call(svc, "go_to_marker", {"marker_id": 0, "standoff_m": 0.05})["error"]
    assert err["code"] == "out_of_limits"
    err = call(svc, "go_to_marker", {"marker_id": 0, "speed_m_s": 5.0})["error"]
    assert err["code"] == "out_of_limits"
    ok = call(svc, "go_to_marker", {})["result"]  # the nearest marker in view
    assert ok["state"] == "running" and ok["behavior"]["marker_id"] == 0 and r.loop.behavior is not None
    r.loop.stop_robot()
    assert r.loop.behavior is None


@pytest.mark.parametrize("params, code", [
    ({"source": "vision", "channels": [{"name": "battery_v"}]}, "invalid"),
    ({"source": "radar", "channels": []}, "invalid"),
    ({"source": "vision", "channels": [{"name": "vision_x", "min": 1e300}]}, "out_of_limits"),
    ({"source": "vision", "channels": [{"name": "vision_x", "label": "x" * 65}]}, "out_of_limits"),
    ({"source": "vision", "channels": [{"name": "vision_x", "bogus": 1}]}, "invalid"),
    ({"source": "vision", "channels": [], "markers": [{"id": 0, "x_m": 1e9, "y_m": 0, "yaw_rad": 0}]},
     "out_of_limits"),
])
def test_fail__declare_channels(tmp_path, params, code) -> None:
    r = robot([], server={"state_dir": str(tmp_path)})
    err = call(RuntimeService(r, tmp_path / "rt.sock"), "declare_channels", params)["error"]
    assert err["code"] == code, err
    assert r.external.declared("vision") is None
