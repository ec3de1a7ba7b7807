"""sim.magnetic: the dipole field's named cases (on its axis, beside it, the 1/r³ fall-off), steel objects from
config, and the hard-iron drift's current and thermal terms."""

from __future__ import annotations

import doctest
import math
import re

import numpy as np
import pytest

import sim.magnetic
from sim.magnetic import MIN_DISTANCE_M, MU0_4PI, HardIronDrift, SteelObject, dipole_field_t, field_of
from sim.world import World


def test_docstring_examples() -> None:
    assert doctest.testmod(sim.magnetic).failed == 0


@pytest.mark.parametrize("r", [0.3, 0.5, 1.0, 2.0])
def test_on_the_axis_the_field_is_twice_beside_it_and_opposite_in_sense(r) -> None:
    m = np.array([0.0, 0.0, 4.0])
    axial = dipole_field_t(m, [0.0, 0.0, r])
    equatorial = dipole_field_t(m, [r, 0.0, 0.0])
    assert axial == pytest.approx([0.0, 0.0, 2.0 * MU0_4PI * 4.0 / r**3])
    assert equatorial == pytest.approx([0.0, 0.0, -MU0_4PI * 4.0 / r**3])


def test_the_field_falls_off_as_the_cube_of_the_distance() -> None:
    m, direction = np.array([1.0, 2.0, -3.0]), np.array([0.6, 0.0, 0.8])
    near, far = dipole_field_t(m, 0.5 * direction), dipole_field_t(m, 1.0 * direction)
    assert near == pytest.approx(8.0 * far)


def test_the_field_is_linear_in_the_moment_and_objects_add_up() -> None:
    a = SteelObject(0.0, 0.0, 0.0, (1.0, 0.0, 0.0))
    b = SteelObject(1.0, 0.0, 0.0, (0.0, 2.0, 0.0))
    p = [0.4, 0.3, 0.1]
    assert field_of([a, b], p) == pytest.approx(a.field_t(p) + b.field_t(p))
    double = SteelObject(0.0, 0.0, 0.0, (2.0, 0.0, 0.0))
    assert double.field_t(p) == pytest.approx(2.0 * a.field_t(p))


def test_inside_the_steel_the_distance_is_clamped_not_infinite() -> None:
    m = (0.0, 0.0, 1.0)
    assert np.all(np.isfinite(dipole_field_t(m, [0.0, 0.0, 0.0])))
    assert dipole_field_t(m, [0.0, 0.0, 1e-4]) == pytest.approx(dipole_field_t(m, [0.0, 0.0, MIN_DISTANCE_M]))


def test_steel_in_the_world_config() -> None:
    w = World.from_config({"size_m": [5.0, 8.0], "steel": [{"position": [2.9, 2.0, -0.05], "moment_am2": [0, 2.6, -3.6],
                                                             "name": "drain cover"}]})
    assert len(w.steel) == 1 and w.steel[0].name == "drain cover" and w.steel[0].z == -0.05
    assert World.from_config({"size_m": [5.0, 8.0]}).steel == []  # none unless given


@pytest.mark.parametrize("cfg, key", [
    ({"position": [1, 2], "moment_am2": [0, 0, 1]}, "steel[0].position"),
    ({"position": [1, 2, 0], "moment_am2": [0, 0, math.inf]}, "steel[0].moment_am2"),
    ({"position": [1, 2, 0], "moment_am2": [0, 0, 1], "mass_kg": 3}, "unknown key(s) mass_kg"),
    ({"position": [1, 2, 0], "moment_am2": [0, 0, 1], "name": 5}, "steel[0].name"),
    ("a pipe", "steel[0] must be a table"),
])
def test_fail__bad_steel_names_the_key(cfg, key) -> None:
    with pytest.raises(ValueError, match=re.escape(key)):
        World.from_config({"steel": [cfg]})


def test_drift_follows_the_current_at_once_and_the_temperature_slowly() -> None:
    d = HardIronDrift(per_amp_t=[[1e-6, 0, 0], [0, 1e-6, 0]], per_kelvin_t=[0, 0, 1e-7], heating_k_per_a2=10.0,
                      thermal_tau_s=100.0)
    assert d.offset_t((0.5, 0.2)) == pytest.approx([0.5e-6, 0.2e-6, 0.0])  # cold: the leads' field only
    d.step(100.0, (1.0, 0.0))  # one time constant at 1 A
    assert d.temperature_rise_k == pytest.approx(10.0 * (1.0 - math.exp(-1.0)))
    assert d.offset_t((0.0, 0.0)) == pytest.approx([0.0, 0.0, 1e-7 * d.temperature_rise_k])


def test_the_thermal_step_does_not_depend_on_how_the_time_is_cut() -> None:
    one, many = HardIronDrift(heating_k_per_a2=5.0, thermal_tau_s=60.0), HardIronDrift(heating_k_per_a2=5.0,
                                                                                        thermal_tau_s=60.0)
    one.step(30.0, (0.8, 0.8))
    for _ in range(3000):
        many.step(0.01, (0.8, 0.8))
    assert one.temperature_rise_k == pytest.approx(many.temperature_rise_k, rel=1e-9)


def test_fail__drift_parameters() -> None:
    with pytest.raises(ValueError):
        HardIronDrift(heating_k_per_a2=-1.0)
    with pytest.raises(ValueError):
        HardIronDrift(thermal_tau_s=0.0)
