"""HTTP routes for recordings: list, status, start/stop, download, delete, CSV export, reports, events.

Every file access goes through :func:`server.gateway.recording.files.safe_path` (a plain
``.mcap`` name inside the recordings directory, nothing else). What reads a whole file
(info, events, CSV, the report and its page) is a job of the report pool
(:mod:`server.gateway.reports.pool`: its own worker processes, limits per user and in all,
answers cached per file and sent as files), never work on the event loop or its thread
pool. Errors use the server's error tree, so they come out as ``{"error": {"code",
"message"}}`` through its one middleware.

``authorize_operator`` (start/stop) and ``authorize_admin`` (delete; stopping the always-on recording) are the
gateway's
auth checks: async callables that raise to refuse; ``None`` allows everyone. ``who(request)``
names the caller for the per-user job limit and the deletion audit; ``on_deleted(file,
size_bytes, request)`` is told of each deletion (the gateway logs it and puts it in the
event log and the recording).
"""

from __future__ import annotations

import asyncio
import math
import tempfile
from pathlib import Path
from typing import Any, Awaitable, Callable

from aiohttp import web

from server.errors import ConflictError, NotFoundError, ValidationError
from server.gateway.http import read_body
from server.gateway.recording.config import RecordingConfig
from server.gateway.recording.files import safe_path
from server.gateway.recording.reader import RecordingError, list_recordings
from server.gateway.recording.recorder import Recorder
from server.gateway.reports.cache import ResultCache
from server.gateway.reports.pool import ReportPool

Authorize = Callable[[web.Request], Awaitable[None]]
MAX_COLUMNS = 64
MAX_CSV_ROWS = 2_000_000
#: the latest time a query may name: MCAP log times are unsigned nanoseconds (2^63 ns ≈ year 2262)
MAX_T_S = 9.2e9
REPORT_POOL = web.AppKey("report_pool", ReportPool)
#: an answer is sent from its file in pieces of this size (read off the event loop)
SEND_CHUNK_BYTES = 256 * 1024


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
    if not 0.0 <= v <= MAX_T_S:
        raise ValidationError(f"{key} must be a unix time in seconds from 0 to {MAX_T_S:g}, not {raw}",
                              code="out_of_limits")
    return v


def _time_range(request: web.Request) -> tuple[float | None, float | None]:
    start_t, end_t = _float_param(request, "start_t"), _float_param(request, "end_t")
    if start_t is not None and end_t is not None and end_t < start_t:
        raise ValidationError(f"end_t ({end_t}) is before start_t ({start_t})", code="out_of_limits")
    return start_t, end_t


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


def default_pool(cfg: RecordingConfig | None = None, cache_root: Path | None = None) -> ReportPool:
    """A report pool from ``[recording]`` (defaults without one), its answers under ``cache_root``."""
    cfg = cfg or RecordingConfig()
    root = cache_root or Path(tempfile.gettempdir()) / "teleop-report-cache"
    return ReportPool(ResultCache(root, cfg.report_cache_bytes), kind=cfg.report_pool, workers=cfg.report_workers,
                      queue=cfg.report_queue, per_user=cfg.reports_per_user)


def remote_of(request: web.Request) -> str:
    return request.remote or "?"


def setup_recording_routes(app: web.Application, directory: str | Path, recorder: Recorder | None = None, *,
                           authorize_operator: Authorize | None = None,
                           authorize_admin: Authorize | None = None,
                           prepare: Callable[[], Awaitable[None]] | None = None,
                           status: Callable[[], dict[str, Any]] | None = None,
                           replay_file: str | None = None,
                           pool: ReportPool | None = None,
                           who: Callable[[web.Request], str] = remote_of,
                           on_deleted: Callable[[str, int, web.Request], None] | None = None) -> ReportPool:
    """Add the ``/api/recordings`` routes to ``app`` (``recorder`` may be ``None`` in replay mode).

    ``prepare()`` runs before a recording starts (the gateway starts its recorder lazily; it
    raises an ``ApiError`` when there can be none); ``status()`` replaces ``recorder.status()``
    (the gateway adds why it has no recorder); ``replay_file`` is the file a replay is
    playing (it cannot be deleted meanwhile); ``pool`` runs the jobs (default: one from
    ``[recording]``'s defaults), closed with the app. Returns the pool."""
    directory = Path(directory)
    if status is None and recorder is not None:
        status = recorder.status
    pool = pool or default_pool()
    app[REPORT_POOL] = pool

    async def close_pool(app: web.Application) -> None:
        await pool.close()

    app.on_cleanup.append(close_pool)

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

    async def answer(request: web.Request, kind: str, path: Path, params: dict[str, Any], *,
                     content_type: str, error_code: str = "invalid",
                     headers: dict[str, str] | None = None) -> web.StreamResponse:
        """The job's answer (cached or computed by the pool), sent from its file."""
        try:
            entry = await pool.answer(who(request), kind, path, params)
        except RecordingError as err:
            raise ValidationError(str(err), code=error_code) from None
        except FileNotFoundError:
            raise NotFoundError(f"no recording {path.name!r}") from None
        try:  # open while pinned: an open file stays readable when the cache removes it
            f = await asyncio.to_thread(open, entry.path, "rb")
        finally:
            pool.cache.release(entry)
        try:
            resp = web.StreamResponse(headers={"Content-Type": content_type, "Cache-Control": "no-store",
                                               **(headers or {})})
            resp.content_length = entry.size
            await resp.prepare(request)
            while chunk := await asyncio.to_thread(f.read, SEND_CHUNK_BYTES):
                await resp.write(chunk)
            await resp.write_eof()
            return resp
        finally:
            f.close()

    async def get_list(request: web.Request) -> web.Response:
        st = status() if status is not None else None
        active = st["file"] if st and st["state"] == "recording" else None
        items = await asyncio.to_thread(list_recordings, directory, active)
        for item in items:
            if item.get("active") and st:
                item["counts"] = st["messages_by_topic"]
                item["size_bytes"] = st["bytes"]
        return web.json_response({"recordings": items, "status": st, "replay_file": replay_file,
                                  "jobs": pool.stats()})

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
        """Stop the named recording (the always-on one resumes); with none running, stopping the always-on
        recording — the black box every incident is read from — is for an admin (issue 19: any lease holder
        could)."""
        if authorize_operator is not None:
            await authorize_operator(request)
        if recorder is None:
            raise ConflictError("no recorder in this mode (replay)", code="no_recorder")
        black_box = not recorder.named_requested and (recorder.cfg.always_on or recorder.status().get("recording"))
        if recorder.started and black_box and authorize_admin is not None:
            await authorize_admin(request)
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
        size = (await asyncio.to_thread(path.stat)).st_size
        await asyncio.to_thread(path.unlink)
        pool.cache.forget(path.name)
        if on_deleted is not None:
            on_deleted(path.name, size, request)
        return web.json_response({"ok": True, "deleted": path.name})

    async def info(request: web.Request) -> web.StreamResponse:
        return await answer(request, "info", path_of(request), {}, content_type="application/json",
                            error_code="unreadable")

    async def csv_export(request: web.Request) -> web.StreamResponse:
        path = path_of(request)
        columns = _list_param(request, "columns", required=True)
        start_t, end_t = _time_range(request)
        return await answer(request, "csv", path, {"columns": columns, "start_t": start_t, "end_t": end_t,
                                                   "max_rows": MAX_CSV_ROWS},
                            content_type="text/csv; charset=utf-8",
                            headers={"Content-Disposition": f'attachment; filename="{path.stem}.csv"'})

    async def report(request: web.Request) -> web.StreamResponse:
        path = path_of(request)
        channels = _list_param(request, "channels", required=False)
        start_t, end_t = _time_range(request)
        if request.path.endswith(".html"):
            return await answer(request, "report.html", path, {"channels": channels, "start_t": start_t,
                                                               "end_t": end_t},
                                content_type="text/html; charset=utf-8")
        plots = request.query.get("plots") in ("1", "true")
        return await answer(request, "report", path, {"channels": channels, "start_t": start_t, "end_t": end_t,
                                                      "plots": plots}, content_type="application/json")

    async def missions(request: web.Request) -> web.StreamResponse:
        """The missions recorded in the file, rebuilt from its events and snapshots (docs/missions.md)."""
        path = path_of(request)
        if request.path.endswith(".html"):
            return await answer(request, "missions.html", path, {}, content_type="text/html; charset=utf-8")
        return await answer(request, "missions", path, {}, content_type="application/json")

    async def events(request: web.Request) -> web.StreamResponse:
        path = path_of(request)
        start_t, end_t = _time_range(request)
        return await answer(request, "events", path, {"start_t": start_t, "end_t": end_t},
                            content_type="application/json")

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
    r.add_get("/api/recordings/{file}/missions", missions)
    r.add_get("/api/recordings/{file}/missions.html", missions)
    r.add_get("/api/recordings/{file}/events", events)
    return pool


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
