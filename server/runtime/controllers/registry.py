"""Profile names → ``"module:Class"`` controllers, imported lazily (as :mod:`drivers.registry` does drivers).

``[robot] profile`` names one of :data:`CONTROLLERS`; the controller class declares the rest
(:class:`~server.runtime.controllers.base.Controller`: its ``[robot]`` and ``[limits]`` structs,
setpoints, commands, stop categories, estimation stages). So the config tables ``[robot]`` and
``[limits]`` are :class:`RobotTable` and :class:`LimitsTable` here: their struct is the profile's
controller's. Adding a robot kind is one line here plus its controller module; nothing in the loop.

Within a profile, the driver's declared capabilities may choose another controller (:data:`BY_CAPABILITY`,
:func:`controller_for`): a rover whose driver takes the body twist itself (an autopilot: MAVLink) gets the
twist controller, not the wheel mixer. It serves the same profile, so it keeps the profile's tables.

>>> controller_class("scara").profile, sorted(CONTROLLERS)
('scara', ['rover', 'scara', 'stewart'])
>>> RobotTable.struct_for({"robot": {"profile": "stewart"}}).__name__
'StewartRobot'
>>> LimitsTable.struct_for({}).__name__         # no [robot] profile: a rover
'RoverLimits'
>>> from drivers.base import Capability
>>> controller_for("rover", {Capability.BODY_TWIST}).__name__, controller_for("rover", set()).__name__
('TwistController', 'RoverController')
"""

from __future__ import annotations

import importlib
from typing import Any, Iterable, Mapping

from drivers.base import Capability
from server.config import ProfileTable
from server.runtime.controllers.base import Controller

CONTROLLERS: dict[str, str] = {
    "rover": "server.runtime.controllers.rover:RoverController",
    "scara": "server.runtime.controllers.scara:ScaraController",
    "stewart": "server.runtime.controllers.stewart:StewartController",
}
#: profile → a driver capability → the controller that serves the profile for a driver declaring it (instead of
#: the profile's own); it must take the profile's ``[robot]`` and ``[limits]`` structs
BY_CAPABILITY: dict[str, dict[Capability, str]] = {
    "rover": {Capability.BODY_TWIST: "server.runtime.controllers.twist:TwistController"},
}
#: the profile of a ``[robot]`` table without a ``profile`` key
DEFAULT_PROFILE = "rover"
#: profile → its ``[robot]`` and ``[limits]`` structs, where they live apart from a controller that imports numpy
#: (the launcher reads the tables and runs nothing: tables.py says why); a profile not here takes its
#: controller's ``robot_type`` and ``limits_type``, so a new robot kind still needs one line (CONTROLLERS)
TABLES: dict[str, tuple[str, str]] = {
    "scara": ("server.runtime.controllers.tables:ScaraRobot", "server.runtime.controllers.tables:ScaraLimits"),
    "stewart": ("server.runtime.controllers.tables:StewartRobot", "server.runtime.controllers.tables:StewartLimits"),
}


def controller_class(profile: str) -> type[Controller]:
    """The controller registered for ``profile``; :class:`ValueError` naming the known ones."""
    try:
        target = CONTROLLERS[profile]
    except (KeyError, TypeError):
        raise ValueError(f"'robot.profile' must be one of {', '.join(sorted(CONTROLLERS))}, not {profile!r}") from None
    return _import(target)


def controller_for(profile: str, capabilities: Iterable[Capability]) -> type[Controller]:
    """The controller for ``profile`` and a driver with these declared ``capabilities``: the first of
    :data:`BY_CAPABILITY`'s the driver has, else the profile's own (:func:`controller_class`)."""
    base = controller_class(profile)
    caps = set(capabilities)
    for capability, target in BY_CAPABILITY.get(profile, {}).items():
        if capability in caps:
            return _import(target)
    return base


def _import(target: str) -> type:
    module_name, _, cls_name = target.partition(":")
    return getattr(importlib.import_module(module_name), cls_name)


def tables_of(profile: str) -> tuple[type, type]:
    """The ``[robot]`` and ``[limits]`` structs of ``profile`` (:data:`TABLES`, else its controller's);
    :class:`ValueError` naming the known profiles."""
    if profile in TABLES and profile in CONTROLLERS:
        robot, limits = TABLES[profile]
        return _import(robot), _import(limits)
    cls = controller_class(profile)
    return cls.robot_type, cls.limits_type


def profile_of(raw: Mapping[str, Any]) -> str:
    """The profile a raw config names (``[robot] profile``, default :data:`DEFAULT_PROFILE`)."""
    robot = raw.get("robot", {})
    return robot.get("profile", DEFAULT_PROFILE) if isinstance(robot, Mapping) else DEFAULT_PROFILE


class RobotTable(ProfileTable):
    """``[robot]``: the struct of the profile's controller (``Controller.robot_type``), chosen by its
    ``profile`` key (default ``rover``)."""

    @classmethod
    def struct_for(cls, raw: Mapping[str, Any]) -> type:
        return tables_of(profile_of(raw))[0]

    @classmethod
    def structs(cls) -> tuple[type, ...]:
        return tuple(tables_of(p)[0] for p in CONTROLLERS)


class LimitsTable(ProfileTable):
    """``[limits]``: the struct of the profile's controller (``Controller.limits_type``)."""

    @classmethod
    def struct_for(cls, raw: Mapping[str, Any]) -> type:
        return tables_of(profile_of(raw))[1]

    @classmethod
    def structs(cls) -> tuple[type, ...]:
        return tuple(dict.fromkeys(tables_of(p)[1] for p in CONTROLLERS))


__all__ = ["BY_CAPABILITY", "CONTROLLERS", "DEFAULT_PROFILE", "LimitsTable", "RobotTable", "TABLES", "controller_class",
           "controller_for", "profile_of", "tables_of"]
