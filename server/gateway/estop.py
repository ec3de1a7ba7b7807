"""The e-stop's own helpers: the scan that finds an e-stop in any frame (a transport runs it on the raw
bytes before it parses anything, so a malformed, oversized or binary frame that asks for an e-stop still
latches one; issue 18), and the reason an e-stop's body gives (read after the latch, never a refusal).
The e-stop itself is a command of the registry (:data:`server.gateway.commands.ESTOP_COMMAND`) whose
dispatch latches first (:meth:`server.gateway.commands.Dispatcher.estop`)."""

from __future__ import annotations

import json
import re

from server.errors import ApiError
from server.gateway.registry import ENVELOPE
from server.runtime_api.params import MAX_REASON
from server.validation import MAX_BODY_BYTES, parse_object

_ESTOP_TYPE = re.compile(rb'"type"\s*:\s*"estop"')
# every JSON string in order and, when a colon and a string follow it, that string (a key and its value)
_STRING_PAIR = re.compile(rb'"([^"\\]*(?:\\.[^"\\]*)*)"(?:\s*:\s*"([^"\\]*(?:\\.[^"\\]*)*)")?')


def looks_like_estop(raw: bytes | str) -> bool:
    r"""Whether a message asks for an e-stop anywhere in it (then it is one, whatever else it says, however
    malformed; issue 18): a key ``"type"`` with the value ``"estop"``, escapes decoded, at any depth, in any
    bytes (a binary frame or invalid UTF-8 too). Whatever the parser reads as an e-stop, this sees.

    >>> looks_like_estop(b'{"type": "estop", "type": "ping"}'), looks_like_estop('{"\\u0074ype":"e\\u0073top"}')
    (True, True)
    >>> looks_like_estop(b'{"type": "ping", "note": "\\"type\\": \\"estop\\""}'), looks_like_estop(b"\xff\xfe")
    (False, False)
    """
    data = raw.encode("utf-8", "surrogateescape") if isinstance(raw, str) else raw
    if _ESTOP_TYPE.search(data) is not None:
        return True
    if b"\\" not in data:  # without escapes the pattern above sees every spelling
        return False
    return any(value is not None and _unescape(key) == "type" and _unescape(value) == "estop"
               for key, value in _STRING_PAIR.findall(data))


def _unescape(s: bytes) -> str | None:
    try:
        return json.loads(b'"' + s + b'"')
    except ValueError:
        return None


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


__all__ = ["estop_reason", "looks_like_estop"]
