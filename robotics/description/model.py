"""The body tree a description parses into, and its forward kinematics.

Frame (seeds/001, §3): every body carries a frame at its pole, x to the right and
y *down* (the paper draws systems in the vertical plane, like SVG); a positive
angle turns x toward y, i.e. clockwise on screen — which is what SVG's
``rotate()`` does, so the drawing needs no sign changes. The formulas are the
usual planar ones, so a top-view arm (x, y up) gets the same numbers: only the
drawing is mirrored (``to_svg(..., y_up=True)`` flips it back).

A body's pose in its base's frame is ``translate(origin) · joint motion``:

====  ==============  ================================  =======================
type  joint           value ``q``                        motion
====  ==============  ================================  =======================
0     prismatic 1-DOF  float, m                          translate(q, 0)
1     revolute         float, rad                        rotate(q)
2     prismatic 2-DOF  (x, y), m                         translate(x, y)
3     free             (x, y, angle), m and rad          translate(x, y)·rotate(angle)
====  ==============  ================================  =======================

Limits, as the paper defines ``min``/``max``: the rotation for angles, and for
translations *the pole's coordinates in the base frame* (the values ``КПТ`` takes
while the body moves), so a prismatic joint whose origin is not at 0 bounds
``origin + q``. ``Body.lower``/``Body.upper`` are the document's numbers in SI;
``Body.q_lower``/``Body.q_upper`` are the same bounds moved onto ``q``.

>>> from robotics.description import parse
>>> tree = parse('<bodySystem><body number="1" joint="revolute" origin="0, 0" min="-90" max="90">'
...              '<body number="2" joint="1" origin="300, 0"/></body></bodySystem>')
>>> pose = tree.forward({1: math.pi / 2})[2]
>>> [round(v, 6) for v in pose]
[0.0, 0.3, 1.570796]
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Any, Mapping

__all__ = ["Body", "BodyTree", "JointType"]

_LIMIT_SLACK = 1e-9  # m or rad


class JointType(enum.IntEnum):
    """The four joint types of seeds/001 (the digit is the value of ``КП``/``joint``)."""

    PRISMATIC = 0  # ПКП1: slides along its base frame's x
    REVOLUTE = 1  # ВКП
    PRISMATIC2 = 2  # ПКП2: slides in x and y
    FREE = 3  # СКП: x, y and angle

    @property
    def arity(self) -> int:
        """How many numbers a joint value (and ``min``/``max``) has."""
        return (1, 1, 2, 3)[self]

    @property
    def slug(self) -> str:
        """The English name, also the CSS class suffix: ``joint-revolute``."""
        return ("prismatic", "revolute", "prismatic2", "free")[self]


Limit = float | tuple[float, ...]


@dataclass(frozen=True)
class Body:
    """One body: its joint to its base, where that joint sits, and its limits (SI).

    ``origin`` is the pole in the base body's frame (m); ``lower``/``upper`` have
    the joint's arity (a float for types 0 and 1, a tuple otherwise; ±inf when
    the document gives none); ``parent`` is the base body's number, ``None`` for
    a body whose base is the ground (body 0). ``length`` (m) and ``end`` (a
    symbol at the far end: ``gripper``, ``bob``, ``foot``) only change the drawing.
    ``line`` is where the body starts in the document.
    """

    number: int
    joint: JointType
    origin: tuple[float, float]
    lower: Limit
    upper: Limit
    parent: int | None
    children: tuple[int, ...] = ()
    length: float | None = None
    end: str | None = None
    line: int = 0

    @property
    def q_lower(self) -> Limit:
        """Lower bound on the joint value ``q`` (limits on the pole moved by the origin)."""
        return self._shift(self.lower)

    @property
    def q_upper(self) -> Limit:
        """Upper bound on the joint value ``q``."""
        return self._shift(self.upper)

    def _shift(self, limit: Limit) -> Limit:
        ox, oy = self.origin
        if self.joint is JointType.PRISMATIC:
            return limit - ox
        if self.joint is JointType.REVOLUTE:
            return limit
        shifted = (limit[0] - ox, limit[1] - oy)
        return shifted + limit[2:]

    def joint_value(self, value: Any) -> tuple[float, float, float]:
        """``value`` checked against the joint type, as the motion (dx, dy, angle) it causes.

        Raises :class:`ValueError` naming the body for a value of the wrong shape or not finite.
        """
        arity = self.joint.arity
        if arity == 1:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"body {self.number} ({self.joint.slug}): joint value must be a finite number, "
                                 f"got {value!r}")
            v = float(value)
            return (v, 0.0, 0.0) if self.joint is JointType.PRISMATIC else (0.0, 0.0, v)
        try:
            values = tuple(float(v) for v in value)
        except (TypeError, ValueError):
            values = ()
        if len(values) != arity or not all(math.isfinite(v) for v in values):
            names = "(x, y)" if arity == 2 else "(x, y, angle)"
            raise ValueError(f"body {self.number} ({self.joint.slug}): joint value must be {names} finite numbers, "
                             f"got {value!r}")
        return (values[0], values[1], values[2] if arity == 3 else 0.0)

    def within_limits(self, value: Any) -> bool:
        """True if the joint value lies within the body's limits (ends included, give or take 1e-9).

        >>> b = Body(1, JointType.PRISMATIC, (0.1, 0.0), -0.1, 0.1, None)
        >>> b.within_limits(0.0), b.within_limits(-0.15), b.within_limits(0.05)
        (True, True, False)
        """
        dx, dy, angle = self.joint_value(value)
        actual = {JointType.PRISMATIC: (dx,), JointType.REVOLUTE: (angle,)}.get(self.joint, (dx, dy, angle))
        lo, hi = self.q_lower, self.q_upper
        lo, hi = (lo,) if self.joint.arity == 1 else lo, (hi,) if self.joint.arity == 1 else hi
        # the bounds were moved by the origin: forgive the rounding of that subtraction
        return all(a - _LIMIT_SLACK <= v <= b + _LIMIT_SLACK for a, v, b in zip(lo, actual, hi))

    def to_json(self) -> dict[str, Any]:
        """Plain data for ``/api/robot`` (±inf limits become ``None``: JSON has no infinity)."""

        def clean(limit: Limit):
            if isinstance(limit, tuple):
                return [v if math.isfinite(v) else None for v in limit]
            return limit if math.isfinite(limit) else None

        return {
            "number": self.number, "joint": int(self.joint), "joint_name": self.joint.slug,
            "origin": list(self.origin), "lower": clean(self.lower), "upper": clean(self.upper),
            "q_lower": clean(self.q_lower), "q_upper": clean(self.q_upper),
            "parent": self.parent, "children": list(self.children), "length": self.length, "end": self.end,
        }


@dataclass(frozen=True)
class BodyTree:
    """A parsed description: ``bodies`` maps number → :class:`Body` in document order
    (every base before the bodies it carries).

    ``dialect`` is ``"xsystel"`` (the paper's Cyrillic names) or ``"english"``;
    ``system_class`` the root's ``класс``/``class`` (e.g. ``"ПДСТ"``) or ``None``;
    ``warnings`` what the parser accepted but you should fix, each naming its line.
    """

    bodies: Mapping[int, Body]
    dialect: str
    system_class: str | None = None
    warnings: tuple[str, ...] = field(default=())

    @property
    def roots(self) -> tuple[int, ...]:
        """Numbers of the bodies whose base is the ground."""
        return tuple(n for n, b in self.bodies.items() if b.parent is None)

    def forward(self, q: Mapping[int, Any] | None = None) -> dict[int, tuple[float, float, float]]:
        """Pose ``(x, y, theta)`` (m, m, rad) of every body's frame in the root frame.

        ``q`` maps body number → joint value (see the module table); a body left out
        is at 0. Limits are not checked here (see :meth:`violations`).

        >>> from robotics.description import parse
        >>> tree = parse('<bodySystem><body number="1" joint="0" origin="0, 0">'
        ...              '<body number="2" joint="1" origin="0, 0" length="500"/></body></bodySystem>')
        >>> tree.forward({1: 0.25, 2: 0.5})
        {1: (0.25, 0.0, 0.0), 2: (0.25, 0.0, 0.5)}
        """
        q = self._check_q(q)
        poses: dict[int, tuple[float, float, float]] = {}
        for number, body in self.bodies.items():
            dx, dy, angle = body.joint_value(q[number]) if number in q else (0.0, 0.0, 0.0)
            lx, ly = body.origin[0] + dx, body.origin[1] + dy
            if body.parent is None:
                poses[number] = (lx, ly, angle)
            else:
                px, py, pt = poses[body.parent]
                c, s = math.cos(pt), math.sin(pt)
                poses[number] = (px + c * lx - s * ly, py + s * lx + c * ly, pt + angle)
        return poses

    def violations(self, q: Mapping[int, Any] | None = None) -> list[str]:
        """One message per joint value of ``q`` outside its body's limits (empty when all are in).

        >>> from robotics.description import parse
        >>> tree = parse('<bodySystem><body number="1" joint="1" origin="0, 0" min="-90" max="90"/></bodySystem>')
        >>> tree.violations({1: 2.0})
        ['body 1: joint value 2 rad is outside [-1.571, 1.571] rad']
        """
        out = []
        for number, value in self._check_q(q).items():
            body = self.bodies[number]
            if not body.within_limits(value):
                unit = "rad" if body.joint is JointType.REVOLUTE else ("m" if body.joint.arity < 3 else "m, m, rad")
                out.append(f"body {number}: joint value {_fmt(value)} {unit} is outside "
                           f"[{_fmt(body.q_lower)}, {_fmt(body.q_upper)}] {unit}")
        return out

    def _check_q(self, q: Mapping[int, Any] | None) -> Mapping[int, Any]:
        if q is None:
            return {}
        if not isinstance(q, Mapping):
            raise ValueError(f"q must map body numbers to joint values, got {type(q).__name__}")
        unknown = [k for k in q if k not in self.bodies]
        if unknown:
            raise ValueError(f"q names bodies that do not exist: {unknown} (bodies: {list(self.bodies)})")
        return q

    def to_json(self) -> dict[str, Any]:
        """Plain data for ``/api/robot``."""
        return {
            "dialect": self.dialect, "class": self.system_class, "warnings": list(self.warnings),
            "bodies": [b.to_json() for b in self.bodies.values()],
        }


def _fmt(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return "(" + ", ".join(f"{float(v):.4g}" for v in value) + ")"
    return f"{float(value):.4g}"
