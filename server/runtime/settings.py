"""The runtime's config tables: ``[loop]``, ``[uwb]``, ``[estimation]``, ``[heading]``, ``[mission]`` and
``[calibration]`` (docs/configuration.md).

They live apart from the code that uses them because the launcher loads every table of a profile to check
it before anything starts (server/config.py ``TABLES``), and the modules that run them import numpy and the
estimators: a launcher that imported those to read six plain tables spent ~0.2 s of CPU more on every
start (docs/development.md). This module imports msgspec and ``server.config`` only
(``tests/server/test_lazy_exports.py`` checks what loading a profile imports).
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from server.config import Table


class LoopConfig(Table):
    """The ``[loop]`` table."""

    rate_hz: Annotated[float, Meta(ge=1.0, le=2000.0)] = 100.0
    realtime: bool = True  # ask for SCHED_FIFO; falls back to normal priority if refused
    spin_us: Annotated[float, Meta(ge=0.0, le=2000.0)] = 200.0  # busy-wait tail before each deadline
    max_consecutive_overruns: Annotated[int, Meta(ge=1, le=100000)] = 10
    # one tick later than this is a trigger of its own (a frozen process counts one overrun);
    # default: five periods, but never under 0.1 s (a VM without PREEMPT_RT shows single ticks
    # several milliseconds late under load, which must not e-stop a healthy robot)
    max_stall_s: Annotated[float, Meta(gt=0.0, le=60.0)] | None = None
    gc: bool = True  # freeze start-up objects and collect in the loop's slack (False: Python's default)

    def __post_init__(self) -> None:
        if self.max_stall_s is None:
            self.max_stall_s = max(5.0 / self.rate_hz, 0.1)


class UwbConfig(Table):
    """The ``[uwb]`` table: anchors configured once for the simulator and the estimator."""

    anchors: list[Annotated[list[float], Meta(min_length=3, max_length=3)]] = []  # [[x, y, z], ...] m, world
    tag_height_m: Annotated[float, Meta(ge=-10.0, le=10.0)] = 0.15  # the tag above the body origin

    def __post_init__(self) -> None:
        if self.anchors and len(self.anchors) < 3:
            raise ValueError("needs at least 3 anchors (or none)")


class EstimationConfig(Table):
    """The ``[estimation]`` table (docs/sensing.md)."""

    enabled: bool = True
    k_acc: Annotated[float, Meta(ge=0.0, le=100.0)] = 2.0  # attitude filter gains, 1/s
    k_mag: Annotated[float, Meta(ge=0.0, le=100.0)] = 1.0
    k_bias: Annotated[float, Meta(ge=0.0, le=100.0)] = 0.2
    declination_deg: Annotated[float, Meta(ge=-180.0, le=180.0)] = 0.0  # magnetic north east of true north
    encoder_ticks_per_rev: Annotated[int, Meta(ge=1, le=10**9)] = 1024
    uwb_z: Literal["fixed", "free"] = "fixed"  # fixed: solve x, y at the tag height
    uwb_sigma_m: Annotated[float, Meta(gt=0.0, le=10.0)] = 0.05  # noise of one fix, per axis
    # until a calibration is stored: true = polyval(c, raw), highest power first
    uwb_range_correction: Annotated[list[float], Meta(min_length=1)] = msgspec.field(default_factory=lambda: [1.0, 0.0])
    odom_sigma_m_per_sqrt_m: Annotated[float, Meta(ge=0.0, le=10.0)] = 0.05
    # the position's random walk per √s whatever the wheels do (pushes, unmodelled slip)
    odom_drift_sigma_m_per_sqrt_s: Annotated[float, Meta(ge=0.0, le=10.0)] = 0.01
    yaw_sigma_deg: Annotated[float, Meta(gt=0.0, le=180.0)] = 2.0
    gate_chi2: Annotated[float, Meta(gt=0.0, le=1e6)] = 13.8
    # UWB fixes closer together than this (travelled, m) share most of their error (multipath and NLOS
    # are static: standing still does not average them away): such a run counts as at most two
    # independent fixes (the n-th fused with n(n-1) times the variance). 0: every fix independent
    uwb_correlation_m: Annotated[float, Meta(ge=0.0, le=100.0)] = 0.0
    # learn the gyro bias whenever the wheels stand still (a zero-rate update): it stays right where the
    # compass is disturbed and the gyro carries the heading
    gyro_bias_at_rest: bool = False
    # the magnetometer's disturbance check (server/runtime/estimation/magcheck.py); off: every reading fused
    mag_check: bool = False
    mag_field_ut: Annotated[float, Meta(gt=0.0, le=1000.0)] | None = None  # the site's field; none: learnt
    mag_dip_deg: Annotated[float, Meta(ge=-90.0, le=90.0)] | None = None  # its dip; none: learnt
    mag_field_tolerance_ut: Annotated[float, Meta(gt=0.0, le=100.0)] = 2.5
    mag_dip_tolerance_deg: Annotated[float, Meta(gt=0.0, le=90.0)] = 2.5
    mag_recover_s: Annotated[float, Meta(ge=0.0, le=600.0)] = 1.0  # clean for this long before it counts again
    mag_reference_s: Annotated[float, Meta(gt=0.0, le=600.0)] = 3.0  # learnt over this after a calibration

    def __post_init__(self) -> None:
        if (self.mag_field_ut is None) != (self.mag_dip_deg is None):
            raise ValueError("give mag_field_ut and mag_dip_deg together (or neither: learnt after a calibration)")


class HeadingConfig(Table):
    """The ``[heading]`` table."""

    tolerance_deg: Annotated[float, Meta(ge=0.1, le=45.0)] = 5.0
    step_deg: Annotated[float, Meta(ge=1.0, le=180.0)] = 45.0  # turn at most this far between two measurements
    turn_rate_rad_s: Annotated[float, Meta(ge=0.01, le=50.0)] = 0.8
    min_turn_rate_rad_s: Annotated[float, Meta(ge=0.001, le=50.0)] = 0.08
    settle_s: Annotated[float, Meta(ge=0.0, le=10.0)] = 0.4  # pause before each measurement
    coast_s: Annotated[float, Meta(ge=0.0, le=10.0)] = 0.1  # the turn goes on ~this long after a zero command
    timeout_s: Annotated[float, Meta(ge=1.0, le=3600.0)] = 60.0


class MissionConfig(Table):
    """The ``[mission]`` table (docs/missions.md)."""

    speed_m_s: Annotated[float, Meta(gt=0.0, le=10.0)] = 0.2  # cruise speed unless the mission gives one
    lookahead_m: Annotated[float, Meta(gt=0.0, le=10.0)] = 0.3  # pure pursuit's goal point ahead
    arrival_tolerance_m: Annotated[float, Meta(gt=0.0, le=5.0)] = 0.03  # a stop counts as reached within this
    settle_s: Annotated[float, Meta(ge=0.0, le=60.0)] = 0.5  # step mode: still for this long before the fix
    fix_s: Annotated[float, Meta(ge=0.0, le=60.0)] = 1.0  # step mode: the UWB fixes of this long are averaged
    leg_timeout_factor: Annotated[float, Meta(ge=1.0, le=100.0)] = 3.0
    leg_timeout_margin_s: Annotated[float, Meta(ge=0.0, le=3600.0)] = 15.0
    max_cross_track_m: Annotated[float, Meta(gt=0.0, le=100.0)] = 0.5  # the corridor either side of a leg
    #: the field a mission's waypoints must lie in, ``[x_min_m, y_min_m, x_max_m, y_max_m]`` (world frame; empty:
    #: anywhere within the API's 10 km)
    field_m: list[float] = []

    def __post_init__(self) -> None:
        f = self.field_m
        if f and (len(f) != 4 or not all(math.isfinite(v) for v in f) or f[0] >= f[2] or f[1] >= f[3]):
            raise ValueError("[mission] field_m must be [x_min_m, y_min_m, x_max_m, y_max_m] with min < max")


class CalibrationConfig(Table):
    """The ``[calibration]`` table."""

    state_file: str = "calibration.json"  # in [server] state_dir
    mag_turn_rate_rad_s: Annotated[float, Meta(ge=0.01, le=50.0)] = 0.4
    mag_revolutions: Annotated[float, Meta(ge=1.0, le=10.0)] = 1.25
    mag_timeout_s: Annotated[float, Meta(ge=1.0, le=3600.0)] = 120.0


__all__ = ["CalibrationConfig", "EstimationConfig", "HeadingConfig", "LoopConfig", "MissionConfig", "UwbConfig"]
