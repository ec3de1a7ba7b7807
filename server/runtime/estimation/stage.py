"""The estimation stage the loop runs: the attitude estimator, then the position estimator, as one stage.

:class:`EstimationStage` is a :class:`server.runtime.stage.Stage` named ``estimation`` (its part of the
snapshot keeps that name): the control loop calls :meth:`EstimationStage.process` every tick, under
its lock, right after the driver's read and before the safety supervisor, so rules may use what it
derives (``tilt_rad above 0.26``). It runs each estimator stage in turn on the driver's clock —
:class:`~server.runtime.estimation.attitude.AttitudeStage`, then
:class:`~server.runtime.estimation.position.PositionStage`, which uses the attitude's pitch and yaw —
and answers for them to the rover's behaviours (heading, odometry turn, magnetometer calibration,
marker fixes); anything else of an estimator's is its own attribute (``stage.attitude.yaw``,
``stage.position.pose``).

Time: the driver's clock may run faster than the loop's (the simulator's ``time_scale``): the
estimators integrate ``dt_s · time_scale`` (capped like the driver's longest step), and behaviours use
:meth:`EstimationStage.sim_dt` likewise.

>>> from server.runtime.estimation.channels import ACC, GYRO
>>> st = EstimationStage(available=ACC + GYRO)          # no magnetometer: no compass heading
>>> [c.name for c in st.channels()]
['roll_rad', 'pitch_rad', 'yaw_rad', 'tilt_rad', 'est_x_m', 'est_y_m']
>>> [type(e).__name__ for e in st.estimators]
['AttitudeStage', 'PositionStage']
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Sequence

from drivers.base import ChannelSpec
from robotics.estimation.markers import MarkerObservation
from server.runtime.estimation.attitude import AttitudeStage
from server.runtime.estimation.magcheck import MagneticCheck
from server.runtime.estimation.position import PositionStage
from server.runtime.stage import Stage


class EstimationStage(Stage):
    """Attitude, heading and position from IMU, magnetometer, encoders and UWB; see the module doc.

    ``available`` are the driver's channel names: the estimators use the magnetometer, encoders and
    UWB only if the driver has them (the IMU it must have). ``range_correction`` are polynomial
    coefficients, highest power first (``true ≈ polyval(c, raw)``); ``mag_offset_ut``/``mag_scale``
    the magnetometer calibration (None: raw readings)."""

    name = "estimation"

    def __init__(
        self,
        *,
        available: Iterable[str],
        anchors: Sequence[Sequence[float]] = (),
        tag_height_m: float = 0.15,
        uwb_z: str = "fixed",
        wheel_radius_m: float = 0.05,
        track_m: float = 0.30,
        ticks_per_rev: int = 1024,
        time_scale: float = 1.0,
        max_dt_s: float = 0.5,
        k_acc: float = 2.0,
        k_mag: float = 1.0,
        k_bias: float = 0.2,
        declination_rad: float = 0.0,
        uwb_sigma_m: float = 0.05,
        odom_sigma_m_per_sqrt_m: float = 0.05,
        odom_drift_sigma_m_per_sqrt_s: float = 0.01,
        yaw_sigma_rad: float = math.radians(2.0),
        gate_chi2: float = 13.8,
        range_correction: Sequence[float] = (1.0, 0.0),
        mag_offset_ut: Sequence[float] | None = None,
        mag_scale: Sequence[float] | None = None,
        tilt_crit_rad: float | None = None,
        uwb_correlation_m: float = 0.0,
        mag_check: MagneticCheck | None = None,
        gyro_bias_at_rest: bool = False,
    ) -> None:
        if not (time_scale > 0 and max_dt_s > 0):
            raise ValueError("time_scale and max_dt_s must be > 0")
        available = tuple(available)
        self.time_scale = float(time_scale)
        self.max_dt_s = float(max_dt_s)
        self.attitude = AttitudeStage(available=available, k_acc=k_acc, k_mag=k_mag, k_bias=k_bias,
                                      declination_rad=declination_rad, mag_offset_ut=mag_offset_ut,
                                      mag_scale=mag_scale, tilt_crit_rad=tilt_crit_rad, mag_check=mag_check,
                                      gyro_bias_at_rest=gyro_bias_at_rest)
        self.position = PositionStage(self.attitude, available=available, anchors=anchors, tag_height_m=tag_height_m,
                                      uwb_z=uwb_z, wheel_radius_m=wheel_radius_m, track_m=track_m,
                                      ticks_per_rev=ticks_per_rev, uwb_sigma_m=uwb_sigma_m,
                                      odom_sigma_m_per_sqrt_m=odom_sigma_m_per_sqrt_m,
                                      odom_drift_sigma_m_per_sqrt_s=odom_drift_sigma_m_per_sqrt_s,
                                      yaw_sigma_rad=yaw_sigma_rad,
                                      gate_chi2=gate_chi2, range_correction=range_correction,
                                      uwb_correlation_m=uwb_correlation_m)
        #: the estimator stages, in the order they run
        self.estimators: tuple[Stage, ...] = (self.attitude, self.position)

    # ------------------------------------------------------------------ the Stage interface
    def process(self, values: dict[str, float], dt_s: float, now: float) -> None:
        dt = self.sim_dt(dt_s)
        for estimator in self.estimators:
            estimator.process(values, dt, now)

    def channels(self) -> list[ChannelSpec]:
        """The derived channels as the dashboard shows them."""
        return [c for est in self.estimators for c in est.channels()]

    def sources(self, channels: Iterable[str]) -> set[str]:
        """The driver channels that must stay acquired for ``channels`` (derived ones map to their inputs).

        >>> from server.runtime.estimation.channels import ACC, GYRO
        >>> sorted(EstimationStage(available=ACC + GYRO).sources(["tilt_rad", "battery_v"]))[:2]
        ['battery_v', 'imu_acc_x_m_s2']
        """
        out: set[str] = set()
        for c in channels:
            owner = next((est for est in self.estimators if c in est.outputs), None)
            out |= owner.sources([c]) if owner is not None else {c}
        return out

    def status(self) -> dict[str, Any]:
        """For the snapshot's ``estimation`` field: each estimator's part."""
        out: dict[str, Any] = {}
        for est in self.estimators:
            out.update(est.status() or {})
        return out

    def take_events(self) -> list[tuple[str, str, str, dict[str, Any]]]:
        """The estimators' events since the last tick (the magnetometer disturbed, clean again)."""
        return [ev for est in self.estimators for ev in est.take_events()]

    @property
    def outputs(self) -> tuple[str, ...]:
        """Names of the channels :meth:`process` writes."""
        return self.attitude.outputs + self.position.outputs

    # ------------------------------------------------------------------ for behaviours and calibrations
    def sim_dt(self, dt_s: float) -> float:
        """The driver-clock duration of a loop period ``dt_s`` (the simulator may run faster)."""
        return min(dt_s * self.time_scale, self.max_dt_s)

    @property
    def heading_deg(self) -> float:
        """The compass heading (the attitude's)."""
        return self.attitude.heading_deg

    @property
    def odom_yaw_rad(self) -> float:
        """The unwrapped turn the odometry measured since start-up, rad (the position estimator's)."""
        return self.position.odom_yaw_rad

    @odom_yaw_rad.setter
    def odom_yaw_rad(self, value: float) -> None:
        self.position.odom_yaw_rad = value

    def set_mag_calibration(self, offset_ut: Sequence[float] | None, scale: Sequence[float] | None) -> None:
        """Apply (or with None, remove) a magnetometer calibration (the attitude's)."""
        self.attitude.set_mag_calibration(offset_ut, scale)

    def update_markers(self, observations: Sequence[MarkerObservation], marker_map: Any, sample_t: float,
                       now: float) -> bool:
        """A marker fix (:meth:`PositionStage.update_markers`).

        >>> from server.runtime.estimation.channels import ACC, GYRO
        >>> st = EstimationStage(available=ACC + GYRO)          # dead reckoning: starts at the origin
        >>> st.process({c: 0.0 for c in ACC + GYRO} | {"imu_acc_z_m_s2": 9.81}, 0.01, 0.0)
        >>> m = {0: (2.0, 0.0, math.pi)}
        >>> st.update_markers([MarkerObservation(0, 2.1, 0.0, range_sigma_m=0.01)], m, 0.0, 0.05)
        True
        >>> round(st.status()["marker_fix"]["x_m"], 3), st.status()["marker_fix"]["used"]
        (-0.1, [0])
        """
        return self.position.update_markers(observations, marker_map, sample_t, now)


__all__ = ["EstimationStage"]
