"""Trajectory runs of the arm and the platform (issue 13 item 6), and their tracking report.

A run is a :class:`~server.runtime.loop.Behavior`: it supplies the controller's setpoint
each tick while the robot is ``running``, so every safety trigger still applies and a stop
or an e-stop cancels it (the loop calls :meth:`TrajectoryRun.cancel`). Three phases:

1. **approach**: a position target at the first sample (the controller's ramp, within its
   limits), until the robot is there and at rest (``approach_timeout_s`` of driver time,
   else the run fails);
2. **run**: the samples streamed tick by tick (``follow`` setpoints), the trajectory's clock
   advancing by the tick's ``dt`` in driver time (the controller's ``time_scale``);
3. **settle**: the last sample held ``settle_s`` longer, so the report sees the end.

While running and settling it records, per tick, the sample commanded on the previous
tick and the position measured now — what the robot did with that command (the order the
paper compares them in, seeds/003) — and which legs the controller saturated. The report
(:meth:`TrajectoryRun.report`) gives per axis the mean, mean |d|, RMS and max |d| of
``achieved − commanded`` (:func:`robotics.tracking.deviation_by_axis`; angles compared
unwrapped), the saturation events, and the moving axes' series reduced to ``max_points`` (fewer when
the reply would not fit a runtime frame) for a plot.
At most :data:`MAX_RECORD` ticks are kept: a longer run records every k-th tick.

:class:`TrajectoryMethods` is the runtime API's side (``trajectory_upload``,
``trajectory_run``, ``trajectory``, ``trajectory_report``, ``program``).
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from robotics.tracking import deviation_by_axis
from robotics.trajectory import MAX_AXES, MAX_POINTS, Trajectory
from server.errors import ConflictError, NotFoundError, ValidationError
from server.runtime_api.protocol import dumps
from server.runtime_api.params import (MAX_TRAJECTORY_S, Empty, ProgramParams, ReportParams, TrajectoryRunParams,
                                TrajectoryUploadParams, check_trajectory_times, check_waypoints,
                                trajectory_from_columns)
from server.validation import check_range

#: most ticks a run records (a longer run records every k-th tick)
MAX_RECORD = 100_000
#: most saturation events a report lists (the counts cover them all)
MAX_SATURATION_EVENTS = 30
#: a report's size at most, bytes of JSON: a runtime reply is one frame header (64 KiB)
MAX_REPLY_BYTES = 60_000


class TrajectoryRun:
    """One run of ``trajectory`` (already checked by the controller's ``prepare``) through ``controller``."""

    name = "trajectory"

    def __init__(self, trajectory: Trajectory, controller: Any, label: str, rate_hz: float,
                 settle_s: float = 0.5, approach_timeout_s: float = 30.0) -> None:
        self.trajectory = trajectory
        self.controller = controller
        self.label = label
        self.settle_s = settle_s
        self.approach_timeout_s = approach_timeout_s
        self.axes = trajectory.axes
        self.phase = "approach"
        self.outcome: str | None = None
        self.t = 0.0  # trajectory time of the sample being commanded, driver seconds
        self.waited_s = 0.0
        check_trajectory_times(trajectory.times_s)  # whoever built it: the tick count below must stay finite
        ticks = (min(trajectory.duration_s, MAX_TRAJECTORY_S) + settle_s) * rate_hz / max(controller.time_scale, 1e-9)
        ticks = int(math.ceil(min(ticks, 1e15) * 1.5)) + 16  # slack for late ticks (a longer dt covers more time)
        self.stride = max(1, math.ceil(ticks / MAX_RECORD))
        size = min(MAX_RECORD, ticks // self.stride + 1)
        k = len(self.axes)
        self.t_rec = np.zeros(size)
        self.commanded = np.zeros((size, k))
        self.achieved = np.zeros((size, k))
        self.count = 0
        self.dropped = 0
        self.ticks = 0
        self.saturated_samples = 0
        self.saturation_events: list[dict[str, Any]] = []
        self.saturation_changes = 0
        self._legs: tuple[int, ...] = ()
        self._last: tuple[float, np.ndarray] | None = None
        self._report: dict[str, Any] | None = None

    # ------------------------------------------------------------------ the Behavior protocol (control thread)
    def update(self, values: dict[str, float], dt_s: float, now: float) -> Any | None:
        h = dt_s * self.controller.time_scale
        tr = self.trajectory
        if self.phase == "approach":
            first = tr.values[0]
            if self.controller.reached(values, first):
                self.phase, self.t = "run", 0.0
            else:
                self.waited_s += h
                if self.waited_s > self.approach_timeout_s:
                    self.phase, self.outcome = "failed", (f"failed: the start of the trajectory was not reached within "
                                                          f"{self.approach_timeout_s:g} s")
                    return None
                return self.controller.target_setpoint(first)
        else:
            self._record(values)
            self.t += h
        if self.t > tr.duration_s + self.settle_s:
            self.phase, self.outcome = "done", "finished"
            return None
        if self.t > tr.duration_s:
            self.phase = "settle"
        row = tr.at(min(self.t + tr.times_s[0], tr.times_s[-1]))
        self._last = (self.t, row)
        return self.controller.follow_setpoint(row)

    def _record(self, values: dict[str, float]) -> None:
        legs = self.controller.saturated_legs()
        if legs:
            self.saturated_samples += 1
        if legs != self._legs:
            self.saturation_changes += 1
            if len(self.saturation_events) < MAX_SATURATION_EVENTS:
                self.saturation_events.append({"t_s": round(self.t, 6), "legs": list(legs), "report": [
                    {k: round(v, 6) for k, v in leg.items()} for leg in self.controller.saturation_report()]
                    if legs else []})
            self._legs = legs
        if self._last is None:
            return
        self.ticks += 1
        if (self.ticks - 1) % self.stride:
            return
        got = self.controller.achieved(values)
        if got is None or self.count >= len(self.t_rec):
            self.dropped += 1
            return
        t, row = self._last
        i = self.count
        self.t_rec[i], self.commanded[i], self.achieved[i] = t, row, got
        self.count += 1

    def cancel(self, reason: str) -> None:
        self.phase, self.outcome = "cancelled", f"cancelled: {reason}"

    def status(self) -> dict[str, Any]:
        duration = self.trajectory.duration_s
        out = {"name": self.name, "label": self.label, "phase": self.phase,
               "progress": round(min(1.0, self.t / duration), 4) if duration > 0 else 1.0,
               "t_s": round(self.t, 3), "duration_s": duration, "points": len(self.trajectory),
               "axes": list(self.axes)}
        if self.outcome:
            out["outcome"] = self.outcome
        return out

    # ------------------------------------------------------------------ the report (runtime API thread, after the run)
    @property
    def finished(self) -> bool:
        return self.phase in ("done", "cancelled", "failed")

    def report(self, max_points: int = 400) -> dict[str, Any]:
        """The tracking report (see the module docstring); 409 ``trajectory_running`` before the run ended."""
        if not self.finished:
            raise ConflictError(f"the trajectory {self.label!r} is still running ({self.phase}, "
                                f"{100 * self.status()['progress']:.0f} %)", code="trajectory_running")
        n = self.count
        t, c, a = self.t_rec[:n], self.commanded[:n], self.achieved[:n].copy()
        for j, axis in enumerate(self.axes):  # angles compared unwrapped: a turn is not an error
            if axis.endswith("_rad") and n:
                a[:, j] = c[:, j] + np.remainder(a[:, j] - c[:, j] + math.pi, 2 * math.pi) - math.pi
        if self._report is None:
            self._report = {
                "label": self.label, "outcome": self.outcome, "axes": list(self.axes),
                "moving_axes": [ax for j, ax in enumerate(self.axes) if n and float(np.ptp(c[:, j])) > 1e-9],
                "samples": n, "stride": self.stride, "dropped": self.dropped,
                "duration_s": self.trajectory.duration_s, "points": len(self.trajectory),
                "deviation": deviation_by_axis(self.axes, c, a) if n else {},
                "saturation": {"samples": self.saturated_samples, "events": self.saturation_events,
                               "events_dropped": self.saturation_changes - len(self.saturation_events)},
            }
        shown = [self.axes.index(ax) for ax in self._report["moving_axes"]] or list(range(len(self.axes)))
        points = min(n, max_points)
        while True:  # the reply travels in one runtime frame: thin the series until it fits
            idx = np.unique(np.linspace(0, n - 1, points).round().astype(int)) if n else np.zeros(0, int)
            series = {"t_s": np.round(t[idx], 6).tolist(),
                      "commanded": {self.axes[j]: np.round(c[idx, j], 7).tolist() for j in shown},
                      "achieved": {self.axes[j]: np.round(a[idx, j], 7).tolist() for j in shown}}
            report = {**self._report, "series": series}
            if points <= 2 or len(dumps(report)) <= MAX_REPLY_BYTES:
                return report
            points //= 2


class TrajectoryMethods:
    """The runtime API's trajectory and program methods for :class:`~server.runtime.robot.Robot` ``robot``."""

    def __init__(self, robot: Any) -> None:
        self.robot = robot
        self.loop = robot.loop
        self.run: TrajectoryRun | None = None
        self._upload_id: str | None = None
        self._parts = 0
        self._columns: dict[str, list[float]] = {}

    def methods(self) -> dict[str, tuple[type, Callable[[Any], Any]]]:
        return {"trajectory_upload": (TrajectoryUploadParams, self.upload),
                "trajectory_run": (TrajectoryRunParams, self.start),
                "trajectory": (Empty, self.status),
                "trajectory_report": (ReportParams, self.report),
                "program": (ProgramParams, self.program)}

    def _controller(self, need: str = "trajectory") -> Any:
        """The controller, if it declares ``need`` in its ``behaviours`` (never found by probing its methods)."""
        ctrl = self.loop.controller
        if need not in ctrl.behaviours:
            what = "FAULHABER programs are for the SCARA arm" if need == "program" else \
                "trajectory runs are for arms and platforms"
            raise ConflictError(f"{what}; this robot is a {ctrl.profile}", code="unavailable")
        return ctrl

    def upload(self, p: TrajectoryUploadParams) -> dict[str, Any]:
        self._controller()
        if not p.upload or len(p.upload) > 64:
            raise ValidationError("upload must be an id of 1 to 64 characters", code="invalid")
        if p.part == 0:
            self._upload_id, self._parts, self._columns = p.upload, 0, {}
        elif p.upload != self._upload_id or p.part != self._parts:
            raise ValidationError(f"upload {p.upload!r} part {p.part} out of order (expected part {self._parts} of "
                                  f"{self._upload_id!r}); start again at part 0", code="invalid")
        names = list(p.columns)
        if len(names) > MAX_AXES + 1:
            raise ValidationError(f"a trajectory has at most {MAX_AXES} axes besides t_s", code="out_of_limits")
        if self._columns and names != list(self._columns):
            raise ValidationError("every part of an upload must have the same columns", code="invalid")
        rows = len(next(iter(p.columns.values()), []))
        if any(len(v) != rows for v in p.columns.values()):
            raise ValidationError("the columns of a part must have the same length", code="invalid")
        total = len(next(iter(self._columns.values()), [])) + rows
        if total > MAX_POINTS:
            self._upload_id = None
            raise ValidationError(f"a trajectory holds at most {MAX_POINTS} points", code="out_of_limits")
        for name, col in p.columns.items():
            self._columns.setdefault(name, []).extend(col)
        self._parts += 1
        return {"ok": True, "upload": p.upload, "points": total}

    def _trajectory(self, ctrl: Any, series: str | None, upload: str | None, columns: Any = None,
                    amplitude: float | None = None) -> tuple[Trajectory, str]:
        given = [x for x in (series, upload, columns) if x is not None]
        if len(given) != 1:
            raise ValidationError("give one of series or an uploaded trajectory", code="invalid")
        if series is not None:
            return ctrl.series(series, amplitude), series
        if columns is None:
            if upload != self._upload_id or not self._columns:
                raise NotFoundError(f"no uploaded trajectory {upload!r}", code="not_found")
            columns = self._columns
        return trajectory_from_columns(columns), "upload"

    def start(self, p: TrajectoryRunParams) -> dict[str, Any]:
        ctrl = self._controller()
        if p.amplitude is not None:
            check_range("amplitude", p.amplitude, -10.0, 10.0)
        tr, label = self._trajectory(ctrl, p.series, p.upload, amplitude=p.amplitude)
        tr = ctrl.prepare(tr)
        run = TrajectoryRun(tr, ctrl, label, rate_hz=self.loop.stats.rate_hz)
        state = self.loop.start_behavior(run)
        self.run = run
        return {"ok": True, "state": state, "trajectory": run.status()}

    def status(self, p: Empty) -> dict[str, Any]:
        ctrl = self._controller()
        return {"series": ctrl.describe()["trajectory"]["series"], "axes": list(ctrl.axes),
                "run": self.run.status() if self.run is not None else None}

    def report(self, p: ReportParams) -> dict[str, Any]:
        self._controller()
        if not 2 <= p.max_points <= 2000:
            raise ValidationError("max_points must be in [2, 2000]", code="out_of_limits")
        if self.run is None:
            raise NotFoundError("no trajectory has run yet", code="not_found")
        return self.run.report(p.max_points)

    def program(self, p: ProgramParams) -> dict[str, Any]:
        ctrl = self._controller("program")
        if p.columns is not None:
            check_waypoints(len(next(iter(p.columns.values()), [])))
        if p.series is not None:
            if not (math.isfinite(p.step_s) and 0.01 <= p.step_s <= 60.0):
                raise ValidationError("step_s must be in [0.01, 60] s", code="out_of_limits")
        tr, _ = self._trajectory(ctrl, p.series, None, p.columns)
        if p.series is not None:
            check_waypoints(int(tr.duration_s / p.step_s) + 1)
            times = np.arange(tr.times_s[0], tr.times_s[-1] + 1e-9, p.step_s)
            tr = Trajectory(times, tr.sample(times), tr.axes)
        return ctrl.program(tr)
