"""Run reports: per-channel statistics, plots, and commanded-vs-achieved tracking figures.

The form the seed experiments report in: for each channel min, max, mean, standard
deviation and the number of samples; for each commanded/measured pair (wheel speed
command vs measured wheel speed, heading target vs heading, later joint and leg
positions) the signed mean, mean absolute, RMS and largest deviation, computed by
:func:`robotics.tracking.deviation` over the samples where both are present. Works on a
recording or on arrays already in memory; plots are SVG (:mod:`server.gateway.reports.svg`).

>>> import numpy as np
>>> rep = report_from_arrays(np.arange(4.0), {"v": np.array([1.0, 2.0, np.nan, 3.0])},
...                          pairs=[("v", np.array([1.0, 2.0, 2.0, 2.0]), np.array([1.0, 2.5, 2.0, 3.0]))], plots=False)
>>> rep["stats"]["v"]
{'samples': 3, 'missing': 1, 'min': 1.0, 'max': 3.0, 'mean': 2.0, 'std': 0.816496580927726}
>>> rep["tracking"][0]["rms"], rep["tracking"][0]["samples"]
(0.5590169943749475, 4)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence
from xml.sax.saxutils import escape

import numpy as np

from robotics.tracking import deviation
from server.gateway.recording.reader import Recording, RecordingError
from server.gateway.reports.svg import line_plot


@dataclass(frozen=True)
class Pair:
    """A commanded column and the measured column that should follow it (columns as in CSV export:
    a channel name or a snapshot path; ``command.wheel_*_rad_s`` are derived from the command and the
    robot geometry). ``period`` wraps the deviation of an angle (360 for degrees, 2π for radians)."""

    name: str
    commanded: str
    achieved: str
    unit: str = ""
    period: float | None = None


ROVER_PAIRS = (
    Pair("left wheel speed", "command.wheel_left_rad_s", "wheel_left_rad_s", "rad/s"),
    Pair("right wheel speed", "command.wheel_right_rad_s", "wheel_right_rad_s", "rad/s"),
    Pair("linear speed", "command.linear", "linear_m_s", "m/s"),
    Pair("turn rate", "command.angular", "angular_rad_s", "rad/s"),
    Pair("heading", "behavior.target_deg", "heading_deg", "deg", period=360.0),
)
_DERIVED = {"command.wheel_left_rad_s": -1.0, "command.wheel_right_rad_s": +1.0}
#: rows of the first block :func:`load_series` fills (it doubles when full)
BLOCK_ROWS = 4096


def channel_stats(series: dict[str, Sequence[float] | np.ndarray]) -> dict[str, dict[str, Any]]:
    """min, max, mean, std (population) and sample counts of each series, over its finite values."""
    out = {}
    for name, values in series.items():
        v = np.asarray(values, dtype=float)
        finite = v[np.isfinite(v)]
        n = int(finite.size)
        out[name] = {"samples": n, "missing": int(v.size - n),
                     "min": float(finite.min()) if n else None, "max": float(finite.max()) if n else None,
                     "mean": float(finite.mean()) if n else None, "std": float(finite.std()) if n else None}
    return out


def tracking(commanded: Sequence[float] | np.ndarray, achieved: Sequence[float] | np.ndarray,
             period: float | None = None) -> dict[str, Any]:
    """Deviation figures of ``achieved`` from ``commanded`` over the samples where both are finite
    (``samples`` = 0 and ``None`` figures when there are none)."""
    c = np.asarray(commanded, dtype=float)
    a = np.asarray(achieved, dtype=float)
    if c.shape != a.shape:
        raise ValueError(f"commanded has {c.shape} samples, achieved {a.shape}")
    both = np.isfinite(c) & np.isfinite(a)
    if c.ndim == 2:
        both = both.all(axis=1)
    c, a = c[both], a[both]
    if period is not None:  # compare angles the short way round
        a = c + (a - c + period / 2) % period - period / 2
    if c.shape[0] == 0:
        return {"samples": 0, "mean": None, "mean_abs": None, "rms": None, "max_abs": None}
    d = deviation(c, a)
    return {"samples": int(c.shape[0]), **{k: np.asarray(v).tolist() for k, v in d.items()}}


def load_series(rec: Recording, columns: Iterable[str], start_t: float | None = None,
                end_t: float | None = None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Snapshot times and the chosen columns as float arrays (missing or non-numeric → NaN).
    ``command.wheel_{left,right}_rad_s`` are derived from ``command`` and the recorded geometry."""
    columns = list(dict.fromkeys(columns))
    derived = [c for c in columns if c in _DERIVED]
    plain = [c for c in columns if c not in _DERIVED]
    geometry = rec.robot.get("geometry") or {}
    if derived:
        if not {"wheel_radius_m", "track_m"} <= set(geometry):
            raise RecordingError("wheel commands need the robot geometry (wheel_radius_m, track_m), "
                                 "which this recording does not have")
        plain += [c for c in ("command.linear", "command.angular") if c not in plain]
    getters = rec.column_getters(plain) if plain else []
    # rows go straight into float arrays grown by doubling: a list of lists of Python floats for a
    # 30-min run (90,000 snapshots × 40 columns) was ~300 MB, these arrays are 29 MB
    times = np.empty(BLOCK_ROWS)
    data = np.empty((BLOCK_ROWS, len(plain)))
    n = 0
    for t, snap in rec.snapshots(start_t, end_t):
        if n == times.shape[0]:
            times, data = _grown(times, n), _grown(data, n)
        times[n] = t
        data[n] = [_num(g(snap)) for g in getters]
        n += 1
    times, data = times[:n].copy(), data[:n].copy()
    series = {c: data[:, i] for i, c in enumerate(plain)}
    if derived:
        r, track = float(geometry["wheel_radius_m"]), float(geometry["track_m"])
        v, w = series["command.linear"], series["command.angular"]
        for c in derived:  # differential drive: wheel = (v ± ω·track/2) / r
            series[c] = (v + _DERIVED[c] * w * track / 2.0) / r
    return times, {c: series[c] for c in columns}


def _grown(a: np.ndarray, n: int) -> np.ndarray:
    out = np.empty((2 * n, *a.shape[1:]))
    out[:n] = a[:n]
    return out


def _num(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return float("nan")
    return float(v)


def report_from_arrays(t: Sequence[float] | np.ndarray, series: dict[str, Sequence[float] | np.ndarray],
                       pairs: Iterable[tuple] = (), *, units: dict[str, str] | None = None,
                       plots: bool = True) -> dict[str, Any]:
    """A report on data in memory. ``pairs``: ``(name, commanded, achieved)`` or ``(name, commanded,
    achieved, unit, period)`` tuples of arrays sampled at ``t``."""
    t = np.asarray(t, dtype=float)
    units = units or {}
    t0 = float(t[0]) if t.size else 0.0
    report: dict[str, Any] = {"samples": int(t.size), "duration_s": float(t[-1] - t[0]) if t.size > 1 else 0.0,
                              "stats": channel_stats(series), "tracking": [], "plots": {}}
    for pair in pairs:
        name, cmd, ach, *rest = pair
        unit = rest[0] if rest else ""
        period = rest[1] if len(rest) > 1 else None
        fig = tracking(cmd, ach, period)
        report["tracking"].append({"name": name, "unit": unit, **fig})
        if plots:
            report["plots"][f"tracking: {name}"] = line_plot(
                t - t0, {f"{name} commanded": cmd, f"{name} measured": ach},
                title=f"{name}: commanded vs measured", y_label=unit)
    if plots:
        for name, v in series.items():
            report["plots"][name] = line_plot(t - t0, {name: v}, title=name, y_label=units.get(name, ""))
    return report


def run_report(path: str | Path, channels: Sequence[str] | None = None, pairs: Sequence[Pair] | None = None,
               start_t: float | None = None, end_t: float | None = None, *, plots: bool = True) -> dict[str, Any]:
    """The report of a recording: stats of ``channels`` (default: every recorded channel), the
    ``pairs`` (default :data:`ROVER_PAIRS`, those whose columns exist) and SVG plots. Blocking
    (reads and decodes the file): call via ``asyncio.to_thread`` from the gateway."""
    with Recording(path) as rec:
        info = rec.info()
        known = rec.channel_names()
        if not known:
            for _t, snap in rec.snapshots(start_t, end_t):
                known = list((snap.get("values") or {}).keys())
                break
        channels = list(channels) if channels is not None else known
        units = {c["name"]: c.get("unit", "") for c in rec.robot.get("channels", []) if isinstance(c, dict)
                 and "name" in c}
        skipped = []
        usable: list[Pair] = []
        for p in (ROVER_PAIRS if pairs is None else pairs):
            missing = [c for c in (p.commanded, p.achieved) if "." not in c and c not in known]
            if missing:
                if pairs is not None:
                    raise RecordingError(f"pair {p.name!r}: unknown channel {missing[0]!r}")
                skipped.append({"name": p.name, "reason": f"channel {missing[0]} not recorded"})
                continue
            if p.commanded in _DERIVED and not {"wheel_radius_m", "track_m"} <= set(rec.robot.get("geometry") or {}):
                skipped.append({"name": p.name, "reason": "no robot geometry recorded"})
                continue
            usable.append(p)
        columns = list(channels) + [c for p in usable for c in (p.commanded, p.achieved)]
        t, series = load_series(rec, columns, start_t, end_t)
    report = report_from_arrays(
        t, {c: series[c] for c in channels},
        [(p.name, series[p.commanded], series[p.achieved], p.unit, p.period) for p in usable],
        units=units, plots=plots)
    for r in report["tracking"]:
        if r["samples"] == 0:
            r["skipped"] = "no sample with both values"
    report["tracking"] += [{"name": s["name"], "unit": "", "samples": 0, "skipped": s["reason"]} for s in skipped]
    report.update({"file": info["file"], "robot": info["robot"], "profile": info["profile"],
                   "start_t": float(t[0]) if t.size else info["start_t"],
                   "end_t": float(t[-1]) if t.size else info["end_t"], "units": units})
    return report


def report_html(report: dict[str, Any]) -> str:
    """A self-contained HTML page of a report (tables and inline SVG plots)."""
    def cell(v: Any) -> str:
        if v is None:
            return "–"
        if isinstance(v, float):
            return f"{v:.6g}"
        if isinstance(v, list):
            return ", ".join(cell(x) for x in v)
        return escape(str(v))

    title = f"Run report: {report.get('file', 'data')}"
    units = report.get("units", {})
    rows = "".join(
        f"<tr><td>{escape(name)}</td><td>{escape(units.get(name, ''))}</td>"
        + "".join(f"<td>{cell(s[k])}</td>" for k in ("samples", "min", "max", "mean", "std")) + "</tr>"
        for name, s in report["stats"].items())
    track = "".join(
        f"<tr><td>{escape(r['name'])}</td><td>{escape(r.get('unit', ''))}</td><td>{r['samples']}</td>"
        + ("".join(f"<td>{cell(r[k])}</td>" for k in ("mean", "mean_abs", "rms", "max_abs")) if r["samples"]
           else f"<td colspan='4'>{escape(r.get('skipped', ''))}</td>") + "</tr>"
        for r in report["tracking"])
    plots = "".join(f"<figure>{svg}</figure>" for svg in report.get("plots", {}).values())
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{escape(title)}</title>"
            "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin-bottom:2em}"
            "td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}td:first-child{text-align:left}</style>"
            f"</head><body><h1>{escape(title)}</h1>"
            f"<p>robot {escape(str(report.get('robot', '')))}, {report.get('samples', 0)} snapshots over "
            f"{report.get('duration_s', 0.0):.1f} s</p>"
            "<h2>Channels</h2><table><tr><th>channel</th><th>unit</th><th>samples</th><th>min</th><th>max</th>"
            f"<th>mean</th><th>std</th></tr>{rows}</table>"
            "<h2>Commanded vs measured</h2><table><tr><th>pair</th><th>unit</th><th>samples</th><th>mean</th>"
            f"<th>mean |dev|</th><th>RMS</th><th>max |dev|</th></tr>{track}</table>"
            f"<h2>Plots</h2>{plots}</body></html>")
