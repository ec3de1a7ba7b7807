"""Routes of the SCARA arm and the Stewart platform (docs/arms.md, docs/api.md): motion commands, trajectory
runs and their reports, FAULHABER programs. The work runs in the runtime; these validate at the edge and forward.

Motion commands — HTTP ``POST /api/joints``, ``/api/jog``, ``/api/tool``, ``/api/tool/jog`` (SCARA),
``/api/pose`` (Stewart), and the same as websocket messages (``joints``, ``jog``, ``tool``, ``tool_jog``,
``pose``) — are each one setpoint struct of :mod:`server.runtime_api.params`, converted and checked against the
robot's limits here (:func:`motion_parser`) and checked again in the runtime, which also refuses what only
kinematics can tell (unreachable, singular, out of the stroke). A robot takes only the commands its
controller declares (``GET /api/robot`` → ``commands``): the others are ``unavailable`` (409, the
dispatcher's check), except a zero ``speed`` — the dashboard's "stand still" when it reconnects or the
operator leaves — which an arm takes as a hold (:func:`server.gateway.commands.parse_speed`).

Each command is one entry of :data:`COMMANDS` (:mod:`server.gateway.registry`); its route, websocket type,
permission and recording come from there (:mod:`server.gateway.commands`).

Trajectories: ``POST /api/trajectory`` with ``{"series": name}`` or ``{"trajectory": {"t_s": [...],
axis: [...]}}`` (JSON) or CSV text (``content-type: text/csv``, header ``t_s,axis,...``), up to
:data:`MAX_TRAJECTORY_BYTES`; parsed and validated off the event loop, sent to the runtime in parts (a
runtime frame holds 64 KiB), then run. ``GET /api/trajectory`` (status), ``POST /api/trajectory/cancel``,
``GET /api/trajectory/report`` (JSON) and ``GET /api/trajectory/report.svg`` (commanded vs achieved).
``POST /api/program``: a programmed joint motion (waypoint columns, CSV, or ``{"series", "step_s"}``) →
the FAULHABER ASCII program as a text download (``?format=json`` for the JSON).
"""

from __future__ import annotations

import asyncio
import math
import secrets
from typing import Any

import msgspec
from aiohttp import web

from server.errors import ConflictError, MalformedError, RuntimeDownError, ValidationError
from server.gateway.auth.permissions import LEASE, LEASE_CSV, OPERATOR_CSV
from server.gateway.keys import RUNTIME
from server.gateway.registry import Command, Context, RawBody
from server.runtime_api.client import DOWN_MESSAGE
from server.runtime_api.params import (ARM_COMMANDS, ProgramParams, TrajectoryRunParams, check_trajectory_times,
                                       check_waypoints, trajectory_from_columns)
from server.validation import convert, number, parse_object, reject_unknown

#: largest trajectory or program body, bytes (a 100 000-point trajectory of 7 columns is ~12 MB of JSON)
MAX_TRAJECTORY_BYTES = 16 * 1024 * 1024
#: budget of one part sent to the runtime (its frames' headers hold 64 KiB)
PART_BYTES = 40_000
#: characters one number takes in a part at most (orjson prints up to 17 significant digits)
_NUMBER_CHARS = 25

def description(ctx: Context) -> dict[str, Any]:
    """The runtime's description, or 503 ``runtime_down``."""
    if ctx.description is None:
        raise RuntimeDownError(DOWN_MESSAGE)
    return ctx.description


def motion_parser(name: str) -> Any:
    """The parser of a motion command of an arm or the platform: its setpoint struct, ``ttl_s``, the robot's
    limits (the runtime checks again: reach, singularity, stroke)."""
    async def parse(body: dict[str, Any], ctx: Context) -> dict[str, Any]:
        limits = description(ctx)["limits"]
        sp = convert(body, ARM_COMMANDS[name], also_allowed=("ttl_s",))
        ttl_s = number(body, "ttl_s", 0.001, limits["ttl_max_s"], required=False)
        sp.check(limits)
        params: dict[str, Any] = {"setpoint": msgspec.to_builtins(sp)}
        if ttl_s is not None:
            params["ttl_s"] = ttl_s
        return params
    return parse


async def setpoint(ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
    """The runtime's ``setpoint`` method, with the transport as its ``source``."""
    return await ctx.request("setpoint", {**params, "source": ctx.transport.name, **ctx.stamps})


# ---------------------------------------------------------------------- trajectories
#: line breaks str.splitlines() honours (a CSV of them would be that many rows)
_LINE_BREAKS = ("\n", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029")


def check_counts(text: str) -> None:
    r"""Refuse a body with more rows or numbers than any trajectory has, before it is decoded: a 16 MiB
    body of ``0,0,0…`` or of empty lines would otherwise become millions of Python objects.

    >>> check_counts("t_s,x_m\n" + "0,0\n" * 3)
    >>> check_counts("\n" * 300_000)
    Traceback (most recent call last):
    ...
    server.errors.ValidationError: body has 300000 lines; a trajectory has at most 100000 points
    """
    # robotics.trajectory brings numpy: imported by the first body (in its worker thread), not by every gateway
    from robotics.trajectory import MAX_AXES, MAX_POINTS

    max_numbers = (MAX_POINTS + 1) * (MAX_AXES + 1)  # every row of the longest trajectory, every column
    lines = sum(text.count(c) for c in _LINE_BREAKS)
    if lines > 2 * MAX_POINTS + 64:  # CR LF counts twice
        raise ValidationError(f"body has {lines} lines; a trajectory has at most {MAX_POINTS} points",
                              code="out_of_limits")
    if text.count(",") > max_numbers:
        raise ValidationError(f"body has more than {max_numbers} numbers; a trajectory has at most {MAX_POINTS} "
                              f"points of {MAX_AXES} axes", code="out_of_limits")


def parse_trajectory_body(raw: bytes, csv: bool, wrapped: bool = True,
                          series_keys: tuple[str, ...] = ("series", "amplitude")) -> tuple[str, Any]:
    """``("series", {"series", <series_keys>})`` or ``("columns", {"t_s": [...], ...})`` from a request body (the
    columns under ``"trajectory"`` when ``wrapped``, else the body itself); runs in a worker thread (a big body
    takes tens of milliseconds to decode and check)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise MalformedError(f"body is not UTF-8: {err}") from None
    check_counts(text)
    if csv:
        from robotics.trajectory import Trajectory  # imported by check_counts above

        try:
            tr = Trajectory.from_csv(text)
        except (ValueError, OverflowError) as err:
            raise ValidationError(f"trajectory: {err}", code="invalid") from None
        check_trajectory_times(tr.times_s)
        return "columns", tr.to_json()
    return trajectory_from_body(parse_object(text, max_bytes=MAX_TRAJECTORY_BYTES), wrapped, series_keys)


def trajectory_from_body(body: dict[str, Any], wrapped: bool = True,
                         series_keys: tuple[str, ...] = ("series", "amplitude")) -> tuple[str, Any]:
    """:func:`parse_trajectory_body` of a decoded JSON object (a websocket message's body)."""
    if "series" in body:
        reject_unknown(body, series_keys)
        if not isinstance(body["series"], str):
            raise ValidationError("series must be a string", code="wrong_type")
        out = {"series": body["series"]}
        if "amplitude" in series_keys:
            out["amplitude"] = number(body, "amplitude", -10.0, 10.0, required=False)
        if "step_s" in series_keys:
            out["step_s"] = number(body, "step_s", 0.01, 60.0, required=False) or 0.5
        return "series", out
    if not wrapped:
        body = {"trajectory": body}
    reject_unknown(body, ("trajectory",))
    columns = body.get("trajectory")
    if not isinstance(columns, dict):
        raise ValidationError('give "series" (a name) or "trajectory" ({"t_s": [...], axis: [...]})',
                              code="missing_field")
    return "columns", trajectory_from_columns(columns).to_json()


def parts_of(columns: dict[str, list[float]]) -> list[dict[str, list[float]]]:
    """``columns`` cut into row ranges that each fit a runtime frame."""
    n = len(columns["t_s"])
    rows = max(1, PART_BYTES // (_NUMBER_CHARS * len(columns)))
    return [{k: v[i:i + rows] for k, v in columns.items()} for i in range(0, n, rows)] or [columns]


UPLOAD_LOCK = web.AppKey("trajectory_upload_lock", asyncio.Lock)


async def parse_trajectory(body: Any, ctx: Context) -> tuple[str, Any]:
    """``POST /api/trajectory`` (JSON or CSV, up to 16 MiB) or a message's body: decoded and checked in a worker
    thread (a big body takes tens of milliseconds)."""
    description(ctx)
    if isinstance(body, RawBody):
        return await asyncio.to_thread(parse_trajectory_body, body.data, body.csv)
    return await asyncio.to_thread(trajectory_from_body, body)


async def run_trajectory(ctx: Context, parsed: tuple[str, Any]) -> dict[str, Any]:
    kind, data = parsed
    if kind == "series":
        return await ctx.request("trajectory_run", data)
    async with ctx.app[UPLOAD_LOCK]:  # one upload at a time: the runtime keeps one
        upload = secrets.token_hex(8)
        for part, cols in enumerate(parts_of(data)):
            await ctx.request("trajectory_upload", {"upload": upload, "part": part, "columns": cols})
        return await ctx.request("trajectory_run", {"upload": upload})


def trajectory_summary(parsed: tuple[str, Any]) -> dict[str, Any]:
    """How a trajectory run is recorded: the series asked for, or the size of the uploaded one (not its MBs)."""
    kind, data = parsed
    if kind == "series":
        return dict(data)
    return {"points": len(data["t_s"]), "axes": [k for k in data if k != "t_s"],
            "duration_s": (data["t_s"][-1] - data["t_s"][0]) if data["t_s"] else 0.0}


async def parse_cancel(body: dict[str, Any], ctx: Context) -> dict[str, Any]:
    reject_unknown(body, ())
    return {}


async def cancel_trajectory(ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
    status = await ctx.request("trajectory")
    run = status.get("run") or {}
    if run.get("phase") not in ("approach", "run", "settle"):
        raise ConflictError("no trajectory is running", code="conflict")
    return await ctx.request("cancel_behavior")


async def parse_program(body: Any, ctx: Context) -> dict[str, Any]:
    """A programmed joint motion (columns, CSV, or ``{"series", "step_s"}``); what the runtime would refuse is not
    sent (nor its 100 KB frame)."""
    description(ctx)
    if isinstance(body, RawBody):
        kind, data = await asyncio.to_thread(parse_trajectory_body, body.data, body.csv, False, ("series", "step_s"))
    else:
        kind, data = await asyncio.to_thread(trajectory_from_body, body, False, ("series", "step_s"))
    if kind == "columns":
        check_waypoints(len(data["t_s"]))
    return data if kind == "series" else {"columns": data}


async def make_program(ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
    return await ctx.request("program", params)


def program_summary(params: dict[str, Any]) -> dict[str, Any]:
    cols = params.get("columns")
    return {"waypoints": len(cols["t_s"])} if cols else {k: v for k, v in params.items()}


def program_reply(request: web.Request, result: dict[str, Any]) -> web.Response:
    if request.query.get("format") == "json":
        return web.json_response(result)
    return web.Response(text=result["text"], content_type="text/plain",
                        headers={"Content-Disposition": 'attachment; filename="faulhaber-program.txt"'})


async def get_trajectory(request: web.Request) -> web.Response:
    return web.json_response(await request.app[RUNTIME].request("trajectory"))


def max_points(request: web.Request, default: int, most: int = 2000) -> int:
    """A report's ``?max_points=`` (2 to ``most``; 422 naming it otherwise)."""
    raw = request.query.get("max_points", str(default))
    try:
        value = int(raw)
    except ValueError:
        raise ValidationError(f"max_points must be an integer, not {raw!r}", code="wrong_type") from None
    if not 2 <= value <= most:
        raise ValidationError(f"max_points must be in [2, {most}]", code="out_of_limits")
    return value


async def get_report(request: web.Request) -> web.Response:
    report = await request.app[RUNTIME].request("trajectory_report", {"max_points": max_points(request, 400)})
    return web.json_response(report)


def _display(axis: str) -> tuple[float, str]:
    """Scale and unit a plot shows an axis in (mm and degrees read better than m and rad)."""
    if axis.endswith("_rad"):
        return 180.0 / math.pi, "°"
    if axis.endswith("_m"):
        return 1000.0, "mm"
    return 1.0, ""


def report_svg(report: dict[str, Any]) -> str:
    """Commanded vs achieved of each moving axis (every axis if none moves), stacked in one SVG (in a thread:
    numpy and the plotter are imported on the first report, not by every gateway at start, ~60 ms of CPU)."""
    import numpy as np

    from server.gateway.reports.svg import line_plot

    series = report["series"]
    axes = report.get("moving_axes") or report["axes"]
    t = np.asarray(series["t_s"], dtype=float)
    width, height = 800, 260
    plots = []
    for i, axis in enumerate(axes):
        scale, unit = _display(axis)
        dev = (report.get("deviation") or {}).get(axis, {})
        rms = f"; RMS deviation {dev['rms'] * scale:.3g} {unit}" if "rms" in dev else ""
        svg = line_plot(t, {"commanded": np.asarray(series["commanded"][axis]) * scale,
                            "achieved": np.asarray(series["achieved"][axis]) * scale},
                        title=f"{report['label']}: {axis}{rms}", y_label=unit, width=width, height=height)
        plots.append(svg.replace("<svg ", f'<svg y="{i * height}" ', 1))
    total = max(1, len(plots)) * height
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{total}" '
            f'viewBox="0 0 {width} {total}">' + "".join(plots) + "</svg>")


async def get_report_svg(request: web.Request) -> web.Response:
    report = await request.app[RUNTIME].request("trajectory_report", {"max_points": max_points(request, 1000)})
    svg = await asyncio.to_thread(report_svg, report)
    return web.Response(text=svg, content_type="image/svg+xml")


#: the motion commands of arms and platforms and their trajectory runs and programs (docs/arms.md)
COMMANDS: tuple[Command, ...] = (
    *(Command(name, path, LEASE, motion_parser(name), setpoint, body=ARM_COMMANDS[name], offered="declared",
              doc=doc)
      for name, path, doc in (
          ("joints", "/api/joints", "move the joints there (scara)"),
          ("jog", "/api/jog", "joint velocities (scara)"),
          ("tool", "/api/tool", "the tool there, through inverse kinematics (scara)"),
          ("tool_jog", "/api/tool/jog", "tool velocity (scara)"),
          ("pose", "/api/pose", "the platform there (stewart)"))),
    Command("trajectory", "/api/trajectory", LEASE_CSV, parse_trajectory, run_trajectory, body=TrajectoryRunParams,
            record="summary", summary=trajectory_summary, reply="result", empty_ok=False, upload=True,
            doc="check every sample, then run it (JSON or CSV, up to 16 MiB)"),
    Command("trajectory_cancel", "/api/trajectory/cancel", LEASE, parse_cancel, cancel_trajectory, moves=False,
            reply="result", doc="cancel the run"),
    Command("program", "/api/program", OPERATOR_CSV, parse_program, make_program, body=ProgramParams, moves=False,
            record="summary", summary=program_summary, reply="result", empty_ok=False, upload=True,
            http_reply=program_reply, doc="the FAULHABER program of a joint motion (moves nothing)"),
)


def setup_arms(app: web.Application) -> None:
    """The arm and platform routes that are no command (reads); the commands are :data:`COMMANDS`."""
    app[UPLOAD_LOCK] = asyncio.Lock()
    r = app.router
    r.add_get("/api/trajectory", get_trajectory)
    r.add_get("/api/trajectory/report", get_report)
    r.add_get("/api/trajectory/report.svg", get_report_svg)


__all__ = ["COMMANDS", "MAX_TRAJECTORY_BYTES", "motion_parser", "report_svg", "setup_arms", "setpoint"]
