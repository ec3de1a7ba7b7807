"""Estimation in the control thread: attitude, compass heading and planar position of the rover.

One module per estimator, each a :class:`server.runtime.stage.Stage`:

* :mod:`~server.runtime.estimation.attitude`: roll, pitch, yaw, tilt and the compass heading from the
  IMU and the magnetometer (its calibration applied);
* :mod:`~server.runtime.estimation.position`: wheel odometry, UWB and marker fixes fused into the
  planar position;
* :mod:`~server.runtime.estimation.magcheck`: the magnetometer's disturbance check the attitude runs;

run in that order by :class:`~server.runtime.estimation.stage.EstimationStage`, the ``estimation``
stage a controller names (``Controller.stages``; :data:`server.runtime.stage.STAGES` builds it with
:func:`build_estimation`). :mod:`~server.runtime.estimation.channels` names the channels (units and
frames), :mod:`server.runtime.settings` owns the ``[uwb]`` and ``[estimation]`` tables.

A value the inputs cannot give yet (no IMU sample, no magnetometer, no UWB fix) is NaN, which the
telemetry sends as ``null`` and which never trips a rule; the acquisition guard
(:meth:`EstimationStage.sources`) keeps the inputs of a rule's channel active.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from server.runtime.estimation.channels import (ACC, ATTITUDE_OUT, ENCODERS, GYRO, HEADING_OUT, MAG, POSE_OUT, TWIST,
                                                UWB_OUT, uwb_channel)
from server.runtime.settings import EstimationConfig, UwbConfig
from server.runtime.estimation.magcheck import MagneticCheck
from server.runtime.estimation.stage import EstimationStage

log = logging.getLogger(__name__)


def build_estimation(profile: Any, driver: Any) -> EstimationStage | None:
    """The estimator for a profile whose driver has an IMU (None otherwise, or when disabled)."""
    est = profile.estimation
    names = [c.name for c in driver.channels()]
    if not est.enabled:
        log.info("estimation off (estimation.enabled = false)")
        return None
    if not all(c in names for c in ACC + GYRO):
        log.info("estimation off: the driver has no IMU channels")
        return None
    tilt_crit = None
    for rule in profile.safety.rules:
        if rule.channel == "tilt_rad" and rule.above is not None:
            tilt_crit = rule.above if tilt_crit is None else min(tilt_crit, rule.above)
    robot = profile.robot
    return EstimationStage(
        available=names,
        anchors=profile.uwb.anchors,
        tag_height_m=profile.uwb.tag_height_m,
        uwb_z=est.uwb_z,
        wheel_radius_m=robot.wheel_radius_m,
        track_m=robot.track_m,
        ticks_per_rev=est.encoder_ticks_per_rev,
        time_scale=driver.time_scale,
        max_dt_s=min(driver.max_read_dt_s, 0.5),
        k_acc=est.k_acc,
        k_mag=est.k_mag,
        k_bias=est.k_bias,
        declination_rad=math.radians(est.declination_deg),
        uwb_sigma_m=est.uwb_sigma_m,
        odom_sigma_m_per_sqrt_m=est.odom_sigma_m_per_sqrt_m,
        odom_drift_sigma_m_per_sqrt_s=est.odom_drift_sigma_m_per_sqrt_s,
        yaw_sigma_rad=math.radians(est.yaw_sigma_deg),
        gate_chi2=est.gate_chi2,
        range_correction=est.uwb_range_correction,
        tilt_crit_rad=tilt_crit,
        uwb_correlation_m=est.uwb_correlation_m,
        mag_check=mag_check(est),
        gyro_bias_at_rest=est.gyro_bias_at_rest,
    )


def mag_check(est: EstimationConfig) -> MagneticCheck | None:
    """The magnetometer's disturbance check the ``[estimation]`` table asks for (None: off)."""
    if not est.mag_check:
        return None
    return MagneticCheck(field_ut=est.mag_field_ut, dip_deg=est.mag_dip_deg,
                         field_tolerance_ut=est.mag_field_tolerance_ut, dip_tolerance_deg=est.mag_dip_tolerance_deg,
                         recover_s=est.mag_recover_s, reference_s=est.mag_reference_s)


__all__ = ["ACC", "ATTITUDE_OUT", "ENCODERS", "EstimationConfig", "EstimationStage", "GYRO", "HEADING_OUT", "MAG",
           "MagneticCheck", "POSE_OUT", "TWIST", "UWB_OUT", "UwbConfig", "build_estimation", "mag_check", "uwb_channel"]
