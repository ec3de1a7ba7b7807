"""Line plots as hand-written SVG text: no plotting library, renders in any browser.

Long series are reduced to at most ``max_points`` per line by keeping each bucket's
minimum and maximum (so spikes survive), which keeps a 1 h plot at 50 Hz a few
hundred kilobytes. Missing samples (NaN) break the line instead of being drawn as
zero. Axis ticks are "nice" numbers (1, 2, 5 × 10^n).

>>> import numpy as np
>>> svg = line_plot(np.arange(5.0), {"x": np.array([0.0, 1.0, np.nan, 3.0, 4.0])}, title="t<1>")
>>> svg.startswith('<svg xmlns="http://www.w3.org/2000/svg"') and "t&lt;1&gt;" in svg
True
>>> svg.count("<polyline")
2
>>> nice_ticks(0.0, 9.3)
[0.0, 2.0, 4.0, 6.0, 8.0]
"""

from __future__ import annotations

import math
from typing import Sequence
from xml.sax.saxutils import escape

import numpy as np

#: line colours (Okabe–Ito, readable by colour-blind people)
COLOURS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000")


def nice_ticks(lo: float, hi: float, target: int = 5) -> list[float]:
    """About ``target`` round tick values covering [lo, hi]."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return []
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / max(1, target)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step) * step
    ticks = []
    v = first
    while v <= hi + step * 1e-9:
        ticks.append(float(round(v, 12)))
        v += step
    return ticks


def _fmt(v: float) -> str:
    return f"{v:.6g}"


def decimate(t: np.ndarray, y: np.ndarray, max_points: int) -> tuple[np.ndarray, np.ndarray]:
    """Keep each bucket's min and max (in time order) so at most ``max_points`` remain; NaNs are kept
    as gaps (a bucket containing one keeps a NaN)."""
    n = len(t)
    if n <= max_points:
        return t, y
    buckets = max(1, max_points // 2)
    edges = np.linspace(0, n, buckets + 1).astype(int)
    out_t, out_y = [], []
    for a, b in zip(edges[:-1], edges[1:]):
        if b <= a:
            continue
        seg = y[a:b]
        finite = np.isfinite(seg)
        if not finite.any():
            out_t.append(t[a])
            out_y.append(np.nan)
            continue
        keep = {a + int(np.nanargmin(seg)), a + int(np.nanargmax(seg))}
        if not finite.all():  # a gap starts or ends here: keep its first missing sample, in time order
            keep.add(a + int(np.argmin(finite)))
        for i in sorted(keep):
            out_t.append(t[i])
            out_y.append(y[i])
    return np.asarray(out_t), np.asarray(out_y)


def line_plot(t: Sequence[float] | np.ndarray, series: dict[str, Sequence[float] | np.ndarray], *,
              title: str = "", x_label: str = "t (s)", y_label: str = "", width: int = 800, height: int = 320,
              max_points: int = 2000) -> str:
    """An SVG document plotting each of ``series`` (name → values, same length as ``t``) against ``t``."""
    t = np.asarray(t, dtype=float)
    ys = {name: np.asarray(v, dtype=float) for name, v in series.items()}
    for name, y in ys.items():
        if y.shape != t.shape:
            raise ValueError(f"series {name!r} has {y.shape[0] if y.ndim else 0} samples, t has {t.shape[0]}")
    ml, mr, mt, mb = 64, 16, 28 if title else 12, 40
    pw, ph = width - ml - mr, height - mt - mb
    finite_t = t[np.isfinite(t)]
    x0, x1 = (float(finite_t.min()), float(finite_t.max())) if finite_t.size else (0.0, 1.0)
    all_y = np.concatenate([y[np.isfinite(y)] for y in ys.values()]) if ys else np.zeros(0)
    y0, y1 = (float(all_y.min()), float(all_y.max())) if all_y.size else (0.0, 1.0)
    if x1 <= x0:
        x1 = x0 + 1.0
    if y1 <= y0:
        y0, y1 = y0 - 0.5, y1 + 0.5
    pad = (y1 - y0) * 0.05
    y0, y1 = y0 - pad, y1 + pad

    def sx(v: float) -> float:
        return ml + (v - x0) / (x1 - x0) * pw

    def sy(v: float) -> float:
        return mt + ph - (v - y0) / (y1 - y0) * ph

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
             f'<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>']
    if title:
        parts.append(f'<text x="{width / 2:.1f}" y="18" text-anchor="middle" font-size="13">{escape(title)}</text>')
    # grid and ticks
    for v in nice_ticks(y0, y1):
        y = sy(v)
        parts.append(f'<line x1="{ml}" y1="{y:.1f}" x2="{ml + pw}" y2="{y:.1f}" stroke="#e0e0e0"/>')
        parts.append(f'<text x="{ml - 4}" y="{y + 4:.1f}" text-anchor="end">{escape(_fmt(v))}</text>')
    for v in nice_ticks(x0, x1, target=8):
        x = sx(v)
        parts.append(f'<line x1="{x:.1f}" y1="{mt}" x2="{x:.1f}" y2="{mt + ph}" stroke="#f0f0f0"/>')
        parts.append(f'<text x="{x:.1f}" y="{mt + ph + 14}" text-anchor="middle">{escape(_fmt(v))}</text>')
    parts.append(f'<rect x="{ml}" y="{mt}" width="{pw}" height="{ph}" fill="none" stroke="#333333"/>')
    parts.append(f'<text x="{ml + pw / 2:.1f}" y="{height - 6}" text-anchor="middle">{escape(x_label)}</text>')
    if y_label:
        parts.append(f'<text transform="translate(14 {mt + ph / 2:.1f}) rotate(-90)" '
                     f'text-anchor="middle">{escape(y_label)}</text>')
    # lines, split at gaps
    for i, (name, y) in enumerate(ys.items()):
        colour = COLOURS[i % len(COLOURS)]
        td, yd = decimate(t, y, max_points)
        ok = np.isfinite(td) & np.isfinite(yd)
        run: list[str] = []
        runs: list[list[str]] = []
        for tv, yv, good in zip(td, yd, ok):
            if good:
                run.append(f"{sx(tv):.1f},{sy(yv):.1f}")
            elif run:
                runs.append(run)
                run = []
        if run:
            runs.append(run)
        parts.append(f'<g stroke="{colour}" fill="none" stroke-width="1.2"><title>{escape(name)}</title>')
        for r in runs:
            if len(r) == 1:
                x, yy = r[0].split(",")
                parts.append(f'<circle cx="{x}" cy="{yy}" r="1.5" fill="{colour}"/>')
            else:
                parts.append(f'<polyline points="{" ".join(r)}"/>')
        parts.append("</g>")
        per_row = min(4, len(ys))
        lx = ml + 8 + (i % per_row) * (pw // per_row)
        ly = mt + 14 + (i // per_row) * 14
        parts.append(f'<line x1="{lx}" y1="{ly - 4}" x2="{lx + 16}" y2="{ly - 4}" stroke="{colour}" stroke-width="2"/>')
        parts.append(f'<text x="{lx + 20}" y="{ly}">{escape(name)}</text>')
    parts.append("</svg>")
    return "\n".join(parts)
