"""server.runtime.estimation: the estimator stage on its own, on the sim driver over a long run (position
error statistics), and in the real server (derived channels, the tilt rule on the steep ramp)."""

from __future__ import annotations

import doctest
import math

import numpy as np
import pytest

import server.runtime.estimation
import server.runtime.estimation.attitude
import server.runtime.estimation.channels
import server.runtime.estimation.position
import server.runtime.estimation.stage
from drivers.sim import SimDriver
from server.config import DEFAULT_CONFIG, load_config
from server.runtime.estimation import ACC, GYRO, MAG, EstimationStage, build_estimation
from server.runtime.robot import build_driver
from tests.conftest import ServerProc, wait_until
from tests.server.runtime.test_heading import CLEAN_MAG, angle_error_deg, compass_deg
from tests.server.test_stop_paths import Heartbeat

PAPER_MEAN_M, PAPER_MAX_M = 0.0908, 0.23  # seeds/002: UWB + odometry on the real rover
DERIVED = ["roll_rad", "pitch_rad", "yaw_rad", "tilt_rad", "heading_deg", "est_x_m", "est_y_m", "uwb_x_m", "uwb_y_m"]


@pytest.mark.parametrize("module", [server.runtime.estimation, server.runtime.estimation.attitude,
                                    server.runtime.estimation.channels, server.runtime.estimation.position,
                                    server.runtime.estimation.stage])
def test_docstring_examples(module) -> None:
    assert doctest.testmod(module).failed == 0


def level_values(yaw: float = 0.0, **extra: float) -> dict[str, float]:
    """At rest and level, facing ``yaw``, in a 50 µT field dipping 60°."""
    b_h, b_z = 25.0, -50.0 * math.sin(math.radians(60.0))
    values = dict(zip(ACC, (0.0, 0.0, 9.80665))) | dict(zip(GYRO, (0.0, 0.0, 0.0)))
    values |= dict(zip(MAG, (b_h * math.sin(yaw), b_h * math.cos(yaw), b_z)))
    return values | extra


def test_level_rover_reads_no_tilt_and_its_compass_heading() -> None:
    st = EstimationStage(available=ACC + GYRO + MAG)
    values = level_values(yaw=math.radians(30.0))  # ENU yaw 30°: compass 60°
    st.process(values, 0.01, 0.0)
    assert values["tilt_rad"] == pytest.approx(0.0, abs=1e-12)
    assert values["yaw_rad"] == pytest.approx(math.radians(30.0))
    assert values["heading_deg"] == pytest.approx(60.0)


def test_tilt_is_the_angle_of_body_z_from_the_vertical() -> None:
    st = EstimationStage(available=ACC + GYRO)
    roll, pitch = 0.2, -0.3
    f = 9.80665 * np.array([-math.sin(pitch), math.cos(pitch) * math.sin(roll), math.cos(pitch) * math.cos(roll)])
    values = dict(zip(ACC, f)) | dict(zip(GYRO, (0.0, 0.0, 0.0)))
    st.process(values, 0.01, 0.0)
    assert (values["roll_rad"], values["pitch_rad"]) == pytest.approx((roll, pitch))
    assert values["tilt_rad"] == pytest.approx(math.acos(math.cos(roll) * math.cos(pitch)))
    assert "heading_deg" not in values  # no magnetometer, no compass


def test_outputs_are_nan_when_the_imu_is_not_acquired() -> None:
    st = EstimationStage(available=ACC + GYRO + MAG)
    values = {"battery_v": 12.0}
    st.process(values, 0.01, 0.0)
    assert all(math.isnan(values[c]) for c in ("roll_rad", "pitch_rad", "yaw_rad", "tilt_rad", "heading_deg"))
    assert values["est_x_m"] == 0.0  # no anchors: dead reckoning from the origin


def test_magnetometer_calibration_is_applied_to_the_raw_readings() -> None:
    offset, gain = np.array([6.0, -4.0, 2.0]), np.array([1.1, 0.9, 1.0])
    raw = level_values(yaw=1.0)
    for name, o, g in zip(MAG, offset, gain):
        raw[name] = raw[name] * g + o
    st = EstimationStage(available=ACC + GYRO + MAG)
    st.process(dict(raw), 0.01, 0.0)
    assert abs(st.attitude.yaw - 1.0) > math.radians(5.0)  # the iron pulls an uncalibrated compass off
    st.set_mag_calibration(offset, 1.0 / gain)
    st.process(dict(raw), 0.01, 0.01)
    assert st.attitude.yaw == pytest.approx(1.0, abs=1e-9)


def test_uwb_fix_uses_the_range_correction() -> None:
    anchors = np.array([[0.0, 0.0, 2.5], [6.0, 0.0, 2.5], [6.0, 4.0, 2.5], [0.0, 4.0, 2.5]])
    true = np.linalg.norm(anchors - [2.0, 1.5, 0.15], axis=1)
    raw = (true - 0.1) / 1.02  # the module reports a = 0.1, b = 1.02 short
    names = [f"uwb_range_{i}_m" for i in range(4)]
    st = EstimationStage(available=ACC + GYRO + tuple(names), anchors=anchors, tag_height_m=0.15,
                         range_correction=(1.02, 0.1))
    values = level_values() | dict(zip(names, raw))
    st.process(values, 0.01, 0.0)
    assert (values["uwb_x_m"], values["uwb_y_m"]) == pytest.approx((2.0, 1.5), abs=1e-6)
    assert (values["est_x_m"], values["est_y_m"]) == pytest.approx((2.0, 1.5), abs=1e-6)
    st.position.set_range_correction((1.0, 0.0))
    values = level_values() | dict(zip(names, raw))
    st.process(values, 0.01, 0.01)
    assert math.hypot(values["uwb_x_m"] - 2.0, values["uwb_y_m"] - 1.5) > 0.03


def test_sources_keep_a_rules_inputs_acquired() -> None:
    st = EstimationStage(available=ACC + GYRO + MAG + ("encoder_left_ticks", "encoder_right_ticks"))
    assert st.sources(["tilt_rad"]) == set(ACC + GYRO)
    assert st.sources(["heading_deg"]) == set(ACC + GYRO + MAG)
    assert {"encoder_left_ticks", "range_front_m"} <= st.sources(["est_x_m", "range_front_m"])


def test_no_stage_without_an_imu() -> None:
    cfg = load_config(DEFAULT_CONFIG)
    assert build_estimation(cfg, SimDriver({}, {"size_m": [6.0, 4.0]})) is None  # no [driver.imu]: no IMU
    off = load_config(DEFAULT_CONFIG, {"estimation": {"enabled": False}})
    assert build_estimation(off, build_driver(off)) is None


# ---------------------------------------------------------------------- a long simulated run
def circle_run(seconds: float, dt: float = 0.01) -> dict[str, np.ndarray]:
    """The default profile's sim driver and estimator, driven round a 1 m circle over the 5° hump.

    The odometry is 3 % off (the true wheel radius is 51.5 mm, the estimator believes the
    profile's 50 mm); UWB as in the profile: 5 cm noise, 2 % NLOS, 1 % dropouts, 10 Hz.
    """
    cfg = load_config(DEFAULT_CONFIG, overrides={"driver": {
        "start_pose": [3.0, 1.0, 0.0], "rover": {"wheel_radius_m": 0.0515}, **CLEAN_MAG}})
    driver = build_driver(cfg)
    driver.open()
    driver.activate()
    stage = build_estimation(cfg, driver)
    assert stage is not None and stage.position.has_uwb and stage.attitude.has_mag
    r, track = 0.0515, cfg.robot.track_m
    v, w = 0.3, 0.3  # 1 m radius round (3, 2)
    driver.write({"wheel_left": (v - 0.5 * w * track) / r, "wheel_right": (v + 0.5 * w * track) / r})
    fused, uwb, heading, tilt = [], [], [], []
    for k in range(round(seconds / dt)):
        frame = driver.read(dt)
        stage.process(frame.values, dt, k * dt)
        if k * dt < 5.0:  # the first fixes and the filters settling
            continue
        t, val = frame.truth, frame.values
        fused.append(math.hypot(val["est_x_m"] - t["x"], val["est_y_m"] - t["y"]))
        if math.isfinite(val["uwb_x_m"]):
            uwb.append(math.hypot(val["uwb_x_m"] - t["x"], val["uwb_y_m"] - t["y"]))
        heading.append(angle_error_deg(val["heading_deg"], compass_deg(t["yaw"])))
        tilt.append(val["tilt_rad"])
    assert not driver.sim.collided and driver.sim.collisions == 0
    return {"fused": np.array(fused), "uwb": np.array(uwb), "heading": np.array(heading), "tilt": np.array(tilt)}


def test_position_error_statistics_over_a_simulated_run() -> None:
    run = circle_run(180.0)  # ~9 laps, 1800 UWB measurements
    fused, uwb = run["fused"], run["uwb"]
    print(f"\nfused: mean {fused.mean() * 100:.2f} cm, p95 {np.percentile(fused, 95) * 100:.2f} cm, "
          f"max {fused.max() * 100:.2f} cm; UWB alone: mean {uwb.mean() * 100:.2f} cm, max {uwb.max() * 100:.2f} cm; "
          f"heading error: mean {np.abs(run['heading']).mean():.2f}°, max {np.abs(run['heading']).max():.2f}°")
    assert fused.mean() < 0.5 * PAPER_MEAN_M
    assert fused.max() < PAPER_MAX_M
    assert fused.mean() < 0.5 * uwb.mean()  # the fusion is worth it
    assert np.abs(run["heading"]).max() < 3.0
    assert run["tilt"].max() > math.radians(3.0)  # it did drive over the hump…
    assert run["tilt"].max() < 0.26  # …without reaching the tilt rule


def test_the_run_is_deterministic() -> None:
    a, b = circle_run(8.0), circle_run(8.0)
    assert np.array_equal(a["fused"], b["fused"]) and np.array_equal(a["heading"], b["heading"])


# ---------------------------------------------------------------------- the real server
@pytest.fixture
def server(server_factory) -> ServerProc:
    """A 5 s link timeout: on a loaded machine the heartbeat thread beats late, and a link-loss stop would take the
    place of the tilt rule's (or end the drive over the hump); the watchdog has its own tests."""
    return server_factory({"safety": {"command_timeout_s": 5.0}})


def test_robot_description_lists_the_derived_channels(server: ServerProc) -> None:
    status, robot = server.get("/api/robot")
    assert status == 200
    specs = {c["name"]: c for c in robot["channels"]}
    assert set(DERIVED) <= set(specs)
    assert (specs["heading_deg"]["widget"], specs["heading_deg"]["min"], specs["heading_deg"]["max"]) == ("dial", 0, 360)
    assert specs["tilt_rad"]["widget"] == "bar" and specs["tilt_rad"]["crit_high"] == pytest.approx(0.26)
    assert specs["tilt_rad"]["warn_high"] < specs["tilt_rad"]["crit_high"] <= specs["tilt_rad"]["max"]
    assert all(specs[c]["widget"] == "digital" and specs[c]["unit"] == "m" for c in DERIVED[5:])
    assert specs["mag_x_ut"]["unit"] == "µT" and specs["imu_acc_z_m_s2"]["unit"] == "m/s²"
    assert robot["uwb"]["anchors"] == [[0.0, 0.0, 2.5], [6.0, 0.0, 2.5], [6.0, 4.0, 2.5], [0.0, 4.0, 2.5]]


def test_state_carries_attitude_heading_and_position(server_factory, tmp_path) -> None:
    srv = server_factory({"driver": CLEAN_MAG, "server": {"state_dir": str(tmp_path)}})

    def settled() -> dict:
        s = srv.state()
        v, t = s["values"], s["truth"]
        return s if v["est_x_m"] is not None and math.hypot(v["est_x_m"] - t["x"], v["est_y_m"] - t["y"]) < 0.1 else {}

    s = wait_until(settled, 10, "a position estimate near the truth")
    v = s["values"]
    assert set(DERIVED) <= set(v)
    assert v["tilt_rad"] < math.radians(2.0)
    assert abs(angle_error_deg(v["heading_deg"], compass_deg(s["truth"]["yaw"]))) < 3.0
    assert v["uwb_x_m"] is None or abs(v["uwb_x_m"] - 3.0) < 0.3


def test_tilt_rule_stops_the_rover_on_the_steep_ramp(server: ServerProc) -> None:
    status, _ = server.post("/api/debug/driver", {"teleport": [2.0, 1.0, math.pi]})  # facing the 20° ramp, 0.8 m off
    assert status == 200
    assert server.post("/api/start")[0] == 200
    assert server.post("/api/speed", {"linear": 0.3, "angular": 0.0})[0] == 200
    with Heartbeat(server):
        wait_until(lambda: server.state()["state"] == "estop", 15, "the tilt e-stop")
    s = server.state()
    assert s["cause"]["trigger"] == "rule" and s["cause"]["rule"] == "tilt", s["cause"]
    assert s["cause"]["category"] == 0 and s["cause"]["values"]["tilt_rad"] > 0.26
    assert s["truth"]["pitch"] == pytest.approx(-math.radians(20.0), abs=1e-6)  # on the ramp, nose up
    assert s["truth"]["x"] > 0.8  # stopped at the foot, not at the top
    wait_until(lambda: abs(server.state()["values"]["linear_m_s"]) < 1e-3, 5, "wheels stopped")


def test_gentle_hump_does_not_trip_the_tilt_rule(server: ServerProc) -> None:
    assert server.post("/api/debug/driver", {"teleport": [3.9, 0.85, math.pi]})[0] == 200  # west, over the 5° hump
    assert server.post("/api/start")[0] == 200
    assert server.post("/api/speed", {"linear": 0.3, "angular": 0.0})[0] == 200
    tilts = []
    with Heartbeat(server):
        def crossed() -> bool:
            s = server.state()
            assert s["state"] == "running", s["cause"]
            tilts.append(s["values"]["tilt_rad"] or 0.0)
            return s["truth"]["x"] < 2.3
        wait_until(crossed, 20, "the rover past the hump", interval_s=0.02)
        assert server.post("/api/stop")[0] == 200
    assert math.radians(3.0) < max(tilts) < 0.26


def test_acquisition_keeps_the_inputs_of_the_tilt_rule(server: ServerProc) -> None:
    available = server.get("/api/acquisition")[1]["available"]
    status, body = server.put("/api/acquisition", {"rate_hz": 100, "channels": [
        c for c in available if c != "imu_gyro_z_rad_s"]})
    assert status == 422 and body["error"]["code"] == "safety_channel" and "imu_gyro_z_rad_s" in body["error"]["message"]
    keep = [c for c in available if not c.startswith(("mag_", "uwb_", "encoder_"))]
    status, body = server.put("/api/acquisition", {"rate_hz": 100, "channels": keep})
    assert status == 200, body
    wait_until(lambda: server.state()["values"].get("uwb_x_m", 0) is None, 5, "no UWB fix without its ranges")
    assert server.state()["values"]["tilt_rad"] is not None


def test_without_an_imu_there_is_no_estimator(server_factory) -> None:
    import tomllib

    from tests.conftest import DEFAULT_CONFIG, REPO

    rules = [r for r in tomllib.loads((REPO / DEFAULT_CONFIG).read_text())["safety"]["rules"]
             if r["channel"] != "tilt_rad"]
    srv = server_factory({"driver": {"imu": {"enabled": False}}, "safety": {"rules": rules}})
    names = {c["name"] for c in srv.get("/api/robot")[1]["channels"]}
    assert not names & set(DERIVED)
    status, body = srv.post("/api/heading", {"heading_deg": 90.0})
    assert status == 409 and body["error"]["code"] == "unavailable"


def test_fail__a_rule_on_a_channel_the_robot_lacks_stops_start_up(server_factory) -> None:
    """The tilt rule without an IMU could never be checked: a config error, named at start-up."""
    with pytest.raises(RuntimeError) as err:
        server_factory({"driver": {"imu": {"enabled": False}}})
    assert "safety.rules" in str(err.value) and "tilt_rad" in str(err.value)
