"""The motion reference of the arm and platform controllers: k axes moved tick by tick toward a goal.

The SCARA controller ramps its two joints, the Stewart controller the six pose coordinates;
each tick the reference moves toward a position target, at a velocity, or along streamed
samples, within its speed, acceleration and travel limits, and the controller writes the
reference (never the raw goal) to the drives. So a target far away becomes a smooth move
(ros2_control's joint trajectory controller works the same way), a controlled stop is a
deceleration of the reference, and nothing beyond the travel ever reaches a driver.

Position targets use the one braking law, :func:`robotics.control.brake_speed` (the simulated
servos of ``sim/servo.py`` use it too): the speed from which braking at ``a_max`` in steps of
``dt`` stops on the target, ``v_brake = sqrt((a·dt/2)² + 2·a·|e|) − a·dt/2``, so the reference
lands on the target without overshoot; the same law keeps a velocity (jog) inside the travel.

>>> r = Ramp(lower=[-1.0], upper=[1.0], v_max=[0.5], a_max=[2.0])
>>> for _ in range(200):
...     r.to_position([0.4], 0.01)          # 2 s: accelerate, cruise at 0.5, brake
>>> round(float(r.pos[0]), 6), float(r.vel[0]), r.stopped
(0.4, 0.0, True)
>>> for _ in range(300):
...     r.at_velocity([0.5], 0.01)          # a jog toward the upper travel brakes on it
>>> round(float(r.pos[0]), 6), float(r.vel[0])
(1.0, 0.0)
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import msgspec
import numpy as np

from robotics.control import brake_speed
from server.runtime.controllers.base import Controller
from server.runtime.controllers.tables import ROVER_ONLY_LIMITS, ReferenceLimits  # noqa: F401 - re-exported
from server.runtime.supervisor import Motion, OutputMode
from server.runtime_api.params import Hold

def _vec(v, k: int | None = None) -> np.ndarray:
    a = np.array(v, dtype=float).reshape(-1)
    if k is not None and a.size == 1 and k > 1:
        a = np.full(k, float(a[0]))
    return a


class Ramp:
    """``k`` axes: a position reference ``pos`` and its velocity ``vel`` (the caller's units), within
    ``[lower, upper]`` (±inf for none), ``v_max`` and ``a_max``. Not thread-safe: the control loop owns it."""

    def __init__(self, lower, upper, v_max, a_max, position=None) -> None:
        self.lower, self.upper = _vec(lower), _vec(upper)
        k = self.lower.size
        self.v_max, self.a_max = _vec(v_max, k), _vec(a_max, k)
        if not (self.upper.size == k and self.v_max.size == k and self.a_max.size == k):
            raise ValueError("lower, upper, v_max and a_max must have one value per axis")
        if np.any(~(self.lower <= self.upper)) or np.any(~(self.v_max > 0)) or np.any(~(self.a_max > 0)):
            raise ValueError("need lower <= upper and v_max, a_max > 0")
        self.pos = np.zeros(k)
        self.vel = np.zeros(k)
        self.speed_scale = 1.0  # the latency governor's cap on moves and jogs (never on braking or a timed run)
        self.sync(np.zeros(k) if position is None else position)

    @property
    def v_limit(self) -> np.ndarray:
        """``v_max`` under the governor's cap: the speed a move or a jog may reach now."""
        return self.v_max if self.speed_scale >= 1.0 else self.v_max * self.speed_scale

    def sync(self, position) -> None:
        """Put the reference at ``position`` (clipped into the travel), at rest."""
        self.pos = np.clip(_vec(position, self.pos.size), self.lower, self.upper)
        self.vel = np.zeros(self.pos.size)

    @property
    def stopped(self) -> bool:
        return not np.any(self.vel)

    def _move(self, wanted: np.ndarray, dt: float, lower: np.ndarray, upper: np.ndarray) -> None:
        dv = self.a_max * dt
        vel = self.vel + np.clip(wanted - self.vel, -dv, dv)
        pos = self.pos + vel * dt
        stopped = (pos > upper) | (pos < lower)
        self.pos = np.clip(pos, lower, upper)
        self.vel = np.where(stopped, 0.0, vel)
        self.vel[np.abs(self.vel) < 1e-12] = 0.0

    def to_position(self, target, dt: float) -> None:
        """One step toward ``target`` (clipped into the travel), landing on it at rest."""
        if dt <= 0:
            return
        error = np.clip(_vec(target, self.pos.size), self.lower, self.upper) - self.pos
        speed = np.minimum(np.minimum(self.v_limit, brake_speed(error, self.a_max, dt)), np.abs(error) / dt)
        self._move(np.sign(error) * speed, dt, self.lower, self.upper)
        done = (np.abs(error) < 1e-12) & (np.abs(self.vel) <= self.a_max * dt)
        self.vel[done] = 0.0

    def at_velocity(self, velocity, dt: float, lower=None, upper=None) -> None:
        """One step at ``velocity`` times the governor's ``speed_scale`` (capped at :attr:`v_limit`), braking in
        time for the travel (or the
        narrower ``lower``/``upper`` given for this step)."""
        if dt <= 0:
            return
        lo = self.lower if lower is None else np.maximum(self.lower, _vec(lower, self.pos.size))
        hi = self.upper if upper is None else np.minimum(self.upper, _vec(upper, self.pos.size))
        v = self.v_limit
        wanted = np.clip(_vec(velocity, self.pos.size) * min(1.0, self.speed_scale), -v, v)
        room_up = np.where(np.isfinite(hi), np.maximum(hi - self.pos, 0.0), np.inf)
        room_down = np.where(np.isfinite(lo), np.maximum(self.pos - lo, 0.0), np.inf)
        with np.errstate(invalid="ignore"):
            wanted = np.clip(wanted, -np.minimum(brake_speed(room_down, self.a_max, dt), room_down / dt),
                             np.minimum(brake_speed(room_up, self.a_max, dt), room_up / dt))
        self._move(wanted, dt, np.minimum(lo, self.pos), np.maximum(hi, self.pos))

    def follow(self, target, dt: float) -> None:
        """Step to the streamed sample ``target`` (clipped into the travel), at most ``v_max·dt`` per axis (a timed
        run keeps its timing: the governor does not slow it; its stop still applies)."""
        if dt <= 0:
            return
        goal = np.clip(_vec(target, self.pos.size), self.lower, self.upper)
        step = np.clip(goal - self.pos, -self.v_max * dt, self.v_max * dt)
        self.pos = self.pos + step
        self.vel = step / dt
        self.vel[np.abs(self.vel) < 1e-12] = 0.0

    def brake(self, dt: float) -> None:
        """One step of the controlled stop: decelerate at ``a_max`` to rest."""
        if dt > 0:
            self._move(np.zeros(self.pos.size), dt, np.minimum(self.lower, self.pos), np.maximum(self.upper, self.pos))

    def hold(self) -> None:
        """Stop the reference where it is (a cut, or a category-2 hold)."""
        self.vel = np.zeros(self.pos.size)


class ReferenceController(Controller):
    """What the SCARA and Stewart controllers share (see :class:`server.runtime.controllers.base.Controller`).

    The reference (:class:`Ramp`) lives on ``axes``, which are also the channels the driver
    measures them on (``q1_rad``…, or ``x_m``…``yaw_rad``). While the outputs are cut or idle the
    reference follows the measurement, so a start moves nothing; in ``TRACK`` a subclass's
    :meth:`_track` moves it, in ``RAMP`` it decelerates, in ``HOLD`` it stops where it is.
    Time: ``dt`` of the loop times ``time_scale`` (a simulator running faster than real time
    has its limits in its own time). Events for the loop's log go through :meth:`take_events`.
    A trajectory run (:mod:`server.runtime.behaviours.trajectory`) talks to the controller
    through :meth:`target_setpoint`, :meth:`follow_setpoint`, :meth:`achieved` and :meth:`reached`.
    """

    axes: tuple[str, ...] = ()
    rate_channels: tuple[str, ...] = ()
    target_type: type = Hold
    follow_type: type = Hold
    #: setpoints that are velocities (a zero one asks for no motion)
    velocity_types: tuple[type, ...] = ()
    #: per axis: how close :meth:`reached` wants the measurement
    reach_tolerance: tuple[float, ...] = ()

    def __init__(self, ramp: Ramp, time_scale: float = 1.0, ttl_max_s: float = 10.0) -> None:
        self.ramp = ramp
        self.time_scale = float(time_scale)
        self.ttl_max_s = ttl_max_s
        self.measured: np.ndarray | None = None
        self._events: list[tuple[str, str, str, dict]] = []

    # ------------------------------------------------------------------ the Controller protocol
    def govern(self, scale: float) -> None:
        """The latency governor's cap: joint (or pose-axis) speed of moves and jogs times ``scale``."""
        self.ramp.speed_scale = min(1.0, max(0.0, float(scale)))

    def zero(self) -> Hold:
        return Hold()

    @property
    def stopped(self) -> bool:
        return self.ramp.stopped

    def reset(self) -> None:
        if self.measured is not None:
            self.ramp.sync(self.measured)
        else:
            self.ramp.hold()

    def motion_of(self, sp: Any) -> Motion:
        """A target always asks for motion; a velocity (jog) unless it is zero; :class:`Hold` never."""
        if isinstance(sp, Hold):
            return Motion(False, 0.0)
        if isinstance(sp, self.velocity_types):
            return Motion(any(getattr(sp, f.name) != 0.0 for f in msgspec.structs.fields(sp)), 0.0)
        return Motion(True, 0.0)

    def motion(self, values: Mapping[str, float]) -> Motion:
        measured = self._measure(values)
        if measured is not None:
            self.measured = measured
        rates = [values.get(ch, 0.0) for ch in self.rate_channels]
        moving = not self.ramp.stopped or any(math.isfinite(r) and abs(r) > 1e-3 for r in rates)
        return Motion(moving, 0.0)

    def update(self, dt_s: float, mode: OutputMode, sp: Any) -> dict[str, float]:
        h = dt_s * self.time_scale
        if mode is OutputMode.TRACK:
            self._track(sp, h)
        elif mode is OutputMode.RAMP:
            self.ramp.brake(h)
        elif mode is OutputMode.HOLD:
            self.ramp.hold()
        else:  # cut or idle: nothing is driven; the next start begins where the robot is
            self.reset()
        return self._command()

    def setpoint_json(self, sp: Any) -> dict[str, Any]:
        return msgspec.to_builtins(sp)

    def take_events(self) -> list[tuple[str, str, str, dict]]:  # type: ignore[override]
        """Events since the last call: (trigger, message, kind, values); the loop logs them."""
        events, self._events = self._events, []
        return events

    # ------------------------------------------------------------------ what a subclass provides
    def _measure(self, values: Mapping[str, float]) -> np.ndarray | None:
        out = [values.get(ch) for ch in self.axes]
        if any(v is None or not math.isfinite(v) for v in out):
            return None
        return np.array(out, dtype=float)

    def _track(self, sp: Any, h: float) -> None:
        raise NotImplementedError

    def _command(self) -> dict[str, float]:
        raise NotImplementedError

    def _note(self, trigger: str, message: str, kind: str = "info", values: dict | None = None) -> None:
        self._events.append((trigger, message, kind, values or {}))

    # ------------------------------------------------------------------ trajectory runs
    def target_setpoint(self, row: np.ndarray) -> Any:
        """Move to the sample ``row`` (over :attr:`axes`) within the limits: a run's approach."""
        return self.target_type(**{a: float(v) for a, v in zip(self.axes, row)})

    def follow_setpoint(self, row: np.ndarray) -> Any:
        """Track the streamed sample ``row`` (a run's tick)."""
        return self.follow_type(**{a: float(v) for a, v in zip(self.axes, row)})

    def achieved(self, values: Mapping[str, float]) -> np.ndarray | None:
        """The measured position over :attr:`axes`, or None while it is unknown."""
        return self._measure(values)

    def reached(self, values: Mapping[str, float], row: np.ndarray) -> bool:
        """The measurement is within :attr:`reach_tolerance` of ``row`` and the reference at rest."""
        got = self.achieved(values)
        return got is not None and self.ramp.stopped and bool(
            np.all(np.abs(got - np.asarray(row)) <= np.asarray(self.reach_tolerance)))

    def saturated_legs(self) -> tuple[int, ...]:
        """Legs the last command saturated (the platform's; an arm has none)."""
        return ()

    def saturation_report(self) -> list[dict[str, float]]:
        """Per leg, what the last command asked of it and got (the platform's; an arm has none)."""
        return []
