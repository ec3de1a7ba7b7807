"""Validation of JSON input, one style for every surface: decode with ``msgspec`` (strict JSON:
NaN and Infinity literals are refused), then convert to the route's ``msgspec.Struct``, with
the documented error codes and messages.

The gateway validates every body at its edge with these; the runtime converts the same
structs again and checks its limits, so it refuses anything out of range whoever sends it.

An object with a key twice is refused (400 ``malformed``), at any depth: decoders keep the last
one, so ``{"type": "estop", "type": "ping"}`` meant two things at once (issue 18: a regex saw
an e-stop, the dispatcher a ping, and the rate limit let 2,500 of them through). The check
lists the key strings of the raw text (split at its quotes); only when a key string repeats
somewhere (a list of objects) does it count the decoded keys, and only an escape in the text
or a count that falls short takes the exact decode with a hook that sees every object's pairs.
Measured (``bench/bench_parse.py``, 2 vCPU, the bare msgspec decode → this): a 60-byte command
0.4 → 2.2 µs, 400 keys (6.5 kB) 24 → 77 µs, 1000 number pairs 80 → 89 µs, 200 objects (7 kB, the
counting path) 32 → 237 µs, a 2.7 MB trajectory (a worker thread) 10.6 → 11.9 ms.

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
from typing import Any, Iterable, TypeVar

import msgspec

from drivers.tables import explain
from server.errors import MalformedError, ValidationError

MAX_BODY_BYTES = 16 * 1024

T = TypeVar("T")

_decoder = msgspec.json.Decoder()
_QUOTE, _BACKSLASH, _COLON = {str: '"', bytes: b'"'}, {str: "\\", bytes: b"\\"}, {str: ":", bytes: b":"}
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
    else:
        _refuse_duplicate_keys(raw, value)
    if not isinstance(value, dict):
        raise MalformedError(f"body must be a JSON object, not {type(value).__name__}")
    return value


def _refuse_duplicate_keys(raw: bytes | str, value: Any) -> None:
    """400 ``malformed`` when an object of ``raw`` (valid JSON, decoded to ``value``) holds a key twice.

    Without a backslash, a JSON text split at its quotes alternates between outside and inside strings, and
    a string followed by a colon is a key: when no key string repeats, no object can repeat one (the fast
    path); when some does (a list of objects), the keys of ``value`` are counted, and fewer than the text's
    means a key was dropped. Escapes (``"\\u0074ype"`` is ``"type"``) take the exact, slower decode.

    >>> _refuse_duplicate_keys('{"a": {"x": 1}, "b": [{"x": 2}]}', {"a": {"x": 1}, "b": [{"x": 2}]})
    >>> _refuse_duplicate_keys(b'{"type": "estop", "type": "ping"}', {"type": "ping"})
    Traceback (most recent call last):
    ...
    server.errors.MalformedError: body has the key 'type' twice in one object (which would count?)
    """
    kind = type(raw)
    if _BACKSLASH[kind] in raw:
        _decode_overflowing(raw)
        return
    parts = raw.split(_QUOTE[kind])
    colon = _COLON[kind]
    keys = [k for k, after in zip(parts[1::2], parts[2::2]) if after[:1] == colon or after.lstrip()[:1] == colon]
    if len(set(keys)) == len(keys) or _count_keys(value) == len(keys):
        return
    _decode_overflowing(raw)  # names the key
    raise MalformedError("body has a key twice in one object")  # pragma: no cover - the decode above raises


def _count_keys(value: Any) -> int:
    """Keys of every object in a decoded JSON value (plain loops: 4× faster than generator expressions)."""
    n, stack = 0, [value]
    pop, push = stack.pop, stack.append
    while stack:
        v = pop()
        if type(v) is dict:
            n += len(v)
            for x in v.values():
                if type(x) is dict or type(x) is list:
                    push(x)
        elif type(v) is list:
            for x in v:
                if type(x) is dict or type(x) is list:
                    push(x)
    return n


class _DuplicateKey(ValueError):
    pass


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        dup = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise _DuplicateKey(f"body has the key {dup!r} twice in one object (which would count?)")
    return out


def _decode_overflowing(raw: bytes | str) -> Any:
    """The standard library's decoder, for what msgspec cannot say: numbers beyond a float's range, and
    objects with a key twice (refused)."""
    def refuse(name: str) -> float:
        raise ValueError(f"{name} is not valid JSON")

    try:
        return json.loads(raw, parse_constant=refuse, object_pairs_hook=_unique_pairs)
    except _DuplicateKey as err:
        raise MalformedError(str(err)) from None
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


#: integers a body may hold: what every consumer (struct fields, numpy, the runtime API's encoder) takes
_INT_LIMIT = 2 ** 63


def _refuse_non_finite(obj: Any, path: str) -> None:
    """Every float anywhere in a body must be finite (a number like 1e400 decodes to infinity), every integer
    within 64 bits (``"degree": 1e400`` written out in digits reached the runtime API's encoder, which cannot
    write it: issue 18)."""
    if isinstance(obj, float):
        if not math.isfinite(obj):
            raise ValidationError(f"{path or 'value'} must be a finite number", code="not_finite")
    elif isinstance(obj, int) and not isinstance(obj, bool):
        if not -_INT_LIMIT <= obj < _INT_LIMIT:
            raise ValidationError(f"{path or 'value'} is outside the limits (an integer of {obj.bit_length()} bits, "
                                  "over 64)", code="out_of_limits")
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _refuse_non_finite(v, f"{path}.{k}" if path else str(k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            _refuse_non_finite(v, f"{path}[{i}]")


def _explain(err: msgspec.ValidationError) -> ValidationError:
    """msgspec's error (:func:`drivers.tables.explain`) as the documented code and message."""
    e = explain(err)
    path = e.path.lstrip(".")
    if e.kind == "missing_field":
        return ValidationError(f"{e.key()} is required", code="missing_field")
    if e.kind == "wrong_type":
        want = " or ".join(_TYPES.get(t, t) for t in e.want if t != "null")
        return ValidationError(f"{path} must be {want}, not {_GOT.get(e.got, e.got)}", code="wrong_type")
    if e.kind == "out_of_limits":
        return ValidationError(f"{path} is outside the limits ({e.detail})", code="out_of_limits")
    return ValidationError(f"{path}: {e.detail}" if path else e.detail, code="invalid")


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
