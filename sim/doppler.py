"""A virtual microwave Doppler radar: speed over ground and moving-object detection.

A continuous-wave radar (24 GHz K-band modules, the 10.525 GHz HB100) hears its own
signal come back shifted by ``f_d = 2·v_r·f0/c`` for a reflector closing at radial
speed ``v_r``. Two uses on a rover, one module each in practice, one sensor here:

**Speed over ground** (the agricultural "radar speed sensor"): the beam points
forward and down at ``depression_rad`` below body x; the ground slides past at the
robot's speed, so ``v_r = v·cos(depression)`` and the sensor reports
``v = v_r / cos(depression)``. It sees true ground speed, so wheel slip and a
stalled robot with spinning wheels (or a pushed one with still wheels) read right,
unlike encoders. Errors:

* the Doppler line is found in a spectrum of ``window_s`` of signal, so speeds whose
  shift is below one bin, ``v_min = c / (2·f0·cos(depression)·window_s)``, cannot be
  told from the clutter at 0 Hz and read 0 (``min_speed_m_s``; 0.076 m/s at 24.125 GHz,
  35°, 0.1 s);
* noise ``σ = sigma_rel·|v| + sigma_m_s`` (the line's width grows with speed: the beam
  has a spread of angles);
* a single-channel module gives only ``|v|``; a quadrature (I/Q) module also the sign
  (``quadrature``).

Body pitch tilts the beam: the model projects the true 3D velocity on the beam
(``v·(R_world_body·beam)``), so on a ramp the reading is the speed along the slope,
as the physics gives.

**Moving objects** (the "motion sensor"): a second, forward-looking beam of
``motion_half_angle_rad`` sees a target within ``motion_range_m`` and line of sight
whose *ground-referenced* radial speed (the robot's own motion removed with the
speed channel, as an MTI filter does) is at least ``motion_min_speed_m_s``. A CW radar
measures no range: only "something moves" and how fast it closes (positive
approaching). Targets are :class:`MovingTarget`: points walking back and forth
between two places at a steady speed (a person crossing the field); the world's
walls and boxes block the beam.

Deterministic: the same number of variates per measurement from the given
``numpy.random.Generator``; time is the simulation clock passed in.

>>> radar = DopplerRadar(sigma_rel=0.0, sigma_m_s=0.0)
>>> rot = np.eye(3)
>>> radar.measure(0.0, np.zeros(3), rot).speed_m_s          # no history yet
0.0
>>> round(radar.measure(0.1, np.array([0.05, 0.0, 0.0]), rot).speed_m_s, 6)
0.5
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from sim.world import World

__all__ = ["DopplerRadar", "DopplerReading", "MovingTarget", "min_detectable_speed"]

C_M_S = 299_792_458.0


def min_detectable_speed(frequency_hz: float, depression_rad: float, window_s: float) -> float:
    """The speed whose Doppler shift is one spectral bin (``1/window_s``), m/s.

    >>> round(min_detectable_speed(24.125e9, math.radians(35.0), 0.1), 4)
    0.0759
    """
    return C_M_S / (2.0 * frequency_hz * math.cos(depression_rad) * window_s)


@dataclass(frozen=True)
class MovingTarget:
    """A point walking from ``a`` to ``b`` and back (m, world frame) at ``speed_m_s``, from ``start_s``.

    Before ``start_s`` it stands at ``a``.

    >>> t = MovingTarget((0.0, 0.0), (2.0, 0.0), 1.0)
    >>> t.position(0.5).tolist(), t.position(3.0).tolist(), t.velocity(3.0).tolist()
    ([0.5, 0.0], [1.0, 0.0], [-1.0, -0.0])
    """

    a: tuple[float, float]
    b: tuple[float, float]
    speed_m_s: float
    start_s: float = 0.0

    def __post_init__(self) -> None:
        if math.dist(self.a, self.b) <= 0.0 or not self.speed_m_s > 0.0:
            raise ValueError("a moving target needs two different points and a speed > 0")

    def _phase(self, t_s: float) -> tuple[float, float]:
        """(fraction along a → b, direction +1 or −1)."""
        length = math.dist(self.a, self.b)
        s = max(0.0, t_s - self.start_s) * self.speed_m_s / length
        s = s % 2.0
        return (s, 1.0) if s < 1.0 else (2.0 - s, -1.0)

    def position(self, t_s: float) -> np.ndarray:
        frac, _ = self._phase(t_s)
        a, b = np.asarray(self.a, float), np.asarray(self.b, float)
        return a + frac * (b - a)

    def velocity(self, t_s: float) -> np.ndarray:
        if t_s < self.start_s:
            return np.zeros(2)
        _, direction = self._phase(t_s)
        a, b = np.asarray(self.a, float), np.asarray(self.b, float)
        return direction * self.speed_m_s * (b - a) / math.dist(self.a, self.b)


@dataclass(frozen=True)
class DopplerReading:
    """One measurement: ``speed_m_s`` over ground (0 below the minimum; ≥ 0 without quadrature),
    ``motion`` (1.0 if a moving object is detected, else 0.0), ``target_speed_m_s`` its closing
    speed (positive approaching; NaN with no detection), and the truth for tests."""

    speed_m_s: float
    motion: float
    target_speed_m_s: float
    true_speed_m_s: float
    true_targets: tuple[int, ...] = ()


class DopplerRadar:
    """The sensor (see the module docstring); :meth:`measure` is called at its own rate.

    >>> DopplerRadar(depression_rad=math.radians(90.0))
    Traceback (most recent call last):
    ...
    ValueError: depression_rad must be in [0, 80°] (a beam straight down sees no Doppler shift)
    """

    def __init__(
        self,
        *,
        depression_rad: float = math.radians(35.0),
        sigma_rel: float = 0.02,
        sigma_m_s: float = 0.005,
        min_speed_m_s: float = 0.076,
        quadrature: bool = True,
        motion_range_m: float = 5.0,
        motion_half_angle_rad: float = math.radians(40.0),
        motion_min_speed_m_s: float = 0.1,
        false_alarm_probability: float = 0.0,
        miss_probability: float = 0.0,
        targets: Sequence[MovingTarget] = (),
        world: World | None = None,
        mount_forward_m: float = 0.15,
    ) -> None:
        if not 0.0 <= depression_rad <= math.radians(80.0):
            raise ValueError("depression_rad must be in [0, 80°] (a beam straight down sees no Doppler shift)")
        for name, v in (("sigma_rel", sigma_rel), ("sigma_m_s", sigma_m_s), ("min_speed_m_s", min_speed_m_s),
                        ("motion_min_speed_m_s", motion_min_speed_m_s)):
            if not (math.isfinite(v) and v >= 0.0):
                raise ValueError(f"{name} must be finite and >= 0")
        if not (motion_range_m > 0.0 and 0.0 < motion_half_angle_rad <= math.pi):
            raise ValueError("motion_range_m must be > 0 and motion_half_angle_rad in (0, pi]")
        for name, p in (("false_alarm_probability", false_alarm_probability), ("miss_probability", miss_probability)):
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"{name} must be in [0, 1]")
        self.depression_rad = float(depression_rad)
        self.beam_body = np.array([math.cos(depression_rad), 0.0, -math.sin(depression_rad)])
        self.sigma_rel = float(sigma_rel)
        self.sigma_m_s = float(sigma_m_s)
        self.min_speed_m_s = float(min_speed_m_s)
        self.quadrature = bool(quadrature)
        self.motion_range_m = float(motion_range_m)
        self.motion_half_angle_rad = float(motion_half_angle_rad)
        self.motion_min_speed_m_s = float(motion_min_speed_m_s)
        self.false_alarm_probability = float(false_alarm_probability)
        self.miss_probability = float(miss_probability)
        self.targets = tuple(targets)
        self.world = world
        self.mount_forward_m = float(mount_forward_m)
        self._last: tuple[float, np.ndarray] | None = None

    def reset(self) -> None:
        """Forget the last pose (after a teleport: no jump is seen as speed)."""
        self._last = None

    def measure(self, t_s: float, position: np.ndarray, R_world_body: np.ndarray,
                rng: np.random.Generator | None = None) -> DopplerReading:
        """One reading at sim time ``t_s`` with the body at ``position`` (3,) m and attitude ``R_world_body``.

        The speed is the mean over the interval since the previous call (the spectrum's
        window). ``rng`` may be None only when every noise and probability is zero.
        """
        position = np.asarray(position, dtype=float).reshape(3)
        last, self._last = self._last, (float(t_s), position.copy())
        # fixed draws per call: noise, false alarm, miss, target speed noise
        draws = rng.standard_normal(2) if rng is not None else np.zeros(2)
        uniforms = rng.random(2) if rng is not None else np.ones(2)
        velocity = np.zeros(3)
        if last is not None and t_s > last[0]:
            velocity = (position - last[1]) / (t_s - last[0])
        beam = R_world_body @ self.beam_body
        radial = float(velocity @ beam)  # closing speed of the ground along the beam
        true_speed = radial / math.cos(self.depression_rad)
        speed = true_speed + draws[0] * (self.sigma_rel * abs(true_speed) + self.sigma_m_s)
        if abs(speed) < self.min_speed_m_s:
            speed = 0.0
        if not self.quadrature:
            speed = abs(speed)

        seen = self._moving_targets(t_s, position, R_world_body)
        motion, target_speed = 0.0, math.nan
        if seen and uniforms[1] >= self.miss_probability:
            closing, _ = max(seen, key=lambda s: abs(s[0]))
            motion = 1.0
            target_speed = closing + draws[1] * (self.sigma_rel * abs(closing) + self.sigma_m_s)
        elif not seen and uniforms[0] < self.false_alarm_probability:
            motion = 1.0  # clutter: a speed the radar cannot attribute, reported as motion alone
        return DopplerReading(float(speed), motion, float(target_speed), float(true_speed),
                              tuple(i for _, i in seen))

    def _moving_targets(self, t_s: float, position: np.ndarray, R_world_body: np.ndarray) -> list[tuple[float, int]]:
        """(closing speed, index) of each target in the beam, in range and line of sight, moving fast enough."""
        if not self.targets:
            return []
        fwd = R_world_body[:2, 0]
        norm = float(np.hypot(*fwd))
        if norm < 1e-9:
            return []
        fwd = fwd / norm
        sensor = position[:2] + self.mount_forward_m * fwd
        out = []
        for i, target in enumerate(self.targets):
            rel = target.position(t_s) - sensor
            dist = float(np.hypot(*rel))
            if dist > self.motion_range_m or dist < 1e-6:
                continue
            u = rel / dist
            if math.acos(max(-1.0, min(1.0, float(u @ fwd)))) > self.motion_half_angle_rad:
                continue
            if self.world is not None and self.world.raycast(tuple(sensor), math.atan2(u[1], u[0]), dist) < dist:
                continue  # a wall or box between
            closing = -float(target.velocity(t_s) @ u)
            if abs(closing) >= self.motion_min_speed_m_s:
                out.append((closing, i))
        return out
