"""The robot-neutral controller interface: the loop knows setpoints only through it.

A profile's ``[robot] profile`` chooses one controller from the registry
(:mod:`server.runtime.controllers.registry`: name → ``"module:Class"``, imported lazily, like
the drivers). The control loop hands it the operator's setpoint and the supervisor's
:class:`~server.runtime.supervisor.OutputMode` once per tick and writes whatever actuator
command it returns; it never reads a robot's field name itself. Setpoints are ``msgspec``
structs of the controller's own type, validated at the gateway's edge and again here
(:meth:`Controller.check`), so the runtime refuses anything out of its limits whoever sends it.

A controller **declares** what it is, as class attributes, so nothing asks by probing:

* :attr:`~Controller.robot_type` and :attr:`~Controller.limits_type`: the structs of its
  ``[robot]`` and ``[limits]`` tables (the config loader picks them by profile);
* :attr:`~Controller.setpoint_type` and :attr:`~Controller.commands`: its setpoints and the
  operator commands it offers, each a name and the struct of its body (``GET /api/robot`` lists
  them with their JSON schema: :meth:`Controller.capabilities`);
* :attr:`~Controller.stop_categories`: the stop categories it can carry out (0 cut, 1 ramp then
  cut, 2 ramp and hold); a profile whose safety table asks for another one does not start;
* :attr:`~Controller.stages`: the estimation stages it needs (names in
  :data:`server.runtime.stage.STAGES`), built for it when the driver has their inputs.

It reaches the hardware through the driver interface only (:class:`drivers.base.Driver`:
actuators, capabilities such as a program generator): ``lint-imports`` refuses an import of a
concrete driver here.
"""

from __future__ import annotations

import abc
from typing import Any, ClassVar, Mapping, NamedTuple

import msgspec

from server.runtime.supervisor import Motion, OutputMode, Rule

#: every stop category (IEC 60204-1 §9.2.2: 0 cut, 1 ramp then cut, 2 ramp and hold)
ALL_STOP_CATEGORIES = frozenset({0, 1, 2})


class Command(NamedTuple):
    """An operator command a controller offers: its name (the HTTP route's tail and the websocket
    message type) and the msgspec Struct of its body."""

    name: str
    params: type

    def to_json(self) -> dict[str, Any]:
        """Name and the body's JSON schema (``msgspec.json.schema``)."""
        return {"name": self.name, "params": msgspec.json.schema(self.params)}


class Controller(abc.ABC):
    """Base of every controller; see the module docstring."""

    #: the profile it serves ("rover", "scara", "stewart"), its registry name
    profile: ClassVar[str] = ""
    #: the struct of its ``[robot]`` table (a :class:`server.config.Table` tagged by ``profile``)
    robot_type: ClassVar[type]
    #: the struct of its ``[limits]`` table
    limits_type: ClassVar[type]
    #: the msgspec Struct (or union of them) of its setpoints
    setpoint_type: ClassVar[Any]
    #: the operator commands it offers beyond start, stop, e-stop, reset and heartbeat
    commands: ClassVar[tuple[Command, ...]] = ()
    #: the stop categories it can carry out
    stop_categories: ClassVar[frozenset[int]] = ALL_STOP_CATEGORIES
    #: the estimation stages it needs (names in server.runtime.stage.STAGES)
    stages: ClassVar[tuple[str, ...]] = ()
    #: the runtime's motions beyond setpoints it can carry out: ``"trajectory"`` (``prepare``, ``follow``: a
    #: trajectory run, :mod:`server.runtime.behaviours.trajectory`), ``"program"`` (``program``: a drive program)
    behaviours: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    @abc.abstractmethod
    def from_profile(cls, profile: Any, driver: Any) -> "Controller":
        """Build from the loaded profile (its ``robot`` and ``limits`` tables are this controller's structs)
        and the driver (its actuators narrow the limits); :class:`server.config.ConfigError` when they do not fit."""

    @abc.abstractmethod
    def zero(self) -> Any:
        """The setpoint that means "stand still"."""

    @abc.abstractmethod
    def check(self, setpoint: Any) -> None:
        """Raise :class:`server.errors.ValidationError` (422) for a setpoint beyond the limits."""

    @abc.abstractmethod
    def motion_of(self, setpoint: Any) -> Motion:
        """The motion a setpoint asks for (rules gated on motion refuse it before it is applied)."""

    @abc.abstractmethod
    def motion(self, values: Mapping[str, float]) -> Motion:
        """The motion now, commanded or measured, whichever is larger."""

    @abc.abstractmethod
    def update(self, dt_s: float, mode: OutputMode, setpoint: Any) -> dict[str, float]:
        """One tick: the actuator command for ``mode`` (``setpoint`` is used only in TRACK)."""

    @abc.abstractmethod
    def reset(self) -> None:
        """Forget the ramp state (outputs cut)."""

    @property
    @abc.abstractmethod
    def stopped(self) -> bool:
        """The ramped command has reached zero."""

    @abc.abstractmethod
    def command_json(self) -> dict[str, float]:
        """The command in force, for the snapshot's ``command`` field."""

    @abc.abstractmethod
    def setpoint_json(self, setpoint: Any) -> dict[str, Any]:
        """A setpoint for the snapshot's ``setpoint`` field."""

    @abc.abstractmethod
    def describe(self) -> dict[str, Any]:
        """Limits and geometry for ``GET /api/robot``."""

    # ------------------------------------------------------------------ with defaults
    def scaled(self, setpoint: Any, scale: float) -> Any:
        """``setpoint`` with its speeds times ``scale`` (0–1): the latency governor's cap
        (:mod:`server.runtime.freshness`). Default: unchanged (a controller that cannot scale is not capped;
        docs/safety.md says which are)."""
        return setpoint

    def govern(self, scale: float) -> None:
        """The latency governor's cap (0–1) on the speeds this controller reaches by itself (an arm's joint and
        tool speed, a platform's pose rate), set on every governor step. Default: nothing (a controller whose
        setpoints are speeds is capped by :meth:`scaled` instead)."""

    def take_events(self) -> tuple | list:
        """Events of its own since the last call — (trigger, message, kind, values) — which the loop logs after
        each update (a platform saturating its legs). Default: none."""
        return ()

    def limit_rules(self, channels: set[str]) -> list[Rule]:
        """Supervisor rules for its own limits on the driver's ``channels`` (joints on their end stops, …),
        added to the profile's ``[[safety.rules]]``. Default: none."""
        return []

    @classmethod
    def capabilities(cls) -> dict[str, Any]:
        """What it declares, for ``GET /api/robot``: its commands (names, and each body's JSON schema), its stop
        categories and its estimation stages."""
        return {"commands": [c.name for c in cls.commands],
                "command_params": {c.name: c.to_json()["params"] for c in cls.commands},
                "stop_categories": sorted(cls.stop_categories), "stages": list(cls.stages),
                "behaviours": sorted(cls.behaviours)}


__all__ = ["ALL_STOP_CATEGORIES", "Command", "Controller"]
