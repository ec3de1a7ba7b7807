"""Typed tables: plain data (TOML, JSON) converted to msgspec Structs, and the one explainer of msgspec's errors.

Every table and body in the project is a ``msgspec.Struct`` whose ranges are ``Meta(ge=…, le=…)``
on the field that owns them. When a conversion fails, :func:`explain` turns msgspec's message
(``Expected `float` <= 360.0 - at `$.rules[0].below```) into an :class:`Explanation`: what kind of
problem, at which path, and the details. Each surface words it its own way from there — the config
loader (:mod:`server.config`: ``'safety.rules[0].below' …``, naming the file), the HTTP/websocket
bodies (:mod:`server.validation`: the documented error codes) and the drivers' own tables
(:func:`convert_table`: a :class:`~drivers.errors.DriverConfigError` naming the dotted key). It lives
here, in the driver layer, so that ``drivers`` and ``server`` share it without ``drivers`` importing
``server``. msgspec has no "finite" constraint: :func:`non_finite_path` finds a NaN or an infinity
anywhere in the data first.

>>> from typing import Annotated
>>> Radar = msgspec.defstruct("Radar", [("rate_hz", Annotated[float, msgspec.Meta(gt=0.0, le=1000.0)], 20.0)],
...                           forbid_unknown_fields=True)
>>> e = explain(_error({"rate_hz": 0}, Radar))
>>> e.kind, e.path, e.detail
('out_of_limits', '.rate_hz', 'Expected float > 0.0')
>>> convert_table({"rate": 5}, Radar, "doppler")
Traceback (most recent call last):
...
drivers.errors.DriverConfigError: doppler.rate: unknown key (known: rate_hz)
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, TypeVar, Union, get_args, get_origin

import msgspec

from drivers.errors import DriverConfigError

T = TypeVar("T")

_AT = re.compile(r"^(?P<msg>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.S)
_UNKNOWN = re.compile(r"Object contains unknown field `(?P<field>[^`]+)`")
_MISSING = re.compile(r"Object missing required field `(?P<field>[^`]+)`")
_TYPE = re.compile(r"Expected `(?P<want>[^`]+)`, got `(?P<got>[^`]+)`")
_LIMIT = re.compile(r"Expected `\w+` (?P<op>[<>]=?) ")
#: msgspec's type names in the words of a config table
_WORDS = {"float": "a number", "int": "an integer", "str": "a text", "bool": "true or false", "array": "a list",
          "object": "a table", "null": "null"}


@dataclass(frozen=True)
class Explanation:
    """One msgspec validation error, taken apart.

    ``kind``: ``unknown_field``, ``missing_field`` (``field`` names it; ``path`` is the object holding it),
    ``wrong_type`` (``want``: msgspec's type names, ``got``: the one found), ``out_of_limits`` (a ``Meta``
    bound or a number beyond a type's range) or ``invalid`` (anything else: a value not allowed, a list of
    the wrong length). ``path`` is msgspec's, after the ``$``: ``.rules[0].when``, ``[2]`` or ``""`` for the
    whole object. ``detail`` is msgspec's message without its backticks."""

    kind: str
    path: str
    detail: str
    field: str | None = None
    want: tuple[str, ...] = ()
    got: str | None = None

    def key(self, prefix: str = "") -> str:
        """The dotted key of the offending value (the unknown or missing field included) under ``prefix``.

        >>> Explanation("missing_field", ".rules[0]", "", field="name").key("safety")
        'safety.rules[0].name'
        """
        path = self.path + (f".{self.field}" if self.field else "")
        return prefix + path if prefix else path.lstrip(".")


def explain(err: msgspec.ValidationError) -> Explanation:
    """``err`` taken apart (see :class:`Explanation`)."""
    m = _AT.match(str(err))
    msg, path = m.group("msg"), m.group("path") or ""
    detail = msg.replace("`", "")
    if u := _UNKNOWN.match(msg):
        return Explanation("unknown_field", path, detail, field=u.group("field"))
    if u := _MISSING.match(msg):
        return Explanation("missing_field", path, detail, field=u.group("field"))
    if t := _TYPE.match(msg):
        want = tuple(w.strip() for w in t.group("want").split("|"))
        return Explanation("wrong_type", path, detail, want=want, got=t.group("got"))
    if "out of range" in msg or _LIMIT.match(msg):
        return Explanation("out_of_limits", path, detail)
    return Explanation("invalid", path, detail)


def non_finite_path(obj: Any, path: str = "") -> str | None:
    """The path (``.a.b[0]``, as :class:`Explanation` has it) of the first NaN or infinity in ``obj``, or None.

    >>> non_finite_path({"a": [1.0, {"b": float("nan")}]}), non_finite_path({"a": 1})
    ('.a[1].b', None)
    """
    if isinstance(obj, float):
        return None if math.isfinite(obj) else path
    if isinstance(obj, dict):
        for k, v in obj.items():
            found = non_finite_path(v, f"{path}.{k}")
            if found is not None:
                return found
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            found = non_finite_path(v, f"{path}[{i}]")
            if found is not None:
                return found
    return None


def convert_table(data: Any, cls: type[T], prefix: str = "") -> T:
    """``data`` (a driver's table or a part of it) as a ``cls`` struct; a :class:`DriverConfigError` whose key is
    dotted under ``prefix`` otherwise: an unknown key (with the known ones), a missing one, a wrong type, a
    value out of its range, a NaN or an infinity, or what ``cls.__post_init__`` refused (a ``ValueError``)."""
    bad = non_finite_path(data)
    if bad is not None:
        raise DriverConfigError(_join(prefix, bad), "must be a finite number")
    try:
        return msgspec.convert(data, cls)
    except msgspec.ValidationError as err:
        e = explain(err)
        raise DriverConfigError(e.key(prefix), explain_words(e, cls)) from None


def _join(prefix: str, path: str) -> str:
    return prefix + path if prefix else path.lstrip(".")


def explain_words(e: Explanation, cls: type) -> str:
    """What is wrong with the value at ``e``'s key, in a table's words (``cls``: the struct converted to, for
    the known keys of an unknown one): ``unknown key (known: …)``, ``is required``, ``must be a number, not a
    text``, ``must be <= 80.0``, …"""
    if e.kind == "unknown_field":
        known = _fields_at(cls, e.path)
        return "unknown key" + (f" (known: {', '.join(known)})" if known else "")
    if e.kind == "missing_field":
        return "is required"
    if e.kind == "wrong_type":  # a table has no null: an optional key is left out
        want = " or ".join(_WORDS.get(w, w) for w in e.want if w != "null")
        return f"must be {want}, not {_WORDS.get(e.got or '', e.got)}"
    if e.kind == "out_of_limits":
        return "must be " + e.detail.split(" ", 2)[-1] if e.detail.startswith("Expected ") else e.detail
    if e.detail.startswith("Invalid value"):
        return "must not be " + e.detail.removeprefix("Invalid value ")
    if e.detail.startswith("Expected array of length"):
        return "must be a list of length " + e.detail.removeprefix("Expected array of length ")
    return e.detail[0].lower() + e.detail[1:] if e.detail else "is invalid"


def _fields_at(cls: Any, path: str) -> list[str]:
    """The field names of the struct at ``path`` under ``cls`` (for "known: …"); [] when it cannot tell."""
    for field, index in re.findall(r"\.([^.\[]+)|\[(\d+)\]", path):
        if field:
            struct = _struct_in(cls)
            match = [f for f in msgspec.structs.fields(struct) if f.encode_name == field] if struct else []
            if not match:
                return []
            cls = match[0].type
        else:  # an element of a list, or a value of a dict (of an optional one too)
            tp = _strip(cls)
            if get_origin(tp) is Union or type(tp).__name__ == "UnionType":
                tp = next((a for a in get_args(tp) if a is not type(None)), None)
            args = get_args(_strip(tp))
            cls = args[-1] if args else None
    struct = _struct_in(cls)
    return [f.encode_name for f in msgspec.structs.fields(struct)] if struct is not None else []


def _strip(tp: Any) -> Any:
    """``Annotated[X, …]`` → X."""
    while get_origin(tp) is not None and hasattr(tp, "__metadata__"):
        tp = get_args(tp)[0]
    return tp


def _struct_in(tp: Any) -> Any:
    """The Struct type ``tp`` is, or holds in a union / ``Annotated``; None when there is none."""
    tp = _strip(tp)
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        return tp
    if get_origin(tp) is Union or type(tp).__name__ == "UnionType":
        for a in get_args(tp):
            found = _struct_in(a)
            if found is not None:
                return found
    return None


def _error(data: Any, cls: type) -> msgspec.ValidationError:
    """The ValidationError converting ``data`` raises (docstring examples)."""
    try:
        msgspec.convert(data, cls)
    except msgspec.ValidationError as err:
        return err
    raise AssertionError("no error")


__all__ = ["Explanation", "convert_table", "explain", "explain_words", "non_finite_path"]
