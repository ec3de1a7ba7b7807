"""``GET /api/robot.svg``: a top view of the robot drawn from its description.

Body frame REP-103 (x forward, y left), drawn with x to the right and y up, in
millimetres so the numbers in the file read as dimensions.

>>> svg = rover_svg({"name": "R", "geometry": {"wheel_radius_m": 0.05, "track_m": 0.3},
...                  "channels": [{"name": "range_front_m"}]})
>>> svg.startswith("<svg") and 'class="wheel"' in svg and "front" in svg
True
"""

from __future__ import annotations

from html import escape
from typing import Any

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
