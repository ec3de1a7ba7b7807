"""The channel names the estimators read and write (SI; degrees only for the compass heading shown).

==================  =====  ============================================================
``roll_rad``        rad    positive: right side down (REP-103, DESIGN.md)
``pitch_rad``       rad    positive: nose down
``yaw_rad``         rad    ENU yaw of body x: 0 = east, +pi/2 = north
``tilt_rad``        rad    angle of body z from the vertical, ``acos(cos roll · cos pitch)``
``heading_deg``     deg    compass heading ``(90° − yaw) mod 360``: 0 = north, 90 = east
``est_x_m``         m      fused position (odometry + UWB), world x (east)
``est_y_m``         m      fused position, world y (north)
``uwb_x_m``         m      the latest UWB fix alone (NaN when it had fewer than 3 ranges)
``uwb_y_m``         m
``mag_disturbed``   0/1    1 while the magnetometer's field is disturbed (``[estimation] mag_check``;
                           NaN while nothing is checked: uncalibrated, or learning the reference)
==================  =====  ============================================================
"""

from __future__ import annotations

AXES = ("x", "y", "z")
ACC = tuple(f"imu_acc_{a}_m_s2" for a in AXES)
GYRO = tuple(f"imu_gyro_{a}_rad_s" for a in AXES)
MAG = tuple(f"mag_{a}_ut" for a in AXES)
ENCODERS = ("encoder_left_ticks", "encoder_right_ticks")
TWIST = ("linear_m_s", "angular_rad_s")
ATTITUDE_OUT = ("roll_rad", "pitch_rad", "yaw_rad", "tilt_rad")
HEADING_OUT = ("heading_deg",)
POSE_OUT = ("est_x_m", "est_y_m")
UWB_OUT = ("uwb_x_m", "uwb_y_m")
MAG_CHECK_OUT = ("mag_disturbed",)


def uwb_channel(i: int) -> str:
    """The raw range to anchor ``i``.

    >>> uwb_channel(2)
    'uwb_range_2_m'
    """
    return f"uwb_range_{i}_m"


__all__ = ["ACC", "ATTITUDE_OUT", "AXES", "ENCODERS", "GYRO", "HEADING_OUT", "MAG", "MAG_CHECK_OUT", "POSE_OUT",
           "TWIST", "UWB_OUT", "uwb_channel"]
