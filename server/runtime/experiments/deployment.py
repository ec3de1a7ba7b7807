"""``deployment_line`` and ``deployment_rectangle``: seeds/002's deployment runs (§3.3), UWB against the truth.

The paper's node jumps 8 times in a straight line (2 trials, from (2.5, 2.0) m) and 16 times round a
~2 m × 2 m square (4 jumps a side, clockwise, from (1.5, 3.0) m) in a 5 m × 8 m field with a UWB anchor at
each corner; after each landing it turns to the set heading, self-rights, and takes a UWB fix, which the
authors compare with the measured landing point: 9.08 cm mean error, within 23 cm. Here each run is a
step-mode mission (:class:`~server.runtime.behaviours.mission.MissionBehavior`: turn to the leg's heading,
drive the step, stop, settle, average the UWB fixes of ``[mission] fix_s``) of steps of ``step_m``, after
driving to the start (not measured). Per step: the UWB fix's error against the true position, and the
fused estimate's (odometry + IMU + UWB through the χ² gate) at the same instant. Summary: mean and max of
each, over all steps of all trials, the paper's UWB figures beside ours, and the ratio fused / UWB
(issue 23's goal: at most ⅓ on the rectangle).

``place`` (on by default, as in the paper: "the node is placed at the start point (250, 200)"): after
driving to the start, the rover is put exactly on it (the simulator's teleport; the experiment needs the
simulator anyway, for the truth) and the estimate with it (:meth:`PositionStage.set_pose
<server.runtime.estimation.position.PositionStage.set_pose>`, a surveyed start, 1 cm). Off: the run starts
from wherever the drive there ended and the estimate the rover has.
"""

from __future__ import annotations

import math
import statistics
from typing import Any, ClassVar

import msgspec

from server.errors import ValidationError
from server.runtime.behaviours.mission import Waypoint, compass_deg
from server.runtime.experiments import paper
from server.runtime.experiments.base import Experiment, ExperimentError, Script

#: compass headings of the rectangle's sides, clockwise from its north-west corner: east, south, west, north
RECTANGLE_SIDES_DEG = (90.0, 180.0, 270.0, 0.0)


class DeploymentParams(msgspec.Struct, forbid_unknown_fields=True):
    """A deployment's parameters; None: the experiment's own (the paper's)."""

    trials: int | None = None
    steps: int | None = None
    step_m: float = 0.5
    start: tuple[float, float] | None = None
    heading_deg: float | None = None  # the line's direction (compass)
    speed_m_s: float | None = None
    place: bool = True  # put the rover (and its estimate) exactly on the start, as the paper's node was


def line_waypoints(start: tuple[float, float], heading_deg: float, steps: int, step_m: float) -> list[Waypoint]:
    """``steps`` points ``step_m`` apart from ``start`` along compass ``heading_deg``.

    >>> [(round(w.x_m, 3), round(w.y_m, 3)) for w in line_waypoints((2.5, 2.0), 0.0, 2, 0.5)]
    [(2.5, 2.5), (2.5, 3.0)]
    """
    dx, dy = math.sin(math.radians(heading_deg)), math.cos(math.radians(heading_deg))
    return [Waypoint(start[0] + k * step_m * dx, start[1] + k * step_m * dy) for k in range(1, steps + 1)]


def rectangle_waypoints(start: tuple[float, float], steps: int, step_m: float) -> list[Waypoint]:
    """``steps`` points round a square clockwise from its north-west corner ``start`` (``steps / 4`` a side).

    >>> [(w.x_m, w.y_m) for w in rectangle_waypoints((0.0, 1.0), 4, 1.0)]
    [(1.0, 1.0), (1.0, 0.0), (0.0, 0.0), (0.0, 1.0)]
    """
    per_side = max(1, steps // 4)
    out, x, y = [], float(start[0]), float(start[1])
    for k in range(steps):
        heading = math.radians(RECTANGLE_SIDES_DEG[(k // per_side) % 4])
        x, y = x + step_m * math.sin(heading), y + step_m * math.cos(heading)
        out.append(Waypoint(round(x, 9) + 0.0, round(y, 9) + 0.0))  # + 0.0: no -0.0
    return out


class Deployment(Experiment):
    """Base of the two deployments: a step-mode mission per trial and the UWB / fused errors per step."""

    shape: ClassVar[str] = "line"
    default_trials: ClassVar[int] = 1
    default_steps: ClassVar[int] = 8
    default_start: ClassVar[tuple[float, float]] = paper.LINE_START_M
    default_heading_deg: ClassVar[float] = 0.0
    source = paper.SEED_002
    params_type = DeploymentParams

    def __init__(self, ctx, params=None) -> None:
        super().__init__(ctx, params)
        p = self.params
        self.n_trials = p.trials if p.trials is not None else self.default_trials
        self.n_steps = p.steps if p.steps is not None else self.default_steps
        self.start = tuple(p.start) if p.start is not None else self.default_start
        self.heading_deg = p.heading_deg if p.heading_deg is not None else self.default_heading_deg
        self.steps: list[dict[str, Any]] = []
        self.reports: list[dict[str, Any]] = []
        self.total_units = self.n_trials * self.n_steps

    def waypoints(self) -> list[Waypoint]:
        p = self.params
        if self.shape == "rectangle":
            return rectangle_waypoints(self.start, self.n_steps, p.step_m)
        return line_waypoints(self.start, self.heading_deg, self.n_steps, p.step_m)

    def check(self) -> None:
        self.ctx.require("rover", truth=True, compass=True, uwb=True)
        p = self.params
        if not 1 <= self.n_trials <= 20 or not 1 <= self.n_steps <= 200:
            raise ValidationError("trials must be 1 to 20, steps 1 to 200", code="out_of_limits")
        if not (math.isfinite(p.step_m) and 0.05 <= p.step_m <= 5.0):
            raise ValidationError("step_m must be in [0.05, 5] m", code="out_of_limits")

    def script(self) -> Script:
        ctx = self.ctx
        self.step = "calibrating the compass"
        yield from ctx.calibrate_compass()
        waypoints = self.waypoints()
        first_heading = compass_deg(waypoints[0].x_m - self.start[0], waypoints[0].y_m - self.start[1])
        for trial in range(self.n_trials):
            self.step = f"trial {trial + 1}: going to the start"
            yield from ctx.go_to(self.start[0], self.start[1], first_heading)
            if self.params.place:
                yield from ctx.place(self.start[0], self.start[1], first_heading)
            self.step = f"trial {trial + 1} of {self.n_trials}"
            mission = ctx.mission(waypoints, mode="step", speed_m_s=self.params.speed_m_s,
                                  label=f"{self.name} trial {trial + 1}")
            yield mission
            report = mission.report(max_points=200)
            self.reports.append(report)
            for leg in report["legs"]:
                self.steps.append({
                    "trial": trial + 1, "step": leg["leg"] + 1, "target": leg["target"],
                    "truth": leg.get("truth"), "uwb_fix": leg.get("uwb_fix"),
                    "uwb_error_cm": _cm(leg.get("uwb_fix_error_m")), "fused_error_cm": _cm(leg.get("estimate_error_m")),
                    "arrival_error_cm": _cm(leg.get("true_arrival_error_m")),
                })
                self.done_units += 1
            if mission.outcome != "finished":
                raise ExperimentError(f"trial {trial + 1}: {mission.outcome}")
        self.step = "done"

    def result(self) -> dict[str, Any]:
        uwb = [s["uwb_error_cm"] for s in self.steps if s["uwb_error_cm"] is not None]
        fused = [s["fused_error_cm"] for s in self.steps if s["fused_error_cm"] is not None]
        ours = {"uwb_mean_cm": _mean(uwb), "uwb_max_cm": _max(uwb), "fused_mean_cm": _mean(fused),
                "fused_max_cm": _max(fused), "steps": len(self.steps),
                "fused_over_uwb": round(_mean(fused) / _mean(uwb), 3) if uwb and fused and _mean(uwb) else None}
        return {"experiment": self.name, "title": self.title, "source": self.source,
                "summary": {"ours": ours, "paper": {"uwb_mean_cm": paper.DEPLOYMENT_UWB_MEAN_CM,
                                                    "uwb_max_cm": paper.DEPLOYMENT_UWB_MAX_CM,
                                                    "note": "over both deployments (line and rectangle)"}},
                "rows": self.steps, "trials": self.n_trials, "steps_per_trial": self.n_steps,
                "paths": [r["path"] for r in self.reports]}


def _cm(v: float | None) -> float | None:
    return None if v is None else round(100.0 * v, 2)


def _mean(v: list[float]) -> float | None:
    return round(statistics.fmean(v), 3) if v else None


def _max(v: list[float]) -> float | None:
    return round(max(v), 3) if v else None


class DeploymentLine(Deployment):
    name = "deployment_line"
    title = "Straight deployment: 8 steps, 2 trials, UWB fix per step against the truth (seeds/002 §3.3)"
    shape = "line"
    default_trials = paper.LINE_TRIALS
    default_steps = paper.LINE_STEPS
    default_start = paper.LINE_START_M
    default_heading_deg = 0.0  # north, along the field's long side


class DeploymentRectangle(Deployment):
    name = "deployment_rectangle"
    title = "Rectangle deployment: 16 steps round ~2 m × 2 m, UWB and fused against the truth (seeds/002 §3.3)"
    shape = "rectangle"
    default_trials = 1
    default_steps = paper.RECTANGLE_STEPS
    default_start = paper.RECTANGLE_START_M


__all__ = ["Deployment", "DeploymentLine", "DeploymentParams", "DeploymentRectangle", "line_waypoints",
           "rectangle_waypoints"]
