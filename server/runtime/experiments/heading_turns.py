"""``heading_turns``: seeds/002's heading adjustment experiment (§3.2, Table 3), encoder-only against compass-corrected.

The paper turns its robot by 45°, 90°, …, 360° (5 trials each) two ways: by the encoder pulses alone, and
with the magnetometer re-measuring the heading every fixed angle until within 5° (its Fig. 8), and reports
the mean deviation and the mean variance of the adjustment. Here, on the spot ``spot`` facing
``start_heading_deg``, each trial:

1. waits still (``settle_s``), notes the true heading (the simulator's, unwrapped: a 360° adjustment is a
   full turn, not none);
2. turns by the target angle, clockwise, with :class:`~server.runtime.behaviours.heading.HeadingBehavior`
   — on the estimator's compass heading (``compass``; the magnetometer re-measures after every
   ``[heading] step_deg``, disturbance check and all) or on :class:`~server.runtime.experiments.base.EncoderHeading`
   (``encoder``: the encoders alone) — in parts of at most 120° (an absolute compass target cannot say
   "a full turn", and a part of 180° could go either way), each finishing when the heading it measures is
   within ``tolerance_deg`` (1° by default: the paper's robot stopped as soon as it measured 5°, which is
   most of its 3.64° mean; 5° is our success criterion, counted apart);
3. waits still again; the deviation is the true turn minus the target.

Per method and target: the mean |deviation|, the variance of the deviation over the trials (sample
variance, as the paper's MATLAB ``var``), how many ended within 5° (true) and how many trials saw the
compass disturbed (``mag_disturbed``). Overall: the mean |deviation| and the mean of the per-target
variances, the paper's figures beside them.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

import msgspec

from robotics.angles import wrap_pi
from server.errors import ValidationError
from server.runtime.experiments import paper
from server.runtime.experiments.base import EncoderHeading, Experiment, ExperimentError, Script, Settle

#: the most a single part of a turn may be (an absolute compass target is ambiguous near 180°)
MAX_PART_DEG = 120.0


class HeadingTurnsParams(msgspec.Struct, forbid_unknown_fields=True):
    """The experiment's parameters (defaults: the paper's)."""

    targets_deg: list[float] = msgspec.field(default_factory=lambda: [float(a) for a in paper.HEADING_TARGETS_DEG])
    trials: int = paper.HEADING_TRIALS
    methods: list[str] = msgspec.field(default_factory=lambda: ["encoder", "compass"])
    spot: tuple[float, float] | None = (2.5, 2.0)  # where to turn (None: where the rover stands)
    start_heading_deg: float = 0.0
    settle_s: float = 1.0
    tolerance_deg: float = 1.0  # a turn ends when it measures itself this close (the paper's robot: 5°)


def parts(angle_deg: float) -> list[float]:
    """The cumulative targets a turn of ``angle_deg`` is made of, none over :data:`MAX_PART_DEG`.

    >>> parts(90.0), parts(360.0)
    ([90.0], [120.0, 240.0, 360.0])
    """
    n = max(1, math.ceil(abs(angle_deg) / MAX_PART_DEG - 1e-9))
    return [angle_deg * (k + 1) / n for k in range(n)]


class HeadingTurns(Experiment):
    name = "heading_turns"
    title = "Heading adjustments 45°…360°, encoder-only against compass-corrected (seeds/002 §3.2, Table 3)"
    source = paper.SEED_002
    params_type = HeadingTurnsParams

    def __init__(self, ctx, params=None) -> None:
        super().__init__(ctx, params)
        p = self.params
        self.trials: list[dict[str, Any]] = []
        self.total_units = len(p.methods) * len(p.targets_deg) * p.trials
        self._true_cw_deg = 0.0  # the true heading turned clockwise since the start, unwrapped
        self._last_yaw: float | None = None
        self._disturbed_seen = False

    def check(self) -> None:
        p = self.params
        self.ctx.require("rover", truth=True, compass="compass" in p.methods)
        unknown = sorted(set(p.methods) - {"encoder", "compass"})
        if unknown or not p.methods:
            raise ValidationError(f"methods must be encoder and/or compass, not {', '.join(unknown) or 'none'}",
                                  code="invalid")
        if not 1 <= p.trials <= 100 or not 1 <= len(p.targets_deg) <= 32:
            raise ValidationError("trials must be 1 to 100, targets_deg 1 to 32 angles", code="out_of_limits")
        if not all(math.isfinite(a) and 1.0 <= a <= 720.0 for a in p.targets_deg):
            raise ValidationError("targets_deg must be angles of 1° to 720°", code="out_of_limits")
        if not (math.isfinite(p.tolerance_deg) and 0.1 <= p.tolerance_deg <= 45.0):
            raise ValidationError("tolerance_deg must be in [0.1, 45]°", code="out_of_limits")
        if not 0.0 <= p.settle_s <= 60.0 or not math.isfinite(p.start_heading_deg):
            raise ValidationError("settle_s must be in [0, 60] s, start_heading_deg finite", code="out_of_limits")

    def observe(self, values: dict[str, float], dt_s: float) -> None:
        yaw = self.ctx.truth().get("yaw")
        if yaw is not None:
            if self._last_yaw is not None:
                self._true_cw_deg -= math.degrees(wrap_pi(float(yaw) - self._last_yaw))  # compass: clockwise
            self._last_yaw = float(yaw)
        if values.get("mag_disturbed") == 1.0:
            self._disturbed_seen = True

    def script(self) -> Script:
        ctx, p = self.ctx, self.params
        stage = ctx.stage
        if "compass" in p.methods:
            self.step = "calibrating the compass"
            yield from ctx.calibrate_compass()
        if p.spot is not None:
            self.step = f"going to the spot ({p.spot[0]:g}, {p.spot[1]:g})"
            yield from ctx.go_to(p.spot[0], p.spot[1], p.start_heading_deg if stage.attitude.has_mag else None)
        for method in p.methods:
            for target in p.targets_deg:
                for trial in range(p.trials):
                    self.step = f"{method}: {target:g}°, trial {trial + 1} of {p.trials}"
                    yield Settle(stage, p.settle_s)
                    start_true = self._true_cw_deg
                    self._disturbed_seen = stage.attitude.mag_disturbed
                    if method == "encoder":
                        view = EncoderHeading(stage)
                        base = view.heading_deg
                    else:
                        view, base = None, stage.heading_deg
                    if not math.isfinite(base):
                        raise ExperimentError("no compass heading from the estimator")
                    measured = []
                    for part in parts(target):
                        turn = ctx.heading((base + part) % 360.0, view, p.tolerance_deg)
                        yield turn
                        if turn.outcome != "reached":
                            raise ExperimentError(f"{method} turn of {target:g}° (trial {trial + 1}): {turn.outcome}")
                        measured.append(turn.error_deg)
                    yield Settle(stage, p.settle_s)
                    turned = self._true_cw_deg - start_true
                    self.trials.append({
                        "method": method, "target_deg": target, "trial": trial + 1,
                        "true_turn_deg": round(turned, 3), "deviation_deg": round(turned - target, 3),
                        "measured_error_deg": round(float(measured[-1]), 3),
                        "compass_disturbed": bool(self._disturbed_seen),
                    })
                    self.done_units += 1
        self.step = "done"

    def result(self) -> dict[str, Any]:
        p = self.params
        rows, overall = [], []
        for method in p.methods:
            per_target = []
            for target in p.targets_deg:
                devs = [t["deviation_deg"] for t in self.trials if t["method"] == method and t["target_deg"] == target]
                if not devs:
                    continue
                var = statistics.variance(devs) if len(devs) > 1 else 0.0
                per_target.append((target, devs, var))
                rows.append({"method": method, "target_deg": target, "trials": len(devs),
                             "ours": {"mean_deviation_deg": round(statistics.fmean(abs(d) for d in devs), 3),
                                      "variance_deg2": round(var, 3),
                                      "within_5_deg": sum(abs(d) <= paper.HEADING_SUCCESS_DEG for d in devs),
                                      "compass_disturbed": sum(t["compass_disturbed"] for t in self.trials
                                                               if t["method"] == method and t["target_deg"] == target)},
                             "paper": None})  # Table 3's rows are not in the source text (paper.py)
            if per_target:
                all_devs = [abs(d) for _, devs, _ in per_target for d in devs]
                paper_mean, paper_var = paper.HEADING_TURNS[method]
                overall.append({"method": method, "trials": len(all_devs),
                                "ours": {"mean_deviation_deg": round(statistics.fmean(all_devs), 3),
                                         "mean_variance_deg2": round(statistics.fmean(v for _, _, v in per_target), 3),
                                         "max_deviation_deg": round(max(all_devs), 3),
                                         "within_5_deg": sum(d <= paper.HEADING_SUCCESS_DEG for d in all_devs),
                                         "compass_disturbed": sum(t["compass_disturbed"] for t in self.trials
                                                                  if t["method"] == method)},
                                "paper": {"mean_deviation_deg": paper_mean, "mean_variance_deg2": paper_var}})
        return {"experiment": self.name, "title": self.title, "source": self.source, "overall": overall,
                "rows": rows, "trials": self.trials}


__all__ = ["HeadingTurns", "HeadingTurnsParams", "parts"]
