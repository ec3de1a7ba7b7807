"""The ``[robot]`` and ``[limits]`` tables of the arm and platform profiles, apart from their controllers.

The launcher checks every table of a profile before anything starts (server/config.py) and runs none of it;
the SCARA and Stewart controllers import numpy and their kinematics, which a launcher has no use for (~0.2 s
of CPU on each start). So their structs live here, on msgspec and the body-description parser only, and the
registry names them (:data:`server.runtime.controllers.registry.TABLES`); each controller's ``robot_type`` and
``limits_type`` are these (tests/server/runtime/test_controllers.py holds the two to each other).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, Any, ClassVar, Mapping

import msgspec
from msgspec import Meta

from robotics.description import DescriptionError, parse
from server.config import REPO_ROOT, ConfigError, Table

log = logging.getLogger(__name__)

#: the rover's ``[limits]`` keys, which the arm and platform tables never used (a profile may still carry them)
ROVER_ONLY_LIMITS = ("linear_m_s", "angular_rad_s", "linear_accel_m_s2", "angular_accel_rad_s2",
                     "linear_decel_m_s2", "angular_decel_rad_s2")


class ReferenceLimits(Table):
    """``[limits]`` of an arm or a platform: their speed and acceleration limits are in ``[robot]``. The rover's
    keys were accepted here while ``[limits]`` was the rover's struct: they still load, ignored, with a warning."""

    deprecated: ClassVar[Mapping[str, str | None]] = dict.fromkeys(ROVER_ONLY_LIMITS)

    ttl_max_s: Annotated[float, Meta(gt=0.0, le=3600.0)] = 10.0  # the largest ttl_s a motion command may carry


_Pair = Annotated[list[Annotated[float, Meta(ge=-360.0, le=360.0)]], Meta(min_length=2, max_length=2)]
_PosPair = Annotated[list[Annotated[float, Meta(gt=0.0, le=1e4)]], Meta(min_length=2, max_length=2)]


class ScaraRobot(Table, tag_field="profile", tag="scara"):
    """``[robot]`` of a 2-link SCARA arm. The simulated arm (``sim-scara``) takes its geometry and drive
    limits from here when ``[driver]`` does not give them."""

    name: str = "Simulated SCARA arm"
    l1_m: Annotated[float, Meta(gt=0.0, le=10.0)] = 0.30
    l2_m: Annotated[float, Meta(gt=0.0, le=10.0)] = 0.20
    q_min_deg: _Pair = msgspec.field(default_factory=lambda: [-170.0, -150.0])
    q_max_deg: _Pair = msgspec.field(default_factory=lambda: [170.0, 150.0])
    max_velocity_rad_s: _PosPair = msgspec.field(default_factory=lambda: [2.0, 3.0])
    max_acceleration_rad_s2: _PosPair = msgspec.field(default_factory=lambda: [10.0, 15.0])
    max_tool_speed_m_s: Annotated[float, Meta(gt=0.0, le=10.0)] = 0.25
    limit_margin_deg: Annotated[float, Meta(ge=0.0, le=30.0)] = 2.0
    singular_margin_deg: Annotated[float, Meta(gt=0.0, le=45.0)] = 5.0
    description: str = "config/bodies/scara.xml"

    @property
    def profile(self) -> str:
        return "scara"

    def __post_init__(self) -> None:
        for j in range(2):
            if self.q_max_deg[j] - self.q_min_deg[j] <= 2 * self.limit_margin_deg:
                raise ValueError(f"q{j + 1}: q_max_deg must exceed q_min_deg by more than twice limit_margin_deg")
        load_description(self.description)  # a bad document stops start-up here, naming the file and the line


class ScaraLimits(ReferenceLimits):
    """``[limits]`` of a SCARA arm (its joint speeds and accelerations are in ``[robot]``)."""


def load_description(path_text: str) -> Any:
    """The body description a profile names (absolute, or relative to the repository), parsed; None for ``""``."""
    if not path_text:
        return None
    path = Path(path_text)
    if not path.is_absolute():
        path = REPO_ROOT / path
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"robot.description: cannot read {path}: {err}") from None
    try:
        tree = parse(text)
    except DescriptionError as err:
        raise ConfigError(f"robot.description: {path}: {err}") from None
    for warning in tree.warnings:
        log.warning("robot.description %s: %s", path, warning)
    return tree


class StewartRobot(Table, tag_field="profile", tag="stewart"):
    """``[robot]`` of a 6-6 Stewart platform (the symmetric layout of ``StewartPlatform.symmetric``). The simulated
    platform (``sim-stewart``) takes this geometry when ``[driver]`` gives none."""

    name: str = "Simulated Stewart platform"
    base_radius_m: Annotated[float, Meta(gt=0.0, le=10.0)] = 0.5
    platform_radius_m: Annotated[float, Meta(gt=0.0, le=10.0)] = 0.3
    base_spread_deg: Annotated[float, Meta(ge=0.0, lt=120.0)] = 20.0
    platform_spread_deg: Annotated[float, Meta(ge=0.0, lt=120.0)] = 100.0
    leg_min_m: Annotated[float, Meta(gt=0.0, le=10.0)] = 0.45
    leg_max_m: Annotated[float, Meta(gt=0.0, le=10.0)] = 0.75
    saturate: bool = False
    stroke_margin_m: Annotated[float, Meta(ge=0.0, le=1.0)] = 0.002
    max_speed_m_s: Annotated[float, Meta(gt=0.0, le=10.0)] = 0.2
    max_angular_speed_deg_s: Annotated[float, Meta(gt=0.0, le=3600.0)] = 60.0
    max_acceleration_m_s2: Annotated[float, Meta(gt=0.0, le=100.0)] = 1.0
    max_angular_acceleration_deg_s2: Annotated[float, Meta(gt=0.0, le=36000.0)] = 300.0

    @property
    def profile(self) -> str:
        return "stewart"

    def __post_init__(self) -> None:
        if self.leg_max_m - self.leg_min_m <= 2 * self.stroke_margin_m:
            raise ValueError("leg_max_m must exceed leg_min_m by more than twice stroke_margin_m")


class StewartLimits(ReferenceLimits):
    """``[limits]`` of a Stewart platform (its pose speeds and accelerations are in ``[robot]``)."""

__all__ = ["ROVER_ONLY_LIMITS", "ReferenceLimits", "ScaraLimits", "ScaraRobot", "StewartLimits", "StewartRobot",
           "load_description"]
