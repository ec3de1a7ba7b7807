"""Operator commands as typed structs, validated once at the gateway's edge and again in the runtime.

HTTP routes and the telemetry websocket parse with the same functions, so the two
surfaces accept exactly the same commands with exactly the same checks; the runtime
converts the parameters it receives with the same structs and checks its own limits.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from server.errors import ApiError
from server.validation import MAX_BODY_BYTES, check_range, convert, parse_object, reject_unknown

COMMANDS = ("start", "stop", "estop", "reset", "heartbeat", "speed")
ENVELOPE = ("type", "id")
MAX_REASON = 200
_ESTOP_TYPE = re.compile(rb'"type"\s*:\s*"estop"')


class Speed(msgspec.Struct, forbid_unknown_fields=True):
    """``POST /api/speed`` and the websocket's ``speed``: a rover setpoint and its time-to-live."""

    linear: float
    angular: float
    ttl_s: float | None = None

    def check(self, limits: dict[str, Any]) -> "Speed":
        """Against the robot's limits as ``GET /api/robot`` describes them."""
        lo, hi = limits["linear_m_s"]
        check_range("linear", self.linear, lo, hi)
        lo, hi = limits["angular_rad_s"]
        check_range("angular", self.angular, lo, hi)
        if self.ttl_s is not None:
            check_range("ttl_s", self.ttl_s, 0.001, limits["ttl_max_s"])
        return self


def parse_speed(body: dict[str, Any], limits: dict[str, Any], envelope: tuple[str, ...] = ()) -> Speed:
    return convert(body, Speed, also_allowed=envelope).check(limits)


def parse_bare(body: dict[str, Any], envelope: tuple[str, ...] = ()) -> None:
    """start, stop, reset, heartbeat take no fields."""
    reject_unknown(body, envelope)


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
    unknown = sorted(str(k) for k in body if k not in ("reason", *ENVELOPE))
    if unknown:
        warning = (warning + "; " if warning else "") + f"unknown field(s) ignored: {', '.join(unknown)}"
    return reason, warning
