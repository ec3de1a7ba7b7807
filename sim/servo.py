"""Servo axes: k joints or actuators, each tracking a position or a velocity target within limits.

The model of a drive with a position loop that is stiff compared with its
trajectory limits (a stepper or a tuned servo): each axis moves at whatever
velocity its target asks, changed by at most ``max_acceleration`` per second and
capped at ``max_velocity``; it stops dead at its travel limits (the hard stop),
which it reports. Per sub-step ``h`` (``dt_s`` is split into steps of at most
``max_substep_s``, so the result hardly depends on the caller's step):

* position mode: the velocity it wants is ``sign(e)·min(v_max, v_brake, |e|/h)`` for
  the error ``e = target − position``, where ``v_brake`` is the one braking law,
  :func:`robotics.control.brake_speed` — the speed from which braking at ``a_max`` in
  sub-steps of ``h`` stops on the target, ``sqrt((a·h/2)² + 2·a·|e|) − a·h/2`` (the
  continuous ``sqrt(2·a·|e|)`` overshoots by about ``v·h/2``) — as fast as it can while
  still able to brake in time, never past the target in one sub-step;
* velocity mode: the target velocity, capped at ``v_max``;
* the velocity moves toward that by at most ``a_max·h``; the position moves by
  ``velocity·h``; an axis that would cross a travel limit stops on it with zero
  velocity.

Position targets outside the travel are clipped to it and flagged. Nothing here
is random and nothing reads a clock: the same commands and steps give the same
motion.

>>> axes = ServoAxes(lower=[-1.0], upper=[1.0], max_velocity=[0.5], max_acceleration=[2.0])
>>> axes.command_position([0.4])
>>> for _ in range(200):
...     axes.step(0.01)                      # 2 s: accelerate, cruise at 0.5, brake
>>> round(float(axes.position[0]), 6), float(axes.velocity[0])
(0.4, 0.0)
"""

from __future__ import annotations

import math

import numpy as np

from robotics.control import brake_speed

__all__ = ["ServoAxes"]


class ServoAxes:
    """``k`` axes with travel ``[lower, upper]``, ``max_velocity`` and ``max_acceleration`` (all (k,) or scalars).

    Units are the caller's (rad or m, per s, per s²). Invalid limits raise :class:`ValueError`.
    """

    def __init__(self, lower, upper, max_velocity, max_acceleration, position=None, max_substep_s: float = 1e-3):
        self.lower, self.upper = _vector(lower, "lower"), _vector(upper, "upper")
        k = self.lower.size
        self.max_velocity = _vector(max_velocity, "max_velocity", k)
        self.max_acceleration = _vector(max_acceleration, "max_acceleration", k)
        if self.upper.size != k or np.any(~(self.lower <= self.upper)) or not np.all(np.isfinite(self.lower)) \
                or not np.all(np.isfinite(self.upper)):
            raise ValueError(f"travel must be finite with lower <= upper, got {self.lower} and {self.upper}")
        if np.any(~(self.max_velocity > 0)) or np.any(~(self.max_acceleration > 0)) \
                or not np.all(np.isfinite(self.max_velocity)) or not np.all(np.isfinite(self.max_acceleration)):
            raise ValueError("max_velocity and max_acceleration must be finite and > 0")
        if not (math.isfinite(max_substep_s) and max_substep_s > 0):
            raise ValueError(f"max_substep_s must be > 0, got {max_substep_s!r}")
        self.max_substep_s = float(max_substep_s)
        start = np.zeros(k) if position is None else _vector(position, "position", k)
        if np.any(start < self.lower) or np.any(start > self.upper):
            raise ValueError(f"start position {start} lies outside the travel [{self.lower}, {self.upper}]")
        self.position = start.copy()
        self.velocity = np.zeros(k)
        self.target = start.copy()
        self.velocity_mode = np.zeros(k, dtype=bool)  # false: the axis tracks a position target
        self.target_clipped = np.zeros(k, dtype=bool)

    @property
    def size(self) -> int:
        return self.position.size

    @property
    def at_limit(self) -> np.ndarray:
        """(k,) int: +1 on the upper travel limit, −1 on the lower one, 0 in between."""
        return np.where(self.position >= self.upper, 1, np.where(self.position <= self.lower, -1, 0))

    def command_position(self, targets, mask=None) -> None:
        """Track position ``targets`` (k,) on the axes where ``mask`` is true (default: all).

        Targets beyond the travel are clipped to it (:attr:`target_clipped` says which).
        """
        targets = _vector(targets, "position targets", self.size)
        mask = np.ones(self.size, dtype=bool) if mask is None else np.asarray(mask, dtype=bool).reshape(self.size)
        clipped = np.clip(targets, self.lower, self.upper)
        self.target = np.where(mask, clipped, self.target)
        self.target_clipped = np.where(mask, clipped != targets, self.target_clipped)
        self.velocity_mode = np.where(mask, False, self.velocity_mode)

    def command_velocity(self, velocities, mask=None) -> None:
        """Track ``velocities`` (k,) (capped at ``max_velocity``) on the axes where ``mask`` is true."""
        velocities = _vector(velocities, "velocity targets", self.size)
        mask = np.ones(self.size, dtype=bool) if mask is None else np.asarray(mask, dtype=bool).reshape(self.size)
        self.target = np.where(mask, velocities, self.target)
        self.target_clipped = np.where(mask, False, self.target_clipped)
        self.velocity_mode = np.where(mask, True, self.velocity_mode)

    def freeze(self, mask=None) -> None:
        """Stop the axes where ``mask`` is true (default: all) where they stand, at once, and hold them there."""
        mask = np.ones(self.size, dtype=bool) if mask is None else np.asarray(mask, dtype=bool).reshape(self.size)
        self.velocity = np.where(mask, 0.0, self.velocity)
        self.target = np.where(mask, self.position, self.target)
        self.velocity_mode = np.where(mask, False, self.velocity_mode)
        self.target_clipped = np.where(mask, False, self.target_clipped)

    def step(self, dt_s: float) -> None:
        """Advance by ``dt_s`` seconds (≥ 0)."""
        if not (math.isfinite(dt_s) and dt_s >= 0.0):
            raise ValueError(f"dt_s must be finite and >= 0, got {dt_s!r}")
        if dt_s == 0.0:
            return
        n = max(1, math.ceil(dt_s / self.max_substep_s - 1e-9))
        h = dt_s / n
        v_max, a_max, lo, hi = self.max_velocity, self.max_acceleration, self.lower, self.upper
        dv_max = a_max * h
        for _ in range(n):
            error = self.target - self.position
            braking = np.minimum(np.minimum(v_max, brake_speed(error, a_max, h)), np.abs(error) / h)
            wanted = np.where(self.velocity_mode, np.clip(self.target, -v_max, v_max), np.sign(error) * braking)
            velocity = self.velocity + np.clip(wanted - self.velocity, -dv_max, dv_max)
            position = self.position + velocity * h
            stopped = (position > hi) | (position < lo)
            self.position = np.clip(position, lo, hi)
            self.velocity = np.where(stopped, 0.0, velocity)


def _vector(value, what: str, size: int | None = None) -> np.ndarray:
    try:
        arr = np.array(value, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be numbers, got {value!r}") from None
    if size is not None:
        if arr.ndim == 0:
            arr = np.full(size, float(arr))
        if arr.shape != (size,):
            raise ValueError(f"{what} must be {size} numbers, got shape {arr.shape}")
    elif arr.ndim != 1:
        arr = arr.reshape(-1)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{what} must be finite, got {arr.tolist()}")
    return arr
