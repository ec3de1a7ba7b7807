"""The recorder, the event log and the Foxglove live view wired into the gateway.

``setup_recording(app, ...)`` (called once by ``create_app``) plugs into the gateway's
:class:`~server.gateway.hooks.Hooks`, so no core handler knows about recording:

* each snapshot → ``Recorder.record_snapshot`` (the runtime's bytes, untouched; log time
  the snapshot's ``t``) and the live view; the snapshot is parsed once for everyone
  (:func:`server.gateway.observability.setup.parsed_snapshot`);
* each event → the recorder, the gateway's :class:`EventLog` and the live view;
* each command, accepted or refused → ``/teleop/commands``, with who sent it
  (:attr:`RecordingAuth.principal`, ``None`` until the auth wiring fills it);
* each settings change → ``/teleop/settings``;
* camera frames → ``/camera/image`` when ``[recording] video_frames`` is on, and only while
  a recording is being written: a frame listener makes the camera capture even with no
  viewer, so it is attached and detached by the 1 Hz task;
* a new runtime connection → the recorder gets the (new) robot description.

Start-up (a cleanup context, after the runtime connection): the event log is seeded from
the recordings, then the recorder starts (repairing files a crash left unfinished; each
repair is logged) if ``always_on`` is set or the directory already exists, otherwise on
the first ``POST /api/recordings/start``, so a server that never records creates no
directory. A directory another recorder holds (a second server started in the same
working directory) leaves this one without a recorder: its status says why, the robot
is unaffected.

In replay mode (the runtime client is a ``ReplayRuntime``: it has a ``replay_source``)
there is no recorder: the routes list the replayed file's directory, the replay
controls are added, and ``/api/events`` is answered by the replay (events up to the
playback position).

**Auth.** :class:`RecordingAuth` (``app[RECORDING_AUTH]``): ``principal(request)`` names
who sent a command or setting (by default the trust layer's principal: a user name,
``local`` in local mode, ``None`` without one), and ``operator`` / ``admin`` / ``viewer``
are optional async checks that raise to refuse (start/stop and replay controls; delete;
the ``/foxglove`` relay). They are read at request time, so they can be set after
``create_app``. The auth middleware guards these routes through its permission table.

**Jobs and deletions.** Reading a whole file (info, events, CSV, reports) is a job of one
:class:`~server.gateway.reports.pool.ReportPool` (``[recording] report_*``; answers cached in
``[server] state_dir``/report-cache), limited per user (the principal, else the client
address). Every deletion, by hand (``DELETE``) or by pruning to the budget, is audited the
same way: a log line naming the file, its size and who or what deleted it, and an
``info`` event (``recording_deleted`` / ``recording_pruned``) through ``Hooks.on_event``,
so it is in ``/api/events`` and in the recording being written.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from pathlib import Path
from typing import Any, Awaitable, Callable

from aiohttp import web

from server.errors import ConflictError
from server.gateway.auth.service import PRINCIPAL_KEY
from server.gateway.hooks import HOOKS, Hooks
from server.gateway.observability.setup import METRICS, parsed_snapshot
from server.gateway.recording.events import SEED_EVENTS, EventLog
from server.gateway.recording.live import FoxgloveLive, proxy_handler
from server.gateway.recording.reader import recent_events
from server.gateway.recording.recorder import Recorder
from server.gateway.recording.routes import default_pool, setup_recording_routes, setup_replay_routes
from server.runtime_api.client import RuntimeClient
from server.gateway.video import VIDEO_KEY

log = logging.getLogger(__name__)

Authorize = Callable[[web.Request], Awaitable[None]]
TICK_S = 1.0


def no_principal(request: web.Request | None) -> str | None:
    """Who sent a request, as the trust layer says (a user name, ``local``), or ``None``."""
    principal = request.get(PRINCIPAL_KEY) if request is not None else None
    return principal.user if principal is not None else None


@dataclasses.dataclass
class RecordingAuth:
    """The auth wiring's hooks for recording (see the module docstring). ``None`` allows everyone."""

    principal: Callable[[web.Request | None], str | None] = no_principal
    operator: Authorize | None = None
    admin: Authorize | None = None
    viewer: Authorize | None = None


RECORDING_AUTH = web.AppKey("recording_auth", RecordingAuth)
RECORDER = web.AppKey("recorder", Recorder)
EVENT_LOG = web.AppKey("event_log", EventLog)
LIVE = web.AppKey("foxglove_live", FoxgloveLive)


def _add_listener(video: Any, fn: Callable[[Any], None]) -> None:
    # a new list, not an append: the capture thread may be iterating the old one
    video.frame_listeners = [*video.frame_listeners, fn]
    video.want_frames(0.0)  # wake the capture thread if it idles


def _remove_listener(video: Any, fn: Callable[[Any], None]) -> None:
    video.frame_listeners = [f for f in video.frame_listeners if f is not fn]


def cache_root(profile: Any) -> Path:
    """Where report, CSV, info and event answers are kept: ``[server] state_dir``/report-cache."""
    return Path(profile.server.state_dir) / "report-cache"


class RecordingService:
    """Owns the recorder, the event log and the live view of one gateway (see the module docstring)."""

    def __init__(self, app: web.Application, profile: Any, runtime: RuntimeClient,
                 describe: Callable[[], dict[str, Any] | None]) -> None:
        self.app = app
        self.cfg = profile.recording
        self.obs_cfg = profile.observability
        self.runtime = runtime
        self.describe = describe
        self.recorder = Recorder(self.cfg)
        self.pool = default_pool(self.cfg, cache_root(profile))
        self.events = EventLog()
        self.live: FoxgloveLive | None = None
        self.unavailable: str | None = None  # why there is no recorder (its directory is taken, …)
        self._started = False
        self._start_lock = asyncio.Lock()
        self._connects = -1
        self._frame_listener: Callable[[Any], None] | None = None
        self._live_listener: Callable[[Any], None] | None = None

    # ------------------------------------------------------------------ auth hooks (read per request)
    @property
    def auth(self) -> RecordingAuth:
        return self.app[RECORDING_AUTH]

    async def authorize(self, role: str, request: web.Request) -> None:
        check = getattr(self.auth, role)
        if check is not None:
            await check(request)

    def principal(self, request: web.Request | None) -> str | None:
        try:
            return self.auth.principal(request)
        except Exception:  # noqa: BLE001 - a failing lookup must not lose the record
            log.exception("principal lookup failed")
            return None

    def who(self, request: web.Request) -> str:
        """Whose jobs these are (the per-user limit): the principal, else the client address."""
        return self.principal(request) or f"address {request.remote}"

    # ------------------------------------------------------------------ deletions, audited alike
    def on_deleted(self, file: str, size: int, request: web.Request) -> None:
        by = self.principal(request) or f"address {request.remote}"
        log.warning("recording %s (%d bytes) deleted by %s", file, size, by)
        self.audit("recording_deleted", f"{file} ({size} bytes) deleted by {by}", {"file": file, "bytes": size,
                                                                                      "by": by})

    def audit_pruned(self) -> None:
        """What pruning deleted since the last tick (logged by the writer thread as it happened)."""
        while self.recorder.pruned_log:
            d = self.recorder.pruned_log.popleft()
            self.pool.cache.forget(d["file"])
            kind = "named" if d["named"] else "automatic"
            self.audit("recording_pruned", f"{d['file']} ({d['bytes']} bytes, {kind}, {d['safety_events']} safety "
                       f"event(s)) deleted by pruning to the {self.cfg.budget_bytes}-byte budget",
                       {**d, "by": "pruning", "budget_bytes": self.cfg.budget_bytes})

    def audit(self, trigger: str, message: str, values: dict[str, Any]) -> None:
        state = self.runtime.latest_snapshot().get("state")
        Hooks.call(self.app[HOOKS].on_event, {"t": time.monotonic(), "wall_t": time.time(), "trigger": trigger,
                                              "message": message, "values": values, "state_before": state,
                                              "state_after": state, "kind": "info"})

    # ------------------------------------------------------------------ recorder lifecycle
    async def ensure_started(self) -> None:
        """Start the recorder once (directory, lock, repair of unfinished files: in a thread)."""
        async with self._start_lock:
            if self._started:
                return
            if self.unavailable is None:
                desc = self.describe()
                if desc:
                    self.recorder.set_robot(desc)
                try:
                    reports = await asyncio.to_thread(self.recorder.start)
                except (RuntimeError, OSError) as err:
                    self.unavailable = f"recording unavailable: {err}"
                    log.error("%s", self.unavailable)
                else:
                    self._started = True
                    for rep in reports:
                        log.warning("recording %s at start-up: %s", rep.get("action"), rep)
                    return
            raise ConflictError(self.unavailable, code="no_recorder")

    def status(self) -> dict[str, Any]:
        st = self.recorder.status()
        if self.unavailable is not None:
            st.update(state="error", recording=False, error=self.unavailable)
        return st

    # ------------------------------------------------------------------ hooks (event loop)
    def on_snapshot(self, data: bytes) -> None:
        rt = self.runtime
        if rt.connects != self._connects and rt.connected:  # a (new) runtime: its description may differ
            self._connects = rt.connects
            desc = self.describe()
            if desc and self._started:
                self.recorder.set_robot(desc)
        t = parsed_snapshot(rt, data).get("t")
        t = t if isinstance(t, (int, float)) else None
        self.recorder.record_snapshot(data, t)
        if self.live is not None:
            self.live.publish_snapshot(data, t)

    def on_event(self, event: dict[str, Any]) -> None:
        self.recorder.record_event(event)
        self.events.add(event)
        if self.live is not None:
            self.live.publish_event(event)

    def on_command(self, record: dict[str, Any]) -> None:
        request = record.get("request")
        body = record.get("body")
        self.recorder.record_command(
            record.get("command", "?"), body if isinstance(body, dict) else None, accepted=bool(record.get("accepted")),
            principal=self.principal(request), source=record.get("source"), state=record.get("state"),
            error=record.get("error"))
        if self.live is not None:
            self.live.publish_command({k: v for k, v in record.items() if k != "request"}
                                      | {"principal": self.principal(request)})

    def on_settings(self, kind: str, settings: dict[str, Any], request: Any) -> None:
        self.recorder.record_settings(kind, settings, principal=self.principal(request))

    # ------------------------------------------------------------------ 1 Hz
    def tick(self) -> None:
        self.audit_pruned()
        status = self.status()
        metrics = self.app.get(METRICS)
        if metrics is not None:
            metrics.update_recorder(status)
            if self.live is not None:
                metrics.set_clients("foxglove", self.live.subscriptions)
        self._update_frame_listeners(status["recording"])

    def _update_frame_listeners(self, recording: bool) -> None:
        video = self.app.get(VIDEO_KEY)
        if video is None:
            return
        from server.gateway.video.frames import unix_time  # loaded with the video service already

        want = self.cfg.video_frames and recording
        if want and self._frame_listener is None:
            recorder = self.recorder

            def record_frame(frame: Any) -> None:  # the capture thread: only enqueues
                recorder.record_frame(frame.jpeg, unix_time(frame.capture_t))  # files keep Unix time

            self._frame_listener = record_frame
            _add_listener(video, record_frame)
        elif not want and self._frame_listener is not None:
            _remove_listener(video, self._frame_listener)
            self._frame_listener = None
        live = self.live
        want_live = live is not None and self.obs_cfg.foxglove_video and live.subscriptions > 0
        if want_live and self._live_listener is None:
            def publish_frame(frame: Any) -> None:
                live.publish_frame(bytes(frame.jpeg), unix_time(frame.capture_t))

            self._live_listener = publish_frame
            _add_listener(video, publish_frame)
        elif not want_live and self._live_listener is not None:
            _remove_listener(video, self._live_listener)
            self._live_listener = None

    async def run(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            try:
                self.tick()
            except Exception:  # a bug here must not end the task
                log.exception("recording tick failed")

    # ------------------------------------------------------------------ the app's lifetime
    async def ctx(self, app: web.Application):
        directory = Path(self.cfg.dir)
        exists = await asyncio.to_thread(directory.is_dir)
        if exists:
            try:
                self.events.seed(await asyncio.to_thread(recent_events, directory, SEED_EVENTS))
            except OSError as err:
                log.warning("could not read the event log back from %s: %s", directory, err)
            log.info("event log: %d event(s) read back from %s", len(self.events), directory)
        if self.cfg.always_on or exists:
            try:
                await self.ensure_started()
            except ConflictError:
                pass  # logged; the status says why
        if self.obs_cfg.foxglove_live:
            live = FoxgloveLive(self.obs_cfg.foxglove_host, self.obs_cfg.foxglove_port, robot=self.describe(),
                                video_frames=self.obs_cfg.foxglove_video)
            try:
                await asyncio.to_thread(live.start)
                self.live = live
                app[LIVE] = live
            except Exception as err:  # noqa: BLE001 - the live view is optional: never stop the gateway
                log.error("foxglove live view not started: %s", err)
        task = asyncio.create_task(self.run(), name="recording-tick")
        try:
            yield
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            self._update_frame_listeners(False)
            if self.live is not None:
                await asyncio.to_thread(self.live.stop)
                self.live = None
            if self._started:
                await self.recorder.aclose()
                self.audit_pruned()  # logged; the last file is finished, the event log still takes them


def setup_recording(app: web.Application, profile: Any, runtime: RuntimeClient,
                    describe: Callable[[], dict[str, Any] | None]) -> RecordingService | None:
    """Wire recording into ``app`` (see the module docstring). ``describe()`` is ``GET /api/robot``'s body.
    Returns the service (``None`` in replay mode)."""
    app[RECORDING_AUTH] = RecordingAuth()
    source = getattr(runtime, "replay_source", None)
    if source is not None:
        async def operator(request: web.Request) -> None:
            check = request.app[RECORDING_AUTH].operator
            if check is not None:
                await check(request)

        setup_recording_routes(app, source.path.parent, None, replay_file=source.path.name,
                               pool=default_pool(profile.recording, cache_root(profile)))
        setup_replay_routes(app, source, authorize_operator=operator)
        return None
    svc = RecordingService(app, profile, runtime, describe)
    app[RECORDER] = svc.recorder
    app[EVENT_LOG] = svc.events
    hooks = app[HOOKS]
    hooks.on_snapshot.append(svc.on_snapshot)
    hooks.on_event.append(svc.on_event)
    hooks.on_command.append(svc.on_command)
    hooks.on_settings.append(svc.on_settings)
    setup_recording_routes(app, svc.cfg.dir, svc.recorder,
                           authorize_operator=lambda request: svc.authorize("operator", request),
                           authorize_admin=lambda request: svc.authorize("admin", request),
                           prepare=svc.ensure_started, status=svc.status, pool=svc.pool, who=svc.who,
                           on_deleted=svc.on_deleted)
    if profile.observability.foxglove_live:  # the live server starts with the app; its route is added now
        app.router.add_get("/foxglove", proxy_handler(lambda: svc.live,
                                                      lambda request: svc.authorize("viewer", request)))
    app.cleanup_ctx.append(svc.ctx)
    return svc


__all__ = ["EVENT_LOG", "LIVE", "RECORDER", "RECORDING_AUTH", "RecordingAuth", "RecordingService", "no_principal",
           "setup_recording"]
