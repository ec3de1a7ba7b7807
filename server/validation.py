"""Validation of JSON input, one style for every surface: decode with ``msgspec`` (strict JSON:
NaN and Infinity literals are refused), then convert to the route's ``msgspec.Struct``, with
the documented error codes and messages.

The gateway validates every body at its edge with these; the runtime converts the same
structs again and checks its limits, so it refuses anything out of range whoever sends it.

>>> parse_object(b'{"linear": 0.2}', max_bytes=100)
{'linear': 0.2}
>>> class Speed(msgspec.Struct):
...     linear: float
>>> convert({"linear": "fast"}, Speed)
Traceback (most recent call last):
...
server.errors.ValidationError: linear must be a number, not str
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Iterable, TypeVar

import msgspec

from server.errors import MalformedError, ValidationError

MAX_BODY_BYTES = 16 * 1024

T = TypeVar("T")

_decoder = msgspec.json.Decoder()
_AT = re.compile(r"^(?P<msg>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.S)
_TYPES = {"float": "a number", "int": "an integer", "str": "a string", "bool": "true or false",
          "array": "a list", "object": "an object", "null": "null"}
_GOT = {"str": "str", "float": "float", "int": "int", "bool": "bool", "null": "NoneType", "array": "list",
        "object": "dict"}


def parse_object(raw: bytes | str, max_bytes: int = MAX_BODY_BYTES, allow_empty: bool = False) -> dict[str, Any]:
    """Decode a JSON object; NaN/Infinity literals, non-objects, deep nesting and oversize bodies are refused."""
    if len(raw) > max_bytes:
        raise MalformedError(f"body of {len(raw)} bytes is over the {max_bytes}-byte limit", code="too_large", status=413)
    if allow_empty and (not raw or not raw.strip()):
        return {}
    try:
        value = _decoder.decode(raw)
    except msgspec.ValidationError:
        # msgspec refuses a number beyond a float's range (1e400) while decoding; it is valid JSON and
        # a value error: decode it the slow way (infinity) so the field check names the field (422)
        value = _decode_overflowing(raw)
    except msgspec.DecodeError as err:
        raise MalformedError(f"body is not valid JSON: {err}") from None
    except RecursionError:
        raise MalformedError("body is nested too deeply") from None
    if not isinstance(value, dict):
        raise MalformedError(f"body must be a JSON object, not {type(value).__name__}")
    return value


def _decode_overflowing(raw: bytes | str) -> Any:
    def refuse(name: str) -> float:
        raise ValueError(f"{name} is not valid JSON")

    try:
        return json.loads(raw, parse_constant=refuse)
    except (ValueError, UnicodeDecodeError) as err:
        raise MalformedError(f"body is not valid JSON: {err}") from None
    except RecursionError:
        raise MalformedError("body is nested too deeply") from None


def reject_unknown(obj: dict[str, Any], allowed: Iterable[str]) -> None:
    allowed = set(allowed)
    unknown = sorted(str(k) for k in obj if k not in allowed)
    if unknown:
        raise ValidationError(
            f"unknown field(s): {', '.join(unknown)}; allowed: {', '.join(sorted(allowed)) or 'none'}",
            code="unknown_field",
        )


def fields_of(cls: type) -> tuple[str, ...]:
    return tuple(f.encode_name for f in msgspec.structs.fields(cls))


def convert(obj: dict[str, Any], cls: type[T], *, also_allowed: Iterable[str] = ()) -> T:
    """``obj`` as a ``cls`` struct: unknown fields, missing ones, wrong types and numbers out of a
    float's range get the documented codes; every float must be finite."""
    reject_unknown(obj, set(fields_of(cls)) | set(also_allowed))
    _refuse_non_finite(obj, "")
    try:
        out = msgspec.convert({k: v for k, v in obj.items() if k not in also_allowed}, cls)
    except msgspec.ValidationError as err:
        raise _explain(err) from None
    return out


def _refuse_non_finite(obj: Any, path: str) -> None:
    """Every float anywhere in a body must be finite (a number like 1e400 decodes to infinity)."""
    if isinstance(obj, float):
        if not math.isfinite(obj):
            raise ValidationError(f"{path or 'value'} must be a finite number", code="not_finite")
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _refuse_non_finite(v, f"{path}.{k}" if path else str(k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            _refuse_non_finite(v, f"{path}[{i}]")


def _explain(err: msgspec.ValidationError) -> ValidationError:
    m = _AT.match(str(err))
    msg, path = m.group("msg"), (m.group("path") or "").lstrip(".")
    if miss := re.match(r"Object missing required field `([^`]+)`", msg):
        name = f"{path}.{miss.group(1)}" if path else miss.group(1)
        return ValidationError(f"{name} is required", code="missing_field")
    if typ := re.match(r"Expected `([^`]+)`, got `([^`]+)`", msg):
        want = " or ".join(_TYPES.get(t.strip(), t.strip()) for t in typ.group(1).split("|") if t.strip() != "null")
        got = _GOT.get(typ.group(2), typ.group(2))
        return ValidationError(f"{path} must be {want}, not {got}", code="wrong_type")
    if "out of range" in msg or re.match(r"Expected `\w+` [<>]=?", msg):
        return ValidationError(f"{path} is outside the limits ({msg.replace('`', '')})", code="out_of_limits")
    return ValidationError(f"{path}: {msg.replace('`', '')}" if path else msg.replace("`", ""), code="invalid")


def number(obj: dict[str, Any], key: str, lo: float | None = None, hi: float | None = None, *,
           required: bool = True, default: float | None = None) -> float | None:
    """A finite number in [lo, hi] from a plain object (query strings, ad-hoc fields); booleans
    and strings are refused."""
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
        raise ValidationError(f"{key} is outside the limits", code="out_of_limits") from None
    if not math.isfinite(v):
        raise ValidationError(f"{key} must be a finite number", code="not_finite")
    if lo is not None and v < lo or hi is not None and v > hi:
        raise ValidationError(f"{key}={v:g} is outside the limits [{lo:g}, {hi:g}]", code="out_of_limits")
    return v


def check_range(name: str, value: float, lo: float, hi: float) -> float:
    """The one range check with the documented message (``not_finite`` / ``out_of_limits``)."""
    if not math.isfinite(value):
        raise ValidationError(f"{name} must be a finite number", code="not_finite")
    if not lo <= value <= hi:
        raise ValidationError(f"{name}={value:g} is outside the limits [{lo:g}, {hi:g}]", code="out_of_limits")
    return value


__all__ = ["MAX_BODY_BYTES", "check_range", "convert", "fields_of", "number", "parse_object", "reject_unknown"]
