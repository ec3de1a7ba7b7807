"""Missions and the seed experiments (issue 23; docs/missions.md) as commands of the registry
(:mod:`server.gateway.registry`), and their reads: the work runs in the runtime
(:mod:`server.runtime.behaviours.mission`, :mod:`server.runtime.experiments`), these validate at the edge
and forward.

Commands (so validation, permission and lease, the rate limit, recording and replay's refusal are the
dispatcher's, on HTTP, the websocket and the data channel alike): ``mission`` (``POST /api/mission``),
``mission_pause`` / ``mission_resume`` / ``mission_cancel`` (``POST /api/mission/pause|resume|cancel``),
``experiment`` (``POST /api/experiments/{name}``: the URL names it; on a message transport the body's
``name``, its parameters under ``params``) and ``experiment_cancel`` (``POST /api/experiments/cancel``).
A mission or an experiment is a behaviour of the runtime's loop: it needs ``running`` (409 otherwise),
the operator's heartbeat keeps it alive and a lost link, a stop or an e-stop ends it like any motion.

Reads: ``GET /api/mission`` (status, progress, current leg, per-leg results), ``GET /api/mission/report``
(JSON; ``.csv``: one row per leg; ``.html``: the page with its plots, drawn in a worker thread),
``GET /api/experiments`` (the list and the current run), ``GET /api/experiments/report`` (``.html``).
"""

from __future__ import annotations

import asyncio
import csv
import io
from typing import Any

import msgspec
from aiohttp import web

from server.errors import ValidationError
from server.gateway.arms import max_points
from server.gateway.auth.permissions import LEASE
from server.gateway.keys import RUNTIME
from server.gateway.navigation import forward
from server.gateway.registry import Command, Context
from server.runtime_api.params import Empty, ExperimentParams, MissionParams
from server.validation import convert, reject_unknown

#: experiment names are identifiers (the runtime lists the known ones in its 404)
MAX_NAME_CHARS = 64


async def parse_mission(body: dict[str, Any], ctx: Context) -> dict[str, Any]:
    return msgspec.to_builtins(convert(body, MissionParams).check())


async def parse_bare(body: dict[str, Any], ctx: Context) -> dict[str, Any]:
    reject_unknown(body, ())
    return {}


async def parse_experiment(body: dict[str, Any], ctx: Context) -> dict[str, Any]:
    p = convert(body, ExperimentParams)
    if not (0 < len(p.name) <= MAX_NAME_CHARS and p.name.replace("_", "").isalnum() and p.name.isascii()):
        raise ValidationError(f"name must be an experiment's name (letters, digits, _), got {p.name[:80]!r}",
                              code="invalid")
    return {"name": p.name, "params": p.params}


def experiment_body(match: dict[str, str], body: Any) -> Any:
    """``POST /api/experiments/{name}`` with the parameters as its body → the command's body."""
    if isinstance(body, dict):
        return {"name": match.get("name", ""), "params": body}
    return body


#: missions and experiments, recorded as validated (the runtime converts them again)
COMMANDS: tuple[Command, ...] = (
    Command("mission", "/api/mission", LEASE, parse_mission, forward("mission_start"), body=MissionParams,
            record="params", reply="result", empty_ok=False,
            doc="drive through waypoints (drive: pure pursuit; step: turn, move, settle, UWB fix)"),
    Command("mission_pause", "/api/mission/pause", LEASE, parse_bare, forward("mission_pause"), body=Empty,
            moves=False, reply="result", doc="hold the mission where it is (the rover stops)"),
    Command("mission_resume", "/api/mission/resume", LEASE, parse_bare, forward("mission_resume"), body=Empty,
            reply="result", doc="go on with a paused mission"),
    Command("mission_cancel", "/api/mission/cancel", LEASE, parse_bare, forward("mission_cancel"), body=Empty,
            moves=False, reply="result", doc="end the mission (the rover stops)"),
    # before experiment's own route: /api/experiments/cancel is not an experiment named "cancel"
    Command("experiment_cancel", "/api/experiments/cancel", LEASE, parse_bare, forward("experiment_cancel"),
            body=Empty, moves=False, reply="result", doc="end the running experiment (the rover stops)"),
    Command("experiment", "/api/experiments/{name}", LEASE, parse_experiment, forward("experiment_run"),
            body=ExperimentParams, record="params", reply="result", http_body=experiment_body,
            doc="run a seed experiment in the simulator (HTTP: the URL names it, the body is its params)"),
)


# ---------------------------------------------------------------------- reads
# the reports (numpy, the recording reader, the plotter) are imported in the worker thread that renders the
# first one, not by every gateway at start
def legs_csv(report: dict[str, Any]) -> str:
    from server.gateway.reports.mission import LEG_COLUMNS, leg_rows

    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(LEG_COLUMNS)
    w.writerows(leg_rows(report))
    return out.getvalue()


def mission_page(report: dict[str, Any]) -> str:
    from server.gateway.reports.mission import mission_html

    return mission_html(report)


def experiment_page(report: dict[str, Any]) -> str:
    from server.gateway.reports.mission import experiment_html

    return experiment_html(report)


async def get_mission(request: web.Request) -> web.Response:
    return web.json_response(await request.app[RUNTIME].request("mission", {}))


async def get_mission_report(request: web.Request) -> web.Response:
    html, as_csv = request.path.endswith(".html"), request.path.endswith(".csv")
    report = await request.app[RUNTIME].request("mission_report",
                                                {"max_points": max_points(request, 2000 if html else 400, 5000)})
    if html:
        return web.Response(text=await asyncio.to_thread(mission_page, report), content_type="text/html")
    if as_csv:
        return web.Response(text=await asyncio.to_thread(legs_csv, report), content_type="text/csv",
                            headers={"Content-Disposition": 'attachment; filename="mission-legs.csv"'})
    return web.json_response(report)


async def get_experiments(request: web.Request) -> web.Response:
    runtime = request.app[RUNTIME]
    listed = await runtime.request("experiments", {})
    return web.json_response({**listed, **await runtime.request("experiment", {})})


async def get_experiment_report(request: web.Request) -> web.Response:
    report = await request.app[RUNTIME].request("experiment_report", {})
    if request.path.endswith(".html"):
        return web.Response(text=await asyncio.to_thread(experiment_page, report), content_type="text/html")
    return web.json_response(report)


def setup_missions(app: web.Application) -> None:
    """The mission and experiment reads (the commands are :data:`COMMANDS`)."""
    r = app.router
    r.add_get("/api/mission", get_mission)
    for suffix in ("", ".html", ".csv"):
        r.add_get(f"/api/mission/report{suffix}", get_mission_report)
    r.add_get("/api/experiments", get_experiments)
    r.add_get("/api/experiments/report", get_experiment_report)
    r.add_get("/api/experiments/report.html", get_experiment_report)


__all__ = ["COMMANDS", "legs_csv", "setup_missions"]
