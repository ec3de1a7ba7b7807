"""The magnetometer's disturbance check and what the estimator does with it (issue 23): strength and dip against the
reference, hysteresis, the learnt reference, the gyro carrying the heading while disturbed, the heading of the last
clean reading restored, the bias learnt at rest, the channel and the events — on the check alone, on the estimator
stage, and on the real loop driving the field profile's rover over the steel pipe."""

from __future__ import annotations

import doctest
import math

import numpy as np
import pytest

import server.runtime.estimation.magcheck
from robotics.estimation.attitude import rotation_zyx
from server.config import REPO_ROOT
from server.runtime.controllers.rover import RoverSetpoint
from server.runtime.estimation import ACC, GYRO, MAG, EstimationStage, MagneticCheck
from server.runtime.estimation.channels import TWIST
from server.runtime.experiments.runner import OfflineRobot

FIELD_UT, DIP_DEG = 50.0, 60.0


def earth(yaw: float = 0.0, extra=(0.0, 0.0, 0.0), dip_deg: float = DIP_DEG) -> tuple[float, float, float]:
    """The field a level body facing ``yaw`` (ENU) reads, µT, plus a world-frame ``extra``."""
    dip = math.radians(dip_deg)
    world = np.array([0.0, FIELD_UT * math.cos(dip), -FIELD_UT * math.sin(dip)]) + np.asarray(extra)
    return tuple(float(v) for v in rotation_zyx(0.0, 0.0, yaw).T @ world)


def test_docstring_examples() -> None:
    assert doctest.testmod(server.runtime.estimation.magcheck).failed == 0


def checked(**kw) -> MagneticCheck:
    c = MagneticCheck(field_ut=FIELD_UT, dip_deg=DIP_DEG, **kw)
    c.calibrated()
    return c


@pytest.mark.parametrize("name, extra, disturbed", [
    ("the_earth", (0.0, 0.0, 0.0), False),
    ("weaker_along_the_field", (0.0, -1.5, 2.6), True),  # 3 µT against the field: strength 47
    ("steeper", (0.0, -2.0, -1.0), True),  # the dip moves by ~2.8°
    ("small", (0.0, 0.5, -0.5), False),  # within both tolerances
    ("across_the_field", (2.0, 0.0, 0.0), False),  # 2 µT east: neither strength nor dip change — unseen
])
def test_strength_and_dip_against_the_reference(name, extra, disturbed) -> None:
    assert checked().check(earth(0.3, extra), 0.0, 0.0, 0.01) is disturbed


def test_a_tilted_body_reads_the_same_dip() -> None:
    c = checked()
    R = rotation_zyx(0.2, -0.15, 1.0)
    dip = math.radians(DIP_DEG)
    reading = R.T @ [0.0, FIELD_UT * math.cos(dip), -FIELD_UT * math.sin(dip)]
    assert c.check(reading, 0.2, -0.15, 0.01) is False and c.dip_rad == pytest.approx(dip)


def test_disturbed_at_once_clean_only_after_recover_s_within_80_percent() -> None:
    c = checked(recover_s=1.0)
    assert c.check(earth(extra=(0.0, -3.0, 5.0)), 0.0, 0.0, 0.01)
    [(trigger, message, kind, values)] = c.take_events()
    assert trigger == "mag_disturbed" and kind == "info" and values["reference_field_ut"] == FIELD_UT
    for _ in range(99):  # 0.99 s of clean readings: still disturbed
        assert c.check(earth(), 0.0, 0.0, 0.01)
    assert not c.check(earth(), 0.0, 0.0, 0.01)
    [(trigger, *_)] = c.take_events()
    assert trigger == "mag_recovered" and c.disturbances == 1
    # just inside the tolerance, but not inside 80 % of it: a disturbed field does not count as clean
    c.check(earth(extra=(0.0, -3.0, 5.0)), 0.0, 0.0, 0.01)
    for _ in range(300):
        assert c.check(earth(extra=(0.0, -1.3, 1.9)), 0.0, 0.0, 0.01)  # 2.3 µT weaker


def test_the_reference_is_learnt_after_a_calibration_when_not_configured() -> None:
    c = MagneticCheck(reference_s=1.0)
    assert not c.check(earth(extra=(0.0, 10.0, 0.0)), 0.0, 0.0, 0.01)  # uncalibrated: nothing checked
    assert c.status()["check"] == "unchecked (uncalibrated)"
    c.calibrated()
    for _ in range(100):  # a second of the site's field (here 10 µT off the model: learnt as it is)
        c.check(earth(extra=(0.0, 3.0, 0.0)), 0.0, 0.0, 0.01)
    assert c.status()["check"] == "clean" and c.reference[0] == pytest.approx(np.linalg.norm(earth(extra=(0, 3, 0))))
    assert not c.check(earth(extra=(0.0, 3.0, 0.0)), 0.0, 0.0, 0.01)
    assert c.check(earth(), 0.0, 0.0, 0.01)  # the model's field is now 3 µT off the learnt one


def test_fail__reference_halves() -> None:
    with pytest.raises(ValueError):
        MagneticCheck(field_ut=50.0)


# ---------------------------------------------------------------- the estimator stage with the check
def stage(**kw) -> EstimationStage:
    st = EstimationStage(available=ACC + GYRO + MAG + TWIST, k_mag=1.0,
                         mag_check=MagneticCheck(field_ut=FIELD_UT, dip_deg=DIP_DEG, recover_s=0.5), **kw)
    st.set_mag_calibration((0.0, 0.0, 0.0), (1.0, 1.0, 1.0))
    return st


def tick(st: EstimationStage, yaw: float, rate: float = 0.0, extra=(0.0, 0.0, 0.0), moving: bool = True) -> dict:
    values = dict(zip(ACC, (0.0, 0.0, 9.80665))) | dict(zip(GYRO, (0.0, 0.0, rate))) | dict(zip(MAG, earth(yaw, extra)))
    values |= {"linear_m_s": 0.1 if moving else 0.0, "angular_rad_s": rate}
    st.process(values, 0.01, 0.0)
    return values


def test_while_disturbed_the_gyro_carries_the_heading_and_the_channel_says_so() -> None:
    st = stage()
    for _ in range(50):
        v = tick(st, 0.0)
    assert v["mag_disturbed"] == 0.0 and st.attitude.yaw == pytest.approx(0.0, abs=1e-6)
    # a strong field that would turn the compass by ~11°, while the body truly stands still
    for _ in range(300):
        v = tick(st, 0.0, extra=(-4.0, 3.0, -3.0))
    assert v["mag_disturbed"] == 1.0 and st.attitude.yaw == pytest.approx(0.0, abs=1e-3)
    assert st.status()["heading_source"].startswith("gyro") and st.status()["magnetometer"]["disturbed"]
    # it turns 0.5 rad on the gyro alone while disturbed: the heading follows the gyro, not the bent field
    for _ in range(100):
        tick(st, 0.005 * 0, rate=0.5, extra=(-4.0, 3.0, -3.0))
    assert st.attitude.yaw == pytest.approx(0.5, abs=1e-3)
    events = [e[0] for e in st.take_events()]
    assert events == ["mag_disturbed"]


def test_without_the_check_the_bent_field_pulls_the_heading() -> None:
    st = EstimationStage(available=ACC + GYRO + MAG + TWIST, k_mag=1.0)
    st.set_mag_calibration((0.0, 0.0, 0.0), (1.0, 1.0, 1.0))
    for _ in range(50):
        tick(st, 0.0)
    for _ in range(500):
        v = tick(st, 0.0, extra=(-4.0, 3.0, -3.0))
    assert abs(st.attitude.yaw) > math.radians(5.0) and "mag_disturbed" not in v


def test_a_disturbance_that_crept_in_is_taken_back_to_the_last_clean_heading() -> None:
    st = stage()
    for _ in range(100):
        tick(st, 0.0)
    # a field growing slowly, west and against the Earth's: the compass turns while the strength still passes
    for k in range(1, 301):
        tick(st, 0.0, extra=np.array([-3.0, -1.5, 2.6]) * 0.8 * k / 300)  # to 2.4 µT weaker: within 2.5
    drifted = st.attitude.yaw
    assert not st.attitude.mag_disturbed and abs(drifted) > math.radians(4.0)
    tick(st, 0.0, extra=np.array([-3.0, -1.5, 2.6]) * 1.0)  # 3 µT weaker: plainly disturbed
    assert st.attitude.mag_disturbed
    # back to where the field was last within 40 % of the tolerances (1 µT weaker), carried by the gyro since
    assert abs(st.attitude.yaw) < 0.5 * abs(drifted)


def test_the_gyro_bias_is_learnt_while_the_wheels_stand_still_not_when_lifted() -> None:
    st = stage(gyro_bias_at_rest=True)
    for _ in range(2000):  # 20 s still, the gyro reading its bias
        tick(st, 0.0, rate=0.004, moving=False)
    assert st.attitude.filter.gyro_bias[2] == pytest.approx(0.004, abs=2e-4)
    for _ in range(5):  # lifted and turned by hand: the wheels still, the gyro reads 1 rad/s
        tick(st, 0.0, rate=1.0, moving=False)
    assert st.attitude.filter.gyro_bias[2] == pytest.approx(0.004, abs=3e-4)


def test_off_by_default_nothing_changes() -> None:
    from server.config import load_config

    cfg = load_config(REPO_ROOT / "config" / "rover-sim.toml")
    assert cfg.estimation.mag_check is False and cfg.estimation.gyro_bias_at_rest is False
    st = EstimationStage(available=ACC + GYRO + MAG)
    assert st.attitude.mag_check is None and "mag_disturbed" not in st.outputs


# ---------------------------------------------------------------- on the loop: the field profile's pipe
def test_driving_over_the_steel_pipe_is_reported_as_it_happens_and_recovers() -> None:
    bot = OfflineRobot(REPO_ROOT / "config" / "rover-field.toml",
                       overrides={"driver": {"start_pose": [2.5, 3.6, 90.0], "time_scale": 2.0},
                                  "safety": {"command_timeout_s": 60.0}})
    st = bot.stage
    st.set_mag_calibration((4.0, -2.5, 0.0), (1 / 1.03, 1 / 0.97, 1.0))  # the profile's iron, as a calibration would
    bot.start()
    bot.tick(100)
    assert bot.loop.snapshot()["values"]["mag_disturbed"] == 0.0  # 1 m south of the pipe: clean
    bot.loop.set_setpoint(RoverSetpoint(0.15, 0.0))  # north over the pipe at y = 4.6
    flags = []
    for _ in range(600):  # 12 s of sim time: 1.8 m
        bot.tick()
        if bot.truth.get("mag_steel_ut", 0.0) > 5.0:
            flags.append(bot.loop.snapshot()["values"]["mag_disturbed"])
    bot.loop.set_setpoint(RoverSetpoint())
    bot.tick(200)
    assert flags and all(f == 1.0 for f in flags)  # reported the whole time the steel bends the field by > 5 µT
    triggers = [e.trigger for e in bot.loop.events]
    assert "mag_disturbed" in triggers and triggers.index("mag_disturbed") < triggers.index("mag_recovered")
    assert bot.loop.snapshot()["values"]["mag_disturbed"] == 0.0  # 1 m past it: clean again
