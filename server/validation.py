"""Validation of JSON input: one function per shape, clear messages, no partial changes.

>>> parse_object(b'{"linear": 0.2}', max_bytes=100)
{'linear': 0.2}
>>> number({"linear": float("nan")}, "linear")
Traceback (most recent call last):
...
server.errors.ValidationError: linear must be a finite number
"""

from __future__ import annotations

import json
import math
from typing import Any, Iterable

from server.errors import MalformedError, ValidationError

MAX_BODY_BYTES = 16 * 1024


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not valid JSON")


def parse_object(raw: bytes | str, max_bytes: int = MAX_BODY_BYTES, allow_empty: bool = False) -> dict[str, Any]:
    """Decode a JSON object; NaN/Infinity literals, non-objects and oversize bodies are refused."""
    if len(raw) > max_bytes:
        raise MalformedError(f"body of {len(raw)} bytes is over the {max_bytes}-byte limit", code="too_large", status=413)
    if allow_empty and (not raw or not raw.strip()):
        return {}
    try:
        value = json.loads(raw, parse_constant=_reject_constant)
    except (ValueError, UnicodeDecodeError) as err:
        raise MalformedError(f"body is not valid JSON: {err}") from err
    except RecursionError:
        raise MalformedError("body is nested too deeply") from None
    if not isinstance(value, dict):
        raise MalformedError(f"body must be a JSON object, not {type(value).__name__}")
    return value


def reject_unknown(obj: dict[str, Any], allowed: Iterable[str]) -> None:
    allowed = set(allowed)
    unknown = sorted(k for k in obj if k not in allowed)
    if unknown:
        raise ValidationError(
            f"unknown field(s): {', '.join(unknown)}; allowed: {', '.join(sorted(allowed)) or 'none'}",
            code="unknown_field",
        )


def number(
    obj: dict[str, Any],
    key: str,
    lo: float | None = None,
    hi: float | None = None,
    *,
    required: bool = True,
    default: float | None = None,
) -> float | None:
    """A finite number in [lo, hi]; booleans and strings are refused."""
    if key not in obj or obj[key] is None and not required:
        if required:
            raise ValidationError(f"{key} is required", code="missing_field")
        return default
    v = obj[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValidationError(f"{key} must be a number, not {type(v).__name__}", code="wrong_type")
    try:
        v = float(v)
    except OverflowError:  # an integer of hundreds of digits
        raise ValidationError(f"{key} is outside the limits [{lo:g}, {hi:g}]" if lo is not None and hi is not None
                              else f"{key} is too large", code="out_of_limits") from None
    if not math.isfinite(v):
        raise ValidationError(f"{key} must be a finite number", code="not_finite")
    if lo is not None and v < lo or hi is not None and v > hi:
        raise ValidationError(f"{key}={v:g} is outside the limits [{lo:g}, {hi:g}]", code="out_of_limits")
    return v


def integer(obj: dict[str, Any], key: str, lo: int, hi: int, *, required: bool = True, default: int | None = None) -> int | None:
    if key not in obj:
        if required:
            raise ValidationError(f"{key} is required", code="missing_field")
        return default
    v = obj[key]
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValidationError(f"{key} must be an integer, not {type(v).__name__}", code="wrong_type")
    if not lo <= v <= hi:
        raise ValidationError(f"{key}={v} is outside the limits [{lo}, {hi}]", code="out_of_limits")
    return v


def string_list(obj: dict[str, Any], key: str, max_items: int = 256) -> list[str]:
    if key not in obj:
        raise ValidationError(f"{key} is required", code="missing_field")
    v = obj[key]
    if not isinstance(v, list) or not all(isinstance(s, str) for s in v):
        raise ValidationError(f"{key} must be a list of strings", code="wrong_type")
    if len(v) > max_items:
        raise ValidationError(f"{key} has more than {max_items} items", code="out_of_limits")
    return v
