"""drivers/faulhaber/programmer.py: the PROGRAMS capability — each joint on the driver's own drive, or a default
direct drive within the joint's limits; a motion the drives cannot do is a ProgramGenerationError."""

from __future__ import annotations

import pytest

from drivers.base import JointLimits
from drivers.errors import ProgramGenerationError
from drivers.faulhaber.axis import AxisConfig, AxisMode
from drivers.faulhaber.programmer import DEFAULT_COUNTS_PER_REV, FaulhaberProgramGenerator

JOINTS = [JointLimits("q1", -2.0, 2.0, 2.0, 10.0), JointLimits("q2", -2.5, 2.5, 3.0, 15.0)]
MOTION = [(0.0, {"q1": 0.0, "q2": 0.0}), (2.0, {"q1": 0.5, "q2": -0.2})]


def test_default_drives_take_the_joints_limits_and_their_place_as_node() -> None:
    p = FaulhaberProgramGenerator().generate(MOTION, JOINTS)
    assert [(a["node"], a["counts_per_rev"], a["gear_ratio"], a["from_driver"]) for a in p.axes] == [
        (1, DEFAULT_COUNTS_PER_REV, 1.0, False), (2, DEFAULT_COUNTS_PER_REV, 1.0, False)]
    assert [a["max_speed_rad_s"] for a in p.axes] == [2.0, 3.0]
    assert p.text.splitlines()[0].startswith("1SP") and p.lines == len(p.text.splitlines())


def test_the_drivers_own_drive_is_used_for_its_joint_and_a_default_for_the_other() -> None:
    own = AxisConfig("q2", node=7, mode=AxisMode.POSITION, counts_per_rev=512, gear_ratio=43.0,
                     max_speed_rad_s=1.0, max_accel_rad_s2=5.0, min_rad=-2.5, max_rad=2.5)
    p = FaulhaberProgramGenerator({"q2": own, "wheel": own}).generate(MOTION, JOINTS)
    assert [(a["node"], a["gear_ratio"], a["from_driver"]) for a in p.axes] == [(1, 1.0, False), (7, 43.0, True)]
    assert any(line.startswith("7LA") for line in p.text.splitlines())


def test_fail__a_segment_too_fast_for_the_drive_is_refused_naming_it() -> None:
    with pytest.raises(ProgramGenerationError, match="segment 1.*q1") as info:
        FaulhaberProgramGenerator().generate([(0.0, {"q1": 0.0, "q2": 0.0}), (0.1, {"q1": 1.9})], JOINTS)
    assert isinstance(info.value, ValueError)
