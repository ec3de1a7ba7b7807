"""The gateway's HTTP edge: the one JSON body reader and the one place errors become HTTP.

Every error response is ``{"error": {"code": str, "message": str}}`` with its status
(docs/api.md lists every code).
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from server.errors import ApiError, MalformedError
from server.validation import MAX_BODY_BYTES, parse_object

BODY_TIMEOUT = web.AppKey("body_timeout_s", float)


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


async def read_raw_body(request: web.Request, limit: int = MAX_BODY_BYTES) -> bytes:
    """The body up to ``limit + 1`` bytes (one more than allowed: the caller sees it is too long), read
    until its end, within ``server.body_timeout_s`` (a client that trickles its body does not hold a
    handler forever). A single ``read()`` returns what has arrived so far, which for a body spread
    over several TCP segments is only part of it: hence the loop."""
    timeout_s = request.app.get(BODY_TIMEOUT, 5.0)
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout_s):
            while size <= limit and (chunk := await request.content.read(limit + 1 - size)):
                chunks.append(chunk)
                size += len(chunk)
            return b"".join(chunks)
    except TimeoutError:
        raise MalformedError(f"the body did not arrive within {timeout_s:g} s", code="timeout", status=408) from None


async def read_body(request: web.Request, allow_empty: bool = True) -> dict[str, Any]:
    """The body as a JSON object (the one reader every route uses): size, time and syntax checked."""
    if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
        raise MalformedError(f"body of {request.content_length} bytes is over the {MAX_BODY_BYTES}-byte limit",
                             code="too_large", status=413)
    return parse_object(await read_raw_body(request), allow_empty=allow_empty)


def json_response(text: str | bytes, status: int = 200) -> web.Response:
    """Already-serialised JSON (the snapshot as the runtime sent it)."""
    body = text.encode() if isinstance(text, str) else text
    return web.Response(body=body, status=status, content_type="application/json")
