"""The vision pipeline wired into the gateway: camera frames in, channels to the runtime, overlays out.

::

    video capture thread ─ frame_listener ─▶ VisionWorker (its thread, ≤ rate_hz) ─ on_result
        ─ call_soon_threadsafe (latest wins) ─▶ event loop: runtime ``measurements`` (a notify)
                                                            + the overlay to every /ws/vision client

* The pipeline is built once the runtime has described the robot (a simulated robot's marker
  map is its world's ``[[sim.world.markers]]`` unless ``[vision] markers`` gives one), then its
  channels are declared to the runtime (``declare_channels``) on every new runtime connection,
  and the gateway's copy of the description is refreshed so ``GET /api/robot`` lists them.
* Each result goes to the runtime as it is (one ``notify``, no reply awaited), stamped with the
  frame's capture time on the monotonic clock the runtime shares: the runtime's staleness, not
  this process, decides when vision is too old to act on (docs/vision.md).
* The overlay (markers with their corners, axes, ids; the fix; the floor cue) is serialised
  once per result and offered to each overlay socket's one-slot mailbox (latest wins, like the
  telemetry), so a slow browser only falls behind itself.
* While it runs the camera is read with no viewer (a frame listener keeps it going): the cost of
  vision at idle (docs/vision.md, bench/bench_vision.py).

Nothing here blocks the event loop: decoding and detection run in the worker's thread; the
worker is joined in a thread at shutdown.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Callable

from aiohttp import WSCloseCode, web

from server.runtime_api.client import RuntimeClient
from server.gateway.telemetry import dumps
from server.gateway.video.listener import RateCappedListener
from server.gateway.vision.config import VisionConfig, markers_from_world
from server.gateway.latest import LatestWriter, StallSweeper

if TYPE_CHECKING:  # the pipeline and its worker (OpenCV, numpy) are imported when vision starts, in a thread:
    # every gateway builds this service, and most run with vision off (~50 ms of a start's CPU)
    from server.gateway.vision.pipeline import VisionPipeline, VisionResult
    from server.gateway.vision.worker import VisionWorker

log = logging.getLogger(__name__)

DECLARE_POLL_S = 0.2  # how soon after a runtime (re)connects its channels are declared again


class OverlayClient(LatestWriter[str]):
    """One ``/ws/vision`` socket: a latest-wins slot and its writer task (:mod:`server.gateway.latest`; a client
    that does not read is closed by the service's :class:`~server.gateway.latest.StallSweeper`)."""

    def __init__(self, ws: web.WebSocketResponse, transport: Any) -> None:
        super().__init__(ws.send_str, transport, name="vision overlay")
        self.ws = ws

    @property
    def closed(self) -> bool:
        return self._aborted or self.ws.closed

    async def writer(self) -> None:
        await self.run()


class VisionService:
    """Owns the pipeline, its worker and its link to the runtime; see the module docstring.

    ``video`` is the gateway's :class:`~server.gateway.video.VideoService` (None: no camera), ``video_table``
    the ``[video]`` table (the camera's size, field of view and mount)."""

    def __init__(self, config: VisionConfig, video_table: Any, runtime: RuntimeClient, video: Any | None,
                 *, writer_stall_s: float = 10.0) -> None:
        self.config = config
        self.video_table = video_table
        self.runtime = runtime
        self.video = video
        self.writer_stall_s = writer_stall_s
        self.reason: str | None = None  # why vision is not running (None while it runs or starts)
        if not config.enabled:
            self.reason = "vision is off ([vision] enabled = false)"
        elif video is None:
            self.reason = "vision needs the camera, and video is off ([video] enabled = false)"
        self.pipeline: VisionPipeline | None = None
        self.worker: VisionWorker | None = None
        self.paused = False  # debug: frames are not offered to the worker (the pipeline "stops")
        self.clients: set[OverlayClient] = set()
        self.sweeper = StallSweeper(writer_stall_s, lambda: self.clients, what="vision overlay client",
                                    on_abort=self.clients.discard)
        self.sent = 0
        self.not_sent = 0  # results while the runtime was down or had not had the channels declared
        self.declares = 0
        self._declared_for = -1  # the runtime connection the channels were declared on
        self._declare_error: str | None = None
        # the camera need not run faster than the pipeline while nobody watches the video
        self._listener: Callable[[Any], None] = RateCappedListener(self._offer, config.rate_hz, raw=self._offer_raw)
        self._lock = threading.Lock()
        self._pending: VisionResult | None = None
        self._scheduled = False
        self._aio: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task | None = None
        self.latest_json: dict[str, Any] | None = None

    @property
    def active(self) -> bool:
        """Configured on and possible (it may still be waiting for the runtime's description)."""
        return self.reason is None

    @property
    def running(self) -> bool:
        return self.worker is not None and self.worker.running

    # ------------------------------------------------------------------ lifecycle (event loop)
    async def start(self) -> None:
        if not self.active:
            log.info("%s", self.reason)
            return
        self._aio = asyncio.get_running_loop()
        self._task = asyncio.create_task(self._keep_declared(), name="vision-declare")
        self.sweeper.start()

    async def stop(self) -> None:
        await self.sweeper.stop()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self.video is not None:
            self.video.frame_listeners = [f for f in self.video.frame_listeners if f != self._listener]
        if self.worker is not None:
            await asyncio.to_thread(self.worker.stop)

    async def _keep_declared(self) -> None:
        rt = self.runtime
        while True:
            try:
                if rt.connected and rt.description is not None and rt.connects != self._declared_for:
                    if self.pipeline is None:
                        self._start_worker(await asyncio.to_thread(self._make_pipeline, rt.description))
                    await self._declare(rt.connects)
            except Exception as err:  # noqa: BLE001 - a refused declaration is logged (once) and retried
                (log.warning if self._declare_error is None else log.debug)(
                    "vision: declaring the channels to the runtime failed: %s", err)
                self._declare_error = str(err)
                await asyncio.sleep(2.0)
                continue
            self._declare_error = None
            await asyncio.sleep(DECLARE_POLL_S)

    def _make_pipeline(self, description: dict[str, Any]) -> VisionPipeline:
        from server.gateway.vision.pipeline import VisionPipeline, camera_from_config  # in a thread (see above)
        from server.gateway.vision.worker import VisionWorker  # noqa: F401  (imported here, not on the loop)

        cfg = self.config
        markers = list(cfg.markers) or markers_from_world(description.get("world"), cfg.dictionary)
        return VisionPipeline(cfg, camera_from_config(cfg, self.video_table), markers)

    def _start_worker(self, pipeline: VisionPipeline) -> None:
        from server.gateway.vision.worker import VisionWorker  # already imported by _make_pipeline's thread

        cfg = self.config
        self.pipeline = pipeline
        self.worker = VisionWorker(pipeline, cfg.rate_hz, self._on_result)
        self.worker.start()
        # copy-on-write: the capture thread iterates the list it has while this one replaces it
        self.video.frame_listeners = [*self.video.frame_listeners, self._listener]
        log.info("vision pipeline on: %g Hz, %s, %d marker(s) in the map, floor cue %s", cfg.rate_hz,
                 cfg.dictionary, len(self.pipeline.marker_ids), "on" if self.pipeline.floor else "off")

    async def _declare(self, connection: int) -> None:
        from server.gateway.vision.pipeline import GAUGE_CHANNELS  # imported when the pipeline was made

        pipe = self.pipeline
        assert pipe is not None
        specs = []
        for s in pipe.channel_specs():
            spec = s.to_json()
            spec["gauge"] = s.name in GAUGE_CHANNELS
            specs.append(spec)
        markers = [{"id": i, "x_m": p[0], "y_m": p[1], "yaw_rad": p[2]} for i, p in sorted(pipe.marker_map.items())]
        rt = self.runtime
        await rt.request("declare_channels", {"source": "vision", "channels": specs, "markers": markers})
        description = await rt.request("describe")
        if rt.connects == connection:  # not a description of a runtime that has gone since
            rt.description = description
            self._declared_for = connection
            self.declares += 1

    # ------------------------------------------------------------------ capture thread → worker
    def _offer(self, frame: Any) -> None:
        if self.paused or self.worker is None:
            return
        self.worker.offer(frame)

    def _offer_raw(self, frame_bgr: Any, capture_t: float, seq: int) -> None:
        if self.paused or self.worker is None:
            return
        self.worker.offer_raw(frame_bgr, capture_t, seq)

    # ------------------------------------------------------------------ worker thread → event loop
    def _on_result(self, result: VisionResult) -> None:
        with self._lock:
            self._pending = result
            if self._scheduled:
                return  # the loop has not taken the previous one: this one replaces it
            self._scheduled = True
        aio = self._aio
        if aio is None:
            return
        try:
            aio.call_soon_threadsafe(self._deliver)
        except RuntimeError:  # the loop closed during shutdown
            pass

    def _deliver(self) -> None:
        with self._lock:
            result, self._pending = self._pending, None
            self._scheduled = False
        if result is None:
            return
        rt = self.runtime
        if rt.connected and self._declared_for == rt.connects and rt.notify("measurements", result.measurement()):
            self.sent += 1
        else:
            self.not_sent += 1
        self.latest_json = result.to_json()
        if self.clients:
            text = dumps({"type": "vision", "data": self.latest_json})
            for c in list(self.clients):
                c.offer(text)

    # ------------------------------------------------------------------ overlay sockets
    def add_client(self, ws: web.WebSocketResponse, transport: Any) -> OverlayClient:
        client = OverlayClient(ws, transport)
        self.clients.add(client)
        return client

    def remove_client(self, client: OverlayClient) -> None:
        self.clients.discard(client)

    async def close_clients(self) -> None:
        for c in list(self.clients):
            await c.ws.close(code=WSCloseCode.GOING_AWAY, message=b"server shutdown")

    # ------------------------------------------------------------------ status
    def map_json(self) -> list[dict[str, Any]]:
        pipe = self.pipeline
        if pipe is None:
            return []
        sizes = pipe.detector.sizes
        return [{"id": i, "x_m": p[0], "y_m": p[1], "yaw_rad": p[2], "size_m": sizes.get(i)}
                for i, p in sorted(pipe.marker_map.items())]

    def status(self) -> dict[str, Any]:
        """``GET /api/vision``."""
        cfg = self.config
        runtime_side = (self.runtime.latest_snapshot().get("external") or {}).get("vision")
        return {
            "enabled": cfg.enabled, "running": self.running, "reason": self.reason, "paused": self.paused,
            "config": {"rate_hz": cfg.rate_hz, "dictionary": cfg.dictionary, "marker_size_m": cfg.marker_size_m,
                       "floor_enabled": cfg.floor_enabled, "max_markers": cfg.max_markers},
            "markers": self.map_json(),
            "channels": [s.name for s in self.pipeline.channel_specs()] if self.pipeline else [],
            "stats": self.worker.stats() if self.worker else None,
            "sent": self.sent, "not_sent": self.not_sent, "declares": self.declares,
            "declare_error": self._declare_error,
            "overlay_clients": len(self.clients),
            "runtime": runtime_side,
            "latest": self.latest_json,
            "t": time.time(),
        }


__all__ = ["OverlayClient", "VisionService"]
