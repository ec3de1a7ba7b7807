"""Per-client telemetry subscriptions (issue 20 §5): which channels and snapshot fields a ``/ws/telemetry`` client
gets, how often, and how they are encoded.

Why: a dashboard's full snapshots are ~2.3 KB of JSON at 50 Hz, ~0.95 Mbit/s on the wire without
permessage-deflate (a client that did not negotiate it saw 0.5–0.9 s telemetry ages on a 1 Mbit/s link), and a
script that wants five channels paid for all of them. A client now sends ``{"type": "subscribe", "channels",
"fields", "rate_hz", "encoding"}``; the gateway decimates the runtime's snapshots to ``rate_hz`` (latest wins, no
backlog, the age bound still applies), keeps only those channels (``values``) and top-level fields, plus what
every snapshot carries (:data:`ALWAYS`: ``seq``, ``t``, ``mono_t``, ``state``, ``cause``, ``stale``, ``link`` — what
the stop paths, the ages and the link panel need), and with ``"encoding": "delta"`` sends only what changed since the last
message *this client was sent* (a keyframe on (re)subscribe and every ``keyframe_every`` messages).
``bench/bench_telemetry_encoding.py`` on the sim rover (35 channels, driven): full snapshots at 50 Hz 1.10 Mbit/s
plain, 0.15 with deflate; the dashboard's subscription at 20 Hz 0.37 as JSON, 0.19 delta-encoded (0.06 with
deflate) — the delta stays under the 0.2 Mbit/s goal without deflate (docs/networks.md has the table).

A delta is exact: the patch holds every changed value as the runtime serialised it, nested objects are patched
key by key, and keys that went away are listed in ``deleted`` (paths), so applying it to the previous message
rebuilds the snapshot exactly (tests/server/test_telemetry_subscription.py compares with a full-snapshot client).
"""

from __future__ import annotations

from typing import Any, Iterable

import msgspec

from server.errors import ValidationError
from server.validation import number, reject_unknown

#: top-level snapshot fields every subscribed message carries (safety and the link panel; docs/api.md)
ALWAYS = ("seq", "t", "mono_t", "state", "cause", "stale", "link")
#: top-level fields the runtime's snapshots may have (docs/api.md "State"); a profile's snapshot may add others,
#: which are accepted once seen
KNOWN_FIELDS = ("seq", "t", "mono_t", "state", "cause", "setpoint", "command", "stale", "truth", "estimation", "external",
                "link", "behavior", "driver", "loop")
ENCODINGS = ("json", "delta")
MAX_NAMES = 1024  # channels (or fields) one subscription may list
MAX_NAME_CHARS = 128
MIN_RATE_HZ = 0.1
DEFAULT_KEYFRAME_EVERY = 40  # a full message every 40 (2 s at the dashboard's 20 Hz): a lost state heals
MAX_KEYFRAME_EVERY = 10000
SUBSCRIBE_FIELDS = ("type", "id", "channels", "fields", "rate_hz", "encoding", "keyframe_every")


class Subscription(msgspec.Struct, frozen=True):
    """What one client asked for; ``channels`` / ``fields`` None: all of them."""

    channels: frozenset[str] | None
    fields: frozenset[str] | None
    rate_hz: float
    encoding: str = "json"
    keyframe_every: int = DEFAULT_KEYFRAME_EVERY

    def key(self) -> tuple[Any, ...]:
        """Equal for subscriptions that select the same message (their filtered JSON is shared)."""
        return (self.channels, self.fields)

    def to_json(self) -> dict[str, Any]:
        return {"channels": "*" if self.channels is None else sorted(self.channels),
                "fields": "*" if self.fields is None else sorted(self.fields),
                "rate_hz": self.rate_hz, "encoding": self.encoding, "keyframe_every": self.keyframe_every}

    def select(self, snapshot: dict[str, Any]) -> dict[str, Any]:
        """The part of ``snapshot`` this subscription gets (key order kept)."""
        fields = self.fields
        out = {k: v for k, v in snapshot.items()
               if k != "values" and (fields is None or k in fields or k in ALWAYS)}
        values = snapshot.get("values")
        if isinstance(values, dict) and (self.channels is None or self.channels):
            out["values"] = values if self.channels is None else \
                {k: v for k, v in values.items() if k in self.channels}
        return out


def _names(body: dict[str, Any], key: str, known: Iterable[str], what: str) -> frozenset[str] | None:
    raw = body[key]
    if raw == "*":
        return None
    if not isinstance(raw, list):
        raise ValidationError(f"{key} must be a list of {what} names or \"*\", not {type(raw).__name__}",
                              code="wrong_type")
    if len(raw) > MAX_NAMES:
        raise ValidationError(f"{key}: {len(raw)} names, at most {MAX_NAMES}", code="out_of_limits")
    names = set()
    for name in raw:
        if not isinstance(name, str):
            raise ValidationError(f"{key}: every {what} name must be a string, not {type(name).__name__}",
                                  code="wrong_type")
        if len(name) > MAX_NAME_CHARS:
            raise ValidationError(f"{key}: a {what} name of {len(name)} characters (at most {MAX_NAME_CHARS})",
                                  code="out_of_limits")
        names.add(name)
    unknown = sorted(names - set(known))
    if unknown:
        shown = ", ".join(repr(n) for n in unknown[:5]) + (" …" if len(unknown) > 5 else "")
        raise ValidationError(f"{key}: unknown {what}(s) {shown}", code="invalid")
    return frozenset(names)


def parse_subscribe(body: dict[str, Any], *, channels: Iterable[str], fields: Iterable[str],
                    max_rate_hz: float) -> Subscription:
    """A ``subscribe`` message → its :class:`Subscription`, or the :class:`ValidationError` naming the field
    (nothing is changed by a refused one). ``channels`` / ``fields``: the names this robot's snapshots have."""
    reject_unknown(body, SUBSCRIBE_FIELDS)
    chans = _names(body, "channels", channels, "channel") if "channels" in body else None
    known_fields = (set(fields) | set(KNOWN_FIELDS)) - {"values"}
    flds = _names(body, "fields", known_fields, "field") if "fields" in body else frozenset()
    rate = number(body, "rate_hz", MIN_RATE_HZ, max_rate_hz, required=False, default=max_rate_hz)
    encoding = body.get("encoding", "json")
    if not isinstance(encoding, str):
        raise ValidationError(f"encoding must be a string, not {type(encoding).__name__}", code="wrong_type")
    if encoding not in ENCODINGS:
        raise ValidationError(f"encoding {encoding[:40]!r} is not one of {', '.join(ENCODINGS)}", code="invalid")
    every = body.get("keyframe_every", DEFAULT_KEYFRAME_EVERY)
    if isinstance(every, bool) or not isinstance(every, int):
        raise ValidationError(f"keyframe_every must be an integer, not {type(every).__name__}", code="wrong_type")
    if not 1 <= every <= MAX_KEYFRAME_EVERY:
        raise ValidationError(f"keyframe_every={every} is outside the limits [1, {MAX_KEYFRAME_EVERY}]",
                              code="out_of_limits")
    assert rate is not None
    return Subscription(channels=chans, fields=flds, rate_hz=rate, encoding=encoding, keyframe_every=every)


def diff(old: dict[str, Any], new: dict[str, Any]) -> tuple[dict[str, Any], list[list[str]]]:
    """The patch from ``old`` to ``new`` and the paths of keys that went away.

    >>> diff({"a": 1, "b": {"x": 1, "y": 2}, "c": [1]}, {"a": 1, "b": {"x": 1, "y": 3}, "c": [1], "d": None})
    ({'b': {'y': 3}, 'd': None}, [])
    >>> diff({"a": 1, "b": {"x": 1}}, {"b": {}})
    ({}, [['b', 'x'], ['a']])
    >>> diff({"a": 1}, {"a": 1.0})  # a type change is a change
    ({'a': 1.0}, [])
    """
    patch: dict[str, Any] = {}
    deleted: list[list[str]] = []
    _diff(old, new, patch, deleted, [])
    return patch, deleted


def _diff(old: dict[str, Any], new: dict[str, Any], patch: dict[str, Any], deleted: list[list[str]],
          path: list[str]) -> None:
    for k, v in new.items():
        if k not in old:
            patch[k] = v
            continue
        o = old[k]
        if type(o) is type(v) and o == v:
            continue
        if isinstance(v, dict) and isinstance(o, dict):
            sub: dict[str, Any] = {}
            _diff(o, v, sub, deleted, [*path, k])
            if sub:
                patch[k] = sub
        else:
            patch[k] = v
    for k in old:
        if k not in new:
            deleted.append([*path, k])


def apply(base: dict[str, Any], patch: dict[str, Any], deleted: Iterable[list[str]] = ()) -> dict[str, Any]:
    """``base`` with ``patch`` and ``deleted`` applied, as a client does (a new object; ``base`` is untouched).

    >>> old = {"a": 1, "b": {"x": 1, "y": 2}}
    >>> new = {"b": {"x": 1, "y": 3}, "d": None}
    >>> apply(old, *diff(old, new)) == new
    True
    """
    out = dict(base)
    for k, v in patch.items():
        b = out.get(k)
        out[k] = apply(b, v) if isinstance(v, dict) and isinstance(b, dict) else v
    for p in deleted:
        node = out
        for k in p[:-1]:
            child = node.get(k)
            if not isinstance(child, dict):
                break
            node[k] = child = dict(child)
            node = child
        else:
            node.pop(p[-1], None)
    return out


__all__ = ["ALWAYS", "ENCODINGS", "KNOWN_FIELDS", "Subscription", "apply", "diff", "parse_subscribe"]
