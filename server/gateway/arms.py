"""Routes of the SCARA arm and the Stewart platform (docs/arms.md, docs/api.md): motion commands, trajectory
runs and their reports, FAULHABER programs. The work runs in the runtime; these validate at the edge and forward.

Motion commands — HTTP ``POST /api/joints``, ``/api/jog``, ``/api/tool``, ``/api/tool/jog`` (SCARA),
``/api/pose`` (Stewart), and the same as websocket messages (``joints``, ``jog``, ``tool``, ``tool_jog``,
``pose``) — are each one setpoint struct of :mod:`server.runtime_api`, converted and checked against the
robot's limits here (:func:`arm_command`) and checked again in the runtime, which also refuses what only
kinematics can tell (unreachable, singular, out of the stroke). A robot takes only its own profile's
commands (:data:`server.runtime_api.PROFILE_COMMANDS`): the others are ``unavailable`` (409), except a
zero ``speed`` — the dashboard's "stand still" when it reconnects or the operator leaves — which an arm
takes as a hold.

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
import numpy as np
from aiohttp import web

from robotics.trajectory import MAX_AXES, MAX_POINTS, Trajectory
from server.errors import ConflictError, MalformedError, RuntimeDownError, ValidationError
from server.gateway.http import read_raw_body
from server.gateway.reports.svg import line_plot
from server.runtime_api import ARM_COMMANDS, PROFILE_COMMANDS, Hold
from server.validation import convert, number, parse_object, reject_unknown

#: largest trajectory or program body, bytes (a 100 000-point trajectory of 7 columns is ~12 MB of JSON)
MAX_TRAJECTORY_BYTES = 16 * 1024 * 1024
#: budget of one part sent to the runtime (its frames' headers hold 64 KiB)
PART_BYTES = 40_000
#: characters one number takes in a part at most (orjson prints up to 17 significant digits)
_NUMBER_CHARS = 25

COMMON_COMMANDS = ("start", "stop", "reset", "heartbeat", "estop")


def _runtime(app: web.Application) -> Any:
    from server.gateway.app import RUNTIME  # app.py calls setup_arms: imported when used

    return app[RUNTIME]


def _description(app: web.Application) -> dict[str, Any]:
    from server.gateway.runtime_client import DOWN_MESSAGE

    desc = _runtime(app).description
    if desc is None:
        raise RuntimeDownError(DOWN_MESSAGE)
    return desc


def commands_for(profile: str) -> tuple[str, ...]:
    """Every command a robot of ``profile`` takes (HTTP route or websocket message type)."""
    return COMMON_COMMANDS + PROFILE_COMMANDS.get(profile, ())


def refuse_foreign(desc: dict[str, Any], name: str) -> None:
    """409 ``unavailable`` for a known command of another profile; 422 ``unknown_command`` for no command at all."""
    profile = desc.get("profile", "rover")
    known = commands_for(profile)
    if name in known:
        return
    if any(name in cmds for cmds in PROFILE_COMMANDS.values()):
        raise ConflictError(f"{name} is not a command of this robot (a {profile}); it takes: {', '.join(known)}",
                            code="unavailable")
    raise ValidationError(f"unknown command {name!r}; known: {', '.join(known)}", code="unknown_command")


async def arm_command(app: web.Application, name: str, body: dict[str, Any], source: str,
                      envelope: tuple[str, ...] = ()) -> dict[str, Any]:
    """A motion command of an arm or the platform: edge checks, then the runtime's ``setpoint`` method."""
    desc = _description(app)
    refuse_foreign(desc, name)
    limits = desc["limits"]
    sp = convert(body, ARM_COMMANDS[name], also_allowed=(*envelope, "ttl_s"))
    ttl_s = number(body, "ttl_s", 0.001, limits["ttl_max_s"], required=False)
    sp.check(limits)
    params: dict[str, Any] = {"setpoint": msgspec.to_builtins(sp), "source": source}
    if ttl_s is not None:
        params["ttl_s"] = ttl_s
    return await _runtime(app).request("setpoint", params)


async def zero_speed(app: web.Application, body: dict[str, Any], source: str,
                     envelope: tuple[str, ...] = ()) -> dict[str, Any]:
    """``speed`` sent to an arm: zero (stand still) is a hold; anything else is the rover's and refused."""
    from server.commands import Speed

    desc = _description(app)
    speed = convert(body, Speed, also_allowed=envelope)
    if speed.linear != 0.0 or speed.angular != 0.0:
        refuse_foreign(desc, "speed")
    return await _runtime(app).request("setpoint", {"setpoint": msgspec.to_builtins(Hold()), "source": source})


# ---------------------------------------------------------------------- trajectories
#: line breaks str.splitlines() honours (a CSV of them would be that many rows)
_LINE_BREAKS = ("\n", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029")
#: most numbers a body may hold (every row of the longest trajectory, every column)
MAX_NUMBERS = (MAX_POINTS + 1) * (MAX_AXES + 1)


def check_counts(text: str) -> None:
    r"""Refuse a body with more rows or numbers than any trajectory has, before it is decoded: a 16 MiB
    body of ``0,0,0…`` or of empty lines would otherwise become millions of Python objects.

    >>> check_counts("t_s,x_m\n" + "0,0\n" * 3)
    >>> check_counts("\n" * 300_000)
    Traceback (most recent call last):
    ...
    server.errors.ValidationError: body has 300000 lines; a trajectory has at most 100000 points
    """
    lines = sum(text.count(c) for c in _LINE_BREAKS)
    if lines > 2 * MAX_POINTS + 64:  # CR LF counts twice
        raise ValidationError(f"body has {lines} lines; a trajectory has at most {MAX_POINTS} points",
                              code="out_of_limits")
    if text.count(",") > MAX_NUMBERS:
        raise ValidationError(f"body has more than {MAX_NUMBERS} numbers; a trajectory has at most {MAX_POINTS} "
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
        try:
            tr = Trajectory.from_csv(text)
        except ValueError as err:
            raise ValidationError(f"trajectory: {err}", code="invalid") from None
        return "columns", tr.to_json()
    body = parse_object(text, max_bytes=MAX_TRAJECTORY_BYTES)
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
    try:
        tr = Trajectory.from_columns(columns)
    except ValueError as err:
        raise ValidationError(f"trajectory: {err}", code="invalid") from None
    return "columns", tr.to_json()


def parts_of(columns: dict[str, list[float]]) -> list[dict[str, list[float]]]:
    """``columns`` cut into row ranges that each fit a runtime frame."""
    n = len(columns["t_s"])
    rows = max(1, PART_BYTES // (_NUMBER_CHARS * len(columns)))
    return [{k: v[i:i + rows] for k, v in columns.items()} for i in range(0, n, rows)] or [columns]


async def _read_big_body(request: web.Request) -> tuple[bytes, bool]:
    """The whole body (up to :data:`MAX_TRAJECTORY_BYTES`) and whether it is CSV. A body this big arrives in many
    chunks: read until the end, within ``server.body_timeout_s``."""
    if request.content_length is not None and request.content_length > MAX_TRAJECTORY_BYTES:
        raise MalformedError(f"body of {request.content_length} bytes is over the {MAX_TRAJECTORY_BYTES}-byte limit",
                             code="too_large", status=413)
    body = await read_raw_body(request, MAX_TRAJECTORY_BYTES)
    if len(body) > MAX_TRAJECTORY_BYTES:
        raise MalformedError(f"body is over the {MAX_TRAJECTORY_BYTES}-byte limit", code="too_large", status=413)
    return body, request.content_type in ("text/csv", "text/plain")


UPLOAD_LOCK = web.AppKey("trajectory_upload_lock", asyncio.Lock)


async def post_trajectory(request: web.Request) -> web.Response:
    app = request.app
    _description(app)
    raw, csv = await _read_big_body(request)
    kind, data = await asyncio.to_thread(parse_trajectory_body, raw, csv)
    rt = _runtime(app)
    if kind == "series":
        result = await rt.request("trajectory_run", data)
    else:
        async with app[UPLOAD_LOCK]:  # one upload at a time: the runtime keeps one
            upload = secrets.token_hex(8)
            for part, cols in enumerate(parts_of(data)):
                await rt.request("trajectory_upload", {"upload": upload, "part": part, "columns": cols})
            result = await rt.request("trajectory_run", {"upload": upload})
    return web.json_response(result)


async def get_trajectory(request: web.Request) -> web.Response:
    return web.json_response(await _runtime(request.app).request("trajectory"))


async def cancel_trajectory(request: web.Request) -> web.Response:
    status = await _runtime(request.app).request("trajectory")
    run = status.get("run") or {}
    if run.get("phase") not in ("approach", "run", "settle"):
        raise ConflictError("no trajectory is running", code="conflict")
    return web.json_response(await _runtime(request.app).request("cancel_behavior"))


def _max_points(request: web.Request, default: int) -> int:
    raw = request.query.get("max_points", str(default))
    try:
        value = int(raw)
    except ValueError:
        raise ValidationError(f"max_points must be an integer, not {raw!r}", code="wrong_type") from None
    if not 2 <= value <= 2000:
        raise ValidationError("max_points must be in [2, 2000]", code="out_of_limits")
    return value


async def get_report(request: web.Request) -> web.Response:
    report = await _runtime(request.app).request("trajectory_report", {"max_points": _max_points(request, 400)})
    return web.json_response(report)


def _display(axis: str) -> tuple[float, str]:
    """Scale and unit a plot shows an axis in (mm and degrees read better than m and rad)."""
    if axis.endswith("_rad"):
        return 180.0 / math.pi, "°"
    if axis.endswith("_m"):
        return 1000.0, "mm"
    return 1.0, ""


def report_svg(report: dict[str, Any]) -> str:
    """Commanded vs achieved of each moving axis (every axis if none moves), stacked in one SVG."""
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
    report = await _runtime(request.app).request("trajectory_report", {"max_points": _max_points(request, 1000)})
    svg = await asyncio.to_thread(report_svg, report)
    return web.Response(text=svg, content_type="image/svg+xml")


async def post_program(request: web.Request) -> web.Response:
    app = request.app
    _description(app)
    raw, csv = await _read_big_body(request)
    kind, data = await asyncio.to_thread(parse_trajectory_body, raw, csv, False, ("series", "step_s"))
    params = data if kind == "series" else {"columns": data}
    result = await _runtime(app).request("program", params)
    if request.query.get("format") == "json":
        return web.json_response(result)
    return web.Response(text=result["text"], content_type="text/plain",
                        headers={"Content-Disposition": 'attachment; filename="faulhaber-program.txt"'})


def setup_arms(app: web.Application) -> None:
    """Register the arm and platform routes (their commands go through ``app``'s command handler)."""
    from server.gateway.app import command_handler

    app[UPLOAD_LOCK] = asyncio.Lock()
    r = app.router
    for name, path in (("joints", "/api/joints"), ("jog", "/api/jog"), ("tool", "/api/tool"),
                       ("tool_jog", "/api/tool/jog"), ("pose", "/api/pose")):
        r.add_post(path, command_handler(name))
    r.add_get("/api/trajectory", get_trajectory)
    r.add_post("/api/trajectory", post_trajectory)
    r.add_post("/api/trajectory/cancel", cancel_trajectory)
    r.add_get("/api/trajectory/report", get_report)
    r.add_get("/api/trajectory/report.svg", get_report_svg)
    r.add_post("/api/program", post_program)


__all__ = ["MAX_TRAJECTORY_BYTES", "arm_command", "commands_for", "refuse_foreign", "report_svg", "setup_arms",
           "zero_speed"]
