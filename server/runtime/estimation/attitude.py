"""The attitude estimator: roll, pitch, yaw, tilt and the compass heading from the IMU and the magnetometer.

:class:`robotics.estimation.attitude.AttitudeFilter` on the accelerometer and gyro, corrected by the
magnetometer when the driver has one, its stored calibration applied first (``(raw − offset) ·
scale``, :func:`robotics.estimation.magcal.apply`). A value the inputs cannot give yet (no IMU
sample; no magnetometer for the heading) is NaN, which the telemetry sends as ``null`` and which
never trips a rule. Until the magnetometer is calibrated, hard and soft iron may put the heading
~10° off; :meth:`AttitudeStage.heading_warning` says so.

With ``gyro_bias_at_rest`` on, the gyro bias is also learnt whenever the wheels have stood still for
:data:`REST_S` (:meth:`robotics.estimation.attitude.AttitudeFilter.observe_at_rest`): the magnetometer's
slow correction cannot learn it where the field is disturbed, and that is exactly where the gyro must carry
the heading (on the field profile the learnt bias was off by 0.003 rad/s, 0.18°/s, after a calibration
and a drive toward steel; at rest it converges to ~2e-4 rad/s in a few seconds).

With ``mag_check`` on (``[estimation] mag_check``), every calibrated reading first passes the
disturbance check (:mod:`server.runtime.estimation.magcheck`): while the field is disturbed the filter
runs on the gyro and accelerometer alone (the heading carries on from the gyro), the channel
``mag_disturbed`` reads 1 and each change is an event.

>>> from server.runtime.estimation.channels import ACC, GYRO, MAG
>>> st = AttitudeStage(available=ACC + GYRO + MAG)
>>> values = {"imu_acc_x_m_s2": 0.0, "imu_acc_y_m_s2": 0.0, "imu_acc_z_m_s2": 9.81,
...           "imu_gyro_x_rad_s": 0.0, "imu_gyro_y_rad_s": 0.0, "imu_gyro_z_rad_s": 0.0,
...           "mag_x_ut": 25.0, "mag_y_ut": 0.0, "mag_z_ut": -43.0}     # north is straight ahead
>>> st.process(values, 0.01, 0.0)
>>> round(values["heading_deg"], 3), round(values["tilt_rad"], 6)
(0.0, 0.0)
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Sequence

from drivers.base import ChannelSpec
from robotics.estimation.attitude import AttitudeFilter, compass_heading_deg
from server.runtime.estimation.channels import ACC, ATTITUDE_OUT, GYRO, HEADING_OUT, MAG, MAG_CHECK_OUT, TWIST
from server.runtime.estimation.magcheck import MagneticCheck
from server.runtime.stage import Stage

DEFAULT_TILT_CRIT_RAD = 0.26
#: the wheels still (|v| and |ω| under these) for this long, s: the body is at rest, the gyro reads its bias —
#: unless someone lifts or pushes it: a reading over REST_GYRO_RAD_S (no MEMS bias is that large) or a specific
#: force off g by REST_ACC_FRACTION is motion, and restarts the wait
REST_S = 0.3
REST_M_S, REST_RAD_S = 1e-3, 2e-3
REST_GYRO_RAD_S = 0.05
REST_ACC_FRACTION = 0.02
#: the time constant of the bias learnt at rest, s (gyro noise 0.003 rad/s at 100 Hz: ~2e-4 rad/s left)
REST_TAU_S = 2.0
#: a disturbance recognised this long after the last clearly clean reading still goes back to its heading, s
#: (the gyro carries it ~0.01°/s once its bias is learnt)
MAX_ROLLBACK_S = 60.0


class AttitudeStage(Stage):
    """See the module docstring. ``available``: the driver's channel names (the IMU it must have; the
    magnetometer is used when present); ``dt_s`` of :meth:`process` is on the driver's clock."""

    name = "attitude"

    def __init__(self, *, available: Iterable[str], k_acc: float = 2.0, k_mag: float = 1.0, k_bias: float = 0.2,
                 declination_rad: float = 0.0, mag_offset_ut: Sequence[float] | None = None,
                 mag_scale: Sequence[float] | None = None, tilt_crit_rad: float | None = None,
                 mag_check: MagneticCheck | None = None, gyro_bias_at_rest: bool = False) -> None:
        have = set(available)
        missing = [c for c in ACC + GYRO if c not in have]
        if missing:
            raise ValueError(f"estimation needs the IMU channels; missing {', '.join(missing)}")
        self.has_mag = all(c in have for c in MAG)
        self.tilt_crit_rad = DEFAULT_TILT_CRIT_RAD if tilt_crit_rad is None else float(tilt_crit_rad)
        self.filter = AttitudeFilter(k_acc=k_acc, k_mag=k_mag, k_bias=k_bias, declination=declination_rad)
        #: the disturbance check (None: every reading is fused, as before the check existed)
        self.mag_check = mag_check if self.has_mag else None
        self.gyro_bias_at_rest = bool(gyro_bias_at_rest) and all(c in have for c in TWIST)
        self.rest_s = 0.0
        # the yaw of the last clearly clean magnetometer reading, carried on by the gyro (NaN: none yet)
        self._clean_yaw = math.nan
        self._since_clean_s = 0.0
        self.mag_offset_ut: tuple[float, float, float] | None = None
        self.mag_scale: tuple[float, float, float] | None = None
        if mag_offset_ut is not None and mag_scale is not None:
            self.set_mag_calibration(mag_offset_ut, mag_scale)
        self.roll = self.pitch = self.yaw = self.tilt = math.nan
        self.heading_deg = math.nan
        self.outputs = ATTITUDE_OUT + (HEADING_OUT if self.has_mag else ()) + \
            (MAG_CHECK_OUT if self.mag_check is not None else ())

    # ------------------------------------------------------------------ description
    def channels(self) -> list[ChannelSpec]:
        crit = self.tilt_crit_rad
        tilt_max = max(0.8, round(2.0 * crit, 2))
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
        if self.mag_check is not None:
            specs.append(ChannelSpec("mag_disturbed", "", 0.0, 1.0, "lamp", "Compass disturbed", kind="digital",
                                     decimals=0))
        return specs

    def sources(self, channels: Iterable[str]) -> set[str]:
        """The IMU for every output, and the magnetometer too for yaw and the heading.

        >>> sorted(AttitudeStage(available=ACC + GYRO).sources(["tilt_rad"]))[:2]
        ['imu_acc_x_m_s2', 'imu_acc_y_m_s2']
        """
        out: set[str] = set()
        for c in channels:
            if c in ATTITUDE_OUT or c in HEADING_OUT or c in MAG_CHECK_OUT:
                out.update(ACC + GYRO)
                if c in ("yaw_rad", "heading_deg", "mag_disturbed") and self.has_mag:
                    out.update(MAG)
            else:
                out.add(c)
        return out

    # ------------------------------------------------------------------ calibration
    def set_mag_calibration(self, offset_ut: Sequence[float] | None, scale: Sequence[float] | None) -> None:
        """Apply (or with None, remove) a magnetometer calibration; the filter restarts from the next
        sample, so the heading is right at once instead of converging."""
        if offset_ut is None or scale is None:
            self.mag_offset_ut = self.mag_scale = None
        else:
            o = tuple(float(v) for v in offset_ut)
            s = tuple(float(v) for v in scale)
            if len(o) != 3 or len(s) != 3 or not all(map(math.isfinite, o + s)) or min(s) <= 0:
                raise ValueError("magnetometer calibration: offset_ut and scale are 3 finite numbers, scale > 0")
            self.mag_offset_ut, self.mag_scale = o, s  # type: ignore[assignment]
        self.filter.reset(keep_bias=self.gyro_bias_at_rest)  # a bias learnt at rest is the gyro's: kept
        self._clean_yaw = math.nan
        if self.mag_check is not None:
            self.mag_check.calibrated() if self.mag_offset_ut is not None else self.mag_check.uncalibrated()

    @property
    def heading_calibrated(self) -> bool:
        return self.mag_offset_ut is not None

    def heading_warning(self) -> str | None:
        """Why the compass heading may be off, or None (no magnetometer: no heading at all)."""
        if not self.has_mag or self.heading_calibrated:
            return None
        return ("heading uncalibrated: hard and soft iron may put it ~10° off until a magnetometer "
                "calibration runs (POST /api/calibration/magnetometer)")

    @property
    def mag_disturbed(self) -> bool:
        """Whether the check holds the field disturbed now (the heading runs on the gyro)."""
        return self.mag_check is not None and self.mag_check.disturbed

    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = {"heading_calibrated": self.heading_calibrated if self.has_mag else None,
                               "warning": self.heading_warning()}
        if self.mag_check is not None:
            out["magnetometer"] = self.mag_check.status()
            out["heading_source"] = "gyro (magnetometer disturbed)" if self.mag_check.disturbed else "magnetometer"
        return out

    def take_events(self) -> list[tuple[str, str, str, dict[str, Any]]]:
        return self.mag_check.take_events() if self.mag_check is not None else []

    def _check(self, check: MagneticCheck, mag, gyro, dt: float) -> bool:
        """Run the disturbance check on the calibrated reading ``mag``; on the tick it turns disturbed, put the
        heading back where the last clearly clean reading left it (carried on by the gyro since)."""
        was = check.disturbed
        disturbed = check.check(mag, self.roll, self.pitch, dt)
        if check.clean:
            self._clean_yaw, self._since_clean_s = self.yaw, 0.0
        elif math.isfinite(self._clean_yaw):
            b = self.filter.gyro_bias
            r, p = self.roll, self.pitch
            rate = ((gyro[1] - b[1]) * math.sin(r) + (gyro[2] - b[2]) * math.cos(r)) / max(math.cos(p), 0.1)
            self._clean_yaw += rate * dt
            self._since_clean_s += dt
        if disturbed and not was and math.isfinite(self._clean_yaw) and self._since_clean_s <= MAX_ROLLBACK_S:
            self.filter.set_yaw(self._clean_yaw)
        return disturbed

    # ------------------------------------------------------------------ per tick
    def process(self, values: dict[str, float], dt_s: float, now: float) -> None:
        self._update(values, dt_s)
        values["roll_rad"] = self.roll
        values["pitch_rad"] = self.pitch
        values["yaw_rad"] = self.yaw
        values["tilt_rad"] = self.tilt
        if self.has_mag:
            values["heading_deg"] = self.heading_deg
        if self.mag_check is not None:
            values["mag_disturbed"] = (1.0 if self.mag_check.disturbed else 0.0) if self.mag_check.active \
                else math.nan

    def _update(self, values: dict[str, float], dt: float) -> None:
        try:
            acc = (values[ACC[0]], values[ACC[1]], values[ACC[2]])
            gyro = (values[GYRO[0]], values[GYRO[1]], values[GYRO[2]])
        except KeyError:  # the IMU was switched off in the acquisition settings
            self.roll = self.pitch = self.yaw = self.tilt = self.heading_deg = math.nan
            self.filter.reset()
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
                check = self.mag_check
                if check is not None and self.filter.initialised and math.isfinite(self.roll) and dt > 0.0:
                    if self._check(check, m, gyro, dt):
                        mag = None  # disturbed: the gyro carries the heading
        f = self.filter
        if f.initialised and not dt > 0.0:
            return
        if self.gyro_bias_at_rest:
            v, w = values.get(TWIST[0], math.nan), values.get(TWIST[1], math.nan)
            g_norm = math.sqrt(acc[0] * acc[0] + acc[1] * acc[1] + acc[2] * acc[2])
            at_rest = (abs(v) < REST_M_S and abs(w) < REST_RAD_S and max(map(abs, gyro)) < REST_GYRO_RAD_S
                       and abs(g_norm - f.gravity) < REST_ACC_FRACTION * f.gravity)
            self.rest_s = self.rest_s + dt if at_rest else 0.0
            if self.rest_s >= REST_S and f.initialised:
                f.observe_at_rest(gyro, dt, REST_TAU_S)
        if not f.initialised and self.has_mag and mag is None:
            return  # wait for a field reading: initialising without one would start the yaw at 0
        roll, pitch, yaw = f.update(dt, acc, gyro, mag)
        self.roll, self.pitch, self.yaw = roll, pitch, yaw
        self.tilt = math.acos(max(-1.0, min(1.0, math.cos(roll) * math.cos(pitch))))
        self.heading_deg = compass_heading_deg(yaw) if self.has_mag else math.nan


__all__ = ["AttitudeStage", "DEFAULT_TILT_CRIT_RAD", "REST_S", "REST_TAU_S"]
