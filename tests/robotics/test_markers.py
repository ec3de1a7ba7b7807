"""robotics.estimation.markers: pose and position fixes from marker observations."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from robotics.estimation.markers import (
    MarkerFixError, MarkerObservation, fix_pose, fix_position, observation_sigmas, observe,
)

# a 6 × 4 m field with markers on its walls, faces turned inwards (psi = direction the face looks)
FIELD_MAP = {
    0: (6.0, 2.0, math.pi),
    1: (3.0, 4.0, -math.pi / 2),
    2: (0.0, 1.5, 0.0),
    3: (2.0, 0.0, math.pi / 2),
    7: (4.5, 0.0, math.pi / 2),
}


def noisy(obs: MarkerObservation, rng: np.random.Generator) -> MarkerObservation:
    return replace(obs, range_m=obs.range_m + rng.normal(0.0, obs.range_sigma_m),
                   bearing_rad=obs.bearing_rad + rng.normal(0.0, obs.bearing_sigma_rad),
                   facing_rad=obs.facing_rad + rng.normal(0.0, obs.facing_sigma_rad))


# ---------------------------------------------------------------- exact observations
@pytest.mark.parametrize("pose", [(1.0, 1.0, 0.0), (3.0, 2.0, 2.5), (5.5, 3.5, -3.1), (0.4, 0.3, math.pi)])
@pytest.mark.parametrize("ids, facing", [((0,), True), ((0, 1), False), ((1, 2, 3), False), ((0, 7), True)])
def test_fix_pose_recovers_the_pose_from_exact_observations(pose, ids, facing):
    obs = [observe(pose, FIELD_MAP[i], i) for i in ids]
    if not facing:
        obs = [replace(o, facing_rad=math.nan) for o in obs]
    fix = fix_pose(obs, FIELD_MAP)
    assert (fix.x, fix.y) == pytest.approx(pose[:2], abs=1e-6)
    assert math.remainder(fix.yaw - pose[2], math.tau) == pytest.approx(0.0, abs=1e-6)
    assert fix.used == ids
    assert fix.chi2 == pytest.approx(0.0, abs=1e-8)


def test_fix_pose_converges_from_a_bad_guess():
    pose = (2.0, 3.0, 1.0)
    obs = [observe(pose, FIELD_MAP[i], i) for i in (0, 1, 2)]
    fix = fix_pose(obs, FIELD_MAP, guess=(4.0, 1.0, 0.3))
    assert (fix.x, fix.y, fix.yaw) == pytest.approx(pose, abs=1e-6)


def test_observations_of_markers_not_in_the_map_are_ignored():
    pose = (2.0, 2.0, 0.5)
    obs = [observe(pose, FIELD_MAP[0], 0), MarkerObservation(42, 1.0, 0.0, 0.0)]
    fix = fix_pose(obs, FIELD_MAP)
    assert fix.used == (0,)
    assert (fix.x, fix.y) == pytest.approx(pose[:2], abs=1e-6)


# ---------------------------------------------------------------- refusals
def test_fail__one_marker_without_facing_cannot_fix_the_heading():
    with pytest.raises(MarkerFixError, match="need 2 markers or a facing"):
        fix_pose([MarkerObservation(0, 2.0, 0.1)], FIELD_MAP)


def test_fail__no_marker_in_the_map():
    with pytest.raises(MarkerFixError, match="no observation"):
        fix_pose([MarkerObservation(99, 2.0, 0.1, 0.0)], FIELD_MAP)
    with pytest.raises(MarkerFixError, match="no observation"):
        fix_position([], FIELD_MAP, 0.0)


def test_fail__two_markers_in_one_place_leave_the_heading_free():
    same = {1: (3.0, 3.0, 0.0), 2: (3.0, 3.0, 0.0)}
    obs = [replace(observe((1.0, 1.0, 0.2), same[i], i), facing_rad=math.nan) for i in (1, 2)]
    with pytest.raises(MarkerFixError, match="degenerate"):
        fix_pose(obs, same)


@pytest.mark.parametrize("bad", [dict(range_m=math.nan), dict(range_m=0.0), dict(range_m=-1.0),
                                 dict(bearing_rad=math.inf), dict(range_sigma_m=0.0),
                                 dict(bearing_sigma_rad=math.nan), dict(facing_sigma_rad=-0.1)])
def test_fail__observation(bad):
    with pytest.raises(ValueError):
        MarkerObservation(**{"marker_id": 1, "range_m": 2.0, "bearing_rad": 0.1, **bad})


def test_fail__fix_position_needs_a_finite_heading():
    obs = [observe((1.0, 1.0, 0.0), FIELD_MAP[0], 0)]
    with pytest.raises(MarkerFixError, match="finite"):
        fix_position(obs, FIELD_MAP, math.nan)
    with pytest.raises(MarkerFixError, match="finite"):
        fix_position(obs, FIELD_MAP, 0.0, -1.0)


# ---------------------------------------------------------------- noise and covariance
def nees(err: np.ndarray, cov: np.ndarray) -> float:
    return float(err @ np.linalg.solve(cov, err))


@pytest.mark.parametrize("ids", [(0,), (0, 1), (1, 2, 3)])
def test_fix_pose_covariance_matches_the_scatter_of_noisy_fixes(ids):
    # the normalised estimation error squared is χ²(3) when the covariance is honest: median 2.37;
    # seeded, so the bounds are not a coin toss. The single-marker fix is nonlinear enough (the heading
    # from the facing turns the whole position) to fatten the tail: its mean is ~3.8, not 3. Markers 0.5 m wide, 60-100 px
    # at these ranges: a small one's facing is so poor (σ ~ 0.6 rad) that no linear covariance holds
    rng = np.random.default_rng(14)
    pose = np.array([2.5, 1.5, 0.3])
    values = []
    for _ in range(400):
        obs = []
        for i in ids:
            o = observe(pose, FIELD_MAP[i], i)
            r, b, f = observation_sigmas(o.range_m, 0.5, 457.0, 0.5)
            obs.append(noisy(replace(o, range_sigma_m=r, bearing_sigma_rad=b, facing_sigma_rad=f), rng))
        fix = fix_pose(obs, FIELD_MAP)
        err = np.array([fix.x, fix.y, math.remainder(fix.yaw, math.tau)]) - pose
        values.append(nees(err, fix.covariance))
    assert 2.0 < np.median(values) < 2.8
    assert np.mean(values) < 4.5


def test_fix_position_covariance_matches_the_scatter_including_the_heading_error():
    rng = np.random.default_rng(3)
    pose = np.array([2.0, 2.0, -0.4])
    yaw_sigma = math.radians(3.0)
    values, spread = [], []
    for _ in range(400):
        obs = [noisy(observe(pose, FIELD_MAP[i], i, range_sigma_m=0.03, bearing_sigma_rad=0.005), rng)
               for i in (0, 3)]
        fix = fix_position(obs, FIELD_MAP, pose[2] + rng.normal(0.0, yaw_sigma), yaw_sigma)
        err = np.array(fix.position) - pose[:2]
        values.append(nees(err, fix.covariance))
        spread.append(err)
    assert 1.6 < np.mean(values) < 2.4  # 2 unknowns
    # ignoring the heading's error would claim a much smaller ellipse than the real scatter
    no_yaw = fix_position(obs, FIELD_MAP, pose[2]).covariance
    assert np.trace(np.cov(np.array(spread).T)) > 2.0 * np.trace(no_yaw)


def test_fix_position_weights_the_nearer_marker_more():
    pose = (1.0, 1.5, 0.0)
    near = observe(pose, FIELD_MAP[2], 2, range_sigma_m=0.01, bearing_sigma_rad=0.005)  # 1 m behind
    far = observe(pose, FIELD_MAP[0], 0, range_sigma_m=0.2, bearing_sigma_rad=0.005)  # ~5 m ahead
    far = replace(far, range_m=far.range_m + 0.4)  # a bad range on the far marker
    fix = fix_position([near, far], FIELD_MAP, 0.0)
    assert fix.x == pytest.approx(1.0, abs=0.02)
    assert fix.chi2 > 3.0  # and the fit says the two disagree


def test_position_sigma_is_the_long_axis():
    # seen from 4 m with a poor bearing: the ellipse is long across the line of sight
    obs = [observe((2.0, 2.0, 0.0), FIELD_MAP[0], 0, range_sigma_m=0.01, bearing_sigma_rad=0.05)]
    fix = fix_position(obs, FIELD_MAP, 0.0)
    assert fix.position_sigma_m == pytest.approx(4.0 * 0.05, rel=1e-6)


def test_observation_sigmas_grow_with_range():
    r1, b1, f1 = observation_sigmas(1.0, 0.2, 457.0)
    r2, b2, f2 = observation_sigmas(6.0, 0.2, 457.0)
    assert r2 == pytest.approx(36.0 * r1)
    assert b1 == b2
    assert f2 > f1
    with pytest.raises(ValueError):
        observation_sigmas(0.0, 0.2, 457.0)
