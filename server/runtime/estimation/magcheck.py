"""The magnetometer's disturbance check: is the field it reads the Earth's, or one a steel object bent?

A compass near steel (a pipe under the floor, a parked car, the rover's own motors warming up) reads a
field of the wrong strength or inclination and points the wrong way: on the field profile
(``config/rover-field.toml``) a compass-corrected heading adjustment beside a steel cabinet ends several
degrees off without this check (docs/sensing.md, "Magnetic disturbances"). Following PX4's EKF2, which
compares the field strength and inclination with the World Magnetic Model before fusing a magnetometer
(``EKF2_MAG_CHECK``), each calibrated reading is compared with a reference:

* its magnitude ``|m|`` against the reference strength, ± ``field_tolerance_ut``;
* its dip (inclination, :func:`robotics.estimation.attitude.dip_from_mag`, with the filter's roll and pitch)
  against the reference dip, ± ``dip_tolerance_deg``.

The reference is the site's field when configured (``[estimation] mag_field_ut``, ``mag_dip_deg``: from
a magnetic model or a survey), else learnt: the median strength and dip of the ``reference_s`` seconds of
readings after each magnetometer calibration (the calibration turn runs where the field is clean, and the
median ignores a passing disturbance). Until the magnetometer is calibrated nothing is checked: its own
hard iron moves the magnitude by several µT as it turns.

A disturbance approached slowly bends the heading before it crosses a tolerance; so the attitude estimator
keeps the heading of the last *clearly* clean reading (within 40 % of both tolerances, :attr:`MagneticCheck.clean`)
carried on by the gyro, and goes back to it when the field turns disturbed.

One reading outside either tolerance marks the field **disturbed** at once (a disturbed sample must not
pull the heading: the attitude filter then turns on the gyro alone, and the pose filter on the odometry);
it is clean again after ``recover_s`` seconds of readings within 80 % of the tolerances (hysteresis, so
the edge of a disturbance does not chatter). Each change is an event (:meth:`MagneticCheck.take_events`):
``mag_disturbed`` with the strength and dip it read, ``mag_recovered`` with how long it lasted.

What it cannot see: a disturbance across the field's horizontal direction changes neither strength nor
dip to first order (a 2 µT field pointing east turns a 25 µT horizontal field by 4.6° and its strength by
0.04 µT). Near a dipole both change with it, which is what the field profile's objects give; the figures
are in docs/sensing.md.

>>> check = MagneticCheck(field_ut=50.0, dip_deg=60.0)
>>> check.calibrated()
>>> check.check((0.0, 25.0, -43.3), 0.0, 0.0, 0.01)               # the Earth's field: clean
False
>>> check.check((0.0, 31.0, -43.3), 0.0, 0.0, 0.01)               # 53.3 µT, dip 54.4°: disturbed
True
>>> [e[0] for e in check.take_events()]
['mag_disturbed']
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from robotics.estimation.attitude import dip_from_mag

#: a disturbed field is clean again within this fraction of the tolerances (hysteresis)
RECOVER_FRACTION = 0.8
#: within this fraction of the tolerances a reading is *clearly* clean: its heading is the one to go back to
#: when a disturbance that crept in below the tolerances is finally recognised
CLEAN_FRACTION = 0.4


class MagneticCheck:
    """See the module docstring. ``field_ut``/``dip_deg``: the site's reference (None: learnt after each
    calibration over ``reference_s`` of driver time); tolerances in µT and degrees; ``recover_s`` of clean
    readings before the field counts as clean again."""

    def __init__(self, *, field_ut: float | None = None, dip_deg: float | None = None,
                 field_tolerance_ut: float = 2.5, dip_tolerance_deg: float = 2.5, recover_s: float = 1.0,
                 reference_s: float = 3.0) -> None:
        if (field_ut is None) != (dip_deg is None):
            raise ValueError("give both mag_field_ut and mag_dip_deg, or neither (learnt after a calibration)")
        if not (field_tolerance_ut > 0 and dip_tolerance_deg > 0 and recover_s >= 0 and reference_s > 0):
            raise ValueError("the magnetometer check's tolerances and reference_s must be > 0, recover_s >= 0")
        self.configured = None if field_ut is None else (float(field_ut), math.radians(float(dip_deg)))
        self.field_tolerance_ut = float(field_tolerance_ut)
        self.dip_tolerance_rad = math.radians(float(dip_tolerance_deg))
        self.recover_s = float(recover_s)
        self.reference_s = float(reference_s)
        self.reference: tuple[float, float] | None = None  # (strength µT, dip rad)
        self.active = False  # checking (calibrated, with a reference or learning one)
        self.disturbed = False
        self.field_ut = math.nan  # the latest reading's strength and dip
        self.dip_rad = math.nan
        self.disturbed_s = 0.0  # how long the current disturbance has lasted, driver time
        self.disturbances = 0
        self.clean = False  # the latest reading was within CLEAN_FRACTION of both tolerances
        self._clean_s = 0.0
        self._learning: list[tuple[float, float]] = []
        self._learnt_s = 0.0
        self._events: list[tuple[str, str, str, dict[str, Any]]] = []

    # ------------------------------------------------------------------ calibration
    def calibrated(self) -> None:
        """A magnetometer calibration was applied: check from now on (learning a reference if none is set)."""
        self.active = True
        self.reference = self.configured
        self._learning, self._learnt_s = [], 0.0
        if self.disturbed:
            self._end(0.0, "new calibration")

    def uncalibrated(self) -> None:
        """The calibration was removed: nothing is checked (the raw hard iron would look like a disturbance)."""
        if self.disturbed:
            self._end(0.0, "calibration removed")
        self.active = False
        self.reference = None

    # ------------------------------------------------------------------ per reading
    def check(self, mag_ut, roll: float, pitch: float, dt_s: float) -> bool:
        """Whether the calibrated reading ``mag_ut`` (3,) µT, body frame, is disturbed (True: do not fuse it)."""
        self.clean = False
        if not self.active:
            return False
        mx, my, mz = mag_ut
        strength = math.sqrt(mx * mx + my * my + mz * mz)
        dip = dip_from_mag(mag_ut, roll, pitch)
        self.field_ut, self.dip_rad = strength, dip
        ref = self.reference
        if ref is None:  # learning the site's field after the calibration
            self._learning.append((strength, dip))
            self._learnt_s += dt_s
            if self._learnt_s >= self.reference_s:
                self.reference = (statistics.median(s for s, _ in self._learning),
                                  statistics.median(d for _, d in self._learning))
                self._learning = []
            return False
        field_err, dip_err = abs(strength - ref[0]), abs(dip - ref[1])
        self.clean = field_err <= CLEAN_FRACTION * self.field_tolerance_ut and dip_err <= CLEAN_FRACTION * \
            self.dip_tolerance_rad
        if not self.disturbed:
            if field_err > self.field_tolerance_ut or dip_err > self.dip_tolerance_rad:
                self.disturbed, self.disturbed_s, self._clean_s = True, 0.0, 0.0
                self.disturbances += 1
                self._events.append(("mag_disturbed", (
                    f"magnetometer disturbed: field {strength:.1f} µT (reference {ref[0]:.1f} ± "
                    f"{self.field_tolerance_ut:g}), dip {math.degrees(dip):.1f}° (reference "
                    f"{math.degrees(ref[1]):.1f} ± {math.degrees(self.dip_tolerance_rad):g}): heading from the gyro "
                    "and odometry"), "info", {"field_ut": round(strength, 2), "dip_deg": round(math.degrees(dip), 2),
                                              "reference_field_ut": round(ref[0], 2),
                                              "reference_dip_deg": round(math.degrees(ref[1]), 2)}))
            return self.disturbed
        self.disturbed_s += dt_s
        clean = (field_err <= RECOVER_FRACTION * self.field_tolerance_ut
                 and dip_err <= RECOVER_FRACTION * self.dip_tolerance_rad)
        self._clean_s = self._clean_s + dt_s if clean else 0.0
        if self._clean_s >= self.recover_s:
            self._end(self.disturbed_s, "the field is the reference's again")
        return self.disturbed

    def _end(self, lasted_s: float, why: str) -> None:
        self.disturbed = False
        self._clean_s = 0.0
        self._events.append(("mag_recovered", f"magnetometer clean after {lasted_s:.1f} s ({why}): heading from the "
                             "compass again", "info", {"disturbed_s": round(lasted_s, 3)}))

    # ------------------------------------------------------------------ reporting
    def take_events(self) -> list[tuple[str, str, str, dict[str, Any]]]:
        """The transitions since the last call, as (trigger, message, kind, values)."""
        events, self._events = self._events, []
        return events

    def status(self) -> dict[str, Any]:
        """For the snapshot's ``estimation.magnetometer`` part."""
        ref = self.reference
        if not self.active:
            state = "unchecked (uncalibrated)"
        elif ref is None:
            state = "learning the reference"
        else:
            state = "disturbed" if self.disturbed else "clean"
        return {"check": state, "disturbed": self.disturbed, "disturbances": self.disturbances,
                "disturbed_s": round(self.disturbed_s, 3) if self.disturbed else 0.0,
                "field_ut": _r(self.field_ut, 2), "dip_deg": _r(math.degrees(self.dip_rad), 2),
                "reference": None if ref is None else {"field_ut": round(ref[0], 2),
                                                       "dip_deg": round(math.degrees(ref[1]), 2),
                                                       "configured": self.configured is not None},
                "tolerance": {"field_ut": self.field_tolerance_ut,
                              "dip_deg": round(math.degrees(self.dip_tolerance_rad), 3)}}


def _r(v: float, nd: int) -> float | None:
    return round(v, nd) if math.isfinite(v) else None


__all__ = ["CLEAN_FRACTION", "MagneticCheck", "RECOVER_FRACTION"]
