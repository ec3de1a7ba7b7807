"""The position estimator: wheel odometry, UWB fixes and marker fixes fused into the rover's planar position.

Each tick (after the attitude estimator, :mod:`server.runtime.estimation.attitude`, whose pitch and
yaw it uses):

1. wheel odometry from the encoder counts (or ``linear_m_s``/``angular_rad_s`` when the encoders
   are not acquired), horizontal advance ``cos(pitch)`` of the distance rolled, dead-reckoned by
   :class:`robotics.estimation.pose.PoseEstimator` with the filter's yaw fused as an absolute heading;
2. when the UWB ranges change (the driver holds them between measurements), the range correction
   polynomial, then :func:`robotics.estimation.uwb.trilaterate`, and the fix corrects the estimate;
3. marker observations from the vision pipeline (:mod:`server.runtime.external` calls
   :meth:`PositionStage.update_markers` once per camera frame): a position fix with the estimated
   heading at the frame's capture time (:func:`robotics.estimation.markers.fix_position`), moved by
   the odometry since then, corrects the estimate like a UWB fix (same gate).

Without UWB the estimate starts at the origin (dead reckoning); with it, at the first fix; or where
:meth:`PositionStage.set_pose` puts it (a surveyed start point).

UWB errors in the field are mostly static — multipath and an obstacle's shadow stay while the tag
stays — so ten fixes at one stop are not ten independent measurements: fused as such, the estimate
takes the local bias for the truth. With ``uwb_correlation_m`` > 0, the fixes taken while the estimate
stays within that distance of where the run began count together as at most two independent fixes: the
first with the fix's variance, the n-th (n ≥ 2) with ``n·(n−1)`` times it (Σ 1/(n(n−1)) = 1), so standing
still for a minute is worth what standing still for a second is (docs/sensing.md has the figures).
While the compass is disturbed (:mod:`server.runtime.estimation.magcheck`) the yaw fused is the gyro's,
as sure as the compass's: letting its variance grow with the disturbance's age let biased UWB fixes turn
the estimate's heading through the filter's cross-covariance (7° in 10 s beside the field profile's drain
cover, the rover driving crooked on it), while the gyro, its bias learnt at rest, drifts ~0.01°/s.
"""

from __future__ import annotations

import collections
import math
from typing import Any, Iterable, Sequence

import numpy as np

from drivers.base import ChannelSpec
from robotics.estimation.markers import MarkerFixError, MarkerObservation, fix_position
from robotics.estimation.pose import PoseEstimator
from robotics.estimation.uwb import trilaterate
from server.runtime.estimation.attitude import AttitudeStage
from server.runtime.estimation.channels import ACC, ENCODERS, GYRO, MAG, POSE_OUT, TWIST, UWB_OUT, uwb_channel
from server.runtime.stage import Stage

# Levenberg-Marquardt iterations after trilaterate's linear start: with 4 anchors and 5 cm noise the
# fix does not improve past the first (1000 random fixes in this field: mean 5.59 cm with 1, 2 or 20),
# while the default 20 cost 3.5× the time in the control thread (~470 µs against ~130 µs: once
# converged, a failed LM step retries up to 10 solves before giving up)
TRILATERATION_ITERATIONS = 1
# a marker fix turns range and bearing into a place with the estimated heading: until the magnetometer is
# calibrated that heading may be ~10° off (the attitude stage's warning), which the fix's covariance must carry
# (at 3 m, 10° is 0.5 m across the line of sight), or the gate refuses every fix as inconsistent
UNCALIBRATED_YAW_SIGMA_RAD = math.radians(10.0)
# ... and the track dead-reckoned on it drifts sideways: the field profile's hard iron puts the uncalibrated
# compass 2.9° off on average (8.7° at worst) round a 1 m circle, the same error tick after tick, which the EKF
# fusing the yaw every tick cannot see; at the step-and-fix tuning (1.5 cm/√m) the estimate trusted that track
# over the UWB fixes and lagged behind them: 13.5 cm mean error driving the circle against raw UWB's 13.9 cm;
# at 5 cm/√m (the bias's ~5 cm per metre driven) 8.5 cm (docs/sensing.md, "Driving")
UNCALIBRATED_ODOM_SIGMA_M_PER_SQRT_M = 0.05


class PositionStage(Stage):
    """See the module docstring. ``attitude``: the stage whose pitch and yaw this one uses; ``available``:
    the driver's channel names (encoders and UWB ranges are used when present); ``range_correction``:
    polynomial coefficients, highest power first (``true ≈ polyval(c, raw)``); ``dt_s`` of :meth:`process`
    is on the driver's clock."""

    name = "position"

    def __init__(self, attitude: AttitudeStage, *, available: Iterable[str], anchors: Sequence[Sequence[float]] = (),
                 tag_height_m: float = 0.15, uwb_z: str = "fixed", wheel_radius_m: float = 0.05,
                 track_m: float = 0.30, ticks_per_rev: int = 1024, uwb_sigma_m: float = 0.05,
                 odom_sigma_m_per_sqrt_m: float = 0.05, odom_drift_sigma_m_per_sqrt_s: float = 0.01,
                 yaw_sigma_rad: float = math.radians(2.0),
                 gate_chi2: float = 13.8, range_correction: Sequence[float] = (1.0, 0.0),
                 uwb_correlation_m: float = 0.0) -> None:
        if uwb_z not in ("fixed", "free"):
            raise ValueError("uwb_z must be 'fixed' or 'free'")
        if not (wheel_radius_m > 0 and track_m > 0 and ticks_per_rev > 0):
            raise ValueError("wheel_radius_m, track_m and ticks_per_rev must be > 0")
        have = set(available)
        self.attitude = attitude
        self.has_encoders = all(c in have for c in ENCODERS)
        a = np.asarray(anchors, dtype=float).reshape(-1, 3) if len(anchors) else np.zeros((0, 3))
        self.uwb_names = tuple(uwb_channel(i) for i in range(len(a)) if uwb_channel(i) in have)
        self.has_uwb = len(a) >= 3 and len(self.uwb_names) == len(a)
        self.anchors = a
        self.tag_height_m = float(tag_height_m)
        self.uwb_z = uwb_z
        self.track_m = float(track_m)
        self.m_per_tick = 2.0 * math.pi * float(wheel_radius_m) / int(ticks_per_rev)
        self.uwb_sigma_m = float(uwb_sigma_m)
        self.odom_sigma = float(odom_sigma_m_per_sqrt_m)
        self.drift_sigma = float(odom_drift_sigma_m_per_sqrt_s)
        self.yaw_sigma_rad = float(yaw_sigma_rad)
        self.gate_chi2 = float(gate_chi2)
        if not uwb_correlation_m >= 0.0:
            raise ValueError("uwb_correlation_m must be >= 0")
        self.uwb_correlation_m = float(uwb_correlation_m)
        self.uwb_robust = False
        self._cluster: tuple[float, float] | None = None  # where the current run of correlated fixes began
        self._cluster_n = 0
        self.pose: PoseEstimator | None = None
        self.range_correction: tuple[float, ...] = (1.0, 0.0)
        self.set_range_correction(range_correction)
        self.uwb_fix: tuple[float, float] = (math.nan, math.nan)
        self.odom_yaw_rad = 0.0  # unwrapped turn measured by the encoders since start-up (for behaviours)
        self.fixes = 0
        self.marker_fix: dict[str, Any] | None = None  # the latest marker fix (snapshot: estimation.marker_fix)
        self.marker_fixes = {"accepted": 0, "gated": 0, "failed": 0}
        # (t, x, y, yaw) of the estimate each tick, kept once marker fixes arrive: a camera frame is
        # ~0.05-0.2 s old when its fix arrives, and the rover has moved meanwhile
        self._history: collections.deque[tuple[float, float, float, float]] | None = None
        self._ticks: tuple[float, float] | None = None
        self._last_ranges: tuple[Any, ...] | None = None
        self.outputs = POSE_OUT + (UWB_OUT if self.has_uwb else ())

    # ------------------------------------------------------------------ description
    def channels(self) -> list[ChannelSpec]:
        if self.has_uwb:
            lo = np.floor(self.anchors[:, :2].min(axis=0) - 2.0)
            hi = np.ceil(self.anchors[:, :2].max(axis=0) + 2.0)
        else:
            lo, hi = np.array([-1000.0, -1000.0]), np.array([1000.0, 1000.0])
        specs = [
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
        """The fused position needs every input (the attitude's too); a UWB fix its ranges."""
        out: set[str] = set()
        for c in channels:
            if c in POSE_OUT:
                out.update(ACC + GYRO + (MAG if self.attitude.has_mag else ()) + self.uwb_names
                           + (ENCODERS if self.has_encoders else TWIST))
            elif c in UWB_OUT:
                out.update(self.uwb_names)
            else:
                out.add(c)
        return out

    def status(self) -> dict[str, Any] | None:
        if self.marker_fix is None:
            return None
        return {"marker_fix": self.marker_fix, "marker_fixes": dict(self.marker_fixes)}

    def set_range_correction(self, coefficients: Sequence[float]) -> None:
        """UWB range correction ``true ≈ polyval(coefficients, raw)``, highest power first."""
        c = tuple(float(v) for v in coefficients)
        if not c or not all(map(math.isfinite, c)):
            raise ValueError("range correction needs at least one finite coefficient")
        self.range_correction = c
        self._last_ranges = None  # re-solve the held ranges with the new correction

    # ------------------------------------------------------------------ per tick
    def process(self, values: dict[str, float], dt_s: float, now: float) -> None:
        self._update(values, dt_s)
        pose = self.pose
        values["est_x_m"], values["est_y_m"] = (float(pose.state[0]), float(pose.state[1])) if pose else (math.nan, math.nan)
        if self._history is not None and pose is not None:
            self._history.append((now, float(pose.state[0]), float(pose.state[1]), float(pose.state[2])))
        if self.has_uwb:
            values["uwb_x_m"], values["uwb_y_m"] = self.uwb_fix

    def _heading(self) -> float | None:
        """The attitude's yaw when the magnetometer makes it absolute, else None."""
        att = self.attitude
        return att.yaw if att.has_mag and math.isfinite(att.yaw) else None

    def set_pose(self, x: float, y: float, yaw: float | None = None, sigma_m: float = 0.02) -> None:
        """Put the estimate at a known place (a surveyed start point), ``sigma_m`` its uncertainty; the yaw is the
        attitude's unless given. Control thread, or under the loop's lock.

        >>> from server.runtime.estimation.channels import ACC, GYRO
        >>> st = PositionStage(AttitudeStage(available=ACC + GYRO), available=ACC + GYRO)
        >>> st.set_pose(2.5, 2.0)
        >>> st.pose.pose[:2], round(st.pose.position_sigma_m, 3)
        ((2.5, 2.0), 0.02)
        """
        if not all(map(math.isfinite, (x, y, sigma_m))) or sigma_m <= 0:
            raise ValueError("set_pose: x, y and sigma_m must be finite, sigma_m > 0")
        heading = self._heading() if yaw is None else float(yaw)
        self.pose = PoseEstimator(
            float(x), float(y), 0.0 if heading is None else heading, initial_position_sigma_m=float(sigma_m),
            initial_yaw_sigma_rad=self.yaw_sigma_rad if heading is not None else math.pi,
            odom_sigma_m_per_sqrt_m=self.odom_sigma, drift_sigma_m_per_sqrt_s=self.drift_sigma,
            uwb_sigma_m=self.uwb_sigma_m, yaw_sigma_rad=self.yaw_sigma_rad, gate_chi2=self.gate_chi2)
        self._cluster, self._cluster_n = None, 0

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

    def _update(self, values: dict[str, float], dt: float) -> None:
        ds, dth = self._odometry(values, dt)
        self.odom_yaw_rad += dth
        yaw = self._heading()
        pose = self.pose
        if pose is None and not self.has_uwb:  # dead reckoning only: start at the origin
            pose = self.pose = self._new_pose(0.0, 0.0, yaw)
        if pose is not None and dt > 0.0:
            pitch = self.attitude.pitch if math.isfinite(self.attitude.pitch) else 0.0
            pose.odom_var_per_m = self._odom_sigma() ** 2
            pose.predict(dt, ds * math.cos(pitch) / dt, dth / dt, yaw=yaw)
        if self.has_uwb:
            self._update_uwb(values, yaw)

    def _odom_sigma(self) -> float:
        """The odometry's random walk per √m: ``odom_sigma_m_per_sqrt_m``, and at least
        :data:`UNCALIBRATED_ODOM_SIGMA_M_PER_SQRT_M` while a magnetometer is there but not calibrated."""
        att = self.attitude
        if att.has_mag and not att.heading_calibrated:
            return max(self.odom_sigma, UNCALIBRATED_ODOM_SIGMA_M_PER_SQRT_M)
        return self.odom_sigma

    def _new_pose(self, x: float, y: float, yaw: float | None) -> PoseEstimator:
        return PoseEstimator(
            x, y, 0.0 if yaw is None else yaw, initial_position_sigma_m=max(self.uwb_sigma_m, 1e-3),
            initial_yaw_sigma_rad=self.yaw_sigma_rad if yaw is not None else math.pi,
            odom_sigma_m_per_sqrt_m=self.odom_sigma, drift_sigma_m_per_sqrt_s=self.drift_sigma,
            uwb_sigma_m=self.uwb_sigma_m, yaw_sigma_rad=self.yaw_sigma_rad, gate_chi2=self.gate_chi2,
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
            sigma = self._correlated_sigma()
            if self.uwb_robust:
                sigma = (sigma or self.uwb_sigma_m) * self._consistency(fix, corrected)
            self.pose.update_uwb(self.uwb_fix, sigma_m=sigma)

    def _consistency(self, fix, corrected) -> float:
        """How much less to trust a fix whose ranges disagree with it: ``max(1, rms residual / uwb_sigma_m)``
        (the residuals' rms over the redundancy n − 2; an NLOS anchor makes the ranges inconsistent)."""
        ok = np.isfinite(corrected)
        n = int(np.count_nonzero(ok))
        if n <= 2:
            return 1.0
        res = np.linalg.norm(self.anchors[ok] - fix, axis=1) - corrected[ok]
        rms = math.sqrt(float(res @ res) / (n - 2))
        return max(1.0, rms / self.uwb_sigma_m)

    def _correlated_sigma(self) -> float | None:
        """The σ to fuse this fix with: ``uwb_sigma_m · √(n(n−1))`` for the n-th fix (n ≥ 2) within
        ``uwb_correlation_m`` of where the run began, ``uwb_sigma_m`` for the first (None: the default, every
        fix independent)."""
        if self.uwb_correlation_m <= 0.0 or self.pose is None:
            return None
        x, y = float(self.pose.state[0]), float(self.pose.state[1])
        c = self._cluster
        if c is None or math.hypot(x - c[0], y - c[1]) > self.uwb_correlation_m:
            self._cluster, self._cluster_n = (x, y), 0
        self._cluster_n += 1
        n = self._cluster_n
        return self.uwb_sigma_m * (math.sqrt(n * (n - 1)) if n > 1 else 1.0)

    # ------------------------------------------------------------------ marker fixes (the vision pipeline)
    def update_markers(self, observations: Sequence[MarkerObservation], marker_map: Any, sample_t: float,
                       now: float) -> bool:
        """Correct the position with markers seen at ``sample_t`` (monotonic s, the frame's capture);
        ``marker_map`` id → (x, y, psi). Returns whether the fix was used (False: no estimate or heading
        yet, a degenerate fix, or gated out as inconsistent). Control thread, under the loop's lock."""
        if self._history is None:
            self._history = collections.deque(maxlen=4096)
        pose = self.pose
        att = self.attitude
        if pose is None:
            if not (att.has_mag and math.isfinite(att.yaw)):
                self.marker_fixes["failed"] += 1
                return False  # no heading to turn ranges and bearings into a place with
            then = (0.0, 0.0, att.yaw)
            yaw_sigma = self.yaw_sigma_rad
        else:
            then = self._pose_at(sample_t)
            yaw_sigma = math.sqrt(max(float(pose.covariance[2, 2]), 0.0))
        if att.has_mag and not att.heading_calibrated:
            yaw_sigma = max(yaw_sigma, UNCALIBRATED_YAW_SIGMA_RAD)
        try:
            fix = fix_position(observations, marker_map, then[2], yaw_sigma)
        except MarkerFixError:
            self.marker_fixes["failed"] += 1
            return False
        sigma = max(fix.position_sigma_m, 1e-3)
        if pose is None:
            self.pose = self._new_pose(fix.x, fix.y, att.yaw)
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


__all__ = ["PositionStage", "TRILATERATION_ITERATIONS", "UNCALIBRATED_ODOM_SIGMA_M_PER_SQRT_M",
           "UNCALIBRATED_YAW_SIGMA_RAD"]
