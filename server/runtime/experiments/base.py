"""What every experiment is made of: a script of behaviours run as one behaviour, its context, its result.

An experiment (seeds/002's heading adjustments and deployments, seeds/000's spinning IMU) is a sequence of
motions the runtime already knows — a turn to a heading, a mission, a joint jog, a wait — with
measurements in between. :class:`Experiment` subclasses write that sequence as a generator
(:meth:`Experiment.script`) that yields one behaviour at a time; :class:`ExperimentRun` is the
:class:`~server.runtime.loop.Behavior` the loop runs: each tick it drives the current sub-behaviour and,
when that ends, asks the script for the next one in the same tick (so the setpoint never lapses between
two). Every safety rule and stop applies as to any behaviour: a stop or an e-stop cancels the run (the
script is closed, the result keeps what was measured so far).

:class:`Context` gives a script what it needs from the robot: the estimator, the truth (the simulator's;
experiments that measure against it refuse to run without), the ``[heading]`` and ``[mission]`` settings
and the turn limits, a magnetometer calibration when there is none, and "go to" (a one-waypoint mission).
The same script runs in the runtime (the control thread, in real time, started by
:class:`server.runtime.experiments.ExperimentMethods`) and offline (:class:`~server.runtime.experiments.runner.OfflineRobot`,
ticked as fast as it goes).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, Generator, Iterable

import msgspec

from server.errors import ConflictError
from server.runtime.behaviours.common import still
from server.runtime.behaviours.heading import HeadingBehavior
from server.runtime.behaviours.magcal import MagCalibrationBehavior
from server.runtime.behaviours.mission import MissionBehavior, MissionMethods, MissionParams, Waypoint
from server.runtime.loop import Behavior

Script = Generator[Behavior, Behavior, None]


class Context:
    """The robot an experiment runs on (``robot``: :class:`server.runtime.robot.Robot`); ``offline``: ticked by hand
    (:class:`~server.runtime.experiments.runner.OfflineRobot`): a magnetometer fit then runs inline, not in a worker."""

    def __init__(self, robot: Any, offline: bool = False) -> None:
        self.robot = robot
        self.loop = robot.loop
        self.stage = robot.stage
        self.profile = robot.profile
        self.offline = offline
        self.missions = MissionMethods(robot)
        lim = getattr(self.profile, "limits", None)
        self.time_scale = self.stage.time_scale if self.stage is not None else 1.0
        if self.stage is not None:  # the rover's turn limits, as the heading command uses them
            self.max_rate = min(self.profile.heading.turn_rate_rad_s, lim.angular_rad_s)
            self.turn_brake = 0.5 * min(lim.angular_accel_rad_s2, lim.angular_decel_rad_s2) / self.time_scale

    def truth(self) -> dict[str, Any]:
        """The latest frame's ground truth (``{}`` on hardware)."""
        return self.loop.truth

    def require(self, kind: str, truth: bool = True, compass: bool = False, uwb: bool = False) -> None:
        """409 ``unavailable`` unless the robot is a ``kind`` with what the experiment measures."""
        ctrl = self.loop.controller
        if ctrl.profile != kind:
            raise ConflictError(f"this experiment is for a {kind}; this robot is a {ctrl.profile}", code="unavailable")
        st = self.stage
        if kind == "rover" and st is None:
            raise ConflictError("this experiment needs the estimator (an IMU)", code="unavailable")
        if compass and not st.attitude.has_mag:
            raise ConflictError("this experiment needs a magnetometer", code="unavailable")
        if uwb and not st.position.has_uwb:
            raise ConflictError("this experiment needs UWB anchors ([uwb] anchors)", code="unavailable")
        if truth and "sim_time_s" not in self.truth():
            raise ConflictError("this experiment measures against the simulator's ground truth: run it in the "
                                "simulator", code="unavailable")

    # ---------------------------------------------------------------- building blocks of a script
    def heading(self, target_deg: float, view: Any = None, tolerance_deg: float | None = None) -> HeadingBehavior:
        """A turn to compass ``target_deg`` by the ``[heading]`` closed loop, on ``view``'s heading (the estimator's
        compass unless given: :class:`EncoderHeading` turns by the encoders alone), finishing within
        ``tolerance_deg`` (default the table's)."""
        cfg = self.profile.heading
        if tolerance_deg is not None:
            cfg = msgspec.structs.replace(cfg, tolerance_deg=float(tolerance_deg))
        return HeadingBehavior(view if view is not None else self.stage, target_deg, cfg, self.max_rate,
                               self.turn_brake)

    def mission(self, waypoints: Iterable[Waypoint], mode: str = "drive", speed_m_s: float | None = None,
                label: str = "") -> MissionBehavior:
        return self.missions.build(MissionParams(waypoints=list(waypoints), mode=mode, speed_m_s=speed_m_s,
                                                 label=label))

    def go_to(self, x_m: float, y_m: float, heading_deg: float | None = None) -> Script:
        """Drive to (x, y) and turn to ``heading_deg`` (not measured: setting up a trial)."""
        pose = self.stage.position.pose
        if pose is not None and math.hypot(float(pose.state[0]) - x_m, float(pose.state[1]) - y_m) > 0.05:
            m = self.mission([Waypoint(x_m, y_m)], label="go to the start")
            yield m
            if m.outcome != "finished":
                raise ExperimentError(f"going to the start ({x_m:g}, {y_m:g}): {m.outcome}")
        if heading_deg is not None:
            turn = self.heading(heading_deg)
            yield turn
            if turn.outcome != "reached":
                raise ExperimentError(f"turning to {heading_deg:g}° at the start: {turn.outcome}")
        yield Settle(self.stage, 0.5)

    def place(self, x_m: float, y_m: float, heading_deg: float, sigma_m: float = 0.01) -> Script:
        """Put the simulated rover exactly at (x, y) facing compass ``heading_deg``, and its estimate there (a
        surveyed start point); then wait still. Runs in the control thread (a script's), under the loop's lock:
        the driver's debug hook directly, not :meth:`ControlLoop.driver_debug`, which takes the lock."""
        yaw = math.radians(90.0 - heading_deg)
        self.loop.driver.debug({"teleport": [x_m, y_m, yaw]})
        yield Settle(self.stage, 0.5)  # the attitude filter follows the jump (the gyro carries it)
        self.stage.position.set_pose(x_m, y_m, sigma_m=sigma_m)
        yield Settle(self.stage, 0.5)

    def calibrate_compass(self, force: bool = False) -> Script:
        """A magnetometer calibration turn where the rover stands, unless it is calibrated already."""
        st = self.stage
        if not st.attitude.has_mag or (st.attitude.heading_calibrated and not force):
            return
        cal = self.profile.calibration
        calibrations = self.robot.calibrations
        b = MagCalibrationBehavior(st, cal.mag_revolutions, min(cal.mag_turn_rate_rad_s, self.max_rate),
                                   cal.mag_timeout_s, self.turn_brake,
                                   on_result=(lambda r: None) if self.offline else calibrations.mag_result_threadsafe,
                                   fit_async=None if self.offline else calibrations.fit_async)
        yield b
        if b.outcome != "calibrated":
            raise ExperimentError(f"the magnetometer calibration failed: {b.outcome}")
        # the disturbance check learns the site's field after a calibration (when not configured): let it
        check = st.attitude.mag_check
        yield Settle(st, (check.reference_s if check is not None else 0.0) + 0.5)


class ExperimentError(RuntimeError):
    """The experiment cannot go on (a calibration failed, a turn timed out): it ends ``failed`` with this reason."""


class Settle:
    """Hold still (the controller's zero setpoint) until the robot has been still for ``seconds`` of driver time."""

    name = "settle"

    def __init__(self, stage: Any, seconds: float, zero: Any = None) -> None:
        self.stage = stage
        self.seconds = float(seconds)
        self.still_s = 0.0
        self.zero = zero

    def update(self, values: dict[str, float], dt_s: float, now: float) -> Any | None:
        self.still_s = self.still_s + self.stage.sim_dt(dt_s) if still(values) else 0.0
        if self.still_s >= self.seconds:
            return None
        return self.zero if self.zero is not None else _rover_zero()

    def cancel(self, reason: str) -> None:
        pass

    def status(self) -> dict[str, Any]:
        return {"name": self.name, "still_s": round(self.still_s, 3), "seconds": self.seconds}


def _rover_zero() -> Any:
    from server.runtime.controllers.rover import RoverSetpoint

    return RoverSetpoint()


class EncoderHeading:
    """A compass heading measured by the wheel encoders alone, for :class:`HeadingBehavior` (seeds/002's
    "encoder-only" adjustment): ``start_deg`` when made, then the odometry's turn (clockwise positive, as a
    compass). Everything else is the estimator's."""

    def __init__(self, stage: Any, start_deg: float = 0.0) -> None:
        self.stage = stage
        self.start_deg = float(start_deg)
        self.start_odom = stage.odom_yaw_rad

    def sim_dt(self, dt_s: float) -> float:
        return self.stage.sim_dt(dt_s)

    @property
    def odom_yaw_rad(self) -> float:
        return self.stage.odom_yaw_rad

    @property
    def heading_deg(self) -> float:
        return (self.start_deg - math.degrees(self.stage.odom_yaw_rad - self.start_odom)) % 360.0


class Experiment:
    """Base of the experiments: a name, what it needs, its parameters (``params_type``, a msgspec Struct with
    defaults), a script and a result. Subclasses set the class attributes and override :meth:`check`,
    :meth:`script`, :meth:`result`, and :meth:`observe` when they measure every tick."""

    name: ClassVar[str] = ""
    title: ClassVar[str] = ""
    source: ClassVar[str] = ""
    #: the profile the paper's figures need (the experiment runs on any fitting robot; this is the offline default)
    profile: ClassVar[str] = "config/rover-field.toml"
    params_type: ClassVar[type] = msgspec.Struct

    def __init__(self, ctx: Context, params: Any = None) -> None:
        self.ctx = ctx
        self.params = params if params is not None else self.params_type()
        self.step = ""  # what the script is doing now, for the status
        self.done_units = 0
        self.total_units = 1

    def check(self) -> None:
        """Raise :class:`ConflictError` when this robot cannot run the experiment."""

    def script(self) -> Script:
        raise NotImplementedError

    def observe(self, values: dict[str, float], dt_s: float) -> None:
        """Every tick, before the current behaviour's update (e.g. follow the true heading)."""

    def result(self) -> dict[str, Any]:
        raise NotImplementedError

    @property
    def progress(self) -> float:
        return min(1.0, self.done_units / max(1, self.total_units))


class ExperimentRun:
    """The behaviour that runs an experiment's script (see the module docstring)."""

    name = "experiment"

    def __init__(self, experiment: Experiment) -> None:
        self.experiment = experiment
        self.phase = "running"
        self.outcome: str | None = None
        self.current: Any = None
        self._script = experiment.script()
        self._last: Any = None
        self._started = False
        self.zero = experiment.ctx.loop.controller.zero()

    def update(self, values: dict[str, float], dt_s: float, now: float) -> Any | None:
        self.experiment.observe(values, dt_s)
        for _ in range(1000):  # sub-behaviours that end at once: the next in the same tick
            if self.current is None:
                try:
                    self.current = self._script.send(self._last) if self._started else next(self._script)
                    self._started = True
                except StopIteration:
                    self.phase, self.outcome = "done", "finished"
                    return None
                except ExperimentError as err:
                    self.phase, self.outcome = "failed", f"failed: {err}"
                    return None
            sp = self.current.update(values, dt_s, now)
            if sp is not None:
                return sp
            self._last, self.current = self.current, None
        return self.zero

    def cancel(self, reason: str) -> None:
        if self.current is not None:
            self.current.cancel(reason)
        self._script.close()
        self.phase, self.outcome = "cancelled", f"cancelled: {reason}"

    @property
    def finished(self) -> bool:
        return self.phase in ("done", "failed", "cancelled")

    def status(self) -> dict[str, Any]:
        exp = self.experiment
        current = None
        if self.current is not None:
            try:
                st = self.current.status()
                current = {k: st.get(k) for k in ("name", "phase", "progress", "leg", "legs") if k in st}
            except Exception:  # a status bug must not break the experiment's
                current = {"name": getattr(self.current, "name", "?")}
        return {"name": self.name, "experiment": exp.name, "phase": self.phase, "step": exp.step,
                "progress": round(1.0 if self.phase == "done" else exp.progress, 4), "current": current,
                "outcome": self.outcome}


__all__ = ["Context", "EncoderHeading", "Experiment", "ExperimentError", "ExperimentRun", "Script", "Settle"]
