"""The source papers' experiments as named runs, each reporting our figures beside the paper's (issue 23).

=========================  =====================================================================
``heading_turns``          seeds/002 §3.2, Table 3: heading adjustments 45°…360°, 5 trials, encoder-only
                           and compass-corrected: mean deviation and variance per target and overall
``deployment_line``        seeds/002 §3.3: 8 steps in a line, 2 trials: UWB error per step, mean and max
``deployment_rectangle``   seeds/002 §3.3: 16 steps round ~2 × 2 m: UWB and fused error per step
``scara_imu_spinup``       seeds/000: the virtual IMU on the SCARA arm's forearm during a joint spin-up,
                           against the analytic values (and the spin-up time, its Table 1)
=========================  =====================================================================

Runtime side, for a route (docs/missions.md): :class:`ExperimentMethods` holds the runtime API's methods
(``experiments``, ``experiment_run``, ``experiment``, ``experiment_cancel``, ``experiment_report``), the
shape :mod:`server.runtime.service` registers; a run is a behaviour on the live loop
(:class:`~server.runtime.experiments.base.ExperimentRun`), in real time, every safety rule applying.
Offline, for a script or a bench: :func:`run_offline` (or ``python -m server.runtime.experiments NAME``)
runs one on :class:`~server.runtime.experiments.runner.OfflineRobot`, as fast as the machine goes, and
returns its result. The paper's figures are :mod:`server.runtime.experiments.paper`'s.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Callable

import msgspec

from server.config import REPO_ROOT
from server.errors import ConflictError, NotFoundError, ValidationError
from server.runtime.experiments.base import Context, Experiment, ExperimentRun
from server.runtime_api.params import Empty, ExperimentParams
from server.validation import convert

#: name → "module:Class", imported when used
EXPERIMENTS: dict[str, str] = {
    "heading_turns": "server.runtime.experiments.heading_turns:HeadingTurns",
    "deployment_line": "server.runtime.experiments.deployment:DeploymentLine",
    "deployment_rectangle": "server.runtime.experiments.deployment:DeploymentRectangle",
    "scara_imu_spinup": "server.runtime.experiments.scara_imu:ScaraImuSpinup",
}


def experiment_class(name: str) -> type[Experiment]:
    """The experiment registered as ``name`` (:class:`NotFoundError` naming the known ones)."""
    try:
        target = EXPERIMENTS[name]
    except KeyError:
        raise NotFoundError(f"no experiment {name!r}; known: {', '.join(sorted(EXPERIMENTS))}",
                            code="not_found") from None
    module, _, cls = target.partition(":")
    return getattr(importlib.import_module(module), cls)


def describe() -> list[dict[str, Any]]:
    """Every experiment: name, title, source, the profile its figures need, its parameters' defaults."""
    out = []
    for name in EXPERIMENTS:
        cls = experiment_class(name)
        out.append({"name": name, "title": cls.title, "source": cls.source, "profile": cls.profile,
                    "params": msgspec.to_builtins(cls.params_type())})
    return out


class ExperimentMethods:
    """The runtime API's experiment methods for :class:`~server.runtime.robot.Robot` ``robot`` (``offline``: its loop
    is ticked by hand, with no event loop beside it: a magnetometer fit runs inline)."""

    def __init__(self, robot: Any, offline: bool = False) -> None:
        self.robot = robot
        self.offline = offline
        self.loop = robot.loop
        self.run: ExperimentRun | None = None

    def methods(self) -> dict[str, tuple[type, Callable[[Any], Any]]]:
        return {"experiments": (Empty, lambda p: {"experiments": describe()}),
                "experiment_run": (ExperimentParams, self.start), "experiment": (Empty, self.status),
                "experiment_cancel": (Empty, self.cancel), "experiment_report": (Empty, self.report)}

    def start(self, p: ExperimentParams) -> dict[str, Any]:
        run = build(self.robot, p.name, p.params, offline=self.offline)
        state = self.loop.start_behavior(run)
        self.run = run
        return {"ok": True, "state": state, "experiment": run.status()}

    def status(self, p: Empty) -> dict[str, Any]:
        with self.loop.lock:
            return {"experiment": None if self.run is None else self.run.status(),
                    "running": self.run is not None and self.loop.behavior is self.run}

    def cancel(self, p: Empty) -> dict[str, Any]:
        if self.run is None or self.loop.behavior is not self.run:
            raise ConflictError("no experiment is running", code="no_experiment")
        return {"ok": True, "state": self.loop.cancel_behavior("experiment cancelled by the operator")}

    def report(self, p: Empty) -> dict[str, Any]:
        if self.run is None:
            raise NotFoundError("no experiment has run yet", code="not_found")
        with self.loop.lock:
            return {**self.run.experiment.result(), "status": self.run.status()}


def build(robot: Any, name: str, params: dict[str, Any] | None = None, offline: bool = False) -> ExperimentRun:
    """The run of experiment ``name`` with ``params`` on ``robot``, checked (422 / 409), not started."""
    cls = experiment_class(name)
    try:
        parsed = convert(params or {}, cls.params_type)
    except ValidationError as err:
        raise ValidationError(f"{name}: {err.message}", code=err.code) from None
    experiment = cls(Context(robot, offline=offline), parsed)
    experiment.check()
    return ExperimentRun(experiment)


def run_offline(name: str, profile: str | Path | None = None, overrides: dict[str, Any] | None = None,
                params: dict[str, Any] | None = None, dt_s: float = 0.01) -> dict[str, Any]:
    """Run experiment ``name`` on an :class:`~server.runtime.experiments.runner.OfflineRobot` of ``profile``
    (default: the experiment's own, e.g. ``config/rover-field.toml``) and return its result."""
    from server.runtime.experiments.runner import OfflineRobot

    cls = experiment_class(name)
    path = Path(profile) if profile is not None else REPO_ROOT / cls.profile
    bot = OfflineRobot(path, overrides=overrides, dt_s=dt_s)
    bot.tick(50)  # the estimator's first fixes and attitude
    run = build(bot.robot, name, params, offline=True)
    bot.run(run)
    return {**run.experiment.result(), "status": run.status()}


__all__ = ["EXPERIMENTS", "ExperimentMethods", "ExperimentParams", "build", "describe", "experiment_class", "run_offline"]
