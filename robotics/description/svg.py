"""A body tree as SVG, one ``<g>`` per body nested like the bodies (seeds/001 §5).

Each body's group carries its joint in one attribute,
``transform="translate(X Y) rotate(A)"`` (mm and degrees, in the base body's
frame: X, Y the pole, A the rotation), so a dashboard animates the scheme by
setting that attribute on ``#body-N`` and nothing else. The group holds, in
order: the body's shape (``#body-N-shape``, a ``<path>`` from the pole to each
carried body's pole, or along x for ``length`` or a loose end), the guides of
the prismatic bodies it carries (``#body-M-guide``, end stops at ``min``/``max``),
then the carried bodies' groups. Repeated symbols are markers defined once in
``<defs>`` (the paper's way to keep the SVG small): ``#marker-ground`` (hatch
where a body meets the ground), ``#marker-carriage`` (a prismatic body's pole),
``#marker-guide`` (end stop), ``#marker-gripper`` / ``-bob`` / ``-foot`` (a
body's ``end``), plus ``#marker-hinge`` (a revolute body's pole). Coordinates are the document's mm; y runs
down as in the paper unless ``y_up=True`` (a top view, like the SCARA's).

Stable names for scripts and CSS: ``#body-N`` has classes ``body joint-<type>``
(``joint-revolute`` …) and ``data-body="N"``; shapes have class ``shape``,
guides ``guide``, ground marks ``ground-mark``; the root ``<svg>`` has classes
``body-system dialect-<dialect>``. Strokes use ``currentColor``. Ids are plain
(``body-3``), so inline one scheme per page.

**Numbers** are printed as JavaScript's ``String(Number(v.toFixed(3)))`` prints
them, so a browser computing the same transform gets the same string::

    const mm = v => String(Number(v.toFixed(3)));
    // prismatic: x = (origin[0] + q) * 1000; revolute: a = q * (180 / Math.PI); ...
    g.setAttribute("transform", `translate(${mm(x)} ${mm(y)}) rotate(${mm(a)})`);

>>> from robotics.description import parse
>>> tree = parse('<bodySystem><body number="1" joint="1" origin="0, 0">'
...              '<body number="2" joint="0" origin="300, 0" min="200" max="400"/></body></bodySystem>')
>>> body_transform(tree.bodies[1], math.pi / 6), body_transform(tree.bodies[2], 0.05)
('translate(0 0) rotate(30)', 'translate(350 0) rotate(0)')
"""

from __future__ import annotations

import html
import math
import statistics
from decimal import ROUND_HALF_UP, Decimal
from typing import Any, Mapping

from robotics.description.model import Body, BodyTree, JointType

__all__ = ["body_transform", "format_number", "to_svg", "transforms"]

_SVG_NS = "http://www.w3.org/2000/svg"
_MILLI = Decimal("0.001")
_DEG_PER_RAD = 180.0 / math.pi  # the same product JavaScript's q * (180 / Math.PI) computes
_TINY_MM = 0.001  # a zero-length path may not draw its markers: give it a micrometre


def format_number(value: float) -> str:
    """``value`` rounded to 3 decimals and printed like JavaScript's ``String(Number(v.toFixed(3)))``.

    ``toFixed`` rounds the exact binary value half away from zero, and the
    ``Number`` round trip drops trailing zeros and the sign of zero.

    >>> [format_number(v) for v in (300.00000000000006, 0.0625, -0.0625, 1.0005, -0.0004, 12.5)]
    ['300', '0.063', '-0.063', '1', '0', '12.5']
    """
    if not math.isfinite(value):
        raise ValueError(f"cannot draw a non-finite number {value!r}")
    rounded = Decimal(value).quantize(_MILLI, rounding=ROUND_HALF_UP)
    if rounded == 0:
        return "0"
    text = format(rounded, "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def body_transform(body: Body, value: Any = None) -> str:
    """The ``transform`` of a body's ``<g>`` for joint value ``value`` (SI; ``None`` = 0).

    Always ``translate(X Y) rotate(A)``: X, Y = (origin + displacement) × 1000 (mm),
    A = angle × (180 / pi) (degrees).
    """
    dx, dy, angle = body.joint_value(value) if value is not None else (0.0, 0.0, 0.0)
    x = (body.origin[0] + dx) * 1000.0
    y = (body.origin[1] + dy) * 1000.0
    return f"translate({format_number(x)} {format_number(y)}) rotate({format_number(angle * _DEG_PER_RAD)})"


def transforms(tree: BodyTree, q: Mapping[int, Any] | None = None) -> dict[int, str]:
    """Body number → :func:`body_transform` for every body (``q`` as in :meth:`BodyTree.forward`)."""
    q = tree._check_q(q)
    return {n: body_transform(b, q.get(n)) for n, b in tree.bodies.items()}


def to_svg(tree: BodyTree, q: Mapping[int, Any] | None = None, *, y_up: bool = False) -> str:
    """The SVG document (a string) of ``tree`` in configuration ``q``; see the module docstring.

    >>> from robotics.description import parse
    >>> svg = to_svg(parse('<bodySystem><body number="1" joint="1" origin="0, 0" length="300"/></bodySystem>'))
    >>> '<g id="body-1" class="body joint-revolute" data-body="1" data-joint="1" transform="translate(0 0) rotate(0)">' in svg
    True
    """
    moves = transforms(tree, q)
    unit = _unit_mm(tree)
    marker = 0.12 * unit
    x0, y0, x1, y1 = _extent_mm(tree, unit)
    pad = 0.15 * unit + marker
    x0, y0, x1, y1 = x0 - pad, y0 - pad, x1 + pad, y1 + pad
    if y_up:
        y0, y1 = -y1, -y0
    view = " ".join(format_number(v) for v in (x0, y0, x1 - x0, y1 - y0))
    out = [
        f'<svg xmlns="{_SVG_NS}" viewBox="{view}" class="body-system dialect-{tree.dialect}"'
        + (f' data-class="{_attr(tree.system_class)}"' if tree.system_class else "")
        + ' role="img">',
        f"<title>{_attr(tree.system_class or 'body system')}</title>",
        _defs(marker, 0.025 * unit),
        f'<g id="scene" fill="none" stroke="currentColor" stroke-width="{format_number(0.025 * unit)}" '
        f'stroke-linecap="round" stroke-linejoin="round"' + (' transform="scale(1 -1)"' if y_up else "") + ">",
        '<g id="ground" class="ground">',
    ]
    for n in tree.roots:
        body = tree.bodies[n]
        if body.joint is not JointType.FREE:
            ox, oy = _mm(body.origin[0]), _mm(body.origin[1])
            out.append(f'<path id="body-{n}-ground" class="ground-mark" d="M{ox} {oy} h{_TINY_MM}" '
                       f'marker-start="url(#marker-ground)"/>')
        out.extend(_guides(body, unit))
    for n in tree.roots:
        _body_svg(tree, n, moves, unit, out)
    out += ["</g>", "</g>", "</svg>"]
    return "\n".join(out)


def _body_svg(tree: BodyTree, number: int, moves: dict[int, str], unit: float, out: list[str]) -> None:
    body = tree.bodies[number]
    out.append(f'<g id="body-{number}" class="body joint-{body.joint.slug}" data-body="{number}" '
               f'data-joint="{int(body.joint)}" transform="{moves[number]}">')
    segments = [tree.bodies[c].origin for c in body.children if math.hypot(*tree.bodies[c].origin) > 1e-12]
    d = [f"M0 0 L{_mm(x)} {_mm(y)}" for x, y in segments]
    stub = _stub_mm(tree, body, unit)
    if stub:
        d.append(f"M0 0 L{format_number(stub)} 0")
    if not d:
        d.append(f"M0 0 h{_TINY_MM}")
    start = {JointType.REVOLUTE: "hinge", JointType.PRISMATIC: "carriage", JointType.PRISMATIC2: "carriage"}
    markers = ""
    if body.joint in start:
        markers += f' marker-start="url(#marker-{start[body.joint]})"'
    if body.end:
        markers += f' marker-end="url(#marker-{body.end})"'
    out.append(f'<path id="body-{number}-shape" class="shape" d="{" ".join(d)}"{markers}/>')
    for child in body.children:
        out.extend(_guides(tree.bodies[child], unit))
    for child in body.children:
        _body_svg(tree, child, moves, unit, out)
    out.append("</g>")


def _guides(body: Body, unit: float) -> list[str]:
    """End-stopped guide lines, in the base's frame, along which a prismatic body's pole slides."""
    if body.joint not in (JointType.PRISMATIC, JointType.PRISMATIC2):
        return []
    ox, oy = body.origin[0] * 1000.0, body.origin[1] * 1000.0
    lo = body.lower if body.joint is JointType.PRISMATIC else body.lower[0]
    hi = body.upper if body.joint is JointType.PRISMATIC else body.upper[0]
    x0, x1 = _span_mm(lo, hi, ox, unit)
    d = f"M{format_number(x0)} {format_number(oy)} L{format_number(x1)} {format_number(oy)}"
    if body.joint is JointType.PRISMATIC2:
        y0, y1 = _span_mm(body.lower[1], body.upper[1], oy, unit)
        d += f" M{format_number(ox)} {format_number(y0)} L{format_number(ox)} {format_number(y1)}"
    return [f'<path id="body-{body.number}-guide" class="guide" d="{d}" '
            f'marker-start="url(#marker-guide)" marker-mid="url(#marker-guide)" marker-end="url(#marker-guide)"/>']


def _span_mm(lo_m: float, hi_m: float, at_mm: float, unit: float) -> tuple[float, float]:
    lo = lo_m * 1000.0 if math.isfinite(lo_m) else at_mm - unit
    hi = hi_m * 1000.0 if math.isfinite(hi_m) else at_mm + unit
    return lo, hi


def _stub_mm(tree: BodyTree, body: Body, unit: float) -> float:
    """How far the shape runs along x beyond the carried bodies: ``length``, or half a unit for a loose end."""
    if body.length is not None:
        return body.length * 1000.0
    reaches = any(math.hypot(*tree.bodies[c].origin) > 1e-12 for c in body.children)
    if not reaches and body.joint in (JointType.REVOLUTE, JointType.FREE):
        return 0.5 * unit
    return 0.0


def _unit_mm(tree: BodyTree) -> float:
    """A typical link length, mm: sizes the markers, strokes and loose ends."""
    sizes = [math.hypot(*b.origin) * 1000.0 for b in tree.bodies.values() if b.parent is not None]
    sizes += [b.length * 1000.0 for b in tree.bodies.values() if b.length]
    sizes = [s for s in sizes if s > 1e-6]
    if sizes:
        return statistics.median(sizes)
    roots = [math.hypot(*tree.bodies[n].origin) * 1000.0 for n in tree.roots]
    return max(roots + [0.0]) or 100.0


def _extent_mm(tree: BodyTree, unit: float) -> tuple[float, float, float, float]:
    """A box holding the scheme in every configuration within the limits.

    Each body's pole is bounded by a disc; a body that may turn (it or a base is
    revolute or free) spreads the discs of what it carries to full circles.
    Unbounded prismatic ranges count as the origin, and so does a free body's
    translation (the room a walker roams would shrink the walker to a dot): the
    view is centred on its home pole, and a page that moves it far may pan.
    """
    discs: dict[int, tuple[float, float, float, bool]] = {}
    x0 = y0 = x1 = y1 = 0.0
    for n, body in tree.bodies.items():
        cx, cy, r, turns = (0.0, 0.0, 0.0, False) if body.parent is None else discs[body.parent]
        ox, oy = body.origin[0] * 1000.0, body.origin[1] * 1000.0
        if body.joint is JointType.PRISMATIC:
            xs, ys = _span_mm(body.lower, body.upper, ox, 0.0), (oy, oy)
        elif body.joint in (JointType.REVOLUTE, JointType.FREE):
            xs, ys = (ox, ox), (oy, oy)  # a free body's range is the room it roams, not the machine
        else:
            xs = _span_mm(body.lower[0], body.upper[0], ox, 0.0)
            ys = _span_mm(body.lower[1], body.upper[1], oy, 0.0)
        mx, my = (xs[0] + xs[1]) / 2.0, (ys[0] + ys[1]) / 2.0
        half = math.hypot(xs[1] - xs[0], ys[1] - ys[0]) / 2.0
        if turns:
            r += math.hypot(mx, my) + half
        else:
            cx, cy, r = cx + mx, cy + my, r + half
        turns = turns or body.joint in (JointType.REVOLUTE, JointType.FREE)
        discs[n] = (cx, cy, r, turns)
        reach = r + _stub_mm(tree, body, unit)
        x0, y0, x1, y1 = min(x0, cx - reach), min(y0, cy - reach), max(x1, cx + reach), max(y1, cy + reach)
    return x0, y0, x1, y1


def _defs(s: float, stroke: float) -> str:
    """The markers, sized ``s`` mm in the drawing's units."""
    f = format_number
    common = f'markerUnits="userSpaceOnUse" markerWidth="{f(4 * s)}" markerHeight="{f(4 * s)}" overflow="visible"'
    paint = f'fill="none" stroke="currentColor" stroke-width="{f(stroke)}"'
    hatch = " ".join(f"M{f(x * s)} 0 l{f(-0.4 * s)} {f(0.5 * s)}" for x in (-0.8, -0.4, 0.0, 0.4, 0.8, 1.2))
    return "\n".join([
        "<defs>",
        f'<marker id="marker-ground" {common} orient="0">'
        f'<path {paint} d="M{f(-1.2 * s)} 0 H{f(1.2 * s)} {hatch}"/></marker>',
        f'<marker id="marker-carriage" {common} orient="0">'
        f'<rect {paint} x="{f(-0.8 * s)}" y="{f(-0.45 * s)}" width="{f(1.6 * s)}" height="{f(0.9 * s)}"/></marker>',
        f'<marker id="marker-guide" {common} orient="auto">'
        f'<path {paint} d="M0 {f(-0.6 * s)} V{f(0.6 * s)}"/></marker>',
        f'<marker id="marker-hinge" {common} orient="0">'
        f'<circle {paint} r="{f(0.3 * s)}"/></marker>',
        f'<marker id="marker-gripper" {common} orient="auto">'
        f'<path {paint} d="M0 {f(-0.5 * s)} V{f(0.5 * s)} M0 {f(-0.5 * s)} H{f(0.7 * s)} '
        f'M0 {f(0.5 * s)} H{f(0.7 * s)}"/></marker>',
        f'<marker id="marker-bob" {common} orient="0">'
        f'<circle fill="currentColor" stroke="none" r="{f(0.45 * s)}"/></marker>',
        f'<marker id="marker-foot" {common} orient="auto">'
        f'<path {paint} d="M0 {f(-0.7 * s)} V{f(0.7 * s)}"/></marker>',
        "</defs>",
    ])


def _mm(metres: float) -> str:
    return format_number(metres * 1000.0)


def _attr(text: str) -> str:
    return html.escape(text, quote=True)
