"""The server's error tree and the one place that maps it to HTTP.

Every error response is ``{"error": {"code": str, "message": str}}`` with a 4xx;
websocket errors carry the same object in ``{"type": "error", "error": {...}}``.
"""

from __future__ import annotations

from aiohttp import web


class ApiError(Exception):
    """An error the client can act on. ``status`` is the HTTP status."""

    status = 400
    code = "bad_request"

    def __init__(self, message: str, *, code: str | None = None, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status

    def to_json(self) -> dict:
        return {"code": self.code, "message": self.message}


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


def error_response(err: ApiError) -> web.Response:
    return web.json_response({"error": err.to_json()}, status=err.status)


@web.middleware
async def error_middleware(request: web.Request, handler):
    """Map :class:`ApiError` and aiohttp's own HTTP errors to the JSON error shape."""
    try:
        return await handler(request)
    except ApiError as err:
        return error_response(err)
    except web.HTTPException as exc:
        if exc.status < 400 or exc.content_type == "application/json":
            raise
        code = {404: "not_found", 405: "method_not_allowed", 413: "too_large"}.get(exc.status, "http_error")
        return web.json_response({"error": {"code": code, "message": exc.reason}}, status=exc.status)
