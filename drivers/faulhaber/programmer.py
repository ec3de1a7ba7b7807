"""FAULHABER programs as a driver capability (:attr:`drivers.base.Capability.PROGRAMS`).

A controller asks its driver for a :class:`drivers.base.ProgramGenerator` and hands it the joint
motion and each joint's limits; it never learns what a FAULHABER axis is. The generator puts each
joint on the driver's own drive of that name (its node, encoder and gearing: the FAULHABER drivers
pass their ``axes``) or, for a joint the driver has no drive for, on a direct drive within the
joint's limits: 2048 increments per turn, gear 1, node = the joint's place in the motion (the
simulated SCARA arm stands for such drives). :func:`drivers.faulhaber.program.generate_program`
writes the text.

>>> from drivers.base import JointLimits
>>> gen = FaulhaberProgramGenerator()
>>> p = gen.generate([(0.0, {"q1": 0.0}), (1.0, {"q1": 0.5})], [JointLimits("q1", -3.0, 3.0, 2.0, 10.0)])
>>> p.lines, p.axes[0]["node"], p.axes[0]["from_driver"]
(9, 1, False)
"""

from __future__ import annotations

from typing import Mapping, Sequence

from drivers.base import JointLimits, MotionProgram, ProgramGenerator
from drivers.errors import ProgramGenerationError
from drivers.faulhaber.axis import AxisConfig, AxisMode
from drivers.faulhaber.program import ProgramError, generate_program

#: encoder increments per turn of a default (direct) drive
DEFAULT_COUNTS_PER_REV = 2048


class FaulhaberProgramGenerator(ProgramGenerator):
    """FAULHABER ASCII programs; ``axes``: the driver's own drives by joint name (see the module docstring)."""

    def __init__(self, axes: Mapping[str, AxisConfig] | None = None) -> None:
        self.axes = dict(axes or {})

    def generate(self, waypoints: Sequence[tuple[float, Mapping[str, float]]],
                 joints: Sequence[JointLimits]) -> MotionProgram:
        axes = {j.name: self.axes.get(j.name) or AxisConfig(
            j.name, node=i + 1, mode=AxisMode.POSITION, counts_per_rev=DEFAULT_COUNTS_PER_REV, gear_ratio=1.0,
            max_speed_rad_s=j.max_speed_rad_s, max_accel_rad_s2=j.max_accel_rad_s2, min_rad=j.min_rad,
            max_rad=j.max_rad) for i, j in enumerate(joints)}
        try:
            program = generate_program(waypoints, axes)
        except ProgramError as err:
            raise ProgramGenerationError(str(err)) from None
        return MotionProgram(program.text(), len(program.lines()), tuple(
            {"node": a.node, "counts_per_rev": a.counts_per_rev, "gear_ratio": a.gear_ratio,
             "max_speed_rad_s": a.max_speed_rad_s, "max_accel_rad_s2": a.max_accel_rad_s2,
             "from_driver": name in self.axes} for name, a in axes.items()))


__all__ = ["DEFAULT_COUNTS_PER_REV", "FaulhaberProgramGenerator"]
