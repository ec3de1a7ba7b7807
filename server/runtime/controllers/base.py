"""The robot-neutral controller interface: the loop knows setpoints only through it.

A profile chooses one controller (the rover's differential drive now; SCARA joints and
Stewart legs plug in the same way). The control loop hands it the operator's setpoint and
the supervisor's :class:`~server.runtime.supervisor.OutputMode` once per tick and writes
whatever actuator command it returns; it never reads a rover field name itself.
Setpoints are ``msgspec`` structs of the controller's own type, validated at the
gateway's edge and again here (:meth:`Controller.check`), so the runtime refuses anything
out of its limits whoever sends it.
"""

from __future__ import annotations

from typing import Any, Mapping, Protocol

from server.runtime.supervisor import Motion, OutputMode


class Controller(Protocol):
    #: the profile it serves ("rover", "scara", "stewart")
    profile: str
    #: the msgspec Struct of its setpoints
    setpoint_type: type

    def zero(self) -> Any:
        """The setpoint that means "stand still"."""

    def check(self, setpoint: Any) -> None:
        """Raise :class:`server.errors.ValidationError` (422) for a setpoint beyond the limits."""

    def motion_of(self, setpoint: Any) -> Motion:
        """The motion a setpoint asks for (rules gated on motion refuse it before it is applied)."""

    def motion(self, values: Mapping[str, float]) -> Motion:
        """The motion now, commanded or measured, whichever is larger."""

    def update(self, dt_s: float, mode: OutputMode, setpoint: Any) -> dict[str, float]:
        """One tick: the actuator command for ``mode`` (``setpoint`` is used only in TRACK)."""

    def reset(self) -> None:
        """Forget the ramp state (outputs cut)."""

    @property
    def stopped(self) -> bool:
        """The ramped command has reached zero."""

    def command_json(self) -> dict[str, float]:
        """The command in force, for the snapshot's ``command`` field."""

    def setpoint_json(self, setpoint: Any) -> dict[str, Any]:
        """A setpoint for the snapshot's ``setpoint`` field."""

    def describe(self) -> dict[str, Any]:
        """Limits and geometry for ``GET /api/robot``."""
