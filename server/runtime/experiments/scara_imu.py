"""``scara_imu_spinup``: seeds/000's virtual IMU check, on the SCARA arm's forearm during a joint spin-up.

seeds/000 builds a virtual accelerometer (velocity differences, eq. 2–4) and gyroscope (relative rotation,
eq. 6–7) and checks them against analytic motion: at rest (gravity alone), spinning at a constant rate
(the radial acceleration ``r·ω²``: 0.463 m/s² at 0.75 m and π/4 rad/s) and spinning up (the spin-up time,
its Table 1). :class:`sim.imu.VirtualImu` is that sensor; the arm profile (``config/scara-sim.toml``) fixes
one to link 2 (``[driver.imu]``). This experiment, with the elbow held at ``q2_deg``:

1. moves the arm to ``q1_start_deg``, holds it still ``static_s``: the readings against gravity alone;
2. jogs joint 1 at ``rate_rad_s`` for ``spin_s`` (the controller ramps its reference up at the joint's
   acceleration limit ``α``): once the joint turns at ``ω`` (its true angle's rate, within 1e-6 rad/s over
   the three samples the accelerometer differences), the readings against the analytic values of a point
   at ``p`` (the sensor relative to the base axis, in the link's frame) turning at ``ω``::

       acc = −ω²·(p_x, p_y, 0) + (0, 0, g)          gyro = (0, 0, ω)

3. measures the spin-up time as the paper does (a line fitted to the rate's ramp, from where it leaves 0
   to where it meets ``ω``), from the gyro and from the joint's true angle, beside the reference's ``ω/α``;
4. stops.

Result rows, ours beside the paper's error levels (its figures are for CoppeliaSim's models; ours for the
arm's geometry, so the radial row also gives the paper's own case, 0.75 m at π/4 rad/s).
"""

from __future__ import annotations

import math
from typing import Any

import msgspec
import numpy as np

from server.errors import ValidationError
from server.runtime.experiments import paper
from server.runtime.experiments.base import Experiment, ExperimentError, Script
from server.runtime_api.params import ScaraJog, ScaraJoints

ACC = ("imu_acc_x_m_s2", "imu_acc_y_m_s2", "imu_acc_z_m_s2")
GYRO = ("imu_gyro_x_rad_s", "imu_gyro_y_rad_s", "imu_gyro_z_rad_s")


class ScaraImuParams(msgspec.Struct, forbid_unknown_fields=True):
    q1_start_deg: float = -150.0
    q2_deg: float = 90.0
    rate_rad_s: float = paper.SPIN_RATE_RAD_S  # seeds/000's π/4 rad/s
    static_s: float = 1.0
    spin_s: float = 2.0


class Command:
    """A fixed setpoint until ``done(values)`` is true or ``timeout_s`` of driver time has passed (then it fails)."""

    name = "command"

    def __init__(self, setpoint: Any, done, clock, timeout_s: float, label: str = "") -> None:
        self.setpoint, self.done, self.clock, self.timeout_s = setpoint, done, clock, timeout_s
        self.label = label
        self.t = 0.0
        self.outcome: str | None = None

    def update(self, values: dict[str, float], dt_s: float, now: float) -> Any | None:
        self.t += self.clock(dt_s)
        if self.done(values, self.t):
            self.outcome = "done"
            return None
        if self.t > self.timeout_s:
            self.outcome = f"failed: {self.label} not done within {self.timeout_s:g} s"
            return None
        return self.setpoint

    def cancel(self, reason: str) -> None:
        self.outcome = f"cancelled: {reason}"

    def status(self) -> dict[str, Any]:
        return {"name": self.name, "phase": self.label, "t_s": round(self.t, 3)}


class ScaraImuSpinup(Experiment):
    name = "scara_imu_spinup"
    title = "Virtual IMU on the SCARA forearm during a joint spin-up, against the analytic values (seeds/000)"
    source = paper.SEED_000
    profile = "config/scara-sim.toml"
    params_type = ScaraImuParams

    def __init__(self, ctx, params=None) -> None:
        super().__init__(ctx, params)
        self.samples: list[tuple[float, ...]] = []  # (t, phase, q1, q2, qd1, qd2, acc…, gyro…)
        self.phase = ""
        self._held: tuple[str, tuple[float, ...]] | None = None
        self.total_units = 4

    def check(self) -> None:
        self.ctx.require("scara", truth=True)
        if not all(c in self.ctx.loop.snapshot().get("values", {}) for c in ACC + GYRO):
            raise ValidationError("the arm has no IMU channels: give its driver an [driver.imu] table "
                                  "(config/scara-sim.toml has one on the forearm)", code="invalid")
        p = self.params
        ctrl = self.ctx.loop.controller
        v_max = ctrl.ramp.v_max[0] if hasattr(ctrl, "ramp") else 2.0
        if not (math.isfinite(p.rate_rad_s) and 0.05 <= p.rate_rad_s <= v_max):
            raise ValidationError(f"rate_rad_s must be in [0.05, {v_max:g}] rad/s", code="out_of_limits")
        if not (0.2 <= p.spin_s <= 30.0 and 0.0 <= p.static_s <= 30.0):
            raise ValidationError("spin_s must be in [0.2, 30] s, static_s in [0, 30] s", code="out_of_limits")

    def _clock(self, dt_s: float) -> float:
        return min(dt_s * self.ctx.loop.controller.time_scale, 0.5)

    def observe(self, values: dict[str, float], dt_s: float) -> None:
        # the loop's truth is the previous tick's frame: pair it with the readings held from that tick
        truth = self.ctx.truth()
        held, self._held = self._held, ((self.phase, tuple(values.get(c, math.nan) for c in ACC + GYRO))
                                        if self.phase else None)
        if held is None or "q" not in truth:
            return
        q, qd = truth["q"], truth["qd"]
        self.samples.append((float(truth["sim_time_s"]), held[0], float(q[0]), float(q[1]), float(qd[0]),
                             float(qd[1]), *held[1]))

    def script(self) -> Script:
        p = self.params
        q1, q2 = math.radians(p.q1_start_deg), math.radians(p.q2_deg)
        ctrl = self.ctx.loop.controller
        ctrl.check(ScaraJoints(q1_rad=q1, q2_rad=q2))  # 422 beyond the limits
        self.step = "moving to the start"
        at_rest = (lambda v, t: abs(v["q1_rad"] - q1) < 2e-3 and abs(v["q2_rad"] - q2) < 2e-3
                   and abs(v["q1_rad_s"]) < 1e-6 and abs(v["q2_rad_s"]) < 1e-6)
        yield from self._run(Command(ScaraJoints(q1_rad=q1, q2_rad=q2), at_rest, self._clock, 30.0, "to the start"))
        self.done_units += 1
        self.step, self.phase = "static", "static"
        yield from self._run(Command(ScaraJoints(q1_rad=q1, q2_rad=q2), lambda v, t: t >= p.static_s, self._clock,
                                     p.static_s + 1.0, "static"))
        self.done_units += 1
        self.step, self.phase = "spinning up", "spin"
        yield from self._run(Command(ScaraJog(q1_rad_s=p.rate_rad_s), lambda v, t: t >= p.spin_s, self._clock,
                                     p.spin_s + 1.0, "spin"))
        self.done_units += 1
        self.step, self.phase = "stopping", "stop"
        yield from self._run(Command(ScaraJog(), lambda v, t: abs(v["q1_rad_s"]) < 1e-6 and t > 0.2, self._clock,
                                     10.0, "stop"))
        self.phase, self.step = "", "done"
        self.done_units += 1

    def _run(self, command: Command) -> Script:
        yield command
        if command.outcome != "done":
            raise ExperimentError(command.outcome or "interrupted")

    # ------------------------------------------------------------------ analysis
    def _sensor_point(self, q2: float) -> np.ndarray:
        """The sensor relative to the base axis, in link 2's frame (x along the link): the elbow at l1 turned by
        −q2, plus the lever arm along the link."""
        drv = self.ctx.robot.driver
        lever = np.asarray(drv.imu_table.lever_arm_m, dtype=float) if drv.imu_table is not None else np.zeros(3)
        if drv.imu_table is not None and drv.imu_table.link == 1:
            return lever[:2]
        l1 = drv.params.l1_m
        return np.array([l1 * math.cos(q2) + lever[0], -l1 * math.sin(q2) + lever[1]])

    def result(self) -> dict[str, Any]:
        s = self.samples
        base = {"experiment": self.name, "title": self.title, "source": self.source, "samples": len(s)}
        if len(s) < 4:
            return {**base, "rows": []}
        t = np.array([r[0] for r in s])
        phase = np.array([r[1] for r in s])
        q2 = np.array([r[3] for r in s])
        acc = np.array([r[6:9] for r in s], dtype=float)
        gyro = np.array([r[9:12] for r in s], dtype=float)
        drv = self.ctx.robot.driver
        g = drv.imu_table.gravity_m_s2 if drv.imu_table is not None else 9.80665
        w = self.params.rate_rad_s
        p_s = np.array([self._sensor_point(v) for v in q2])
        rows: list[dict[str, Any]] = []
        k = np.arange(len(s))
        static = (phase == "static") & (k >= 2) & (np.roll(phase, 2) == "static")  # the arrival's samples out
        if static.any():
            rows.append({"case": "at rest: gravity alone",
                         "ours": {"acc_max_error_m_s2": _f(float(np.abs(acc[static] - [0.0, 0.0, g]).max())),
                                  "gyro_max_error_rad_s": _f(float(np.abs(gyro[static]).max())),
                                  "samples": int(static.sum())},
                         "paper": {"acc_error_m_s2": paper.IMU_ACC_ERROR_M_S2,
                                   "gyro_error_rad_s": paper.IMU_GYRO_ERROR_RAD_S}})
        # the motion at the sample instants: the joint's mean rate over each interval (the simulated servo ripples
        # within a 10 ms tick as it chases its position target; the samples see the tick-to-tick motion)
        q1 = np.array([r[2] for r in s])
        rate = np.concatenate([[0.0], np.diff(q1) / np.diff(t)])
        moving = np.flatnonzero(np.isin(phase, ("spin", "stop")))
        steady = np.abs(rate - w) < 1e-6
        cruise = moving[(moving >= 2) & steady[moving] & steady[np.maximum(moving - 1, 0)]
                        & steady[np.maximum(moving - 2, 0)]]  # the motion term spans three samples
        if len(cruise):
            rho = float(np.hypot(*p_s[cruise[0]]))
            radial = np.hypot(acc[cruise, 0], acc[cruise, 1])
            analytic = np.column_stack([-w * w * p_s[cruise, 0], -w * w * p_s[cruise, 1], np.full(len(cruise), g)])
            rows.append({"case": f"constant rate ω = {w:.4f} rad/s, the sensor {rho:.3f} m from the axis",
                         "ours": {"radial_analytic_m_s2": _f(rho * w * w), "radial_measured_m_s2": _f(float(radial.mean())),
                                  "radial_max_error_m_s2": _f(float(np.abs(radial - rho * w * w).max())),
                                  "acc_max_error_m_s2": _f(float(np.abs(acc[cruise] - analytic).max())),
                                  "gyro_max_error_rad_s": _f(float(np.abs(gyro[cruise, 2] - w).max())),
                                  "samples": int(len(cruise))},
                         "paper": {"radial_m_s2": paper.SPIN_RADIAL_M_S2, "radius_m": paper.SPIN_RADIUS_M,
                                   "rate_rad_s": round(paper.SPIN_RATE_RAD_S, 4), "error_m_s2": paper.IMU_ACC_ERROR_M_S2,
                                   "gyro_error_rad_s": paper.IMU_GYRO_ERROR_RAD_S}})
        rows.append(self._spinup_row(t, phase, gyro[:, 2], rate, w))
        return {**base, "rows": rows}

    def _spinup_row(self, t: np.ndarray, phase: np.ndarray, gz: np.ndarray, rate: np.ndarray,
                    w: float) -> dict[str, Any]:
        """The spin-up time as seeds/000 measures it (Fig. 11: a line fitted to the rate where it reads 10–90 % of
        ω, from where it crosses 0 to where it meets ω), from the gyro and from the joint's true angle (its mean
        rate per interval, ``rate``), beside the reference's ``ω/α`` (the controller ramps its reference at the
        joint's acceleration limit; the simulated servo follows it a few ticks behind)."""
        ctrl = self.ctx.loop.controller
        alpha = float(ctrl.ramp.a_max[0]) if hasattr(ctrl, "ramp") else math.nan

        def fitted(rate: np.ndarray, t_of: np.ndarray) -> float:
            ramp = (phase == "spin") & (rate > 0.1 * w) & (rate < 0.9 * w)
            if ramp.sum() < 2:
                return math.nan
            slope, _ = np.polyfit(t_of[ramp], rate[ramp], 1)
            return w / slope if slope > 0 else math.nan

        # both are mean rates over the interval before each sample: their time is the interval's middle
        t_mid = np.concatenate([[t[0]], 0.5 * (t[1:] + t[:-1])])
        gyro_s, true_s = fitted(gz, t_mid), fitted(rate, t_mid)
        lo, hi = paper.SPINUP_TIME_ERROR_S
        return {"case": f"spin-up time to ω = {w:.4f} rad/s",
                "ours": {"reference_s": _f(w / alpha if alpha > 0 else math.nan), "true_motion_s": _f(true_s),
                         "gyro_s": _f(gyro_s), "gyro_error_s": _f(abs(gyro_s - true_s))},
                "paper": {"error_s_range": [lo, hi], "note": "Table 1: the simulator's spin-up time against t = I·ω/M"}}


def _f(v: float) -> float | None:
    return None if v is None or not math.isfinite(v) else float(f"{v:.6g}")


__all__ = ["Command", "ScaraImuParams", "ScaraImuSpinup"]
