"""``GET /api/robot.svg``: the robot drawn from its description (:func:`robot_svg`): the rover's top view
here; an arm's body description as the runtime drew it; the Stewart platform's top and front views here.

Body frame REP-103 (x forward, y left), drawn with x to the right and y up, in
millimetres so the numbers in the file read as dimensions.

>>> svg = rover_svg({"name": "R", "geometry": {"wheel_radius_m": 0.05, "track_m": 0.3},
...                  "channels": [{"name": "range_front_m"}]})
>>> svg.startswith("<svg") and 'class="wheel"' in svg and "front" in svg
True
"""

from __future__ import annotations

import math
from html import escape
from typing import Any

from robotics.description import format_number

BODY_LENGTH_M = 0.30  # drawing only; the simulator's collision box has the same default
BODY_WIDTH_M = 0.25


def rover_svg(desc: dict[str, Any]) -> str:
    """From the robot's description (``GET /api/robot``)."""
    r = {"name": desc["name"], **desc["geometry"]}
    channels = [c["name"] for c in desc.get("channels", [])]
    mm = 1000.0
    track = r["track_m"] * mm
    wheel_d = 2 * r["wheel_radius_m"] * mm
    wheel_w = max(12.0, 0.12 * track)
    length = max(BODY_LENGTH_M * mm, wheel_d * 1.4)
    width = max(BODY_WIDTH_M * mm, track - wheel_w)
    half = max(length, track + wheel_w) / 2 + 60
    rangers = [c[len("range_"):-len("_m")] for c in channels if c.startswith("range_") and c.endswith("_m")]
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="{-half:.0f} {-half:.0f} {2 * half:.0f} {2 * half:.0f}" '
        f'width="{2 * half:.0f}" height="{2 * half:.0f}" role="img" aria-label="{escape(r["name"])}, top view">',
        f"<title>{escape(r['name'])}: top view, x forward (right), y left (up), mm</title>",
        "<style>.body{fill:#2f5d8a;stroke:#e8edf2;stroke-width:2}.wheel{fill:#222;stroke:#999;stroke-width:2}"
        ".axis{stroke-width:3}.sonar{fill:#f3b619;opacity:.35}text{font:14px sans-serif;fill:#e8edf2}</style>",
        f'<rect x="{-half:.0f}" y="{-half:.0f}" width="{2 * half:.0f}" height="{2 * half:.0f}" fill="#0f1216"/>',
        f'<rect class="body" x="{-length / 2:.1f}" y="{-width / 2:.1f}" width="{length:.1f}" height="{width:.1f}" rx="12"/>',
    ]
    for side in (+1, -1):  # y left is up in the drawing: SVG y grows downward, so flip
        parts.append(f'<rect class="wheel" x="{-wheel_d / 2:.1f}" y="{-side * track / 2 - wheel_w / 2:.1f}" '
                     f'width="{wheel_d:.1f}" height="{wheel_w:.1f}" rx="4"/>')
    parts.append('<line class="axis" x1="0" y1="0" x2="80" y2="0" stroke="#ff5a52"/>'
                 '<line class="axis" x1="0" y1="0" x2="0" y2="-80" stroke="#3ecf6e"/>'
                 '<text x="86" y="5">x</text><text x="-5" y="-86">y</text>')
    for i, name in enumerate(rangers):
        x = length / 2
        parts.append(f'<path class="sonar" d="M{x:.1f} 0 L{x + 50:.1f} -14 L{x + 50:.1f} 14 Z"/>'
                     f'<text x="{x + 4:.1f}" y="{32 + 16 * i}">{escape(name)}</text>')
    parts.append(f'<text x="{-half + 8:.0f}" y="{half - 10:.0f}">track {track:.0f} mm, wheel ⌀ {wheel_d:.0f} mm</text>')
    parts.append("</svg>")
    return "".join(parts)


def robot_svg(desc: dict[str, Any]) -> str:
    """``GET /api/robot.svg`` for any profile: the rover's top view, the arm's body description as the runtime
    drew it (``scheme.svg``, :func:`robotics.description.to_svg`), or the platform's two views."""
    scheme = desc.get("scheme") or {}
    if scheme.get("kind") == "bodies" and scheme.get("svg"):
        return scheme["svg"]
    if scheme.get("kind") == "stewart":
        return stewart_svg(desc)
    if "geometry" in desc and "track_m" in desc["geometry"]:
        return rover_svg(desc)
    name = escape(str(desc.get("name", "robot")))
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 400 60" role="img" aria-label="{name}">'
            f'<text x="10" y="35" font-family="sans-serif" font-size="16">{name}: no scheme in this profile</text></svg>')


# ---------------------------------------------------------------------- the Stewart platform
# Two orthographic views, mm, y (resp. z) up: top (x, y) and front (x, z). Like the body descriptions'
# schemes, only ``transform`` attributes change with the pose (web/static/js/scheme.js computes them):
#   leg-N-VIEW       translate(bx by) rotate(a) scale(L 1)   base joint → platform joint (a line of length 1)
#   platform-VIEW    matrix(a b c d e f)                     the platform's plane projected: exact for any pose
# The projection of the platform frame's plane is affine: [x' y']ᵀ = t_view + R_view · [Px Py]ᵀ, with R_view the
# rows of R = Rx(roll)·Ry(pitch)·Rz(yaw) for the view's axes (top: x, y; front: x, z).
STEWART_VIEWS = {"top": (0, 1), "front": (0, 2)}


def _rotation_xyz(roll: float, pitch: float, yaw: float) -> list[list[float]]:
    cr, sr, cp, sp, cy, sy = (math.cos(roll), math.sin(roll), math.cos(pitch), math.sin(pitch), math.cos(yaw),
                              math.sin(yaw))
    return [[cp * cy, -cp * sy, sp],
            [cr * sy + sr * sp * cy, cr * cy - sr * sp * sy, -sr * cp],
            [sr * sy - cr * sp * cy, sr * cy + cr * sp * sy, cr * cp]]


def stewart_transforms(geometry: dict[str, Any], pose: dict[str, float]) -> dict[str, str]:
    """Element id → ``transform`` for the pose (``x_m`` … ``yaw_rad``), as scheme.js computes them.

    >>> g = {"base_joints_m": [[0.5, 0, 0]] * 6, "platform_joints_m": [[0.3, 0, 0]] * 6}
    >>> stewart_transforms(g, {"z_m": 0.4})["leg-1-front"]
    'translate(500 0) rotate(116.565) scale(447.214 1)'
    """
    f = format_number
    t = [pose.get("x_m", 0.0), pose.get("y_m", 0.0), pose.get("z_m", 0.0)]
    rot = _rotation_xyz(pose.get("roll_rad", 0.0), pose.get("pitch_rad", 0.0), pose.get("yaw_rad", 0.0))
    out = {}
    for view, (u, v) in STEWART_VIEWS.items():
        a, b, c, d = rot[u][0], rot[v][0], rot[u][1], rot[v][1]
        out[f"platform-{view}"] = (f"matrix({a:.5f} {b:.5f} {c:.5f} {d:.5f} {f(t[u] * 1000)} {f(t[v] * 1000)})")
        for i, (bj, pj) in enumerate(zip(geometry["base_joints_m"], geometry["platform_joints_m"]), start=1):
            top = [t[k] + sum(rot[k][m] * pj[m] for m in range(3)) for k in range(3)]
            dx, dy = (top[u] - bj[u]) * 1000, (top[v] - bj[v]) * 1000
            out[f"leg-{i}-{view}"] = (f"translate({f(bj[u] * 1000)} {f(bj[v] * 1000)}) "
                                      f"rotate({f(math.degrees(math.atan2(dy, dx)))}) scale({f(math.hypot(dx, dy))} 1)")
    return out


def stewart_svg(desc: dict[str, Any]) -> str:
    """The platform at its home pose, top and front views side by side (see above)."""
    g = desc["geometry"]
    base, top = g["base_joints_m"], g["platform_joints_m"]
    reach = max(math.hypot(p[0], p[1]) for p in base + top) * 1000
    height = max(g["leg_max_m"]) * 1000
    m = 0.15 * reach
    shift = 2 * reach + 2 * m  # the front view's origin, right of the top view
    moves = stewart_transforms(g, g["home"])
    f = format_number
    stroke = f(0.012 * reach)

    def poly(points: list[list[float]], u: int, v: int) -> str:
        return "M" + " L".join(f"{f(p[u] * 1000)} {f(p[v] * 1000)}" for p in points) + " Z"

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="{f(-reach - m)} {f(-height - m)} '
        f'{f(shift + 2 * reach + 2 * m)} {f(height + reach + 3 * m)}" class="stewart-scheme" role="img" '
        f'aria-label="{escape(str(desc.get("name", "Stewart platform")))}: top and front views">',
        "<title>Stewart platform: top view (x right, y up) and front view (x right, z up), mm</title>",
        f'<g fill="none" stroke="currentColor" stroke-width="{stroke}" stroke-linecap="round" '
        f'stroke-linejoin="round" transform="scale(1 -1)">',
    ]
    for view, (u, v) in STEWART_VIEWS.items():
        parts.append(f'<g id="view-{view}" class="view" transform="translate({f(0 if view == "top" else shift)} 0)">')
        if view == "top":
            parts.append(f'<path class="base" d="{poly(base, u, v)}"/>')
        else:
            xs = [p[0] * 1000 for p in base]
            parts.append(f'<path class="base" d="M{f(min(xs) - m / 2)} 0 L{f(max(xs) + m / 2)} 0"/>')
        for i in range(1, 7):
            parts.append(f'<g id="leg-{i}-{view}" class="leg" data-leg="{i}" transform="{moves[f"leg-{i}-{view}"]}">'
                         f'<path d="M0 0 L1 0" stroke-width="3" vector-effect="non-scaling-stroke"/></g>')
        parts.append(f'<g id="platform-{view}" class="platform" transform="{moves[f"platform-{view}"]}">'
                     f'<path class="platform-shape" d="{poly(top, 0, 1)}"/>'
                     f'<path class="platform-axis" d="M0 0 L{f(0.5 * reach)} 0"/></g>')
        parts.append("</g>")
    parts.append("</g>")
    for view, x in (("top", 0.0), ("front", shift)):
        parts.append(f'<text x="{f(x - reach)}" y="{f(reach + 2 * m)}" font-family="sans-serif" '
                     f'font-size="{f(0.09 * reach)}" fill="currentColor">{view}</text>')
    parts.append("</svg>")
    return "\n".join(parts)
