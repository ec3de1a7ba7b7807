"""The ``[uwb]`` and ``[estimation]`` tables (docs/sensing.md)."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from server.config import Table


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


__all__ = ["EstimationConfig", "UwbConfig"]
