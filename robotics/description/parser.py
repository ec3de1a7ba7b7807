"""Reading a body-system description (XsysTel, seeds/001 §4, or its English equivalent).

Two dialects, told apart by the root element:

=================  ================  ==================
meaning            XsysTel           English
=================  ================  ==================
root               ``СистемаТел``    ``bodySystem``
body               ``Тело``          ``body``
body number        ``номер``         ``number``
joint type         ``КП``            ``joint``
pole in the base   ``КПТ``           ``origin``
system class       ``класс``         ``class``
=================  ================  ==================

``min``/``max`` are spelt the same in both, and so are two drawing-only
extensions of ours: ``length`` (mm, how far a body with nothing to reach is
drawn along its x) and ``end`` (``gripper``, ``bob``, ``foot``: a symbol at its
far end). The joint type is a digit 0–3 or its abbreviation (``ПКП1``, ``ВКП``,
``ПКП2``, ``СКП``; in English ``prismatic``, ``revolute``, ``prismatic2``,
``free``). Numbers are in mm and degrees, lists separated by commas and/or
spaces (``"0,0"``, ``"0, 1000"``). Bodies nest like the tree; bodies are
numbered from 1 (0 is the ground) and a body's number exceeds its base's, as
the paper numbers them walking out from the ground.

**The typographic quote.** Listing 2 of the paper closes four ``КП`` attributes
with ``”`` (``КП="1” КПТ="0, 500"``), which is not XML. The parser first reads
the text as it is; only if that fails does it retry with each ``“ ” „`` that
closes an attribute value opened by ``"`` (it is followed by a space, ``>`` or
``/>``) replaced by ``"``. If the retry parses, the document is accepted and
every replacement is reported in ``BodyTree.warnings`` with its line, column and
attribute; otherwise the original error is raised, followed by what still fails
after the repair. A well-formed document is never rewritten.

**Hostile input.** The stdlib's expat, driven directly (no DOM, no entity
resolver): any ``<!DOCTYPE`` is refused at once — internal entities (billion
laughs, quadratic blow-up) and external ones (files, URLs) can only be
declared in a DTD, so none ever expands; an undeclared ``&name;`` is an expat
error. The text is limited to :data:`MAX_CHARS` before parsing, nesting to
:data:`MAX_DEPTH` and bodies to :data:`MAX_BODIES` while parsing (the handler
raises at the first element past a limit, so nothing grows). ``defusedxml`` is
not used: it would be a third-party import in ``robotics/``, which the purity
contract forbids, and refusing the DTD outright leaves it nothing to add.

Errors are :class:`DescriptionError` (a :class:`ValueError`) saying where
(line and column, 1-based, in characters), which body and which attribute.

>>> tree = parse('<СистемаТел класс="ПСТОВ"><Тело номер="1" КП="ВКП" КПТ="0, 0" min="-90" max="90"/></СистемаТел>')
>>> tree.dialect, tree.system_class, tree.bodies[1].joint.name, round(tree.bodies[1].upper, 4)
('xsystel', 'ПСТОВ', 'REVOLUTE', 1.5708)
>>> parse('<bodySystem><body number="1" joint="7"/></bodySystem>')
Traceback (most recent call last):
...
robotics.description.parser.DescriptionError: line 1, column 13: body 1: attribute joint: unknown joint type '7' (expected 0–3 or prismatic, revolute, prismatic2, free)
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any
from xml.parsers import expat

from robotics.description.model import Body, BodyTree, JointType

__all__ = ["DescriptionError", "MAX_BODIES", "MAX_CHARS", "MAX_DEPTH", "parse"]

#: longest document accepted, characters (the paper's listings are a few hundred)
MAX_CHARS = 256 * 1024
#: deepest element nesting accepted (the root counts as 1)
MAX_DEPTH = 64
#: most bodies accepted
MAX_BODIES = 1000

_ENDS = ("gripper", "bob", "foot")
_MM = 1e-3


class DescriptionError(ValueError):
    """A description that cannot be read; the message says where and what."""


@dataclass(frozen=True)
class _Dialect:
    name: str
    root: str
    body: str
    number: str
    joint: str
    origin: str
    system_class: str
    joint_names: dict[str, int]


_DIALECTS = {
    d.root: d
    for d in (
        _Dialect("xsystel", "СистемаТел", "Тело", "номер", "КП", "КПТ", "класс",
                 {"ПКП1": 0, "ВКП": 1, "ПКП2": 2, "СКП": 3}),
        _Dialect("english", "bodySystem", "body", "number", "joint", "origin", "class",
                 {"prismatic": 0, "revolute": 1, "prismatic2": 2, "free": 3}),
    )
}

_TYPOGRAPHIC_CLOSE = re.compile(r'([^\s=<>"]+)(\s*=\s*"[^"<>\n]*?)([“”„])(?=\s|/?>)')
_SPLIT = re.compile(r"\s*,\s*|\s+")


def parse(text: str) -> BodyTree:
    """Read a description (text, not a file name) into a :class:`BodyTree`; see the module docstring."""
    if not isinstance(text, str):
        raise TypeError(f"parse takes the document as str, got {type(text).__name__}")
    if len(text) > MAX_CHARS:
        raise DescriptionError(f"description is {len(text)} characters long, more than the {MAX_CHARS} allowed")
    text = text.removeprefix("\ufeff")
    try:
        return _Reader(text).read()
    except _NotWellFormed as first:
        repaired, warnings = _close_typographic_quotes(text)
        if not warnings:
            raise DescriptionError(str(first)) from None
        try:
            tree = _Reader(repaired).read()
        except (_NotWellFormed, DescriptionError) as second:
            raise DescriptionError(f"{first} (with the typographic quotes read as \" it still fails: {second})") from None
        return BodyTree(tree.bodies, tree.dialect, tree.system_class, tuple(warnings) + tree.warnings)


def _close_typographic_quotes(text: str) -> tuple[str, list[str]]:
    warnings = []

    def fix(match: re.Match) -> str:
        pos = match.start(3)
        line = text.count("\n", 0, pos) + 1
        column = pos - (text.rfind("\n", 0, pos) + 1) + 1
        quote = match.group(3)
        warnings.append(
            f"line {line}, column {column}: attribute {match.group(1)} closed with a typographic quote "
            f"{quote} (U+{ord(quote):04X}) instead of \"; read as \""
        )
        return match.group(1) + match.group(2) + '"'

    return _TYPOGRAPHIC_CLOSE.sub(fix, text), warnings


class _NotWellFormed(Exception):
    """expat refused the text (kept apart so that parse() can retry with the quotes closed)."""


class _Reader:
    def __init__(self, text: str) -> None:
        self.text = text
        self.parser = expat.ParserCreate(encoding="UTF-8")
        self.parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
        self.parser.StartDoctypeDeclHandler = self._doctype
        self.parser.EntityDeclHandler = self._entity
        self.parser.ExternalEntityRefHandler = self._external
        self.parser.StartElementHandler = self._start
        self.parser.EndElementHandler = self._end
        self.parser.CharacterDataHandler = self._chars
        self.dialect: _Dialect | None = None
        self.system_class: str | None = None
        self.stack: list[int | None] = []  # body numbers of the open elements (None for the root)
        self.bodies: dict[int, Body] = {}
        self.children: dict[int, list[int]] = {}
        self.warnings: list[str] = []

    # -- where ------------------------------------------------------------------------------
    def _here(self) -> str:
        # expat counts columns in characters (0-based), not bytes: Cyrillic names need no conversion
        return f"line {self.parser.CurrentLineNumber}, column {self.parser.CurrentColumnNumber + 1}"

    def _fail(self, message: str) -> DescriptionError:
        return DescriptionError(f"{self._here()}: {message}")

    # -- run ----------------------------------------------------------------------------------
    def read(self) -> BodyTree:
        try:
            self.parser.Parse(self.text, True)
        except expat.ExpatError as err:
            where = f"line {err.lineno}, column {err.offset + 1}"
            raise _NotWellFormed(f"{where}: not well-formed XML: {expat.ErrorString(err.code)}") from None
        except UnicodeEncodeError as err:
            raise DescriptionError(f"description is not valid text: {err.reason} at character {err.start}") from None
        if self.dialect is None:
            raise DescriptionError("no root element")
        bodies = {
            n: Body(b.number, b.joint, b.origin, b.lower, b.upper, b.parent, tuple(self.children[n]), b.length,
                    b.end, b.line)
            for n, b in self.bodies.items()
        }
        return BodyTree(bodies, self.dialect.name, self.system_class, tuple(self.warnings))

    # -- handlers -------------------------------------------------------------------------------
    def _doctype(self, name, *_args) -> None:
        raise self._fail("a DOCTYPE is not allowed in a description (a DTD can declare entities that expand "
                         "without bound or read files)")

    def _entity(self, name, *_args) -> None:
        raise self._fail(f"entity declarations are not allowed (entity {name!r})")

    def _external(self, *_args) -> int:
        raise self._fail("external entities are not allowed")

    def _chars(self, data: str) -> None:
        if data.strip():
            raise self._fail(f"unexpected text {data.strip()[:40]!r}: a description holds only elements")

    def _end(self, name: str) -> None:
        self.stack.pop()

    def _start(self, name: str, attrs: dict[str, str]) -> None:
        if len(self.stack) >= MAX_DEPTH:
            raise self._fail(f"elements nest deeper than {MAX_DEPTH} levels")
        if self.dialect is None:
            self._root(name, attrs)
            self.stack.append(None)
            return
        if name != self.dialect.body:
            raise self._fail(f"element <{name}> is not part of the {self.dialect.name} language "
                             f"(inside <{self.dialect.root}> only <{self.dialect.body}> may appear)")
        if len(self.bodies) >= MAX_BODIES:
            raise self._fail(f"more than {MAX_BODIES} bodies")
        body = self._body(attrs)
        self.bodies[body.number] = body
        self.children[body.number] = []
        if body.parent is not None:
            self.children[body.parent].append(body.number)
        self.stack.append(body.number)

    def _root(self, name: str, attrs: dict[str, str]) -> None:
        dialect = _DIALECTS.get(name)
        if dialect is None:
            raise self._fail(f"root element <{name}> is neither <СистемаТел> (XsysTel) nor <bodySystem> (English)")
        self.dialect = dialect
        for key, value in attrs.items():
            if key == dialect.system_class:
                self.system_class = value.strip()
            elif not (key == "xmlns" or key.startswith("xmlns:")):
                raise self._fail(f"<{name}>: unknown attribute {key} (known: {dialect.system_class})")

    def _body(self, attrs: dict[str, str]) -> Body:
        d = self.dialect
        line = self.parser.CurrentLineNumber
        raw_number = attrs.get(d.number)
        who = f"body {raw_number.strip()}" if raw_number is not None else f"body at line {line}"
        known = (d.number, d.joint, d.origin, "min", "max", "length", "end")
        for key in attrs:
            if key not in known:
                raise self._fail(f"{who}: unknown attribute {key} (known: {', '.join(known)})")
        if raw_number is None:
            raise self._fail(f"{who}: attribute {d.number} is missing")
        if not re.fullmatch(r"\s*[0-9]{1,9}\s*", raw_number) or int(raw_number) < 1:
            raise self._fail(f"{who}: attribute {d.number}: {raw_number!r} is not a whole number from 1 up "
                             f"(0 is the ground)")
        number = int(raw_number)
        if number in self.bodies:
            raise self._fail(f"{who}: attribute {d.number}: number {number} is already the body at line "
                             f"{self.bodies[number].line}")
        parent = self.stack[-1]
        if parent is not None and number <= parent:
            raise self._fail(f"{who}: attribute {d.number}: a body's number must exceed its base's ({parent})")

        if d.joint not in attrs:
            raise self._fail(f"{who}: attribute {d.joint} is missing")
        raw_joint = attrs[d.joint].strip()
        if raw_joint in ("0", "1", "2", "3"):
            joint = JointType(int(raw_joint))
        elif raw_joint in d.joint_names:
            joint = JointType(d.joint_names[raw_joint])
        else:
            raise self._fail(f"{who}: attribute {d.joint}: unknown joint type {raw_joint!r} "
                             f"(expected 0–3 or {', '.join(d.joint_names)})")

        ox, oy = self._numbers(who, d.origin, attrs.get(d.origin, "0, 0"), 2, "coordinates x, y in mm")
        origin = (ox * _MM, oy * _MM)
        n = joint.arity
        what = {0: "x in mm", 1: "an angle in degrees", 2: "x, y in mm", 3: "x, y in mm and an angle in degrees"}
        lo = self._numbers(who, "min", attrs["min"], n, what[joint]) if "min" in attrs else (-math.inf,) * n
        hi = self._numbers(who, "max", attrs["max"], n, what[joint]) if "max" in attrs else (math.inf,) * n
        for k, (a, b) in enumerate(zip(lo, hi)):
            if a > b:
                part = f" (value {k + 1})" if n > 1 else ""
                raise self._fail(f"{who}: attributes min/max: min {a:g} > max {b:g}{part}")
        lower, upper = _si(joint, lo), _si(joint, hi)

        length = None
        if "length" in attrs:
            (length_mm,) = self._numbers(who, "length", attrs["length"], 1, "a length in mm")
            if length_mm < 0:
                raise self._fail(f"{who}: attribute length: {length_mm:g} mm is negative")
            length = length_mm * _MM
        end = attrs.get("end")
        if end is not None:
            end = end.strip()
            if end not in _ENDS + ("none",):
                raise self._fail(f"{who}: attribute end: {end!r} is not one of {', '.join(_ENDS)}, none")
            end = None if end == "none" else end

        body = Body(number, joint, origin, lower, upper, parent, (), length, end, line)
        self._check_origin_within_limits(body, who)
        return body

    def _numbers(self, who: str, key: str, raw: str, count: int, what: str) -> tuple[float, ...]:
        parts = [p for p in _SPLIT.split(raw.strip()) if p]
        try:
            values = tuple(float(p) for p in parts)
        except ValueError:
            values = ()
        if len(values) != count or not all(math.isfinite(v) and abs(v) <= 1e9 for v in values):
            raise self._fail(f"{who}: attribute {key}: {raw!r} is not {count} number{'s' if count > 1 else ''} "
                             f"({what})")
        return values

    def _check_origin_within_limits(self, body: Body, who: str) -> None:
        if body.joint is JointType.REVOLUTE or body.within_limits(_zero(body.joint)):
            return
        line = self.parser.CurrentLineNumber
        self.warnings.append(
            f"line {line}: {who}: its pole {self.dialect.origin} lies outside min..max, so the drawn (home) "
            f"configuration breaks its limits (min/max bound the pole's coordinates in the base frame)"
        )


def _zero(joint: JointType) -> Any:
    return 0.0 if joint.arity == 1 else (0.0,) * joint.arity


def _si(joint: JointType, values: tuple[float, ...]) -> float | tuple[float, ...]:
    if joint is JointType.PRISMATIC:
        return values[0] * _MM
    if joint is JointType.REVOLUTE:
        return math.radians(values[0])
    converted = (values[0] * _MM, values[1] * _MM)
    return converted + ((math.radians(values[2]),) if joint is JointType.FREE else ())
