"""The gateway's HTTP edge: the one JSON body reader and the one place errors become HTTP.

Every error response is ``{"error": {"code": str, "message": str}}`` with its status
(docs/api.md lists every code).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from aiohttp import web

from server.errors import ApiError, MalformedError, TracebackLimiter
from server.validation import MAX_BODY_BYTES, parse_object

log = logging.getLogger(__name__)
_unexpected = TracebackLimiter(log)

BODY_TIMEOUT = web.AppKey("body_timeout_s", float)
BODY_MIN_RATE = web.AppKey("body_min_rate_bytes_s", float)


def error_response(err: ApiError) -> web.Response:
    # an error may carry headers of its own (Retry-After on 429 / 503)
    return web.json_response({"error": err.to_json()}, status=err.status, headers=getattr(err, "headers", None))


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
    except Exception as exc:  # noqa: BLE001 - what no check caught: a JSON 500, its traceback logged (rate-limited)
        _unexpected.log("%s %s failed", request.method, request.path)
        return web.json_response({"error": {"code": "internal", "message": f"{request.method} {request.path} "
                                            f"failed in the gateway ({type(exc).__name__}); it logged why"}},
                                 status=500)


async def read_raw_body(request: web.Request, limit: int = MAX_BODY_BYTES) -> bytes:
    """The body up to ``limit + 1`` bytes (one more than allowed: the caller sees it is too long), read
    until its end. A single ``read()`` returns what has arrived so far, which for a body spread over
    several TCP segments is only part of it: hence the loop.

    Deadline: ``server.body_timeout_s`` plus one second per ``server.body_min_rate_bytes_s`` bytes received
    so far (so at most ``body_timeout_s + Content-Length / rate``). A fixed 5 s refused a 3 MB trajectory sent
    at 0.6 MB/s (issue 18); a client that trickles its body (slowloris) falls behind the rate and gets 408
    soon after ``body_timeout_s`` whatever length it declared."""
    base_s = request.app.get(BODY_TIMEOUT, 5.0)
    rate = request.app.get(BODY_MIN_RATE, 50_000.0)
    start = time.monotonic()
    chunks: list[bytes] = []
    size = 0
    while size <= limit:
        left = start + base_s + size / rate - time.monotonic()
        try:
            if left <= 0:
                raise TimeoutError
            async with asyncio.timeout(left):
                chunk = await request.content.read(limit + 1 - size)
        except TimeoutError:
            raise MalformedError(f"the body did not arrive in time: {size} bytes in {time.monotonic() - start:.1f} s "
                                 f"(allowed: {base_s:g} s plus 1 s per {rate:g} bytes)", code="timeout",
                                 status=408) from None
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


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
