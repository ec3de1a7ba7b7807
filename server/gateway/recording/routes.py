"""HTTP routes for recordings: list, status, start/stop, download, delete, CSV export, reports, events.

Every file access goes through :func:`server.gateway.recording.files.safe_path` (a plain
``.mcap`` name inside the recordings directory, nothing else), and every read of a
file runs in a worker thread, never on the event loop. Errors use the server's error
tree, so they come out as ``{"error": {"code", "message"}}`` through its one middleware.

``authorize_operator`` (start/stop) and ``authorize_admin`` (delete) are the gateway's
auth checks: async callables that raise to refuse; ``None`` allows everyone.
"""

from __future__ import annotations

import asyncio
import math
from pathlib import Path
from typing import Any, Awaitable, Callable

from aiohttp import web

from server.errors import ConflictError, NotFoundError, ValidationError
from server.gateway.http import read_body
from server.gateway.recording.files import safe_path
from server.gateway.recording.reader import Recording, RecordingError, list_recordings
from server.gateway.recording.recorder import Recorder
from server.gateway.reports.report import report_html, run_report

Authorize = Callable[[web.Request], Awaitable[None]]
MAX_COLUMNS = 64
MAX_CSV_ROWS = 2_000_000


def _float_param(request: web.Request, key: str) -> float | None:
    raw = request.query.get(key)
    if raw is None or raw == "":
        return None
    try:
        v = float(raw)
    except ValueError:
        raise ValidationError(f"{key} must be a number of seconds (unix time), not {raw!r}", code="wrong_type") from None
    if not math.isfinite(v):
        raise ValidationError(f"{key} must be finite", code="not_finite")
    return v


def _list_param(request: web.Request, key: str, required: bool) -> list[str] | None:
    raw = request.query.get(key)
    if raw is None or raw.strip() == "":
        if required:
            raise ValidationError(f"{key} is required (comma-separated names)", code="missing_field")
        return None
    items = [s.strip() for s in raw.split(",") if s.strip()]
    if len(items) > MAX_COLUMNS:
        raise ValidationError(f"at most {MAX_COLUMNS} {key}", code="out_of_limits")
    return items


def setup_recording_routes(app: web.Application, directory: str | Path, recorder: Recorder | None = None, *,
                           authorize_operator: Authorize | None = None,
                           authorize_admin: Authorize | None = None,
                           prepare: Callable[[], Awaitable[None]] | None = None,
                           status: Callable[[], dict[str, Any]] | None = None,
                           replay_file: str | None = None) -> None:
    """Add the ``/api/recordings`` routes to ``app`` (``recorder`` may be ``None`` in replay mode).

    ``prepare()`` runs before a recording starts (the gateway starts its recorder lazily; it
    raises an ``ApiError`` when there can be none); ``status()`` replaces ``recorder.status()``
    (the gateway adds why it has no recorder); ``replay_file`` is the file a replay is
    playing (it cannot be deleted meanwhile)."""
    directory = Path(directory)
    if status is None and recorder is not None:
        status = recorder.status

    def path_of(request: web.Request) -> Path:
        try:
            path = safe_path(directory, request.match_info["file"])
        except ValueError as err:
            raise ValidationError(str(err), code="invalid") from None
        if not path.is_file():
            raise NotFoundError(f"no recording {path.name!r}")
        return path

    def active_file() -> str | None:
        if status is None:
            return None
        st = status()
        return st["file"] if st["state"] == "recording" else None

    async def get_list(request: web.Request) -> web.Response:
        st = status() if status is not None else None
        active = st["file"] if st and st["state"] == "recording" else None
        items = await asyncio.to_thread(list_recordings, directory, active)
        for item in items:
            if item.get("active") and st:
                item["counts"] = st["messages_by_topic"]
                item["size_bytes"] = st["bytes"]
        return web.json_response({"recordings": items, "status": st, "replay_file": replay_file})

    async def get_status(request: web.Request) -> web.Response:
        if status is None:
            raise ConflictError("no recorder in this mode (replay)", code="no_recorder")
        return web.json_response(status())

    async def post_start(request: web.Request) -> web.Response:
        if authorize_operator is not None:
            await authorize_operator(request)
        if recorder is None:
            raise ConflictError("no recorder in this mode (replay)", code="no_recorder")
        body = await read_body(request)
        if set(body) - {"name"}:
            raise ValidationError("body must be {} or {\"name\": str}", code="unknown_field")
        name = body.get("name")
        if prepare is not None:
            await prepare()
        try:
            file = recorder.start_recording(name)
        except ValueError as err:
            raise ValidationError(str(err), code="invalid") from None
        return web.json_response({"ok": True, "file": file})

    async def post_stop(request: web.Request) -> web.Response:
        if authorize_operator is not None:
            await authorize_operator(request)
        if recorder is None:
            raise ConflictError("no recorder in this mode (replay)", code="no_recorder")
        if recorder.started:  # a recorder never started has nothing to stop
            recorder.stop_recording()
        return web.json_response({"ok": True})

    async def download(request: web.Request) -> web.StreamResponse:
        path = path_of(request)
        return web.FileResponse(path, headers={"Content-Type": "application/octet-stream",
                                               "Content-Disposition": f'attachment; filename="{path.name}"'})

    async def delete(request: web.Request) -> web.Response:
        if authorize_admin is not None:
            await authorize_admin(request)
        path = path_of(request)
        if path.name == active_file():
            raise ConflictError(f"{path.name} is being recorded; stop the recording first", code="recording_active")
        if path.name == replay_file:
            raise ConflictError(f"{path.name} is being replayed", code="recording_active")
        await asyncio.to_thread(path.unlink)
        return web.json_response({"ok": True, "deleted": path.name})

    async def info(request: web.Request) -> web.Response:
        path = path_of(request)

        def read() -> dict[str, Any]:
            with Recording(path) as rec:
                return {**rec.info(), "robot_description": rec.robot, "channels": rec.channel_names()}
        try:
            return web.json_response(await asyncio.to_thread(read))
        except RecordingError as err:
            raise ValidationError(str(err), code="unreadable") from None

    async def csv_export(request: web.Request) -> web.Response:
        path = path_of(request)
        columns = _list_param(request, "columns", required=True)
        start_t, end_t = _float_param(request, "start_t"), _float_param(request, "end_t")

        rec = await asyncio.to_thread(Recording, path)
        try:
            try:
                chunks = await asyncio.to_thread(rec.iter_csv, columns, start_t, end_t, MAX_CSV_ROWS)
            except RecordingError as err:
                raise ValidationError(str(err), code="invalid") from None
            resp = web.StreamResponse(headers={"Content-Type": "text/csv; charset=utf-8",
                                               "Content-Disposition": f'attachment; filename="{path.stem}.csv"'})
            await resp.prepare(request)
            # streamed in chunks read off the event loop: a long export never sits in memory whole
            while (chunk := await asyncio.to_thread(next, chunks, None)) is not None:
                await resp.write(chunk.encode())
            await resp.write_eof()
            return resp
        finally:
            rec.close()

    async def report(request: web.Request) -> web.Response:
        path = path_of(request)
        channels = _list_param(request, "channels", required=False)
        start_t, end_t = _float_param(request, "start_t"), _float_param(request, "end_t")
        html = request.path.endswith(".html")
        plots = html or request.query.get("plots") in ("1", "true")
        try:
            rep = await asyncio.to_thread(run_report, path, channels, None, start_t, end_t, plots=plots)
        except RecordingError as err:
            raise ValidationError(str(err), code="invalid") from None
        if html:
            return web.Response(text=await asyncio.to_thread(report_html, rep), content_type="text/html")
        return web.json_response(rep)

    async def events(request: web.Request) -> web.Response:
        path = path_of(request)
        start_t, end_t = _float_param(request, "start_t"), _float_param(request, "end_t")

        def read() -> list[dict[str, Any]]:
            with Recording(path) as rec:
                return rec.events(start_t, end_t)
        try:
            return web.json_response({"events": await asyncio.to_thread(read)})
        except RecordingError as err:
            raise ValidationError(str(err), code="invalid") from None

    r = app.router
    r.add_get("/api/recordings", get_list)
    r.add_get("/api/recordings/status", get_status)
    r.add_post("/api/recordings/start", post_start)
    r.add_post("/api/recordings/stop", post_stop)
    r.add_get("/api/recordings/{file}", download)
    r.add_delete("/api/recordings/{file}", delete)
    r.add_get("/api/recordings/{file}/info", info)
    r.add_get("/api/recordings/{file}/csv", csv_export)
    r.add_get("/api/recordings/{file}/report", report)
    r.add_get("/api/recordings/{file}/report.html", report)
    r.add_get("/api/recordings/{file}/events", events)


# ---------------------------------------------------------------------- replay mode
def replay_refusal(command: str = "command") -> ConflictError:
    """The error every robot command gets in replay mode (409 ``replay``); raise it from the command path."""
    return ConflictError(f"replay mode: no robot is attached, {command} refused", code="replay")


def _finite_number(body: dict[str, Any], key: str) -> float:
    v = body.get(key)
    if v is None:
        raise ValidationError(f"{key} is required", code="missing_field")
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValidationError(f"{key} must be a number", code="wrong_type")
    if not math.isfinite(v):
        raise ValidationError(f"{key} must be finite", code="not_finite")
    return float(v)


def setup_replay_routes(app: web.Application, source: Any,
                        authorize_operator: Authorize | None = None) -> None:
    """Replay controls for the dashboard: ``GET /api/replay`` (status), ``POST /api/replay/play``,
    ``/pause``, ``/seek`` ``{"t": unix s}`` or ``{"offset_s": s from the start}``, ``/speed`` ``{"speed": x}``.
    Each POST answers with the new status. ``source`` is a :class:`server.gateway.recording.replay.ReplaySource`."""

    async def get_status(request: web.Request) -> web.Response:
        return web.json_response(source.status())

    def control(name: str):
        async def handle(request: web.Request) -> web.Response:
            if authorize_operator is not None:
                await authorize_operator(request)
            if name == "play":
                source.play()
            elif name == "pause":
                source.pause()
            elif name == "seek":
                body = await read_body(request, allow_empty=False)
                if not body:
                    raise ValidationError('body must be {"t": unix seconds} or {"offset_s": seconds}',
                                          code="missing_field")
                if set(body) - {"t", "offset_s"} or len(body) != 1:
                    raise ValidationError('body must be {"t": unix seconds} or {"offset_s": seconds}',
                                          code="unknown_field")
                t = (_finite_number(body, "t") if "t" in body
                     else source.start_t + _finite_number(body, "offset_s"))
                await asyncio.to_thread(source.seek, t)
            elif name == "speed":
                body = await read_body(request, allow_empty=False)
                if set(body) != {"speed"}:
                    raise ValidationError('body must be {"speed": x}', code="unknown_field")
                try:
                    source.set_speed(_finite_number(body, "speed"))
                except ValueError as err:
                    raise ValidationError(str(err), code="out_of_limits") from None
            return web.json_response(source.status())
        handle.__name__ = f"post_replay_{name}"
        return handle

    r = app.router
    r.add_get("/api/replay", get_status)
    for name in ("play", "pause", "seek", "speed"):
        r.add_post(f"/api/replay/{name}", control(name))
