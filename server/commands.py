"""Operator commands, validated once and dispatched to the control loop.

HTTP routes and the telemetry websocket both go through :func:`execute`, so the
two surfaces accept exactly the same commands with exactly the same checks.
"""

from __future__ import annotations

from typing import Any

from server.control_loop import ControlLoop
from server.controller import Limits
from server.errors import ConflictError, ValidationError
from server.safety import Refused
from server.validation import number, reject_unknown

COMMANDS = ("start", "stop", "estop", "reset", "heartbeat", "speed")
ENVELOPE = {"type", "id"}


def parse_speed(body: dict[str, Any], limits: Limits) -> tuple[float, float, float | None]:
    reject_unknown(body, {"linear", "angular", "ttl_s"} | ENVELOPE)
    linear = number(body, "linear", -limits.linear_m_s, limits.linear_m_s)
    angular = number(body, "angular", -limits.angular_rad_s, limits.angular_rad_s)
    ttl = number(body, "ttl_s", 0.001, limits.ttl_max_s, required=False)
    return linear, angular, ttl


def execute(loop: ControlLoop, limits: Limits, name: str, body: dict[str, Any], source: str = "http") -> str:
    """Run one command; returns the state after. Raises ValidationError / ConflictError.
    ``source`` ("http", "websocket") is shown with the setpoint it sets."""
    try:
        if name == "speed":
            linear, angular, ttl = parse_speed(body, limits)
            return loop.set_speed(linear, angular, ttl, source)
        if name == "estop":
            reject_unknown(body, {"reason"} | ENVELOPE)
            reason = body.get("reason", "")
            if not isinstance(reason, str) or len(reason) > 200:
                raise ValidationError("reason must be a string of at most 200 characters", code="wrong_type")
            return loop.estop(reason)
        reject_unknown(body, ENVELOPE)
        if name == "start":
            return loop.start_robot()
        if name == "stop":
            return loop.stop_robot()
        if name == "reset":
            return loop.reset()
        if name == "heartbeat":
            return loop.heartbeat()
    except Refused as r:
        err = ConflictError(r.message, code=r.code)
        err.details = r.details
        raise err from None
    raise ValidationError(f"unknown command {name!r}; known: {', '.join(COMMANDS)}", code="unknown_command")
