"""Mission and experiment reports as pages and tables (issue 23; docs/missions.md).

The runtime measures (:meth:`MissionBehavior.report <server.runtime.behaviours.mission.MissionBehavior.report>`:
per-leg arrival errors by the estimate and, in the simulator, by the truth, UWB fix errors, heading errors,
the driven paths); this turns that into what a person reads and exports: one CSV row per leg
(:func:`leg_rows`), and a self-contained HTML page with the map of the planned and driven paths and the
per-leg errors as inline SVG (:func:`mission_html`). An experiment's result (ours beside the paper's, row
by row) becomes tables the same way (:func:`experiment_html`). Pure functions of plain dicts: the gateway
runs them in a worker thread (a 20,000-point path is ~50 ms of string work here, not the event loop's).

>>> rep = {"label": "demo", "mode": "step", "outcome": "finished", "legs": [{"leg": 0, "target": {"x_m": 1.0,
...        "y_m": 2.0}, "arrival_error_m": 0.01, "true_arrival_error_m": 0.02, "uwb_fix_error_m": 0.05}],
...        "waypoints": [{"x_m": 1.0, "y_m": 2.0}], "summary": {}, "path": {"estimate": [[0, 0.0, 0.0],
...        [1, 1.0, 2.0]], "truth": []}}
>>> leg_rows(rep)[0][:4]
[0, 1.0, 2.0, 'reached']
>>> "<svg" in mission_html(rep) and "demo" in mission_html(rep)
True
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence
from xml.sax.saxutils import escape

import numpy as np
import orjson

from server.gateway.recording import topics
from server.gateway.recording.reader import Recording, RecordingError
from server.gateway.reports.svg import COLOURS, line_plot, nice_ticks

#: the CSV's columns, one row per leg (errors in metres and degrees; empty: not measured)
LEG_COLUMNS = ("leg", "target_x_m", "target_y_m", "outcome", "arrival", "arrival_error_m", "true_arrival_error_m",
               "uwb_fix_x_m", "uwb_fix_y_m", "uwb_fix_n", "uwb_fix_error_m", "estimate_error_m",
               "leg_heading_error_deg", "leg_heading_true_error_deg", "waypoint_heading_error_deg",
               "waypoint_heading_true_error_deg", "duration_s")


def _get(d: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


def leg_rows(report: dict[str, Any]) -> list[list[Any]]:
    """One row of :data:`LEG_COLUMNS` per leg of ``report``."""
    rows = []
    for leg in report.get("legs", []):
        rows.append([
            leg.get("leg"), _get(leg, "target", "x_m"), _get(leg, "target", "y_m"), leg.get("outcome", "reached"),
            leg.get("arrival"), leg.get("arrival_error_m"), leg.get("true_arrival_error_m"),
            _get(leg, "uwb_fix", "x_m"), _get(leg, "uwb_fix", "y_m"), _get(leg, "uwb_fix", "n"),
            leg.get("uwb_fix_error_m"), leg.get("estimate_error_m"),
            _get(leg, "leg_heading", "error_deg"), _get(leg, "leg_heading", "true_error_deg"),
            _get(leg, "waypoint_heading", "error_deg"), _get(leg, "waypoint_heading", "true_error_deg"),
            leg.get("duration_s")])
    return rows


def xy_plot(lines: dict[str, Sequence[Sequence[float]]], points: dict[str, Sequence[Sequence[float]]], *,
            title: str = "", size: int = 560) -> str:
    """An SVG map (equal scales, metres): ``lines`` name → [(x, y), ...] drawn as polylines, ``points`` as
    markers."""
    xs = [p[0] for v in (*lines.values(), *points.values()) for p in v if all(map(math.isfinite, p[:2]))]
    ys = [p[1] for v in (*lines.values(), *points.values()) for p in v if all(map(math.isfinite, p[:2]))]
    x0, x1 = (min(xs), max(xs)) if xs else (0.0, 1.0)
    y0, y1 = (min(ys), max(ys)) if ys else (0.0, 1.0)
    span = max(x1 - x0, y1 - y0, 0.5) * 1.1
    cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
    x0, x1, y0, y1 = cx - span / 2, cx + span / 2, cy - span / 2, cy + span / 2
    m, top = 48, 28
    plot = size - 2 * m

    def sx(v: float) -> float:
        return m + (v - x0) / span * plot

    def sy(v: float) -> float:
        return top + plot - (v - y0) / span * plot

    h = plot + top + m
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{size}" height="{h}" viewBox="0 0 {size} {h}" '
             'font-family="sans-serif" font-size="11"><rect width="100%" height="100%" fill="#ffffff"/>',
             f'<text x="{size / 2:.0f}" y="18" text-anchor="middle" font-size="13">{escape(title)}</text>',
             f'<rect x="{m}" y="{top}" width="{plot}" height="{plot}" fill="none" stroke="#333"/>']
    for v in nice_ticks(x0, x1):
        parts.append(f'<text x="{sx(v):.1f}" y="{top + plot + 14}" text-anchor="middle">{v:g}</text>')
    for v in nice_ticks(y0, y1):
        parts.append(f'<text x="{m - 4}" y="{sy(v) + 4:.1f}" text-anchor="end">{v:g}</text>')
    parts.append(f'<text x="{size / 2:.0f}" y="{h - 8}" text-anchor="middle">x (m, east) · y (m, north)</text>')
    for i, (name, pts) in enumerate([*lines.items(), *points.items()]):
        colour = COLOURS[i % len(COLOURS)]
        good = [(sx(p[0]), sy(p[1])) for p in pts if all(map(math.isfinite, p[:2]))]
        if name in lines:
            body = " ".join(f"{x:.1f},{y:.1f}" for x, y in good)
            parts.append(f'<polyline points="{body}" fill="none" stroke="{colour}" stroke-width="1.3">'
                         f'<title>{escape(name)}</title></polyline>')
        else:
            parts.extend(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="none" stroke="{colour}"/>' for x, y in good)
        parts.append(f'<line x1="{m + 8}" y1="{top + 10 + 14 * i}" x2="{m + 24}" y2="{top + 10 + 14 * i}" '
                     f'stroke="{colour}" stroke-width="2"/><text x="{m + 28}" y="{top + 14 + 14 * i}">'
                     f'{escape(name)}</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def _cell(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, (list, tuple)):
        return ", ".join(_cell(x) for x in v)
    return escape(str(v))


def _table(rows: list[dict[str, Any]]) -> str:
    """Rows of (possibly nested) dicts as one HTML table, nested keys joined with a dot (``ours.mean_cm``)."""
    flat = [_flatten(r) for r in rows]
    cols: list[str] = []
    for r in flat:
        cols.extend(k for k in r if k not in cols)
    head = "".join(f"<th>{escape(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{_cell(r.get(c))}</td>" for c in cols) + "</tr>" for r in flat)
    return f"<table><tr>{head}</tr>{body}</table>"


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        elif not (isinstance(v, list) and v and isinstance(v[0], (dict, list))):  # paths: plotted, not tabled
            out[f"{prefix}{k}"] = v
    return out


_STYLE = ("<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin-bottom:2em}"
          "td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}td:first-child{text-align:left}</style>")


def _page(title: str, body: str) -> str:
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{escape(title)}</title>{_STYLE}</head>"
            f"<body><h1>{escape(title)}</h1>{body}</body></html>")


def mission_plots(report: dict[str, Any]) -> list[str]:
    """The map (planned, estimate, truth, UWB fixes) and the per-leg errors (cm) as SVG documents."""
    legs = report.get("legs", [])
    planned = [(w["x_m"], w["y_m"]) for w in report.get("waypoints", [])]
    start = next((leg["from"] for leg in legs if "from" in leg), None)
    if start is not None:
        planned = [(start["x_m"], start["y_m"]), *planned]
    path = report.get("path", {})
    lines = {"planned": planned, "estimate": [p[1:] for p in path.get("estimate", [])]}
    if path.get("truth"):
        lines["truth"] = [p[1:] for p in path["truth"]]
    fixes = [(leg["uwb_fix"]["x_m"], leg["uwb_fix"]["y_m"]) for leg in legs if leg.get("uwb_fix")]
    points = {"UWB fix": fixes} if fixes else {}
    plots = [xy_plot(lines, points, title=f"{report.get('label') or 'mission'}: paths")]
    if legs:
        n = np.arange(1, len(legs) + 1, dtype=float)

        def cm(key: str) -> np.ndarray:
            return np.array([100.0 * leg[key] if leg.get(key) is not None else np.nan for leg in legs])

        series = {"arrival (estimate)": cm("arrival_error_m"), "arrival (truth)": cm("true_arrival_error_m"),
                  "UWB fix vs truth": cm("uwb_fix_error_m"), "fused vs truth": cm("estimate_error_m")}
        series = {k: v for k, v in series.items() if np.isfinite(v).any()}
        if series:
            plots.append(line_plot(n, series, title="per-leg errors", x_label="leg", y_label="cm"))
    return plots


def mission_html(report: dict[str, Any]) -> str:
    """The mission report as a self-contained page: outcome, summary, per-leg table, plots."""
    summary = [{"figure": k, **(v or {})} for k, v in report.get("summary", {}).items()]
    legs = [dict(zip(LEG_COLUMNS, row)) for row in leg_rows(report)]
    plots = "".join(f"<figure>{svg}</figure>" for svg in mission_plots(report))
    body = (f"<p>mode {escape(str(report.get('mode')))}, outcome <b>{escape(str(report.get('outcome')))}</b>, "
            f"{len(legs)} legs, {report.get('elapsed_s', 0.0)} s</p>"
            f"<h2>Summary</h2>{_table(summary)}<h2>Legs</h2>{_table(legs)}<h2>Plots</h2>{plots}")
    return _page(f"Mission report: {report.get('label') or 'mission'}", body)


def experiment_html(result: dict[str, Any]) -> str:
    """An experiment's result as tables, ours beside the paper's (``overall``, ``summary``, ``rows``)."""
    parts = [f"<p>{escape(str(result.get('title', '')))}<br>source: {escape(str(result.get('source', '')))}<br>"
             f"status: {escape(str(_get(result, 'status', 'outcome')))}</p>"]
    if isinstance(result.get("summary"), dict):
        parts.append("<h2>Summary: ours and the paper's</h2>" + _table([result["summary"]]))
    if result.get("overall"):
        parts.append("<h2>Overall</h2>" + _table(result["overall"]))
    if result.get("rows"):
        parts.append("<h2>Row by row</h2>" + _table(result["rows"]))
    for i, path in enumerate(result.get("paths") or []):
        lines = {"estimate": [p[1:] for p in path.get("estimate", [])],
                 "truth": [p[1:] for p in path.get("truth", [])]}
        parts.append(f"<figure>{xy_plot(lines, {}, title=f'trial {i + 1}: paths')}</figure>")
    return _page(f"Experiment: {result.get('experiment', '?')}", "".join(parts))


# ---------------------------------------------------------------------- from a recording
def _summary(legs: list[dict[str, Any]]) -> dict[str, Any]:
    def stats(values: list[Any]) -> dict[str, Any]:
        v = [abs(float(x)) for x in values if isinstance(x, (int, float)) and math.isfinite(x)]
        return {"mean": round(sum(v) / len(v), 5) if v else None, "max": round(max(v), 5) if v else None, "n": len(v)}
    return {k: stats([leg.get(k) for leg in legs]) for k in ("arrival_error_m", "true_arrival_error_m",
                                                              "uwb_fix_error_m", "estimate_error_m")}


def recorded_missions(path: str | Path, max_points: int = 2000) -> dict[str, Any]:
    """Every mission in the recording at ``path``, rebuilt from its events (``behavior_start`` "mission started",
    the ``mission_leg`` results, the ``behavior_end``/``behavior_cancel`` with the outcome) and its snapshots
    (the estimate's and the truth's path while it ran): ``{"missions": [report, ...]}``, each shaped like
    ``GET /api/mission/report``'s (so :func:`mission_html` draws it). A mission still running when the file
    ends has outcome None."""
    with Recording(path) as rec:
        missions: list[dict[str, Any]] = []
        current: dict[str, Any] | None = None
        for m in rec.messages(topics.EVENTS):
            try:
                ev = orjson.loads(m.data)
            except orjson.JSONDecodeError:
                continue
            if not isinstance(ev, dict):
                continue
            trigger, message = ev.get("trigger"), str(ev.get("message", ""))
            if trigger == "behavior_start" and message.startswith("mission"):
                current = {"label": "", "mode": None, "outcome": None, "legs": [], "waypoints": [], "t0": m.t,
                           "t1": None}
                missions.append(current)
            elif current is not None and trigger == "mission_leg" and isinstance(ev.get("values"), dict):
                current["legs"].append(ev["values"])
                current["waypoints"].append(ev["values"].get("target") or {})
            elif current is not None and trigger in ("behavior_end", "behavior_cancel") and \
                    message.startswith("mission"):
                current["outcome"] = (ev.get("values") or {}).get("outcome") or message
                current["t1"] = m.t
                current = None
        for mission in missions:
            est: list[list[float]] = []
            truth: list[list[float]] = []
            for t, snap in rec.snapshots(mission["t0"], mission["t1"]):
                v, tr = snap.get("values") or {}, snap.get("truth") or {}
                x, y = v.get("est_x_m"), v.get("est_y_m")
                if isinstance(x, (int, float)) and isinstance(y, (int, float)):
                    est.append([t - mission["t0"], x, y])
                if isinstance(tr.get("x"), (int, float)) and isinstance(tr.get("y"), (int, float)):
                    truth.append([t - mission["t0"], tr["x"], tr["y"]])
            step = max(1, len(est) // max_points)
            mission["path"] = {"estimate": est[::step], "truth": truth[::max(1, len(truth) // max_points)]}
            mission["summary"] = _summary(mission["legs"])
            mission["elapsed_s"] = round((mission["t1"] or mission["t0"]) - mission["t0"], 3)
    return {"file": Path(path).name, "missions": missions}


def recorded_missions_html(path: str | Path) -> str:
    found = recorded_missions(path)
    if not found["missions"]:
        raise RecordingError(f"{found['file']} has no mission (no 'mission started' event)")
    pages = [mission_html(m) for m in found["missions"]]
    # one page: each mission's body after the first's heading
    bodies = [p.split("<body>", 1)[1].rsplit("</body>", 1)[0] for p in pages]
    return _page(f"Missions in {found['file']}", "".join(f"<section>{b}</section>" for b in bodies))


__all__ = ["LEG_COLUMNS", "recorded_missions", "recorded_missions_html", "experiment_html", "leg_rows", "mission_html", "mission_plots", "xy_plot"]
