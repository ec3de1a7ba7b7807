"""Operator commands, validated once and dispatched to the control loop.

HTTP routes and the telemetry websocket both go through :func:`execute`, so the
two surfaces accept exactly the same commands with exactly the same checks.
"""

from __future__ import annotations

import re
from typing import Any

from server.control_loop import ControlLoop
from server.controller import Limits
from server.errors import ApiError, ConflictError, ValidationError
from server.safety import Refused
from server.validation import MAX_BODY_BYTES, number, parse_object, reject_unknown

COMMANDS = ("start", "stop", "estop", "reset", "heartbeat", "speed")
ENVELOPE = {"type", "id"}
MAX_REASON = 200
_ESTOP_TYPE = re.compile(rb'"type"\s*:\s*"estop"')


def looks_like_estop(raw: bytes | str) -> bool:
    """Whether a message that failed to parse or validate still asks for an e-stop (then it is one)."""
    return _ESTOP_TYPE.search(raw.encode() if isinstance(raw, str) else raw) is not None


def estop_reason(raw: bytes | str) -> tuple[str, str | None]:
    """The reason an e-stop body carries, and a warning when it had to be replaced or ignored.

    Never raises: the e-stop happened before this runs.

    >>> estop_reason(b'{"reason": "kid on the track"}')
    ('kid on the track', None)
    >>> estop_reason(b'{"reason": 5}')
    ('', 'reason replaced: it must be a string of at most 200 characters')
    >>> estop_reason(b'not json')[1]
    'body ignored: it is not a JSON object'
    """
    if not raw or not raw.strip():
        return "", None
    if len(raw) > MAX_BODY_BYTES:
        return "", f"body ignored: over the {MAX_BODY_BYTES}-byte limit"
    try:
        body = parse_object(raw)
    except ApiError:
        return "", "body ignored: it is not a JSON object"
    reason = body.get("reason", "")
    warning = None
    if not isinstance(reason, str) or len(reason) > MAX_REASON:
        reason, warning = "", f"reason replaced: it must be a string of at most {MAX_REASON} characters"
    unknown = sorted(k for k in body if k not in {"reason"} | ENVELOPE)
    if unknown:
        warning = (warning + "; " if warning else "") + f"unknown field(s) ignored: {', '.join(map(str, unknown))}"
    return reason, warning


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
