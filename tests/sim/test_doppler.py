"""The virtual Doppler radar: speed over ground, minimum speed, moving objects; as sim driver channels
and in a safety rule on the real server."""

from __future__ import annotations

import math
import tomllib

import numpy as np
import pytest

from drivers.errors import DriverConfigError
from drivers.sim import DOPPLER_CHANNELS, SimDriver
from robotics.estimation.attitude import rotation_zyx
from sim.doppler import DopplerRadar, MovingTarget, min_detectable_speed
from sim.world import World

LEVEL = np.eye(3)
WORLD = {"size_m": [6.0, 4.0]}


def drive_straight(radar: DopplerRadar, speed: float, rot: np.ndarray = LEVEL, n: int = 50,
                   rng: np.random.Generator | None = None, dt: float = 0.05) -> list:
    """Readings while moving along body x (with ``rot``) at ``speed``."""
    out, p = [], np.zeros(3)
    step = rot @ np.array([speed * dt, 0.0, 0.0])
    for k in range(n):
        out.append(radar.measure(k * dt, p.copy(), rot, rng))
        p = p + step
    return out[1:]  # the first has no history


# ---------------------------------------------------------------- speed over ground
@pytest.mark.parametrize("speed", [0.5, -0.3, 0.1])
def test_speed_over_ground_is_the_true_speed(speed):
    readings = drive_straight(DopplerRadar(sigma_rel=0.0, sigma_m_s=0.0), speed)
    assert [r.speed_m_s for r in readings] == pytest.approx([speed] * len(readings), abs=1e-9)


def test_below_the_minimum_detectable_speed_it_reads_zero():
    radar = DopplerRadar(sigma_rel=0.0, sigma_m_s=0.0, min_speed_m_s=0.08)
    assert {r.speed_m_s for r in drive_straight(radar, 0.07)} == {0.0}
    assert drive_straight(radar, 0.09)[-1].speed_m_s == pytest.approx(0.09)


def test_minimum_speed_is_one_spectral_bin():
    v = min_detectable_speed(24.125e9, math.radians(35.0), 0.1)
    f_d = 2.0 * v * math.cos(math.radians(35.0)) * 24.125e9 / 299_792_458.0
    assert f_d == pytest.approx(10.0)  # Hz = 1 / window


def test_without_quadrature_the_sign_is_lost():
    radar = DopplerRadar(sigma_rel=0.0, sigma_m_s=0.0, quadrature=False)
    assert drive_straight(radar, -0.4)[-1].speed_m_s == pytest.approx(0.4)


def test_on_a_ramp_it_reads_the_speed_along_the_slope():
    # nose up 10° (negative pitch), driving up the slope: the beam keeps its angle to the velocity
    rot = rotation_zyx(0.0, math.radians(-10.0), 0.3)
    r = drive_straight(DopplerRadar(sigma_rel=0.0, sigma_m_s=0.0), 0.4, rot)[-1]
    assert r.speed_m_s == pytest.approx(0.4)


def test_noise_grows_with_speed_and_is_seeded():
    def spread(speed, seed):
        rs = drive_straight(DopplerRadar(sigma_rel=0.02, sigma_m_s=0.005), speed, n=800,
                            rng=np.random.default_rng(seed))
        return np.array([r.speed_m_s for r in rs])

    a, b = spread(0.5, 1), spread(0.5, 1)
    assert (a == b).all()
    assert a.std() == pytest.approx(0.02 * 0.5 + 0.005, rel=0.1)
    assert a.mean() == pytest.approx(0.5, abs=0.002)
    assert spread(0.2, 2).std() < a.std()


def test_teleport_is_not_a_speed():
    radar = DopplerRadar(sigma_rel=0.0, sigma_m_s=0.0)
    radar.measure(0.0, np.zeros(3), LEVEL)
    radar.reset()
    assert radar.measure(0.05, np.array([3.0, 0.0, 0.0]), LEVEL).speed_m_s == 0.0


# ---------------------------------------------------------------- moving objects
def person(a, b, speed=1.0) -> MovingTarget:
    return MovingTarget(tuple(a), tuple(b), speed)


def test_target_walking_towards_the_radar_is_detected_with_its_closing_speed():
    radar = DopplerRadar(sigma_rel=0.0, sigma_m_s=0.0, targets=[person((4.0, 0.0), (1.0, 0.0), 0.8)])
    r = radar.measure(0.5, np.zeros(3), LEVEL)
    assert r.motion == 1.0 and r.target_speed_m_s == pytest.approx(0.8)
    r = radar.measure(3.9 / 0.8 * 1.0, np.zeros(3), LEVEL)  # walking back away
    assert r.motion == 1.0 and r.target_speed_m_s == pytest.approx(-0.8)


@pytest.mark.parametrize("target, why", [
    (person((7.0, 0.0), (6.0, 0.0)), "out of range"),
    (person((-3.0, 0.0), (-2.0, 0.0)), "behind"),
    (person((1.0, 2.0), (1.0, 3.0)), "outside the beam"),
    (person((3.0, -0.5), (3.0, 0.5), 0.5), "crossing: no radial speed"),
    (person((3.0, 0.0), (2.0, 0.0), 0.05), "too slow"),
])
def test_target_not_detected(target, why):
    radar = DopplerRadar(sigma_rel=0.0, sigma_m_s=0.0, targets=[target])
    assert radar.measure(0.2, np.zeros(3), LEVEL).motion == 0.0, why


def test_a_box_between_hides_the_target():
    w = World.from_config({**WORLD, "boxes": [{"center": [3.0, 2.0], "size": [0.4, 1.0]}]})
    target = person((5.0, 2.0), (4.0, 2.0))
    at = np.array([1.0, 2.0, 0.0])
    assert DopplerRadar(targets=[target], world=w).measure(0.3, at, LEVEL).motion == 0.0
    assert DopplerRadar(targets=[target], world=World.from_config(WORLD)).measure(0.3, at, LEVEL).motion == 1.0


def test_false_alarms_and_misses_at_their_rates():
    rng = np.random.default_rng(5)
    alarms = DopplerRadar(false_alarm_probability=0.1)
    n = sum(alarms.measure(0.05 * k, np.zeros(3), LEVEL, rng).motion for k in range(2000))
    assert n == pytest.approx(200, abs=45)
    misses = DopplerRadar(miss_probability=0.3, targets=[person((4.0, 0.0), (1.0, 0.0), 0.01 + 1.0)])
    n = sum(misses.measure(0.001 * k, np.zeros(3), LEVEL, rng).motion for k in range(2000))
    assert n == pytest.approx(1400, abs=80)


@pytest.mark.parametrize("bad", [dict(depression_rad=math.radians(85)), dict(sigma_rel=-0.1),
                                 dict(min_speed_m_s=math.nan), dict(motion_range_m=0.0),
                                 dict(false_alarm_probability=1.5)])
def test_fail__radar(bad):
    with pytest.raises(ValueError):
        DopplerRadar(**bad)


def test_fail__target():
    with pytest.raises(ValueError):
        MovingTarget((1.0, 1.0), (1.0, 1.0), 1.0)
    with pytest.raises(ValueError):
        MovingTarget((1.0, 1.0), (2.0, 1.0), 0.0)


# ---------------------------------------------------------------- sim driver channels
def make(doppler: dict, **settings) -> SimDriver:
    d = SimDriver({"rate_hz": 100.0, "doppler": doppler, **settings}, WORLD, seed=3)
    d.open()
    d.activate()
    return d


def test_driver_channels_are_described_and_absent_without_the_table():
    specs = {c.name: c for c in SimDriver({"doppler": {}}, WORLD).channels()}
    assert [specs[n].unit for n in DOPPLER_CHANNELS] == ["m/s", "", "m/s"]
    assert specs["doppler_speed_m_s"].min < 0  # quadrature by default: signed
    assert SimDriver({"doppler": {"quadrature": False}}, WORLD).channels()[-3].min == 0.0
    assert not any(c.name.startswith("doppler_") for c in SimDriver({}, WORLD).channels())
    assert not any(c.name.startswith("doppler_")
                   for c in SimDriver({"doppler": {"enabled": False}}, WORLD).channels())


def test_driver_reads_ground_speed_at_its_own_rate_held_with_its_sample_time():
    d = make({"rate_hz": 10.0}, noise=False)
    d.write({"wheel_left": 8.0, "wheel_right": 8.0})  # 0.4 m/s
    frames = [d.read(0.01) for _ in range(200)]
    speeds = [f.values["doppler_speed_m_s"] for f in frames]
    times = [f.sample_t["doppler_speed_m_s"] for f in frames]
    assert speeds[-1] == pytest.approx(frames[-1].truth["doppler_true_speed_m_s"])
    assert speeds[-1] == pytest.approx(0.4, abs=0.01)
    assert len(set(times)) == pytest.approx(20, abs=1)  # 2 s at 10 Hz, held in between
    # between measurements the value keeps its own (older) sample time: it can go stale
    older = [f.sample_t["doppler_speed_m_s"] < f.sample_t["linear_m_s"] for f in frames]
    assert sum(older) >= 170
    assert frames[-1].values["doppler_motion"] == 0.0 and math.isnan(frames[-1].values["doppler_target_speed_m_s"])


def test_driver_sees_a_configured_walker_and_reports_it_in_truth():
    d = make({"targets": [{"from": [5.5, 2.0], "to": [4.0, 2.0], "speed_m_s": 0.5}]}, noise=False,
             start_pose=[2.0, 2.0, 0.0])
    for _ in range(20):
        f = d.read(0.01)
    assert f.values["doppler_motion"] == 1.0
    assert f.values["doppler_target_speed_m_s"] == pytest.approx(0.5)
    x, y = f.truth["doppler_targets"][0]
    assert y == 2.0 and 4.0 < x < 5.5


def test_driver_doppler_streams_are_seeded_and_do_not_shift_the_others():
    with_radar = make({"sigma_rel": 0.05}, uwb={"anchors": [[0, 0, 2], [6, 0, 2], [6, 4, 2]]})
    without = SimDriver({"rate_hz": 100.0, "uwb": {"anchors": [[0, 0, 2], [6, 0, 2], [6, 4, 2]]}}, WORLD, seed=3)
    without.open()
    a = [with_radar.read(0.01).values["uwb_range_0_m"] for _ in range(50)]
    b = [without.read(0.01).values["uwb_range_0_m"] for _ in range(50)]
    assert a == b


@pytest.mark.parametrize("bad, message", [
    ({"rate_hz": 0}, r"doppler.rate_hz: must be > 0"),
    ({"depression_deg": 85}, r"doppler.depression_deg: must be <= 80.0"),
    ({"quadrature": "yes"}, "doppler.quadrature: must be true or false"),
    ({"sigma_rel": math.nan}, "doppler.sigma_rel: must be a finite number"),
    ({"targets": {"from": [0, 0]}}, "doppler.targets: must be a list, not a table"),
    ({"targets": [{"from": [0, 0], "to": [0, 0]}]}, r"doppler.targets\[0\]: needs from != to"),
    ({"targets": [{"from": [0, 0, 0], "to": [1, 0]}]}, r"doppler.targets\[0\].from: must be a list of length 2"),
    ({"targets": [{"from": [0, 0], "to": [1, 0], "pace": 1}]},
     r"doppler.targets\[0\].pace: unknown key \(known: from, to, speed_m_s, start_s\)"),
    ({"range_m": 3}, r"doppler.range_m: unknown key \(known: enabled, rate_hz"),
    ({"targets": [{"from": [0, 0], "to": [1, 0], "speed_m_s": 0}]}, r"doppler.targets\[0\].speed_m_s: must be > 0"),
])
def test_fail__driver_doppler_table(bad, message):
    with pytest.raises(DriverConfigError, match=message):
        SimDriver.from_config({"name": "sim", "doppler": bad}, {"sim": {"world": WORLD}})


# ---------------------------------------------------------------- in a safety rule, on the real server
@pytest.mark.timeout(90)
def test_a_rule_on_doppler_motion_stops_the_rover_turning_towards_a_walker(server_factory):
    from tests.conftest import DEFAULT_CONFIG, REPO, wait_until
    from tests.server.test_stop_paths import Heartbeat, drive

    base = tomllib.loads((REPO / DEFAULT_CONFIG).read_text())
    rules = base["safety"]["rules"] + [{"name": "person_ahead", "channel": "doppler_motion", "above": 0.5,
                                        "when": "moving", "category": 1, "message": "something moves ahead"}]
    # a walker pacing along y = 3 between x = 5.8 and 4.5, 53°-63° right of a rover at (1.8, 1) facing
    # north: outside the radar's ±40° beam until the rover turns right towards it
    srv = server_factory({
        "driver": {"doppler": {"targets": [{"from": [5.8, 3.0], "to": [4.5, 3.0], "speed_m_s": 0.3}]}},
        "safety": {"rules": rules, "command_timeout_s": 5.0},  # a late heartbeat must not stop it first (load)
    })
    assert srv.post("/api/debug/driver", {"teleport": [1.8, 1.0, math.pi / 2]})[0] == 200
    # (before the teleport, at the field's centre facing east, the walker was in the beam)
    wait_until(lambda: srv.state()["values"].get("doppler_motion") == 0.0, 5, "walker out of the beam")
    drive(srv, 0.0, -0.4)  # turn right in place
    with Heartbeat(srv):
        wait_until(lambda: srv.state()["state"] == "estop", 20, "the rule stops the turn")
    s = srv.state()
    assert s["cause"]["trigger"] == "rule" and s["cause"]["rule"] == "person_ahead", s["cause"]
    assert s["values"]["doppler_motion"] == 1.0
    yaw = s["truth"]["yaw"]
    assert math.radians(40.0) < yaw < math.pi / 2  # stopped soon after the walker entered the beam
