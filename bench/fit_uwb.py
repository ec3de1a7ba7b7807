"""Fit the field profile's UWB error model to seeds/002's deployment figures (issue 23), reproducibly.

Run: ``.venv/bin/python bench/fit_uwb.py [--seeds 200] [--write]`` (~1 min; ``--write`` puts the chosen
parameters into ``config/rover-field.toml``'s ``[driver.uwb]``). No server, no control loop: the sim's own
model (:class:`sim.uwb.UwbRanger`, vectorised by :meth:`~sim.uwb.UwbRanger.ranges_batch`, its obstacles'
shadows by :meth:`sim.world.World.penetration_m`) on the paper's geometry, solved by the estimator's own
trilateration (:func:`robotics.estimation.uwb.trilaterate`, z fixed at the tag height, one LM step, batched
here and checked against it).

**What the paper measured** (seeds/002 §3.3): 32 landing points — a line of 8 steps north from (2.5, 2.0) m,
twice, and a square of 16 steps round 2 × 2 m from (1.5, 3.0) m — each located by UWB once the node stood
still, against the measured landing point: mean error 9.08 cm, "basically within 23 cm". Here each step is
what the step-mode mission does (docs/missions.md): the mean of the fixes of ``[mission] fix_s`` at
``[driver.uwb] rate_hz`` (1 s × 10 Hz = 10 fixes) at the step's point, against that point. One seed is one
field: its static multipath drawn from the stream the sim driver draws it from (``SeedSequence(seed)``'s child
5), so seed *k* here has the same multipath as ``[driver] seed = k`` in the simulator, shared by both
deployments as the yard is (the ranges' noise is drawn in a batch: the same distribution, not the same
samples).

**The criterion.** Both figures of the paper are one sample of a random field: the mean over 32 steps and,
even more, the max of 32 errors. So the fit targets the distribution over ``--seeds`` fields (seeds
1…N): the **median over seeds of the 32-step mean = 9.08 cm** (± 0.05 cm) and **the 32-step max within
23 cm in at least half the fields** (the paper's max a typical, not a lucky, outcome). Two figures cannot
identify the model's eleven parameters, so the procedure fixes what the paper or the physics gives and
searches the rest:

* fixed: ``sigma_m`` 0.03 m (t-scale) with ``noise_dof`` 4 — the white part of the paper's calibrated
  ranges "within ±5 cm" (§2.2), averaged ten times per step; ``multipath_length_m`` 0.3 m (a few UWB
  wavelengths of reflector geometry: neighbouring 0.5 m steps see independent multipath);
  ``nlos_sigma_m`` 0.03 m, ``nlos_probability`` 0.01 × ``nlos_bias_m`` 0.3 m, ``outlier_m`` 1 m,
  ``dropout_probability`` 0.01;
* searched, the tail — a grid over ``nlos_excess_per_m`` (0.1–0.4 m per metre of the cabinet and the cart
  the line of sight crosses: the biggest static errors) × ``outlier_probability`` (0–5 %: an occasional
  late peak, not a broken radio);
* solved, the body — for each grid point, ``multipath_m`` (by a secant search) so that the median mean is
  9.08 cm (it grows with it monotonically); a point that needs ``multipath_m`` = 0 is refused.

The max hardly separates the grid points (its median stays 20–21.5 cm once the mean is 9.08 cm: the max
of 32 errors of that mean, whatever the tail), so it bounds the tail rather than fits it. Of the points
that meet the criterion the chosen one has the **heaviest tail the paper allows**: the smallest share of
fields within 23 cm (then the largest median max) — a simulator as bad as the field, not kinder. The table
printed has every grid point: the solved ``multipath_m``, the mean's median and 10–90 % range, the max's
median and 10–90 % range, and the share of fields whose max is within 23 cm.

Figures (2 CPUs shared, 200 seeds): see docs/sensing.md, "Fitted parameters".
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from robotics.estimation.uwb import trilaterate  # noqa: E402
from server.runtime.experiments import paper  # noqa: E402
from server.runtime.experiments.deployment import line_waypoints, rectangle_waypoints  # noqa: E402
from sim.uwb import UwbRanger  # noqa: E402
from sim.world import World  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]
FIELD = REPO_ROOT / "config" / "rover-field.toml"
#: the sim driver's child of SeedSequence(seed) for the static multipath field (drivers/sim/rover.py)
SEED_MULTIPATH = 5
#: the fit's own child for the ranges' noise (the driver's UWB stream is 3; a batch cannot replay it anyway)
SEED_NOISE = 3
#: the estimator's trilateration: one Levenberg-Marquardt step (server/runtime/estimation/position.py)
LM_ITERATIONS = 1
#: [driver.uwb] keys that are the model's parameters (UwbRanger's keyword arguments)
MODEL_KEYS = ("sigma_m", "noise_dof", "multipath_m", "multipath_length_m", "nlos_excess_per_m", "nlos_sigma_m",
              "nlos_probability", "nlos_bias_m", "outlier_probability", "outlier_m", "dropout_probability")
#: the grid of the tail (searched) and what is held fixed; multipath_m is solved per grid point
GRID_NLOS_EXCESS_PER_M = (0.1, 0.2, 0.3, 0.4)
GRID_OUTLIER_PROBABILITY = (0.0, 0.01, 0.02, 0.05)
FIXED = {"sigma_m": 0.03, "noise_dof": 4.0, "multipath_length_m": 0.3, "nlos_sigma_m": 0.03,
         "nlos_probability": 0.01, "nlos_bias_m": 0.3, "outlier_m": 1.0, "dropout_probability": 0.01}
TARGET_MEAN_CM = paper.DEPLOYMENT_UWB_MEAN_CM
TARGET_MAX_CM = paper.DEPLOYMENT_UWB_MAX_CM
#: the solved mean's tolerance (cm) and the share of fields whose 32-step max must be within 23 cm
MEAN_TOLERANCE_CM = 0.05
WITHIN_MAX_SHARE = 0.5


@dataclass
class Geometry:
    """The paper's field and steps as the sim has them: anchors, tag height, boxes, the 32 step points."""

    anchors: np.ndarray
    tag_height_m: float
    world: World
    steps: np.ndarray  # (32, 3) the tag at each step
    fixes_per_step: int
    blocked: np.ndarray = field(init=False)  # (32, N) metres of box the line to each anchor crosses

    def __post_init__(self) -> None:
        self.blocked = np.array([[self.world.penetration_m(p, a) for a in self.anchors] for p in self.steps])


def load_profile(path: Path = FIELD) -> dict:
    with open(path, "rb") as f:
        return tomllib.load(f)


def geometry(profile: dict) -> Geometry:
    """The deployments' 32 steps (seeds/002 §3.3: the line twice, the rectangle once) in the profile's field."""
    h = float(profile["uwb"]["tag_height_m"])
    pts = [(w.x_m, w.y_m) for _ in range(paper.LINE_TRIALS)
           for w in line_waypoints(paper.LINE_START_M, 0.0, paper.LINE_STEPS, 0.5)]
    pts += [(w.x_m, w.y_m) for w in rectangle_waypoints(paper.RECTANGLE_START_M, paper.RECTANGLE_STEPS, 0.5)]
    fix_s = float(profile.get("mission", {}).get("fix_s", 1.0))
    rate_hz = float(profile["driver"]["uwb"].get("rate_hz", 10.0))
    return Geometry(np.asarray(profile["uwb"]["anchors"], dtype=float), h, World.from_config(profile["sim"]["world"]),
                    np.array([[x, y, h] for x, y in pts]), max(1, round(fix_s * rate_hz)))


def model_params(profile: dict) -> dict[str, float]:
    """The model's parameters of the profile's ``[driver.uwb]`` (absent keys: UwbRanger's defaults)."""
    table = profile["driver"]["uwb"]
    out = {k: float(table[k]) for k in MODEL_KEYS if k in table}
    return out


def trilaterate_batch(anchors: np.ndarray, ranges: np.ndarray, z: float) -> np.ndarray:
    """(M, 2) fixes from ranges (M, N) (NaN: a dropout): :func:`trilaterate` with ``z_fixed=z`` and one LM
    step, batched per set of anchors heard; NaN where fewer than 3 were.

    A row whose first LM trial would not lower the cost (the scalar routine then retries with more damping)
    goes through :func:`trilaterate` itself, so every row is what the estimator computes.
    """
    out = np.full((len(ranges), 2), np.nan)
    heard = np.isfinite(ranges)
    patterns, which = np.unique(heard, axis=0, return_inverse=True)
    for k, mask in enumerate(patterns):
        if np.count_nonzero(mask) < 3:
            continue
        rows = np.flatnonzero(which.reshape(-1) == k)
        out[rows] = _lm_once(anchors[mask], np.abs(ranges[rows][:, mask]), z, rows, ranges, anchors)
    return out


def _lm_once(a: np.ndarray, r: np.ndarray, z: float, rows: np.ndarray, ranges: np.ndarray,
             anchors: np.ndarray) -> np.ndarray:
    """trilaterate's linear start and first LM trial (λ = 1e-3) on rows of the same anchors ``a``."""
    lin_a = 2.0 * (a[1:] - a[0])
    lin_b = (np.sum(a[1:] ** 2, axis=1) - np.sum(a[0] ** 2))[None, :] - (r[:, 1:] ** 2 - r[:, :1] ** 2)
    xy = (lin_b - lin_a[:, 2] * z) @ np.linalg.pinv(lin_a[:, :2]).T  # lstsq's solution (full column rank)
    p = np.concatenate([xy, np.full((len(xy), 1), z)], axis=1)

    def cost(q: np.ndarray) -> np.ndarray:
        return np.sum((np.linalg.norm(q[:, None, :] - a[None], axis=2) - r) ** 2, axis=1)

    diff = p[:, None, :] - a[None]
    dist = np.maximum(np.linalg.norm(diff, axis=2), 1e-12)
    jac = (diff / dist[..., None])[..., :2]
    jtj = np.einsum("mni,mnj->mij", jac, jac)
    grad = np.einsum("mni,mn->mi", jac, dist - r)
    damped = jtj + 1e-3 * (jtj * np.eye(2)[None] + 1e-9 * np.eye(2)[None])
    trial = p.copy()
    trial[:, :2] += np.linalg.solve(damped, -grad[..., None])[..., 0]
    better = cost(trial) <= cost(p)
    fixes = np.where(better[:, None], trial[:, :2], p[:, :2])
    for i in np.flatnonzero(~better):
        fixes[i] = trilaterate(anchors, ranges[rows[i]], z_fixed=z, iterations=LM_ITERATIONS)[:2]
    return fixes


def step_errors(geo: Geometry, params: dict[str, float], seeds) -> np.ndarray:
    """(seeds, 32) the steps' UWB error (cm), each seed a field: each step the mean of its fixes against the point."""
    ranger = UwbRanger(geo.anchors, **params)
    k = geo.fixes_per_step
    pos = np.repeat(geo.steps, k, axis=0)
    blocked = np.repeat(geo.blocked, k, axis=0)
    raw = []
    for seed in seeds:
        streams = np.random.SeedSequence(seed).spawn(6)
        ranger.seed_multipath(np.random.default_rng(streams[SEED_MULTIPATH]))
        raw.append(ranger.ranges_batch(pos, np.random.default_rng(streams[SEED_NOISE]), penetration_m=blocked))
    fixes = trilaterate_batch(geo.anchors, np.concatenate(raw), geo.tag_height_m)
    mean = np.nanmean(fixes.reshape(len(raw), len(geo.steps), k, 2), axis=2)  # the mission averages the finite fixes
    return 100.0 * np.hypot(*np.moveaxis(mean - geo.steps[None, :, :2], -1, 0))


@dataclass
class Figures:
    """Over seeds: the 32-step mean and max (cm), their medians and 10–90 % ranges, P(max ≤ 23 cm)."""

    means: np.ndarray
    maxes: np.ndarray

    @property
    def mean_median(self) -> float:
        return float(np.median(self.means))

    @property
    def max_median(self) -> float:
        return float(np.median(self.maxes))

    @property
    def within(self) -> float:
        return float(np.mean(self.maxes <= TARGET_MAX_CM))

    def row(self) -> str:
        m10, m90 = np.percentile(self.means, [10, 90])
        x10, x90 = np.percentile(self.maxes, [10, 90])
        return (f"{self.mean_median:6.2f} [{m10:5.2f}–{m90:5.2f}]  {self.max_median:6.2f} [{x10:5.2f}–{x90:5.2f}]  "
                f"{100 * self.within:4.0f} %")


def figures(geo: Geometry, params: dict[str, float], seeds) -> Figures:
    errs = step_errors(geo, params, seeds)
    return Figures(errs.mean(axis=1), errs.max(axis=1))


def solve_multipath(geo: Geometry, params: dict[str, float], seeds, hi: float = 0.2,
                    tol_cm: float = 0.02) -> tuple[float, Figures]:
    """``multipath_m`` in [0, hi] whose median 32-step mean is the paper's 9.08 cm.

    Independent errors add in variance, so the median mean² is close to linear in ``multipath_m``²: the
    secant on (multipath_m², mean²), kept inside the bracket (bisection when it would leave it); 3–5 runs.
    """
    lo_x, lo = 0.0, figures(geo, {**params, "multipath_m": 0.0}, seeds)
    if lo.mean_median >= TARGET_MEAN_CM:
        return 0.0, lo  # the tail alone is already as bad as the paper's mean
    hi_x, hi_f = hi, figures(geo, {**params, "multipath_m": hi}, seeds)
    if hi_f.mean_median <= TARGET_MEAN_CM:
        return hi, hi_f
    points = [(lo_x, lo), (hi_x, hi_f)]
    for _ in range(30):
        (x0, f0), (x1, f1) = points[-2], points[-1]
        slope = (f1.mean_median**2 - f0.mean_median**2) / (x1**2 - x0**2) if x1 != x0 else 0.0
        x2 = (x1**2 + (TARGET_MEAN_CM**2 - f1.mean_median**2) / slope) if slope > 0 else -1.0
        x = math.sqrt(x2) if lo_x**2 < x2 < hi_x**2 else 0.5 * (lo_x + hi_x)
        f = figures(geo, {**params, "multipath_m": x}, seeds)
        if abs(f.mean_median - TARGET_MEAN_CM) <= tol_cm:
            return x, f
        if f.mean_median < TARGET_MEAN_CM:
            lo_x = x
        else:
            hi_x = x
        points.append((x, f))
    return x, f


@dataclass(frozen=True)
class Candidate:
    nlos_excess_per_m: float
    outlier_probability: float
    multipath_m: float
    figures: Figures

    def params(self) -> dict[str, float]:
        return {**FIXED, "nlos_excess_per_m": self.nlos_excess_per_m, "outlier_probability": self.outlier_probability,
                "multipath_m": round(self.multipath_m, 4)}


def meets(c: "Candidate") -> bool:
    """The criterion: the median mean within :data:`MEAN_TOLERANCE_CM` of 9.08 cm with multipath in the model
    (not the boundary ``multipath_m`` = 0, where the tail alone overshoots), and at least half the fields'
    32-step max within 23 cm."""
    f = c.figures
    return (c.multipath_m > 0.0 and abs(f.mean_median - TARGET_MEAN_CM) <= MEAN_TOLERANCE_CM
            and f.within >= WITHIN_MAX_SHARE)


def fit(geo: Geometry, seeds, grid_nlos=GRID_NLOS_EXCESS_PER_M, grid_outlier=GRID_OUTLIER_PROBABILITY,
        log=print) -> tuple[Candidate | None, list[Candidate]]:
    """The grid search of the module docstring; returns (the chosen candidate or None, every candidate)."""
    table = []
    log(f"{'nlos/m':>7s} {'outlier p':>9s} {'multipath':>9s}   {'mean cm [10–90 %]':>21s}  "
        f"{'max cm [10–90 %]':>21s}  max ≤ 23")
    for excess in grid_nlos:
        for outlier in grid_outlier:
            base = {**FIXED, "nlos_excess_per_m": excess, "outlier_probability": outlier}
            mp, f = solve_multipath(geo, base, seeds)
            # the printed figures are of the rounded multipath_m (what --write puts in the profile)
            f = figures(geo, {**base, "multipath_m": round(mp, 4)}, seeds)
            c = Candidate(excess, outlier, mp, f)
            table.append(c)
            ok = "✓" if meets(c) else " "
            log(f"{excess:7.2f} {outlier:9.3f} {mp:9.4f}   {f.row()} {ok}")
    meeting = [c for c in table if meets(c)]
    # the heaviest tail the paper allows: the least share within 23 cm, then the largest median max
    chosen = min(meeting, key=lambda c: (c.figures.within, -c.figures.max_median)) if meeting else None
    return chosen, table


def write_params(params: dict[str, float], path: Path = FIELD) -> None:
    """Replace the values of ``params``' keys in the profile's ``[driver.uwb]`` table (comments kept)."""
    text = path.read_text()
    head = text.index("[driver.uwb]")
    end = text.index("\n[", head + 1)
    block = text[head:end]
    for key, value in params.items():
        pattern = re.compile(rf"^({re.escape(key)}\s*=\s*)([^\s#]+)", re.M)
        if not pattern.search(block):
            raise KeyError(f"[driver.uwb] {key} is not in {path}: add it first")
        block = pattern.sub(lambda m: m.group(1) + repr(float(value)), block, count=1)
    path.write_text(text[:head] + block + text[end:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=200, help="fields (seeds 1..N) per candidate (default 200)")
    parser.add_argument("--write", action="store_true", help="put the chosen parameters into config/rover-field.toml")
    parser.add_argument("--check", action="store_true", help="only the profile's current parameters' figures")
    args = parser.parse_args(argv)
    profile = load_profile()
    geo = geometry(profile)
    seeds = range(1, args.seeds + 1)
    print(f"seeds/002 deployments: {len(geo.steps)} steps × {geo.fixes_per_step} fixes, {len(seeds)} fields; "
          f"paper: mean {TARGET_MEAN_CM} cm, max ≤ {TARGET_MAX_CM} cm")
    current = model_params(profile)
    print(f"the profile now:  mean cm [10–90 %], max cm [10–90 %], max ≤ 23:  {figures(geo, current, seeds).row()}")
    print(f"  {current}")
    if args.check:
        return 0
    t0 = time.perf_counter()
    chosen, _ = fit(geo, seeds)
    print(f"({time.perf_counter() - t0:.0f} s)")
    if chosen is None:
        print("no grid point meets the criterion")
        return 1
    params = chosen.params()
    print(f"chosen: nlos_excess_per_m {chosen.nlos_excess_per_m}, outlier_probability {chosen.outlier_probability}, "
          f"multipath_m {params['multipath_m']}:  {chosen.figures.row()}")
    print(f"  {params}")
    if args.write:
        write_params(params)
        print(f"written to {FIELD.relative_to(REPO_ROOT)} [driver.uwb]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
