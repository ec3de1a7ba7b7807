"""The error tree shared by the runtime and the gateway; the gateway maps it to HTTP in one place
(:mod:`server.gateway.http`).

Every error response is ``{"error": {"code": str, "message": str}}`` with a 4xx;
websocket errors carry the same object in ``{"type": "error", "error": {...}}``; the
runtime API carries it in a response's ``error`` field with the status, so an error
raised in the runtime reaches the browser unchanged. What no check caught is answered
500 ``internal`` on both sides, its traceback logged through a :class:`TracebackLimiter`.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any, Callable


class ApiError(Exception):
    """An error the client can act on. ``status`` is the HTTP status."""

    status = 400
    code = "bad_request"

    def __init__(self, message: str, *, code: str | None = None, status: int | None = None,
                 details: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status

    def to_json(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message}

    def to_wire(self) -> dict[str, Any]:
        """The form the runtime API carries (status and details included)."""
        out = {"code": self.code, "message": self.message, "status": self.status}
        if self.details is not None:
            out["details"] = self.details
        return out

    @classmethod
    def from_wire(cls, obj: dict[str, Any]) -> "ApiError":
        return cls(str(obj.get("message", "")), code=str(obj.get("code", "bad_request")),
                   status=int(obj.get("status", 400)), details=obj.get("details"))


class ValidationError(ApiError):
    """The input is malformed or out of limits (400 for syntax, 422 for values)."""

    status = 422
    code = "invalid"


class MalformedError(ApiError):
    """The body is not JSON, not an object, or too large."""

    status = 400
    code = "malformed"


class ConflictError(ApiError):
    """The robot's state forbids the command right now (speed during e-stop, …)."""

    status = 409
    code = "conflict"


class NotFoundError(ApiError):
    status = 404
    code = "not_found"


class RuntimeDownError(ApiError):
    """The robot runtime process is not connected (it died and is being restarted)."""

    status = 503
    code = "runtime_down"


class TracebackLimiter:
    """Log the exception being handled with its traceback, at most ``burst`` times per ``period_s`` and then
    one line saying how many were left out: a client that repeats a failing request does not fill the disk.
    """

    def __init__(self, logger: logging.Logger, burst: int = 5, period_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.logger, self.burst, self.period_s, self.clock = logger, burst, period_s, clock
        self._window_t = -math.inf
        self._count = 0
        self.suppressed = 0

    def log(self, msg: str, *args: Any) -> None:
        now = self.clock()
        if now - self._window_t >= self.period_s:
            if self.suppressed:
                self.logger.error("%d more failure(s) not logged in the last %.0f s", self.suppressed, self.period_s)
            self._window_t, self._count, self.suppressed = now, 0, 0
        if self._count < self.burst:
            self._count += 1
            self.logger.error(msg, *args, exc_info=True)
        else:
            self.suppressed += 1
