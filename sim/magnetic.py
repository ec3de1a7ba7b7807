"""Magnetic disturbances a field compass meets: steel objects that bend the Earth's field near them, and hard
iron that drifts with the motors' current and the electronics' temperature.

Why: a calibrated compass in an empty simulated world is exact to its noise (0.71° mean after calibration on
today's sim, issue 23), while the same rover in a yard reads several degrees off near a steel pipe or a parked
car and drifts as its motors warm up. seeds/002 §1.2 names both ("the robot's components and the magnetic
materials around it clearly affect the field near the magnetometer"). These models make the simulator that
bad, so the estimator's disturbance check (:mod:`server.runtime.estimation.attitude`) has something to catch.

**Steel objects** (``[[sim.world.steel]]``, :class:`SteelObject`): each is a point dipole of moment ``m``
(A·m², world frame) at ``position`` (m; ``z < 0`` for a pipe or rebar under the floor). Its field at a point
``r`` away (Jackson, *Classical Electrodynamics*, eq. 5.56)::

    B(r) = μ0/(4π) · (3 (m·r̂) r̂ − m) / |r|³          μ0/(4π) = 1e-7 T·m/A

A magnetised steel object of a few kilograms has ``|m|`` ~ 1–20 A·m²: 5 A·m² bends a 50 µT field by 8 µT at
0.5 m and by 1 µT at 1 m (the 1/r³ fall-off is why a compass is fine one step further away). Distances are
clamped to :data:`MIN_DISTANCE_M` so a sensor inside an object reads a large field, not infinity.

**Hard-iron drift** (:class:`HardIronDrift`): a body-frame offset added to the calibrated hard iron::

    offset = Σ_motors k_i · I_i + k_T · ΔT,      dΔT/dt = (c · Σ I_i² − ΔT) / τ

``k_i`` (µT per A, a vector per motor: the leads' and the magnets' field at the sensor), ``k_T`` (µT per K:
the magnetisation of nearby parts falls as they warm), ``c`` (K per A²: the steady temperature rise of
``Σ I²`` — copper losses heat the body) and ``τ`` (s, the thermal time constant). The thermal step is exact
for a current held over the step. Nothing here is random or reads a clock.

>>> steel = SteelObject(0.0, 0.0, 0.0, (0.0, 5.0, 0.0))
>>> np.round(steel.field_t([0.5, 0.0, 0.0]) * 1e6, 3).tolist()    # beside the dipole: −m/r³
[0.0, -4.0, 0.0]
>>> np.round(steel.field_t([0.0, 0.5, 0.0]) * 1e6, 3).tolist()    # on its axis: twice that, along m
[0.0, 8.0, 0.0]
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

__all__ = ["HardIronDrift", "MIN_DISTANCE_M", "MU0_4PI", "SteelObject", "dipole_field_t", "field_of"]

MU0_4PI = 1e-7  # μ0 / 4π, T·m/A
#: closer than this the dipole's field is evaluated at this distance (a sensor cannot sit inside the steel)
MIN_DISTANCE_M = 0.05
_STEEL_KEYS = ("position", "moment_am2", "name")


def dipole_field_t(moment_am2, r_m) -> np.ndarray:
    """Field (3,) T of a point dipole ``moment_am2`` (3,) A·m² at offset ``r_m`` (3,) m from it.

    >>> np.round(dipole_field_t([0, 0, 1.0], [0, 0, 1.0]) * 1e9, 6).tolist()   # 1 A·m², 1 m along its axis
    [0.0, 0.0, 200.0]
    """
    m = np.asarray(moment_am2, dtype=float).reshape(3)
    r = np.asarray(r_m, dtype=float).reshape(3)
    norm = float(np.linalg.norm(r))
    n = r / norm if norm > 0.0 else r  # the direction (none at the centre itself)
    d = max(norm, MIN_DISTANCE_M)
    return MU0_4PI * (3.0 * float(m @ n) * n - m) / d**3


@dataclass(frozen=True)
class SteelObject:
    """A steel object as a dipole: centre (x, y, z) m (world), moment (3,) A·m² (world), an optional name."""

    x: float
    y: float
    z: float
    moment_am2: tuple[float, float, float]
    name: str = ""

    def field_t(self, point_m) -> np.ndarray:
        """Its field (3,) T at the world point ``point_m`` (3,) m."""
        return dipole_field_t(self.moment_am2, np.asarray(point_m, dtype=float) - (self.x, self.y, self.z))

    @classmethod
    def from_config(cls, cfg: Any, where: str = "steel") -> "SteelObject":
        """One ``[[sim.world.steel]]`` table (``position`` [x, y, z] m, ``moment_am2`` [mx, my, mz], ``name``);
        :class:`ValueError` names the key that is wrong.

        >>> SteelObject.from_config({"position": [1, 2, -0.3], "moment_am2": [0, 3, -2]}).z
        -0.3
        >>> SteelObject.from_config({"position": [1, 2]})
        Traceback (most recent call last):
        ...
        ValueError: steel.position must be [x, y, z] in metres
        """
        if not isinstance(cfg, dict):
            raise ValueError(f"{where} must be a table")
        unknown = sorted(str(k) for k in cfg if k not in _STEEL_KEYS)
        if unknown:
            raise ValueError(f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(_STEEL_KEYS)})")
        pos, moment = cfg.get("position"), cfg.get("moment_am2")
        if not _triple(pos):
            raise ValueError(f"{where}.position must be [x, y, z] in metres")
        if not _triple(moment) or max(abs(float(v)) for v in moment) > 1e6:
            raise ValueError(f"{where}.moment_am2 must be [mx, my, mz] in A·m² (each within ±1e6)")
        name = cfg.get("name", "")
        if not isinstance(name, str) or len(name) > 64:
            raise ValueError(f"{where}.name must be a string of at most 64 characters")
        return cls(float(pos[0]), float(pos[1]), float(pos[2]), tuple(float(v) for v in moment), name)


def field_of(objects: Sequence[SteelObject], point_m) -> np.ndarray:
    """The summed field (3,) T of ``objects`` at ``point_m`` (zeros with none).

    >>> field_of([], [0, 0, 0]).tolist()
    [0.0, 0.0, 0.0]
    """
    out = np.zeros(3)
    for obj in objects:
        out += obj.field_t(point_m)
    return out


def _triple(v: Any) -> bool:
    return isinstance(v, (list, tuple)) and len(v) == 3 and all(
        not isinstance(c, bool) and isinstance(c, (int, float)) and math.isfinite(c) for c in v)


class HardIronDrift:
    """Body-frame hard-iron offset that follows the motor currents and the temperature; see the module doc.

    ``per_amp_t`` (n_motors, 3) T/A, ``per_kelvin_t`` (3,) T/K, ``heating_k_per_a2`` K/A², ``thermal_tau_s`` s.

    >>> drift = HardIronDrift(per_amp_t=[[1e-6, 0, 0], [1e-6, 0, 0]], per_kelvin_t=[0, 2e-7, 0],
    ...                       heating_k_per_a2=10.0, thermal_tau_s=100.0)
    >>> for _ in range(2000):                      # 2000 s at 1 A in each motor: the temperature settles
    ...     drift.step(1.0, (1.0, 1.0))
    >>> round(drift.temperature_rise_k, 3), np.round(drift.offset_t((1.0, 1.0)) * 1e6, 3).tolist()
    (20.0, [2.0, 4.0, 0.0])
    """

    def __init__(self, per_amp_t=((0.0, 0.0, 0.0), (0.0, 0.0, 0.0)), per_kelvin_t=(0.0, 0.0, 0.0),
                 heating_k_per_a2: float = 0.0, thermal_tau_s: float = 300.0) -> None:
        self.per_amp_t = np.asarray(per_amp_t, dtype=float).reshape(-1, 3)
        self.per_kelvin_t = np.asarray(per_kelvin_t, dtype=float).reshape(3)
        if not (heating_k_per_a2 >= 0.0 and thermal_tau_s > 0.0):
            raise ValueError("heating_k_per_a2 must be >= 0 and thermal_tau_s > 0")
        self.heating_k_per_a2 = float(heating_k_per_a2)
        self.thermal_tau_s = float(thermal_tau_s)
        self.temperature_rise_k = 0.0

    def step(self, dt_s: float, currents_a: Sequence[float]) -> None:
        """Advance the temperature by ``dt_s`` s with the motors drawing ``currents_a`` (A) throughout."""
        target = self.heating_k_per_a2 * sum(float(i) * float(i) for i in currents_a)
        self.temperature_rise_k += (target - self.temperature_rise_k) * (1.0 - math.exp(-dt_s / self.thermal_tau_s))

    def offset_t(self, currents_a: Sequence[float]) -> np.ndarray:
        """The drift (3,) T, body frame, for the motors drawing ``currents_a`` (A) now."""
        i = np.asarray(currents_a, dtype=float).reshape(-1)[: len(self.per_amp_t)]
        return i @ self.per_amp_t[: len(i)] + self.per_kelvin_t * self.temperature_rise_k
