"""Missions: the rover through a list of waypoints on its fused pose, with per-leg results (issue 23).

A mission is a :class:`~server.runtime.loop.Behavior` like the heading turn (``heading.py``) and the
trajectory runs (``trajectory.py``): it supplies the rover's setpoint each tick while the robot is
``running``, so every safety rule, the link-loss watchdog and every stop still apply — a stop, an
e-stop, a lost link or an operator's speed command end it (the loop calls :meth:`MissionBehavior.cancel`),
and the operator's heartbeat keeps it alive like any motion. Two modes:

* ``drive``: pure pursuit (:class:`robotics.pursuit.PurePursuit`) along the legs, through the waypoints
  without stopping, except at the last one and at a waypoint with a ``heading_deg`` (turned to after
  arriving, by the compass closed loop of :class:`~server.runtime.behaviours.heading.HeadingBehavior`) or
  a ``hold_s`` (waited there);
* ``step``: seeds/002's step-and-fix (§3.3: "adjust to the set heading, jump, self-right, then locate by
  UWB"): per leg, turn to the leg's bearing, drive to the waypoint and stop, wait still ``settle_s``,
  average the UWB fixes of ``fix_s``, record, go on.

Each leg has a time bound, ``leg_timeout_factor`` × (its length / the speed + its turn / the turn rate)
+ ``leg_timeout_margin_s`` (+ hold, settle and fix), and a corridor, ``max_cross_track_m`` either side
of it: outside either, the mission fails with the reason (``failed: waypoint 3 (2.00, 4.50) not
reached within 21.3 s (0.62 m to go)``) and the rover stops (still ``running``).

Per leg it records the arrival error by the estimate and, in the simulator, by the truth
(:attr:`ControlLoop.truth <server.runtime.loop.ControlLoop.truth>`, read on the tick after so the
estimate and the truth are of the same instant); in step mode the UWB fix's error and the fused
estimate's, against the truth; the heading errors after each turn. Each leg's result is also an
event (``mission_leg``), and pause/resume are events (``mission_pause``, ``mission_resume``).

**Entry points** (docs/missions.md): :class:`MissionMethods` holds the runtime API's methods (``mission_start``,
``mission_pause``, ``mission_resume``, ``mission_cancel``, ``mission``, ``mission_report``, as
``methods()`` → name → (params struct, function), the shape :mod:`server.runtime.service` registers);
:class:`MissionParams` / :class:`Waypoint` are the request body; :class:`MissionConfig` the ``[mission]``
table. The experiments (:mod:`server.runtime.experiments`) run missions the same way.
"""

from __future__ import annotations

import copy
import math
import typing
from typing import Any, Callable, Mapping, Sequence

import msgspec

from robotics.angles import wrap_deg
from robotics.pursuit import PurePursuit
from server.errors import ConflictError, NotFoundError, ValidationError
from server.runtime.behaviours.common import rounded, still
from server.runtime.behaviours.heading import HeadingBehavior
from server.runtime.controllers.rover import RoverSetpoint
from server.runtime.estimation import EstimationStage
from server.runtime.settings import HeadingConfig, MissionConfig
from server.runtime_api.params import Empty, MissionParams, ReportParams, Waypoint
from server.validation import check_range

def compass_deg(dx: float, dy: float) -> float:
    """Compass heading (0 north, 90 east) of the direction (dx east, dy north).

    >>> compass_deg(0.0, 1.0), compass_deg(1.0, 0.0), compass_deg(-1.0, 0.0)
    (0.0, 90.0, 270.0)
    """
    return (90.0 - math.degrees(math.atan2(dy, dx))) % 360.0


def _stats(values: Sequence[float | None]) -> dict[str, float | None]:
    v = [abs(x) for x in values if x is not None and math.isfinite(x)]
    return {"mean": round(sum(v) / len(v), 5) if v else None, "max": round(max(v), 5) if v else None, "n": len(v)}


class MissionBehavior:
    """A mission through ``waypoints`` (see the module docstring), on ``stage``'s fused pose.

    ``heading`` is the ``[heading]`` table (the turns), ``max_rate_rad_s`` / ``turn_brake_rad_s2`` the turn
    limits and ``decel_m_s2`` the braking the follower plans with (driver-clock time, as the heading's);
    ``truth`` returns the latest frame's ground truth (``{}`` on hardware); ``emit`` logs an event (the
    loop's, called in the control thread)."""

    name = "mission"

    def __init__(self, stage: EstimationStage, waypoints: Sequence[Waypoint], *, mode: str = "drive",
                 speed_m_s: float, settings: MissionConfig, heading: HeadingConfig, max_rate_rad_s: float,
                 turn_brake_rad_s2: float, decel_m_s2: float,
                 truth: Callable[[], Mapping[str, Any]] = dict,
                 emit: Callable[..., None] | None = None, label: str = "") -> None:
        if mode not in ("drive", "step"):
            raise ValueError(f"mode must be drive or step, got {mode!r}")
        if not waypoints:
            raise ValueError("a mission needs at least one waypoint")
        self.stage = stage
        self.waypoints = list(waypoints)
        self.mode = mode
        self.speed = float(speed_m_s)
        self.cfg = settings
        self.heading_cfg = heading
        self.max_rate = float(max_rate_rad_s)
        self.turn_brake = float(turn_brake_rad_s2)
        self.decel = float(decel_m_s2)
        self.truth = truth
        self.emit = emit
        self.label = label
        self.id = 0  # the runtime's number for this mission (MissionMethods.start), 0 for an experiment's own
        self.phase = "starting"
        self.outcome: str | None = None
        self.paused = False
        self.leg = 0  # index of the waypoint being approached
        self.clock_s = 0.0  # driver time while not paused
        self.leg_clock_s = 0.0
        self.leg_budget_s = math.inf
        self.results: list[dict[str, Any]] = []
        self.path: list[tuple[float, float, float]] = []  # (t_s, x, y) of the estimate, every ~0.1 s
        self.true_path: list[tuple[float, float, float]] = []
        self._path_t = -math.inf
        self._follower: PurePursuit | None = None
        self._run_end = 0  # the last waypoint index of the current pursuit run (drive mode)
        self._wp_along: list[float] = []  # along-path distance of each waypoint of the run
        self._turn: HeadingBehavior | None = None
        self._turn_target: float | None = None
        self._turn_kind = ""  # "leg" (step mode: the bearing) or "waypoint" (its heading_deg)
        self._still_s = 0.0
        self._hold_s = 0.0
        self._fixes: list[tuple[float, float]] = []
        self._fix_count = 0
        self._fix_clock_s = 0.0
        self._current: dict[str, Any] = {}  # the result being built for the current leg
        # truth-based figures to fill on the next tick (the loop's truth is then the frame they were taken in):
        # (result dict, key, reference: a point or a compass heading)
        self._pending_truth: list[tuple[dict[str, Any], str, Any]] = []
        self._dt_s = 0.0
        # the closest approach to the waypoint being passed (drive mode): distance, pose, the truth then
        self._closest: tuple[float, tuple[float, float, float]] = (math.inf, (0.0, 0.0, 0.0))
        self._closest_truth: Mapping[str, Any] = {}
        self._closest_truth_due = False
        self.distance_to_go_m = math.nan

    # ------------------------------------------------------------------ the pose
    def _pose(self) -> tuple[float, float, float] | None:
        pose = self.stage.position.pose
        if pose is None:
            return None
        return float(pose.state[0]), float(pose.state[1]), float(pose.state[2])

    # ------------------------------------------------------------------ the Behavior protocol (control thread)
    def update(self, values: dict[str, float], dt_s: float, now: float) -> RoverSetpoint | None:
        h = self.stage.sim_dt(dt_s)
        self._take_truth()
        if self._closest_truth_due:  # the frame of the closest approach's tick
            self._closest_truth, self._closest_truth_due = self.truth() or {}, False
        pose = self._pose()
        if pose is None:
            return self._fail("no position estimate (no UWB fix and no known start)")
        self._record_path(pose)
        if self.paused:
            return RoverSetpoint()
        self.clock_s += h
        self.leg_clock_s += h
        if self.phase == "starting":
            self._begin_leg(pose)
        if self.leg_clock_s > self.leg_budget_s:
            wp = self.waypoints[self.leg]
            to_go = math.hypot(wp.x_m - pose[0], wp.y_m - pose[1])
            return self._fail(f"waypoint {self.leg} ({wp.x_m:.2f}, {wp.y_m:.2f}) not reached within "
                              f"{self.leg_budget_s:.1f} s ({to_go:.2f} m to go, {self.phase})")
        self._dt_s = dt_s  # the loop period, for sub-behaviours (they convert to driver time themselves)
        step = getattr(self, f"_{self.phase}")
        return step(values, pose, h)

    def cancel(self, reason: str) -> None:
        if self._turn is not None:
            self._turn.cancel(reason)
        self.phase, self.outcome = "cancelled", f"cancelled: {reason}"

    # ------------------------------------------------------------------ pause (runtime API thread, under the lock)
    def pause(self) -> None:
        """Stop where it is (the controller ramps down) until :meth:`resume`; the leg's clock stops too."""
        if self.finished or self.paused:
            return
        self.paused = True
        if self._turn is not None:  # a turn restarts from scratch on resume
            self._turn.cancel("mission paused")
            self._turn = None

    def resume(self) -> None:
        """Go on with the current leg: a turn starts again, a wait for still wheels and a fix too."""
        if self.finished or not self.paused:
            return
        self.paused = False
        if self.phase in ("settling", "fixing"):
            self.phase, self._still_s, self._fixes, self._fix_clock_s = "settling", 0.0, [], 0.0

    @property
    def finished(self) -> bool:
        return self.phase in ("done", "failed", "cancelled")

    # ------------------------------------------------------------------ legs
    def _begin_leg(self, pose: tuple[float, float, float]) -> None:
        """Start leg ``self.leg`` from ``pose``: its result record, time budget and first phase."""
        wp = self.waypoints[self.leg]
        dist = self._new_result(pose[0], pose[1])
        turn = abs(wrap_deg(compass_deg(wp.x_m - pose[0], wp.y_m - pose[1]) - _compass_of_yaw(pose[2])))
        if wp.heading_deg is not None:
            turn += 180.0  # at most another half turn at the waypoint
        c = self.cfg
        self.leg_budget_s = (c.leg_timeout_factor * (dist / self.speed + math.radians(turn) / self.max_rate)
                             + c.leg_timeout_margin_s + wp.hold_s + (c.settle_s + c.fix_s if self.mode == "step" else 0))
        self.leg_clock_s = 0.0
        if self.mode == "step" and dist > c.arrival_tolerance_m:
            self._start_turn(compass_deg(wp.x_m - pose[0], wp.y_m - pose[1]), "leg")
        else:
            self._start_drive(pose)

    def _start_drive(self, pose: tuple[float, float, float]) -> None:
        """Pure pursuit from ``pose`` through the waypoints up to the next one the rover stops at."""
        end = self.leg
        if self.mode == "drive":
            while end < len(self.waypoints) - 1 and not self._stops_at(end):
                end += 1
        points = [(pose[0], pose[1])] + [(w.x_m, w.y_m) for w in self.waypoints[self.leg:end + 1]]
        c = self.cfg
        self._follower = PurePursuit(points, lookahead_m=c.lookahead_m, speed_m_s=self.speed,
                                     max_rate_rad_s=self.max_rate, decel_m_s2=self.decel,
                                     turn_brake_rad_s2=self.turn_brake, goal_tolerance_m=c.arrival_tolerance_m,
                                     min_speed_m_s=min(0.03, self.speed))
        self._run_end = end
        along, total = [], 0.0
        for a, b in zip(points, points[1:]):
            total += math.hypot(b[0] - a[0], b[1] - a[1])
            along.append(total)
        self._wp_along = along  # along-path distance of waypoints leg … end
        self.phase = "driving"

    def _stops_at(self, i: int) -> bool:
        wp = self.waypoints[i]
        return wp.heading_deg is not None or wp.hold_s > 0.0 or i == len(self.waypoints) - 1

    def _start_turn(self, target_deg: float, kind: str) -> None:
        self._turn = HeadingBehavior(self.stage, target_deg, self.heading_cfg, self.max_rate, self.turn_brake)
        self._turn_target, self._turn_kind = target_deg, kind
        self.phase = "turning"

    # ------------------------------------------------------------------ phases
    def _turning(self, values: dict[str, float], pose, h: float) -> RoverSetpoint | None:
        turn = self._turn
        if turn is None:  # resumed after a pause: the turn starts again
            self._start_turn(self._turn_target if self._turn_target is not None else 0.0, self._turn_kind)
            turn = self._turn
        sp = turn.update(values, self._dt_s, 0.0)
        if sp is not None:
            return sp
        self._turn = None
        if turn.outcome != "reached":
            return self._fail(f"turn to {self._turn_target:.1f}° at waypoint {self.leg}: {turn.outcome}")
        key = "leg_heading" if self._turn_kind == "leg" else "waypoint_heading"
        self._current[key] = {"target_deg": round(self._turn_target, 3),
                              "error_deg": rounded(turn.error_deg, 3), "steps": turn.steps}
        self._pending_truth.append((self._current, key, float(self._turn_target)))
        if self._turn_kind == "leg":
            self._start_drive(pose)
            return RoverSetpoint()
        return self._after_heading()

    def _driving(self, values: dict[str, float], pose, h: float) -> RoverSetpoint | None:
        f = self._follower
        assert f is not None
        cmd = f.update(pose, h)
        self.distance_to_go_m = cmd.progress.remaining_m
        if abs(cmd.progress.cross_track_m) > self.cfg.max_cross_track_m and not cmd.reached:
            wp = self.waypoints[self.leg]
            return self._fail(f"left the corridor of leg {self.leg} to ({wp.x_m:.2f}, {wp.y_m:.2f}): "
                              f"{abs(cmd.progress.cross_track_m):.2f} m off (limit {self.cfg.max_cross_track_m:g} m)")
        # intermediate waypoints of the run: passed when the projection goes beyond them; the arrival error is
        # the closest approach's
        if self.leg < self._run_end:
            wp = self.waypoints[self.leg]
            d = math.hypot(wp.x_m - pose[0], wp.y_m - pose[1])
            if d < self._closest[0]:
                self._closest, self._closest_truth_due = (d, pose), True
        while self.leg < self._run_end and cmd.progress.along_m >= self._wp_along[0]:
            self._pass()
            self._wp_along.pop(0)
            self._begin_pass()
        if not cmd.reached:
            return RoverSetpoint(cmd.linear_m_s, cmd.angular_rad_s)
        self._follower = None
        self.phase, self._still_s = "settling", 0.0
        return RoverSetpoint()

    def _new_result(self, x: float, y: float) -> float:
        """A new result record for leg ``self.leg``, from (x, y); returns the leg's length."""
        wp = self.waypoints[self.leg]
        dist = math.hypot(wp.x_m - x, wp.y_m - y)
        self._current = {"leg": self.leg, "target": msgspec.to_builtins(wp),
                         "from": {"x_m": round(x, 4), "y_m": round(y, 4)}, "length_m": round(dist, 4),
                         "start_s": round(self.clock_s, 3)}
        return dist

    def _begin_pass(self) -> None:
        """The next leg of a drive run starts where the last waypoint was passed (its budget from there)."""
        wp = self.waypoints[self.leg]
        prev = self.waypoints[self.leg - 1]
        dist = self._new_result(prev.x_m, prev.y_m)
        c = self.cfg
        self.leg_budget_s = c.leg_timeout_factor * dist / self.speed + c.leg_timeout_margin_s + wp.hold_s + \
            (c.leg_timeout_factor * math.pi / self.max_rate if wp.heading_deg is not None else 0.0)
        self.leg_clock_s = 0.0

    def _settling(self, values: dict[str, float], pose, h: float) -> RoverSetpoint:
        self._still_s = self._still_s + h if still(values) else 0.0
        if self._still_s < (self.cfg.settle_s if self.mode == "step" else min(self.cfg.settle_s, 0.2)):
            return RoverSetpoint()
        self._arrive(pose)
        if self.mode == "step":
            self.phase, self._fixes, self._fix_clock_s = "fixing", [], 0.0
            self._fix_count = self.stage.position.fixes
            return RoverSetpoint()
        return self._at_waypoint()

    def _fixing(self, values: dict[str, float], pose, h: float) -> RoverSetpoint:
        pos = self.stage.position
        if pos.fixes != self._fix_count:  # a new UWB measurement was solved this tick
            self._fix_count = pos.fixes
            if all(map(math.isfinite, pos.uwb_fix)):
                self._fixes.append(pos.uwb_fix)
        self._fix_clock_s += h
        if self._fix_clock_s < self.cfg.fix_s:
            return RoverSetpoint()
        if self._fixes:
            fx = sum(p[0] for p in self._fixes) / len(self._fixes)
            fy = sum(p[1] for p in self._fixes) / len(self._fixes)
            self._current["uwb_fix"] = {"x_m": round(fx, 4), "y_m": round(fy, 4), "n": len(self._fixes)}
            self._pending_truth.append((self._current, "uwb_fix_error_m", (fx, fy)))
        else:
            self._current["uwb_fix"] = None
        self._current["estimate_at_fix"] = {"x_m": round(pose[0], 4), "y_m": round(pose[1], 4)}
        self._pending_truth.append((self._current, "estimate_error_m", (pose[0], pose[1])))
        return self._at_waypoint()

    def _at_waypoint(self) -> RoverSetpoint | None:
        wp = self.waypoints[self.leg]
        if wp.heading_deg is not None:
            self._start_turn(wp.heading_deg, "waypoint")
            return RoverSetpoint()
        return self._after_heading()

    def _after_heading(self) -> RoverSetpoint | None:
        wp = self.waypoints[self.leg]
        if wp.hold_s > 0.0:
            self.phase, self._hold_s = "holding", 0.0
            return RoverSetpoint()
        return self._next_leg()

    def _holding(self, values: dict[str, float], pose, h: float) -> RoverSetpoint | None:
        self._hold_s += h
        if self._hold_s < self.waypoints[self.leg].hold_s:
            return RoverSetpoint()
        return self._next_leg()

    def _next_leg(self) -> RoverSetpoint | None:
        self._finish_leg()
        self.leg += 1
        if self.leg >= len(self.waypoints):
            self.phase, self.outcome = "done", "finished"
            self._take_truth()  # no next tick: the last frame's truth (the rover stands still)
            return None
        pose = self._pose()
        assert pose is not None
        self._begin_leg(pose)
        return RoverSetpoint()

    # ------------------------------------------------------------------ results
    def _arrive(self, pose) -> None:
        """The rover stopped at the current waypoint: its arrival error (the truth's on the next tick)."""
        self._arrival("stopped", pose)
        self._pending_truth.append((self._current, "true_arrival_error_m", self._target_xy()))

    def _pass(self) -> None:
        """A drive run passed the current waypoint: the closest approach's errors, and on to the next leg."""
        d, pose = self._closest
        self._arrival("passed", pose)
        truth = self._closest_truth
        if "x" in truth:
            wp = self._target_xy()
            tx, ty = float(truth["x"]), float(truth["y"])
            self._current["true_arrival_error_m"] = round(math.hypot(tx - wp[0], ty - wp[1]), 4)
            self._current["truth"] = {"x_m": round(tx, 4), "y_m": round(ty, 4)}
        self._closest, self._closest_truth = (math.inf, (0.0, 0.0, 0.0)), {}
        self._finish_leg()
        self.leg += 1

    def _arrival(self, how: str, pose) -> None:
        wp = self._target_xy()
        self._current["arrival"] = how
        self._current["arrival_error_m"] = round(math.hypot(pose[0] - wp[0], pose[1] - wp[1]), 4)
        self._current["estimate"] = {"x_m": round(pose[0], 4), "y_m": round(pose[1], 4),
                                     "heading_deg": round(_compass_of_yaw(pose[2]), 3)}

    def _target_xy(self) -> tuple[float, float]:
        wp = self.waypoints[self.leg]
        return wp.x_m, wp.y_m

    def _finish_leg(self) -> None:
        res = self._current
        res["duration_s"] = round(self.clock_s - res.get("start_s", self.clock_s), 3)
        res["outcome"] = "reached"
        self.results.append(res)
        self._leg_result_event(res)

    def _leg_result_event(self, res: dict[str, Any]) -> None:
        if self.emit is not None:
            self.emit("mission_leg", f"mission: waypoint {res['leg']} reached, arrival error "
                      f"{res.get('arrival_error_m', math.nan):.3f} m (estimate)", "info", res)

    def _take_truth(self) -> None:
        """Fill the truth-based errors asked for on the previous tick (the loop's truth is that frame's)."""
        if not self._pending_truth:
            return
        truth = self.truth() or {}
        pending, self._pending_truth = self._pending_truth, []
        if "x" not in truth:  # hardware: no truth
            return
        tx, ty, tyaw = float(truth["x"]), float(truth["y"]), float(truth.get("yaw", math.nan))
        for result, key, ref in pending:
            if isinstance(ref, tuple):
                result[key] = round(math.hypot(tx - ref[0], ty - ref[1]), 4)
            else:  # a heading: the true heading's error against the target
                result[key]["true_error_deg"] = round(wrap_deg(_compass_of_yaw(tyaw) - float(ref)), 3)
            if key == "true_arrival_error_m":
                result["truth"] = {"x_m": round(tx, 4), "y_m": round(ty, 4),
                                   "heading_deg": round(_compass_of_yaw(tyaw), 3)}

    def _record_path(self, pose) -> None:
        if self.clock_s - self._path_t < 0.1 or len(self.path) >= 20_000:
            return
        self._path_t = self.clock_s
        self.path.append((round(self.clock_s, 2), round(pose[0], 4), round(pose[1], 4)))
        truth = self.truth() or {}
        if "x" in truth:
            self.true_path.append((round(self.clock_s, 2), round(float(truth["x"]), 4), round(float(truth["y"]), 4)))

    def _fail(self, reason: str) -> None:
        self.phase, self.outcome = "failed", f"failed: {reason}"
        if self._current and self._current not in self.results:
            self._current["outcome"] = self.outcome
            self.results.append(self._current)
        return None

    # ------------------------------------------------------------------ status and report
    def status(self) -> dict[str, Any]:
        n = len(self.waypoints)
        wp = self.waypoints[min(self.leg, n - 1)]
        pose = self._pose()
        done = len([r for r in self.results if r.get("outcome") == "reached"])
        frac = 0.0  # of the current leg, by the distance left to its waypoint
        length = self._current.get("length_m") if self._current else None
        if pose is not None and length and not self.finished and "arrival" not in self._current:
            frac = max(0.0, min(1.0, 1.0 - math.hypot(wp.x_m - pose[0], wp.y_m - pose[1]) / length))
        out = {"name": self.name, "id": self.id, "label": self.label, "mode": self.mode, "phase": self.phase,
               "paused": self.paused, "leg": min(self.leg, n - 1), "legs": n,
               "progress": round(1.0 if self.phase == "done" else min(1.0, (done + frac) / n), 4),
               "target": {"x_m": wp.x_m, "y_m": wp.y_m, "heading_deg": wp.heading_deg},
               "estimate": None if pose is None else {"x_m": round(pose[0], 4), "y_m": round(pose[1], 4),
                                                      "heading_deg": round(_compass_of_yaw(pose[2]), 2)},
               "distance_to_go_m": rounded(self.distance_to_go_m, 3) if self.phase == "driving" else None,
               "elapsed_s": round(self.clock_s, 3), "leg_elapsed_s": round(self.leg_clock_s, 3),
               "leg_budget_s": rounded(self.leg_budget_s, 1), "legs_done": done, "outcome": self.outcome}
        if self.results:
            out["last_leg"] = self.results[-1]
        return out

    def plan(self) -> dict[str, Any]:
        """What is being driven, for a client that did not send it (a second dashboard, one opened after the start,
        a mission started with curl): the waypoints as given, the cruise speed in force, the mode. Not in the
        per-tick :meth:`status` (up to 500 waypoints in every snapshot): in ``GET /api/mission`` and the replies."""
        return {"waypoints": [msgspec.to_builtins(w) for w in self.waypoints], "speed_m_s": self.speed,
                "mode": self.mode}

    def report(self, max_points: int = 400) -> dict[str, Any]:
        """Everything about the mission: per-leg results, their summary, the driven path (thinned)."""
        legs = self.results

        def pick(key: str, sub: str | None = None) -> list[float | None]:
            if sub is None:
                return [r.get(key) for r in legs]
            return [(r.get(key) or {}).get(sub) for r in legs]

        def thin(points: list) -> list:
            if len(points) <= max_points:
                return [list(p) for p in points]
            step = len(points) / max_points
            return [list(points[int(i * step)]) for i in range(max_points)] + [list(points[-1])]

        return {
            "label": self.label, "mode": self.mode, "outcome": self.outcome, "phase": self.phase,
            "waypoints": [msgspec.to_builtins(w) for w in self.waypoints], "speed_m_s": self.speed,
            "elapsed_s": round(self.clock_s, 3), "legs": legs,
            "summary": {
                "arrival_error_m": _stats(pick("arrival_error_m")),
                "true_arrival_error_m": _stats(pick("true_arrival_error_m")),
                "uwb_fix_error_m": _stats(pick("uwb_fix_error_m")),
                "estimate_error_m": _stats(pick("estimate_error_m")),
                "leg_heading_error_deg": _stats(pick("leg_heading", "error_deg")),
                "leg_heading_true_error_deg": _stats(pick("leg_heading", "true_error_deg")),
                "waypoint_heading_error_deg": _stats(pick("waypoint_heading", "error_deg")),
                "waypoint_heading_true_error_deg": _stats(pick("waypoint_heading", "true_error_deg")),
            },
            "path": {"estimate": thin(self.path), "truth": thin(self.true_path)},
        }


def _compass_of_yaw(yaw_rad: float) -> float:
    return (90.0 - math.degrees(yaw_rad)) % 360.0


# ---------------------------------------------------------------------- the runtime API's side
class MissionMethods:
    """The runtime API's mission methods for :class:`~server.runtime.robot.Robot` ``robot`` (docs/missions.md).

    ``methods()`` maps each name to its params struct and function, as :class:`TrajectoryMethods
    <server.runtime.behaviours.trajectory.TrajectoryMethods>` does; :mod:`server.runtime.service` adds them
    with ``self.methods.update(MissionMethods(robot).methods())``."""

    def __init__(self, robot: Any) -> None:
        self.robot = robot
        self.loop = robot.loop
        self.mission: MissionBehavior | None = None
        self.started = 0  # missions started: the next one's id

    def methods(self) -> dict[str, tuple[type, Callable[[Any], Any]]]:
        return {"mission_start": (MissionParams, self.start), "mission_pause": (Empty, self.pause),
                "mission_resume": (Empty, self.resume), "mission_cancel": (Empty, self.cancel),
                "mission": (Empty, self.status), "mission_report": (ReportParams, self.report)}

    def build(self, p: MissionParams) -> MissionBehavior:
        """The mission ``p`` describes, checked against the robot (ValidationError / ConflictError), not started."""
        robot = self.robot
        declared = robot.controller.setpoint_type  # what the controller declares it takes (a struct or a union)
        if not (declared is RoverSetpoint or RoverSetpoint in typing.get_args(declared)):
            raise ConflictError(f"a mission drives a rover's setpoints; this robot is a {robot.controller.profile}",
                                code="unavailable")
        stage = robot.stage
        if stage is None:
            raise ConflictError("a mission needs the estimator (an IMU, docs/sensing.md)", code="unavailable")
        if p.mode == "step" and not stage.attitude.has_mag:
            raise ConflictError("step mode turns by the compass: it needs a magnetometer", code="unavailable")
        p.check()
        field = robot.profile.mission.field_m
        if field:
            for i, w in enumerate(p.waypoints):
                if not (field[0] <= w.x_m <= field[2] and field[1] <= w.y_m <= field[3]):
                    raise ValidationError(
                        f"waypoints[{i}] ({w.x_m:g}, {w.y_m:g}) m is outside the field [{field[0]:g}, {field[2]:g}] × "
                        f"[{field[1]:g}, {field[3]:g}] m ([mission] field_m)", code="out_of_limits")
        prof = robot.profile
        lim = prof.limits
        cfg: MissionConfig = prof.mission
        speed = cfg.speed_m_s if p.speed_m_s is None else p.speed_m_s
        speed = check_range("speed_m_s", speed, 0.0, lim.linear_m_s)
        if speed < 0.02:
            raise ValidationError(f"speed_m_s={speed:g} is under the slowest mission speed, 0.02 m/s",
                                  code="out_of_limits")
        ts = stage.time_scale
        return MissionBehavior(
            stage, p.waypoints, mode=p.mode, speed_m_s=speed, settings=cfg, heading=prof.heading,
            max_rate_rad_s=min(prof.heading.turn_rate_rad_s, lim.angular_rad_s),
            # plan with half the loop's ramps, seen on the driver's clock (as the heading turn does)
            turn_brake_rad_s2=0.5 * min(lim.angular_accel_rad_s2, lim.angular_decel_rad_s2) / ts,
            decel_m_s2=0.5 * min(lim.linear_accel_m_s2, lim.linear_decel_m_s2) / ts,
            truth=lambda: self.loop.truth, emit=self.loop.emit, label=p.label)

    def start(self, p: MissionParams) -> dict[str, Any]:
        mission = self.build(p)
        if self.robot.stage.position.pose is None:
            raise ConflictError("no position estimate yet (no UWB fix): the mission has nowhere to start from",
                                code="unavailable")
        mission.id = self.started + 1
        state = self.loop.start_behavior(mission)
        self.started, self.mission = mission.id, mission
        with self.loop.lock:
            return {"ok": True, "state": state, "mission": self.full(mission)}

    @staticmethod
    def full(m: MissionBehavior) -> dict[str, Any]:
        """The status with the plan and every leg's result so far (copied: the control thread fills a result's
        truth figures a tick later): what a client needs to draw the mission. Call under the loop's lock."""
        return {**m.status(), **m.plan(), "results": copy.deepcopy(m.results)}

    def _active(self) -> MissionBehavior:
        m = self.mission
        if m is None or self.loop.behavior is not m:
            raise ConflictError("no mission is running", code="no_mission")
        return m

    def pause(self, p: Empty) -> dict[str, Any]:
        with self.loop.lock:
            m = self._active()
            m.pause()
        self.loop.emit_now("mission_pause", "mission paused by the operator", values={"leg": m.leg})
        with self.loop.lock:
            return {"ok": True, "mission": self.full(m)}

    def resume(self, p: Empty) -> dict[str, Any]:
        with self.loop.lock:
            m = self._active()
            m.resume()
        self.loop.emit_now("mission_resume", "mission resumed by the operator", values={"leg": m.leg})
        with self.loop.lock:
            return {"ok": True, "mission": self.full(m)}

    def cancel(self, p: Empty) -> dict[str, Any]:
        with self.loop.lock:
            self._active()
        state = self.loop.cancel_behavior("mission cancelled by the operator")
        with self.loop.lock:
            return {"ok": True, "state": state, "mission": self.full(self.mission)}

    def status(self, p: Empty) -> dict[str, Any]:
        with self.loop.lock:
            return {"mission": None if self.mission is None else self.full(self.mission),
                    "running": self.mission is not None and self.loop.behavior is self.mission}

    def report(self, p: ReportParams) -> dict[str, Any]:
        if not 2 <= p.max_points <= 5000:
            raise ValidationError("max_points must be in [2, 5000]", code="out_of_limits")
        if self.mission is None:
            raise NotFoundError("no mission has run yet", code="not_found")
        with self.loop.lock:
            return self.mission.report(p.max_points)


__all__ = ["MissionBehavior", "MissionMethods", "MissionParams", "ReportParams", "Waypoint",
           "compass_deg"]
