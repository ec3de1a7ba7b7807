"""A motor axis as a motion controller drives it: velocity or position mode with speed and acceleration limits.

State is kept in motor revolutions (``position_rev``) and rev/s; the device
emulators convert to what their protocol speaks (rpm, encoder increments).

* velocity mode: the speed ramps to the target at ``accel_rev_s2`` (speeding
  up) or ``decel_rev_s2`` (slowing down), clipped to ``max_speed_rev_s``;
* position mode: a trapezoidal profile — the speed is the largest that still
  stops at the target with ``decel_rev_s2`` (``sqrt(2·dec·distance)``), capped
  by ``max_speed_rev_s`` and reached at ``accel_rev_s2``; within half an
  increment at low speed the axis snaps onto the target (``reached``);
* disabled (output stage off): the axis coasts down at ``coast_rev_s2``;
* current ``I = i0 + k_a·|a| + k_v·|ω|`` in A.

Deterministic: :meth:`step` takes ``dt_s``; nothing reads a clock.

>>> axis = MotorAxis(max_speed_rev_s=50.0, accel_rev_s2=100.0, decel_rev_s2=100.0)
>>> axis.enabled = True
>>> axis.move_to(10.0)
>>> for _ in range(2000):
...     axis.step(0.001)
>>> axis.reached, round(axis.position_rev, 6)
(True, 10.0)
"""

from __future__ import annotations

import enum
import math


class AxisMode(enum.Enum):
    VELOCITY = "velocity"
    POSITION = "position"


class MotorAxis:
    def __init__(self, max_speed_rev_s: float = 100.0, accel_rev_s2: float = 500.0, decel_rev_s2: float = 500.0,
                 coast_rev_s2: float = 200.0, counts_per_rev: int = 4096, i0_a: float = 0.05,
                 k_accel_a: float = 0.0005, k_speed_a: float = 0.002) -> None:
        if min(max_speed_rev_s, accel_rev_s2, decel_rev_s2, coast_rev_s2) <= 0 or counts_per_rev <= 0:
            raise ValueError("motor limits must be positive")
        self.max_speed_rev_s = max_speed_rev_s
        self.accel_rev_s2 = accel_rev_s2
        self.decel_rev_s2 = decel_rev_s2
        self.coast_rev_s2 = coast_rev_s2
        self.counts_per_rev = counts_per_rev
        self.i0_a, self.k_accel_a, self.k_speed_a = i0_a, k_accel_a, k_speed_a
        self.enabled = False
        self.mode = AxisMode.VELOCITY
        self.target_speed_rev_s = 0.0
        self.target_position_rev = 0.0
        self.position_rev = 0.0
        self.speed_rev_s = 0.0
        self.accel_now_rev_s2 = 0.0
        self.reached = True
        #: set by an external cause (a blocked joint): the speed is held at zero
        self.blocked = False

    # commands ----------------------------------------------------------------
    def set_speed(self, speed_rev_s: float) -> None:
        self.mode = AxisMode.VELOCITY
        self.target_speed_rev_s = max(-self.max_speed_rev_s, min(self.max_speed_rev_s, speed_rev_s))

    def move_to(self, position_rev: float) -> None:
        self.mode = AxisMode.POSITION
        self.target_position_rev = position_rev
        self.reached = False

    def home(self, position_rev: float = 0.0) -> None:
        """Set the actual position (FAULHABER ``HO``) without moving."""
        shift = position_rev - self.position_rev
        self.position_rev = position_rev
        self.target_position_rev += shift

    @property
    def counts(self) -> int:
        return int(round(self.position_rev * self.counts_per_rev))

    @property
    def current_a(self) -> float:
        if not self.enabled and self.speed_rev_s == 0.0:
            return 0.0
        return self.i0_a + self.k_accel_a * abs(self.accel_now_rev_s2) + self.k_speed_a * abs(self.speed_rev_s)

    # physics -------------------------------------------------------------------
    def step(self, dt_s: float) -> None:
        """Advance ``dt_s``, in sub-steps of at most :attr:`max_substep_s` (the profile is piecewise)."""
        n = max(1, math.ceil(dt_s / self.max_substep_s - 1e-9)) if dt_s > 0 else 0
        for _ in range(n):
            self._step(dt_s / n)

    max_substep_s = 0.001

    def _step(self, dt_s: float) -> None:
        v0 = self.speed_rev_s
        if self.blocked:
            v = 0.0
        elif not self.enabled:
            v = _towards(v0, 0.0, self.coast_rev_s2 * dt_s)
        elif self.mode is AxisMode.VELOCITY:
            rate = self.accel_rev_s2 if abs(self.target_speed_rev_s) > abs(v0) and \
                self.target_speed_rev_s * v0 >= 0 else self.decel_rev_s2
            v = _towards(v0, self.target_speed_rev_s, rate * dt_s)
        else:
            v = self._position_speed(v0, dt_s)
        self.position_rev += 0.5 * (v0 + v) * dt_s
        self.accel_now_rev_s2 = (v - v0) / dt_s
        self.speed_rev_s = v
        if self.mode is AxisMode.POSITION and self.enabled and not self.reached:
            half_count = 0.5 / self.counts_per_rev
            if abs(self.target_position_rev - self.position_rev) <= half_count and \
                    abs(v) <= self.decel_rev_s2 * dt_s * 2:
                self.position_rev = self.target_position_rev
                self.speed_rev_s = 0.0
                self.reached = True

    def _position_speed(self, v0: float, dt_s: float) -> float:
        d = self.target_position_rev - self.position_rev
        if self.reached:
            return 0.0
        want = math.copysign(min(self.max_speed_rev_s, math.sqrt(2.0 * self.decel_rev_s2 * abs(d))), d)
        # do not overshoot within this step
        want = math.copysign(min(abs(want), abs(d) / dt_s), d)
        rate = self.accel_rev_s2 if abs(want) > abs(v0) and want * v0 >= 0 else self.decel_rev_s2
        return _towards(v0, want, rate * dt_s)


def _towards(value: float, target: float, step: float) -> float:
    if value < target:
        return min(target, value + step)
    return max(target, value - step)
