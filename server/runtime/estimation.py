"""Estimation in the control thread: attitude, compass heading and planar position of the rover.

:class:`EstimationStage` is a :class:`server.runtime.loop.Stage`: the control loop
calls :meth:`EstimationStage.process` every tick, under its lock, right after the
driver's read and before the safety supervisor, so rules may use what it derives
(``tilt_rad above 0.26``). Each tick:

1. :class:`robotics.estimation.attitude.AttitudeFilter` on the IMU (accelerometer +
   gyro) and the magnetometer, the stored magnetometer calibration applied first
   (``(raw − offset) · scale``, :func:`robotics.estimation.magcal.apply`);
2. wheel odometry from the encoder counts (or ``linear_m_s``/``angular_rad_s`` when
   the encoders are not acquired), horizontal advance ``cos(pitch)`` of the distance
   rolled, dead-reckoned by :class:`robotics.estimation.pose.PoseEstimator` with the
   filter's yaw fused as an absolute heading;
3. when the UWB ranges change (the driver holds them between measurements), the
   range correction polynomial, then :func:`robotics.estimation.uwb.trilaterate`,
   and the fix corrects the pose estimator;
4. marker observations from the vision pipeline (:mod:`server.runtime.external` calls
   :meth:`EstimationStage.update_markers` once per camera frame): a position fix with the
   estimated heading at the frame's capture time (:func:`robotics.estimation.markers.fix_position`),
   moved by the odometry since then, corrects the pose estimator like a UWB fix (same gate).

Derived channels (SI; degrees only for the compass heading shown to the operator):

==============  =====  ============================================================
``roll_rad``    rad    positive: right side down (REP-103, DESIGN.md)
``pitch_rad``   rad    positive: nose down
``yaw_rad``     rad    ENU yaw of body x: 0 = east, +pi/2 = north
``tilt_rad``    rad    angle of body z from the vertical, ``acos(cos roll · cos pitch)``
``heading_deg`` deg    compass heading ``(90° − yaw) mod 360``: 0 = north, 90 = east
``est_x_m``     m      fused position (odometry + UWB), world x (east)
``est_y_m``     m      fused position, world y (north)
``uwb_x_m``     m      the latest UWB fix alone (NaN when it had fewer than 3 ranges)
``uwb_y_m``     m
==============  =====  ============================================================

A value the inputs cannot give yet (no IMU sample, no magnetometer, no UWB fix) is
NaN, which the telemetry sends as ``null`` and which never trips a rule; the
acquisition guard (:meth:`EstimationStage.sources`) keeps the inputs of a rule's
channel active.

Time: the driver's clock may run faster than the loop's (the simulator's
``time_scale``): the stage integrates ``dt_s · time_scale`` (capped like the
driver's longest step), and behaviors use :meth:`EstimationStage.sim_dt` likewise.
"""

from __future__ import annotations

import collections
import logging
import math
from typing import Annotated, Any, Iterable, Literal, Sequence

import numpy as np
import msgspec
from msgspec import Meta

from drivers.base import ChannelSpec
from robotics.estimation.attitude import AttitudeFilter, compass_heading_deg
from robotics.estimation.markers import MarkerFixError, MarkerObservation, fix_position
from robotics.estimation.pose import PoseEstimator
from robotics.estimation.uwb import trilaterate
from server.config import Table

log = logging.getLogger(__name__)

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
DEFAULT_TILT_CRIT_RAD = 0.26
# Levenberg-Marquardt iterations after trilaterate's linear start: with 4 anchors and 5 cm noise the
# fix does not improve past the first (1000 random fixes in this field: mean 5.59 cm with 1, 2 or 20),
# while the default 20 cost 3.5× the time in the control thread (~470 µs against ~130 µs: once
# converged, a failed LM step retries up to 10 solves before giving up)
TRILATERATION_ITERATIONS = 1
# a marker fix turns range and bearing into a place with the estimated heading: until the magnetometer is
# calibrated that heading may be ~10° off (the warning below), which the fix's covariance must carry (at 3 m,
# 10° is 0.5 m across the line of sight), or the gate refuses every fix as inconsistent
UNCALIBRATED_YAW_SIGMA_RAD = math.radians(10.0)


def uwb_channel(i: int) -> str:
    return f"uwb_range_{i}_m"


class EstimationStage:
    """Attitude, heading and position from IMU, magnetometer, encoders and UWB; see the module doc.

    ``available`` are the driver's channel names: the stage uses the magnetometer,
    encoders and UWB only if the driver has them (the IMU it must have).
    ``range_correction`` are polynomial coefficients, highest power first
    (``true ≈ polyval(c, raw)``); ``mag_offset_ut``/``mag_scale`` the magnetometer
    calibration (None: raw readings).

    >>> st = EstimationStage(available=ACC + GYRO + MAG)
    >>> values = {"imu_acc_x_m_s2": 0.0, "imu_acc_y_m_s2": 0.0, "imu_acc_z_m_s2": 9.81,
    ...           "imu_gyro_x_rad_s": 0.0, "imu_gyro_y_rad_s": 0.0, "imu_gyro_z_rad_s": 0.0,
    ...           "mag_x_ut": 25.0, "mag_y_ut": 0.0, "mag_z_ut": -43.0}     # north is straight ahead
    >>> st.process(values, 0.01, 0.0)
    >>> round(values["heading_deg"], 3), round(values["tilt_rad"], 6)
    (0.0, 0.0)
    """

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
        yaw_sigma_rad: float = math.radians(2.0),
        gate_chi2: float = 13.8,
        range_correction: Sequence[float] = (1.0, 0.0),
        mag_offset_ut: Sequence[float] | None = None,
        mag_scale: Sequence[float] | None = None,
        tilt_crit_rad: float | None = None,
    ) -> None:
        have = set(available)
        missing = [c for c in ACC + GYRO if c not in have]
        if missing:
            raise ValueError(f"estimation needs the IMU channels; missing {', '.join(missing)}")
        if uwb_z not in ("fixed", "free"):
            raise ValueError("uwb_z must be 'fixed' or 'free'")
        if not (time_scale > 0 and max_dt_s > 0 and wheel_radius_m > 0 and track_m > 0 and ticks_per_rev > 0):
            raise ValueError("time_scale, max_dt_s, wheel_radius_m, track_m and ticks_per_rev must be > 0")
        self.has_mag = all(c in have for c in MAG)
        self.has_encoders = all(c in have for c in ENCODERS)
        a = np.asarray(anchors, dtype=float).reshape(-1, 3) if len(anchors) else np.zeros((0, 3))
        self.uwb_names = tuple(uwb_channel(i) for i in range(len(a)) if uwb_channel(i) in have)
        self.has_uwb = len(a) >= 3 and len(self.uwb_names) == len(a)
        self.anchors = a
        self.tag_height_m = float(tag_height_m)
        self.uwb_z = uwb_z
        self.time_scale = float(time_scale)
        self.max_dt_s = float(max_dt_s)
        self.wheel_radius_m = float(wheel_radius_m)
        self.track_m = float(track_m)
        self.m_per_tick = 2.0 * math.pi * self.wheel_radius_m / int(ticks_per_rev)
        self.uwb_sigma_m = float(uwb_sigma_m)
        self.odom_sigma = float(odom_sigma_m_per_sqrt_m)
        self.yaw_sigma_rad = float(yaw_sigma_rad)
        self.gate_chi2 = float(gate_chi2)
        self.tilt_crit_rad = DEFAULT_TILT_CRIT_RAD if tilt_crit_rad is None else float(tilt_crit_rad)
        self.attitude = AttitudeFilter(k_acc=k_acc, k_mag=k_mag, k_bias=k_bias, declination=declination_rad)
        self.pose: PoseEstimator | None = None
        self.range_correction: tuple[float, ...] = (1.0, 0.0)
        self.set_range_correction(range_correction)
        self.mag_offset_ut: tuple[float, float, float] | None = None
        self.mag_scale: tuple[float, float, float] | None = None
        if mag_offset_ut is not None and mag_scale is not None:
            self.set_mag_calibration(mag_offset_ut, mag_scale)
        # running state
        self.roll = self.pitch = self.yaw = self.tilt = math.nan
        self.heading_deg = math.nan
        self.uwb_fix: tuple[float, float] = (math.nan, math.nan)
        self.odom_yaw_rad = 0.0  # unwrapped turn measured by the encoders since start-up (for behaviors)
        self.fixes = 0
        self.marker_fix: dict[str, Any] | None = None  # the latest marker fix (snapshot: estimation.marker_fix)
        self.marker_fixes = {"accepted": 0, "gated": 0, "failed": 0}
        # (t, x, y, yaw) of the estimate each tick, kept once marker fixes arrive: a camera frame is
        # ~0.05-0.2 s old when its fix arrives, and the rover has moved meanwhile
        self._history: collections.deque[tuple[float, float, float, float]] | None = None
        self._ticks: tuple[float, float] | None = None
        self._last_ranges: tuple[Any, ...] | None = None
        self._outputs = ATTITUDE_OUT + (HEADING_OUT if self.has_mag else ()) + POSE_OUT + \
            (UWB_OUT if self.has_uwb else ())

    # ------------------------------------------------------------------ description
    def channels(self) -> list[ChannelSpec]:
        """The derived channels as the dashboard shows them."""
        crit = self.tilt_crit_rad
        tilt_max = max(0.8, round(2.0 * crit, 2))
        if self.has_uwb:
            lo = np.floor(self.anchors[:, :2].min(axis=0) - 2.0)
            hi = np.ceil(self.anchors[:, :2].max(axis=0) + 2.0)
        else:
            lo, hi = np.array([-1000.0, -1000.0]), np.array([1000.0, 1000.0])
        angle = dict(unit="rad", min=-math.pi, max=math.pi, widget="digital", decimals=3)
        specs = [
            ChannelSpec("roll_rad", label="Roll", **angle),
            ChannelSpec("pitch_rad", label="Pitch", **angle),
            ChannelSpec("yaw_rad", label="Yaw (ENU)", **angle),
            ChannelSpec("tilt_rad", "rad", 0.0, tilt_max, "bar", "Tilt", warn_high=round(0.6 * crit, 3),
                        crit_high=crit, plot=True, decimals=3),
        ]
        if self.has_mag:
            specs.append(ChannelSpec("heading_deg", "°", 0.0, 360.0, "dial", "Heading", decimals=1))
        specs += [
            ChannelSpec("est_x_m", "m", float(lo[0]), float(hi[0]), "digital", "Position x (fused)", decimals=3),
            ChannelSpec("est_y_m", "m", float(lo[1]), float(hi[1]), "digital", "Position y (fused)", decimals=3),
        ]
        if self.has_uwb:
            specs += [
                ChannelSpec("uwb_x_m", "m", float(lo[0]), float(hi[0]), "digital", "UWB fix x", decimals=3),
                ChannelSpec("uwb_y_m", "m", float(lo[1]), float(hi[1]), "digital", "UWB fix y", decimals=3),
            ]
        return specs

    def sources(self, channels: Iterable[str]) -> set[str]:
        """The driver channels that must stay acquired for ``channels`` (derived ones map to their inputs).

        >>> sorted(EstimationStage(available=ACC + GYRO).sources(["tilt_rad", "battery_v"]))[:2]
        ['battery_v', 'imu_acc_x_m_s2']
        """
        out: set[str] = set()
        for c in channels:
            if c in ATTITUDE_OUT or c in HEADING_OUT:
                out.update(ACC + GYRO)
                if c in ("yaw_rad", "heading_deg") and self.has_mag:
                    out.update(MAG)
            elif c in POSE_OUT:
                out.update(ACC + GYRO + (MAG if self.has_mag else ()) + self.uwb_names
                           + (ENCODERS if self.has_encoders else TWIST))
            elif c in UWB_OUT:
                out.update(self.uwb_names)
            else:
                out.add(c)
        return out

    # ------------------------------------------------------------------ calibrations
    def set_mag_calibration(self, offset_ut: Sequence[float] | None, scale: Sequence[float] | None) -> None:
        """Apply (or with None, remove) a magnetometer calibration; the attitude filter restarts
        from the next sample, so the heading is right at once instead of converging."""
        if offset_ut is None or scale is None:
            self.mag_offset_ut = self.mag_scale = None
        else:
            o = tuple(float(v) for v in offset_ut)
            s = tuple(float(v) for v in scale)
            if len(o) != 3 or len(s) != 3 or not all(map(math.isfinite, o + s)) or min(s) <= 0:
                raise ValueError("magnetometer calibration: offset_ut and scale are 3 finite numbers, scale > 0")
            self.mag_offset_ut, self.mag_scale = o, s  # type: ignore[assignment]
        self.attitude.reset()

    def set_range_correction(self, coefficients: Sequence[float]) -> None:
        """UWB range correction ``true ≈ polyval(coefficients, raw)``, highest power first."""
        c = tuple(float(v) for v in coefficients)
        if not c or not all(map(math.isfinite, c)):
            raise ValueError("range correction needs at least one finite coefficient")
        self.range_correction = c
        self._last_ranges = None  # re-solve the held ranges with the new correction

    # ------------------------------------------------------------------ per tick
    def sim_dt(self, dt_s: float) -> float:
        """The driver-clock duration of a loop period ``dt_s`` (the simulator may run faster)."""
        return min(dt_s * self.time_scale, self.max_dt_s)

    def process(self, values: dict[str, float], dt_s: float, now: float) -> None:
        dt = self.sim_dt(dt_s)
        self._update_attitude(values, dt)
        self._update_pose(values, dt)
        values["roll_rad"] = self.roll
        values["pitch_rad"] = self.pitch
        values["yaw_rad"] = self.yaw
        values["tilt_rad"] = self.tilt
        if self.has_mag:
            values["heading_deg"] = self.heading_deg
        pose = self.pose
        values["est_x_m"], values["est_y_m"] = (float(pose.state[0]), float(pose.state[1])) if pose else (math.nan, math.nan)
        if self._history is not None and pose is not None:
            self._history.append((now, float(pose.state[0]), float(pose.state[1]), float(pose.state[2])))
        if self.has_uwb:
            values["uwb_x_m"], values["uwb_y_m"] = self.uwb_fix

    def _update_attitude(self, values: dict[str, float], dt: float) -> None:
        try:
            acc = (values[ACC[0]], values[ACC[1]], values[ACC[2]])
            gyro = (values[GYRO[0]], values[GYRO[1]], values[GYRO[2]])
        except KeyError:  # the IMU was switched off in the acquisition settings
            self.roll = self.pitch = self.yaw = self.tilt = self.heading_deg = math.nan
            self.attitude.reset()
            return
        if not all(map(math.isfinite, acc + gyro)):
            return
        mag = None
        if self.has_mag:
            m = (values.get(MAG[0], math.nan), values.get(MAG[1], math.nan), values.get(MAG[2], math.nan))
            if all(map(math.isfinite, m)):
                if self.mag_offset_ut is not None:
                    o, s = self.mag_offset_ut, self.mag_scale
                    m = ((m[0] - o[0]) * s[0], (m[1] - o[1]) * s[1], (m[2] - o[2]) * s[2])
                mag = m
        f = self.attitude
        if f.initialised and not dt > 0.0:
            return
        if not f.initialised and self.has_mag and mag is None:
            return  # wait for a field reading: initialising without one would start the yaw at 0
        roll, pitch, yaw = f.update(dt, acc, gyro, mag)
        self.roll, self.pitch, self.yaw = roll, pitch, yaw
        self.tilt = math.acos(max(-1.0, min(1.0, math.cos(roll) * math.cos(pitch))))
        self.heading_deg = compass_heading_deg(yaw) if self.has_mag else math.nan

    def _odometry(self, values: dict[str, float], dt: float) -> tuple[float, float]:
        """(distance rolled m, turn rad) since the last tick."""
        if self.has_encoders and ENCODERS[0] in values and ENCODERS[1] in values:
            ticks = (values[ENCODERS[0]], values[ENCODERS[1]])
            last, self._ticks = self._ticks, ticks
            if last is None:
                return 0.0, 0.0
            dl = (ticks[0] - last[0]) * self.m_per_tick
            dr = (ticks[1] - last[1]) * self.m_per_tick
            return 0.5 * (dl + dr), (dr - dl) / self.track_m
        self._ticks = None
        v, w = values.get(TWIST[0], 0.0), values.get(TWIST[1], 0.0)
        if not (math.isfinite(v) and math.isfinite(w)):
            return 0.0, 0.0
        return v * dt, w * dt

    def _update_pose(self, values: dict[str, float], dt: float) -> None:
        ds, dth = self._odometry(values, dt)
        self.odom_yaw_rad += dth
        yaw = self.yaw if self.has_mag and math.isfinite(self.yaw) else None
        pose = self.pose
        if pose is None and not self.has_uwb:  # dead reckoning only: start at the origin
            pose = self.pose = self._new_pose(0.0, 0.0, yaw)
        if pose is not None and dt > 0.0:
            pitch = self.pitch if math.isfinite(self.pitch) else 0.0
            pose.predict(dt, ds * math.cos(pitch) / dt, dth / dt, yaw=yaw)
        if self.has_uwb:
            self._update_uwb(values, yaw)

    def _new_pose(self, x: float, y: float, yaw: float | None) -> PoseEstimator:
        return PoseEstimator(
            x, y, 0.0 if yaw is None else yaw, initial_position_sigma_m=max(self.uwb_sigma_m, 1e-3),
            initial_yaw_sigma_rad=self.yaw_sigma_rad if yaw is not None else math.pi,
            odom_sigma_m_per_sqrt_m=self.odom_sigma, uwb_sigma_m=self.uwb_sigma_m,
            yaw_sigma_rad=self.yaw_sigma_rad, gate_chi2=self.gate_chi2,
        )

    def _update_uwb(self, values: dict[str, float], yaw: float | None) -> None:
        raw = [values.get(n, math.nan) for n in self.uwb_names]
        key = tuple(r if r == r else None for r in raw)  # NaN != NaN: compare dropouts as None
        if key == self._last_ranges:
            return  # held between measurements
        self._last_ranges = key
        corrected = np.polyval(self.range_correction, np.asarray(raw, dtype=float))
        if np.count_nonzero(np.isfinite(corrected)) < 3:
            self.uwb_fix = (math.nan, math.nan)
            return
        if self.uwb_z == "fixed":
            fix = trilaterate(self.anchors, corrected, z_fixed=self.tag_height_m,
                              iterations=TRILATERATION_ITERATIONS)
        else:
            fix = trilaterate(self.anchors, corrected, z_hint=self.tag_height_m, iterations=TRILATERATION_ITERATIONS)
        self.uwb_fix = (float(fix[0]), float(fix[1]))
        self.fixes += 1
        if self.pose is None:
            self.pose = self._new_pose(self.uwb_fix[0], self.uwb_fix[1], yaw)
        else:
            self.pose.update_uwb(self.uwb_fix)

    def update_markers(self, observations: Sequence[MarkerObservation], marker_map: Any, sample_t: float,
                       now: float) -> bool:
        """Correct the position with markers seen at ``sample_t`` (monotonic s, the frame's capture);
        ``marker_map`` id → (x, y, psi). Returns whether the fix was used (False: no estimate or heading
        yet, a degenerate fix, or gated out as inconsistent). Control thread, under the loop's lock.

        >>> st = EstimationStage(available=ACC + GYRO)          # dead reckoning: starts at the origin
        >>> st.process({c: 0.0 for c in ACC + GYRO} | {"imu_acc_z_m_s2": 9.81}, 0.01, 0.0)
        >>> m = {0: (2.0, 0.0, math.pi)}
        >>> st.update_markers([MarkerObservation(0, 2.1, 0.0, range_sigma_m=0.01)], m, 0.0, 0.05)
        True
        >>> round(st.marker_fix["x_m"], 3), st.marker_fix["used"]
        (-0.1, [0])
        """
        if self._history is None:
            self._history = collections.deque(maxlen=4096)
        pose = self.pose
        if pose is None:
            if not (self.has_mag and math.isfinite(self.yaw)):
                self.marker_fixes["failed"] += 1
                return False  # no heading to turn ranges and bearings into a place with
            then = (0.0, 0.0, self.yaw)
            yaw_sigma = self.yaw_sigma_rad
        else:
            then = self._pose_at(sample_t)
            yaw_sigma = math.sqrt(max(float(pose.covariance[2, 2]), 0.0))
        if self.has_mag and not self.heading_calibrated:
            yaw_sigma = max(yaw_sigma, UNCALIBRATED_YAW_SIGMA_RAD)
        try:
            fix = fix_position(observations, marker_map, then[2], yaw_sigma)
        except MarkerFixError:
            self.marker_fixes["failed"] += 1
            return False
        sigma = max(fix.position_sigma_m, 1e-3)
        if pose is None:
            self.pose = self._new_pose(fix.x, fix.y, self.yaw)
            z, accepted = (fix.x, fix.y), True
        else:
            # the fix is of the place at capture time: move it by what the estimate moved since
            z = (fix.x + float(pose.state[0]) - then[0], fix.y + float(pose.state[1]) - then[1])
            accepted = pose.update_uwb(z, sigma_m=sigma)
        self.marker_fixes["accepted" if accepted else "gated"] += 1
        self.marker_fix = {"x_m": round(z[0], 4), "y_m": round(z[1], 4), "sigma_m": round(sigma, 4),
                           "used": list(fix.used), "accepted": accepted, "sample_t": sample_t,
                           "age_at_fusion_s": round(now - sample_t, 4)}
        return accepted

    def _pose_at(self, t: float) -> tuple[float, float, float]:
        """The estimate (x, y, yaw) of the last tick at or before ``t`` (the current one if none is that old)."""
        hist = self._history
        pose = self.pose
        assert pose is not None
        current = (float(pose.state[0]), float(pose.state[1]), float(pose.state[2]))
        if not hist:
            return current
        for entry in reversed(hist):
            if entry[0] <= t:
                return entry[1:]
        return hist[0][1:]

    @property
    def outputs(self) -> tuple[str, ...]:
        """Names of the channels :meth:`process` writes."""
        return self._outputs

    @property
    def heading_calibrated(self) -> bool:
        return self.mag_offset_ut is not None

    def heading_warning(self) -> str | None:
        """Why the compass heading may be off, or None (no magnetometer: no heading at all)."""
        if not self.has_mag or self.heading_calibrated:
            return None
        return ("heading uncalibrated: hard and soft iron may put it ~10° off until a magnetometer "
                "calibration runs (POST /api/calibration/magnetometer)")

    def status(self) -> dict[str, Any]:
        """For the snapshot's ``estimation`` field."""
        out = {"heading_calibrated": self.heading_calibrated if self.has_mag else None,
               "warning": self.heading_warning()}
        if self.marker_fix is not None:
            out["marker_fix"] = self.marker_fix
            out["marker_fixes"] = dict(self.marker_fixes)
        return out


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
    yaw_sigma_deg: Annotated[float, Meta(gt=0.0, le=180.0)] = 2.0
    gate_chi2: Annotated[float, Meta(gt=0.0, le=1e6)] = 13.8


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
        yaw_sigma_rad=math.radians(est.yaw_sigma_deg),
        gate_chi2=est.gate_chi2,
        range_correction=est.uwb_range_correction,
        tilt_crit_rad=tilt_crit,
    )


__all__ = ["EstimationConfig", "EstimationStage", "UwbConfig", "build_estimation"]
