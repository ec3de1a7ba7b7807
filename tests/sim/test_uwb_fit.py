"""The field profile's UWB model against seeds/002's figures, as bench/fit_uwb.py fitted it (issue 23).

The fit's criterion (docs/sensing.md, "Fitted parameters"): over fields 1…200 the median of the 32-step mean
is 9.08 cm (± 0.05) and at least half the fields keep their 32-step max within 23 cm. Here the profile's
parameters must still meet it on the fit's seeds, and on 200 other fields (201…400) within the sampling error
of a median of 200 (the 32-step mean's spread over fields is ~1 cm: ± 0.25 cm). The hand-tuned parameters it
replaced fail on the fit's seeds (median mean 8.78 cm); on the other 200 fields they give 9.02 cm, within that
sampling error: the hand tuning was close, what the fit adds is a stated, re-runnable procedure. No server.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys

import numpy as np
import pytest

from robotics.estimation.uwb import trilaterate
from server.config import REPO_ROOT

_spec = importlib.util.spec_from_file_location("fit_uwb", REPO_ROOT / "bench" / "fit_uwb.py")
fit_uwb = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("fit_uwb", fit_uwb)  # its dataclasses look their module up
_spec.loader.exec_module(fit_uwb)

FIT_SEEDS = range(1, 201)
HELD_OUT_SEEDS = range(201, 401)
HELD_OUT_TOLERANCE_CM = 0.25
#: the parameters before the fit (hand-tuned against seed 1's offline runs)
HAND_TUNED = {"sigma_m": 0.03, "noise_dof": 4.0, "multipath_m": 0.077, "multipath_length_m": 0.3,
              "nlos_excess_per_m": 0.2, "nlos_sigma_m": 0.03, "nlos_probability": 0.01, "nlos_bias_m": 0.3,
              "outlier_probability": 0.005, "outlier_m": 1.0, "dropout_probability": 0.01}


@pytest.fixture(scope="module")
def field():
    profile = fit_uwb.load_profile()
    return fit_uwb.geometry(profile), fit_uwb.model_params(profile)


def meets(f, tolerance_cm: float) -> bool:
    return abs(f.mean_median - fit_uwb.TARGET_MEAN_CM) <= tolerance_cm and f.within >= fit_uwb.WITHIN_MAX_SHARE


def test_the_geometry_is_the_paper_s_32_steps_of_10_fixes(field) -> None:
    geo, _ = field
    assert geo.steps.shape == (32, 3) and geo.fixes_per_step == 10
    assert geo.steps[0, :2].tolist() == [2.5, 2.5] and geo.steps[16, :2].tolist() == [2.0, 3.0]
    assert np.all(geo.steps[:, 2] == 0.125)
    assert (geo.blocked > 0).any(axis=1).sum() >= 16  # the cabinet and the cart shadow anchors at half the steps


def test_the_fitted_profile_gives_the_paper_s_mean_and_max(field) -> None:
    geo, params = field
    fitted = fit_uwb.figures(geo, params, FIT_SEEDS)
    assert meets(fitted, fit_uwb.MEAN_TOLERANCE_CM), fitted.row()
    held_out = fit_uwb.figures(geo, params, HELD_OUT_SEEDS)
    assert meets(held_out, HELD_OUT_TOLERANCE_CM), held_out.row()


def test_fail__the_hand_tuned_parameters_miss_the_paper_s_mean(field) -> None:
    geo, _ = field
    hand = fit_uwb.figures(geo, HAND_TUNED, FIT_SEEDS)
    assert hand.mean_median < fit_uwb.TARGET_MEAN_CM - 0.2 and not meets(hand, fit_uwb.MEAN_TOLERANCE_CM), hand.row()


def test_the_batched_trilateration_is_the_estimator_s(field) -> None:
    geo, params = field
    ranger = fit_uwb.UwbRanger(geo.anchors, **{**params, "outlier_probability": 0.1, "dropout_probability": 0.1})
    ranger.seed_multipath(np.random.default_rng(1))
    raw = ranger.ranges_batch(np.repeat(geo.steps, 10, axis=0), np.random.default_rng(2),
                              penetration_m=np.repeat(geo.blocked, 10, axis=0))
    batch = fit_uwb.trilaterate_batch(geo.anchors, raw, geo.tag_height_m)
    for r, b in zip(raw, batch):
        if np.count_nonzero(np.isfinite(r)) < 3:
            assert np.all(np.isnan(b))
        else:
            assert b == pytest.approx(trilaterate(geo.anchors, r, z_fixed=geo.tag_height_m, iterations=1)[:2], abs=1e-9)


def test_the_fit_s_seed_is_the_simulator_s_multipath_field(field) -> None:
    # seed k of the fit is [driver] seed = k's field: the sim driver draws it from SeedSequence(k)'s child 5
    from drivers.sim.rover import _SEED_MULTIPATH

    assert fit_uwb.SEED_MULTIPATH == _SEED_MULTIPATH


def test_write_params_replaces_the_values_and_keeps_the_comments(tmp_path) -> None:
    path = tmp_path / "field.toml"
    shutil.copy(fit_uwb.FIELD, path)
    fit_uwb.write_params({"multipath_m": 0.0123, "outlier_probability": 0.02}, path)
    text = path.read_text()
    table = fit_uwb.load_profile(path)["driver"]["uwb"]
    assert table["multipath_m"] == 0.0123 and table["outlier_probability"] == 0.02
    assert "# the static, position-dependent bias" in text
    with pytest.raises(KeyError):
        fit_uwb.write_params({"no_such_key": 1.0}, path)
