"""The runtime API server: requests and subscriptions over a Unix socket (docs/runtime-api.md).

Runs on the runtime process's asyncio thread (the control loop has a thread of its own).
Requests are answered in order on each connection; each method validates its parameters
with the same structs the gateway uses at its edge and the robot's limits, so the runtime
refuses anything out of range whoever sends it. Snapshots are serialised once per publish
and written to every subscriber whose socket keeps up; a subscriber that does not read
loses snapshots (latest wins), never the control loop's time.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import time
from pathlib import Path
from typing import Any, Callable


from drivers.base import ChannelSpec
from drivers.errors import AcquisitionError, DriverError
from robotics.estimation.markers import MarkerObservation
from server import protocol
from server.commands import MAX_REASON
from server.errors import ApiError, ConflictError, NotFoundError, ValidationError
from server.runtime.behaviours.marker import GoToMarkerBehavior, bearing_channel, range_channel
from server.runtime.behaviours.trajectory import TrajectoryMethods
from server.runtime.external import ExternalError, is_external
from server.runtime.robot import Robot
from server.runtime_api import (AcquisitionParams, DebugParams, DeclareParams, Empty, EstopParams, EventsParams,
                                GoToMarkerParams, HeadingParams, MagParams, MeasurementsParams, PingParams,
                                SetpointParams, SubscribeParams, UwbParams, setpoint_from)
from server.runtime.supervisor import Event, Refused
from server.validation import check_range, convert

log = logging.getLogger(__name__)

#: a subscriber whose socket holds this much unsent data gets no more snapshots until it drains
MAX_BACKLOG_BYTES = 256 * 1024


MAX_PAIRS = 2000
#: methods after which no snapshot needs to go out before the reply (they change nothing, or only the
#: link's age: a heartbeat at 50 Hz must not double the snapshot rate)
NO_PUBLISH = {"describe", "state", "events", "acquisition", "calibration", "ping", "subscribe", "heartbeat",
              "loop_stats", "trajectory_upload", "trajectory", "trajectory_report", "program",
              "declare_channels", "measurements", "external"}


def _prepare_socket_path(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() or path.is_symlink():
        path.unlink()  # a stale socket of a runtime that died


def _remove(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


class Connection:
    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.topics: set[str] = set()
        self.dropped = 0
        self.peer = f"fd {writer.get_extra_info('socket').fileno()}" if writer.get_extra_info("socket") else "?"

    def send(self, frame: bytes) -> None:
        if not self.writer.is_closing():
            self.writer.write(frame)

    def offer(self, frame: bytes) -> None:
        """A snapshot: dropped (counted) while the socket has a backlog."""
        transport = self.writer.transport
        if transport.is_closing():
            return
        if transport.get_write_buffer_size() > MAX_BACKLOG_BYTES:
            self.dropped += 1
            return
        self.writer.write(frame)


class RuntimeService:
    """Serves :class:`Robot` on ``socket_path``; see the module docstring."""

    def __init__(self, robot: Robot, socket_path: str | Path) -> None:
        self.robot = robot
        self.loop = robot.loop
        self.socket_path = str(socket_path)
        self.connections: set[Connection] = set()
        self._aio: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.AbstractServer | None = None
        self._publish_pending = False
        self._last_record: dict[str, Any] | None = None
        self.published = 0
        debug = robot.profile.debug.routes
        self.methods: dict[str, tuple[type, Callable[[Any], Any]]] = {
            "describe": (Empty, lambda p: robot.describe()),
            "state": (Empty, lambda p: self.loop.snapshot()),
            "events": (EventsParams, self._events),
            "start": (Empty, lambda p: {"ok": True, "state": self.loop.start_robot()}),
            "stop": (Empty, lambda p: {"ok": True, "state": self.loop.stop_robot()}),
            "reset": (Empty, lambda p: {"ok": True, "state": self.loop.reset()}),
            "heartbeat": (Empty, lambda p: {"ok": True, "state": self.loop.heartbeat()}),
            "estop": (EstopParams, self._estop_any),  # listed for the docs; _handle latches it before anything
            "estop_reason": (EstopParams, self._estop_reason),
            "setpoint": (SetpointParams, self._setpoint),
            "acquisition": (Empty, lambda p: self._acquisition_json()),
            "set_acquisition": (AcquisitionParams, self._set_acquisition),
            "heading": (HeadingParams, self._heading),
            "calibrate_magnetometer": (MagParams, lambda p: robot.calibrations.magnetometer(p.revolutions,
                                                                                            p.rate_rad_s)),
            "calibrate_uwb": (UwbParams, self._uwb),
            "calibration": (Empty, lambda p: robot.calibrations.state_json()),
            "cancel_behavior": (Empty, lambda p: {"ok": True, "state": self.loop.cancel_behavior()}),
            # external channels and the marker behaviour (server/runtime/external.py, docs/vision.md)
            "declare_channels": (DeclareParams, self._declare_channels),
            "measurements": (MeasurementsParams, self._measurements),
            "external": (Empty, lambda p: self._external_json()),
            "go_to_marker": (GoToMarkerParams, self._go_to_marker),
            "subscribe": (SubscribeParams, None),  # handled per connection
            "loop_stats": (Empty, lambda p: self.loop.stats.histogram()),
            "ping": (PingParams, lambda p: {"t": p.t, "runtime_t": time.time(), "monotonic": time.monotonic()}),
        }
        self.trajectories = TrajectoryMethods(robot)  # arms and platforms (docs/arms.md)
        self.methods.update(self.trajectories.methods())
        if debug:
            self.methods["debug_driver"] = (DebugParams, self._debug_driver)

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        self._aio = asyncio.get_running_loop()
        self.loop.on_event = self._on_event_threadsafe
        self.loop.on_publish = self._on_publish_threadsafe
        await asyncio.to_thread(_prepare_socket_path, Path(self.socket_path))
        old = os.umask(0o177)  # the socket is the operator's own: 0600
        try:
            self._server = await asyncio.start_unix_server(self._serve, path=self.socket_path)
        finally:
            os.umask(old)

    async def stop(self) -> None:
        """Push what is left (the shutdown snapshot and events), then close every connection."""
        if self._server is not None:
            self._server.close()
        await asyncio.sleep(0)  # let the events the halt scheduled go out first…
        self._publish()  # …then the last snapshot
        for conn in list(self.connections):
            if conn.writer.transport.get_write_buffer_size():
                try:
                    await asyncio.wait_for(conn.writer.drain(), 1.0)
                except (OSError, asyncio.TimeoutError):
                    pass
        for conn in list(self.connections):
            try:
                conn.writer.close()
                await asyncio.wait_for(conn.writer.wait_closed(), 1.0)
            except (OSError, asyncio.TimeoutError):
                pass
        self.connections.clear()
        await asyncio.to_thread(_remove, Path(self.socket_path))

    # ------------------------------------------------------------------ connections
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = Connection(writer)
        self.connections.add(conn)
        conn.send(protocol.encode({"type": "hello", "protocol": protocol.PROTOCOL, "version": protocol.VERSION,
                                   "pid": os.getpid(), "robot": self.robot.describe()}))
        log.info("runtime API client connected (%d connected)", len(self.connections))
        try:
            while True:
                try:
                    header, _ = await protocol.read_frame(reader)
                except (asyncio.IncompleteReadError, ConnectionError):
                    break
                except protocol.ProtocolError as err:
                    conn.send(protocol.encode({"type": "error", "error": {"code": "malformed", "message": str(err)}}))
                    break
                kind = header.get("type")
                if kind == "hello":
                    if header.get("version") != protocol.VERSION:
                        conn.send(protocol.encode({"type": "error", "error": {
                            "code": "version", "message": f"runtime API version {protocol.VERSION} only, "
                                                          f"not {header.get('version')!r}"}}))
                        break
                    continue
                reply = self._handle(conn, header)
                if header.get("method") not in NO_PUBLISH:
                    self._publish()  # the new state reaches subscribers before the reply does
                if kind == "request":
                    conn.send(protocol.encode(reply))
                await asyncio.sleep(0)  # a busy client yields to the others
        finally:
            self.connections.discard(conn)
            writer.close()
            log.info("runtime API client disconnected (%d connected)", len(self.connections))

    def _handle(self, conn: Connection, header: dict[str, Any]) -> dict[str, Any]:
        req_id = header.get("id")
        method = header.get("method")
        params = header.get("params") or {}
        try:
            if method == "estop":  # never refused: latch first, look at the parameters after
                return {"type": "response", "id": req_id, "result": self._estop_any(params)}
            if not isinstance(params, dict):
                raise ValidationError("params must be an object", code="wrong_type")
            entry = self.methods.get(method) if isinstance(method, str) else None
            if entry is None:
                raise NotFoundError(f"unknown method {method!r}; known: {', '.join(sorted(self.methods))}",
                                    code="unknown_method")
            ptype, fn = entry
            p = convert(params, ptype)
            if method == "subscribe":
                unknown = sorted(set(p.topics) - {"snapshot", "event"})
                if unknown:
                    raise ValidationError(f"unknown topic(s): {', '.join(unknown)}; known: event, snapshot")
                conn.topics = set(p.topics)
                result: Any = {"ok": True, "topics": sorted(conn.topics)}
            else:
                result = fn(p)
            return {"type": "response", "id": req_id, "result": result}
        except Refused as r:
            err: ApiError = ConflictError(r.message, code=r.code, details=r.details)
        except ApiError as e:
            err = e
        except AcquisitionError as e:
            err = ValidationError(str(e), code="invalid")
        except DriverError as e:
            err = ApiError(f"driver error: {e}", code="driver_error", status=503)
        except (ValueError, TypeError, KeyError, NotImplementedError) as e:
            err = ValidationError(f"refused: {e}", code="invalid")
        return {"type": "response", "id": req_id, "error": err.to_wire()}

    # ------------------------------------------------------------------ methods
    def _events(self, p: EventsParams) -> dict[str, Any]:
        if not 1 <= p.limit <= 100000:
            raise ValidationError("limit must be in [1, 100000]", code="out_of_limits")
        return {"events": [e.to_json() for e in list(self.loop.events)[-p.limit:]]}

    def _estop_any(self, params: Any) -> dict[str, Any]:
        state = self.loop.estop("")
        reason = params.get("reason") if isinstance(params, dict) else None
        if isinstance(reason, str) and reason and len(reason) <= MAX_REASON:
            self.loop.note_estop_reason(reason)
        return {"ok": True, "state": state}

    def _estop_reason(self, p: EstopParams) -> dict[str, Any]:
        if not p.reason or len(p.reason) > MAX_REASON:
            raise ValidationError(f"reason must be a string of 1 to {MAX_REASON} characters", code="wrong_type")
        self.loop.note_estop_reason(p.reason)
        return {"ok": True}

    def _setpoint(self, p: SetpointParams) -> dict[str, Any]:
        ctrl = self.loop.controller
        sp = setpoint_from(p.setpoint, ctrl.setpoint_type)
        if p.ttl_s is not None:
            check_range("ttl_s", p.ttl_s, 0.001, self.robot.profile.limits.ttl_max_s)
        if p.source not in ("http", "websocket", "console"):
            raise ValidationError("source must be http, websocket or console", code="invalid")
        return {"ok": True, "state": self.loop.set_setpoint(sp, p.ttl_s, p.source)}

    def _acquisition_json(self) -> dict[str, Any]:
        drv = self.robot.driver
        return {**drv.get_acquisition().to_json(), "available": [c.name for c in drv.channels()],
                "min_rate_hz": drv.min_rate_hz, "max_rate_hz": drv.max_rate_hz}

    def _set_acquisition(self, p: AcquisitionParams) -> dict[str, Any]:
        drv = self.robot.driver
        rate = check_range("rate_hz", p.rate_hz, 0.0, drv.max_rate_hz)
        if rate <= 0:
            raise ValidationError("rate_hz must be > 0", code="out_of_limits")
        if len(p.channels) > 256:
            raise ValidationError("channels has more than 256 items", code="out_of_limits")
        needed = self.robot.rule_sources()
        missing = sorted(set(needed) - set(p.channels))
        if missing:
            names = sorted({n for ch in missing for n in needed[ch]})
            raise ValidationError(f"channel(s) {', '.join(missing)} feed safety rule(s) {', '.join(names)} "
                                  "and must stay active", code="safety_channel")
        stale_s = self.robot.profile.safety.sensor_stale_s
        if needed and 1.0 / rate > stale_s / 2:
            names = sorted({n for ns in needed.values() for n in ns})
            raise ValidationError(
                f"rate_hz={rate:g} samples every {1.0 / rate:.3g} s: the safety rule(s) {', '.join(names)} would "
                f"see their channels go stale (safety.sensor_stale_s = {stale_s:g} s); use at least "
                f"{2.0 / stale_s:g} Hz", code="safety_rate")
        if rate < drv.min_rate_hz:
            raise ValidationError(f"rate_hz={rate:g} is under the driver's floor of {drv.min_rate_hz:g} Hz",
                                  code="out_of_limits")
        self.loop.set_acquisition(rate, p.channels)
        self.loop.emit_now("acquisition", f"acquisition set to {rate:g} Hz, {len(p.channels)} channel(s)",
                           values={"rate_hz": rate, "channels": p.channels})
        return self._acquisition_json()

    def _heading(self, p: HeadingParams) -> dict[str, Any]:
        check_range("heading_deg", p.heading_deg, 0.0, 360.0)
        return self.robot.calibrations.heading(p.heading_deg)

    def _uwb(self, p: UwbParams) -> dict[str, Any]:
        if not p.pairs:
            raise ValidationError("pairs must be a non-empty list of [raw_m, true_m]", code="wrong_type")
        if len(p.pairs) > MAX_PAIRS:
            raise ValidationError(f"pairs has more than {MAX_PAIRS} items", code="out_of_limits")
        for i, pair in enumerate(p.pairs):
            if len(pair) != 2:
                raise ValidationError(f"pairs[{i}] must be [raw_m, true_m] (two numbers)", code="wrong_type")
            for v in pair:
                check_range(f"pairs[{i}]", v, 0.0, 1000.0)
        if not 0 <= p.degree <= 3:
            raise ValidationError(f"degree={p.degree} is outside the limits [0, 3]", code="out_of_limits")
        return self.robot.calibrations.uwb(p.pairs, p.degree)

    # ---- external channels (the gateway's vision pipeline) and the marker behaviour
    def _declare_channels(self, p: DeclareParams) -> dict[str, Any]:
        specs, gauges = [], []
        for c in p.channels:
            for name, v in (("min", c.min), ("max", c.max), ("warn_low", c.warn_low), ("warn_high", c.warn_high),
                            ("crit_low", c.crit_low), ("crit_high", c.crit_high)):
                if v is not None:
                    check_range(f"channel {c.name}: {name}", v, -1e9, 1e9)
            if len(c.unit) > 16 or len(c.label) > 64 or len(c.widget) > 16 or not 0 <= c.decimals <= 9:
                raise ValidationError(f"channel {c.name}: unit ≤ 16, label ≤ 64, widget ≤ 16 characters, decimals 0-9",
                                      code="out_of_limits")
            specs.append(ChannelSpec(c.name, c.unit, c.min, c.max, c.widget, c.label, c.kind, c.warn_low, c.warn_high,
                                     c.crit_low, c.crit_high, c.plot, c.decimals))
            if c.gauge:
                gauges.append(c.name)
        for m in p.markers:
            check_range(f"marker {m.id}: x_m", m.x_m, -1e4, 1e4)
            check_range(f"marker {m.id}: y_m", m.y_m, -1e4, 1e4)
            check_range(f"marker {m.id}: yaw_rad", m.yaw_rad, -10.0, 10.0)
        try:
            with self.loop.lock:  # the description and the stage change together
                self.robot.external.declare(p.source, specs, {m.id: (m.x_m, m.y_m, m.yaw_rad) for m in p.markers},
                                            gauges)
        except ExternalError as err:
            raise ValidationError(str(err), code="invalid") from None
        missing = [r.name for r in self.robot.safety.rules
                   if is_external(r.channel) and r.channel not in {s.name for s in specs}]
        if missing:
            self.loop.emit_now("external_rule_channel_missing",
                               f"{p.source}: safety rule(s) {', '.join(missing)} name channels it does not publish: "
                               "they stay stale and the robot cannot start", kind="safety",
                               values={"rules": missing})
        return {"ok": True, "channels": len(specs), "markers": len(p.markers)}

    def _measurements(self, p: MeasurementsParams) -> dict[str, Any]:
        try:
            obs = [MarkerObservation(o.id, o.range_m, o.bearing_rad, range_sigma_m=o.range_sigma_m,
                                     bearing_sigma_rad=o.bearing_sigma_rad) for o in p.observations]
            self.robot.external.measure(p.source, p.channels, p.sample_t, self.loop.clock(), obs)
        except (ExternalError, ValueError) as err:
            raise ValidationError(str(err), code="invalid") from None
        return {"ok": True}

    def _external_json(self) -> dict[str, Any]:
        ext = self.robot.external
        return {src: {**status, "latency": ext.latency_stats(src)} for src, status in ext.status().items()}

    def _go_to_marker(self, p: GoToMarkerParams) -> dict[str, Any]:
        robot, ext = self.robot, self.robot.external
        if robot.controller.profile != "rover":
            raise ConflictError("go to marker is a rover behaviour", code="unavailable")
        decl = ext.declared("vision")
        if decl is None:
            raise ConflictError("go to marker needs the vision pipeline, and it is off: [video] enabled and "
                                "[vision] enabled (docs/vision.md)", code="unavailable")
        if not decl.markers:
            raise ConflictError("go to marker needs a marker map ([vision] markers, or a simulated world's)",
                                code="unavailable")
        check_range("standoff_m", p.standoff_m, 0.2, 10.0)
        limit = robot.profile.limits.linear_m_s
        speed = min(0.25, limit) if p.speed_m_s is None else check_range("speed_m_s", p.speed_m_s, 0.02, limit)
        now = self.loop.clock()
        age = ext.age_s("vision", now)
        if age > ext.max_age_s:
            raise ConflictError("vision data is stale (" + ("none yet" if math.isinf(age) else f"{age:.2f} s old")
                                + f", limit {ext.max_age_s:g} s): is the camera running?", code="unavailable")
        m = ext.latest("vision")
        in_view = sorted(i for i in decl.markers if math.isfinite(m.values.get(range_channel(i), math.nan))
                         and math.isfinite(m.values.get(bearing_channel(i), math.nan)))
        if p.marker_id is None:
            if not in_view:
                raise ConflictError("no marker of the map is in view", code="not_in_view")
            marker_id = min(in_view, key=lambda i: m.values[range_channel(i)])
        else:
            marker_id = p.marker_id
            if marker_id not in decl.markers:
                raise ValidationError(f"marker {marker_id} is not in the marker map (ids: "
                                      f"{', '.join(map(str, sorted(decl.markers)))})", code="invalid")
            if marker_id not in in_view:
                raise ConflictError(f"marker {marker_id} is not in view (in view: "
                                    f"{', '.join(map(str, in_view)) or 'none'})", code="not_in_view")
        lim = robot.profile.limits
        stage = robot.stage
        behavior = GoToMarkerBehavior(ext, marker_id, p.standoff_m, speed, max_rate_rad_s=min(1.0, lim.angular_rad_s),
                                      brake_m_s2=0.5 * min(lim.linear_accel_m_s2, lim.linear_decel_m_s2),
                                      time_scale=stage.time_scale if stage is not None else 1.0)
        return {"ok": True, "state": self.loop.start_behavior(behavior), "behavior": behavior.status()}

    def _debug_driver(self, p: DebugParams) -> dict[str, Any]:
        return self.loop.driver_debug(p.command)

    # ------------------------------------------------------------------ publishing (control thread → here)
    def _on_publish_threadsafe(self) -> None:
        if self._publish_pending or self._aio is None:
            return
        self._publish_pending = True
        try:
            self._aio.call_soon_threadsafe(self._publish)
        except RuntimeError:  # event loop closed during shutdown
            self._publish_pending = False

    def _publish(self) -> None:
        self._publish_pending = False
        subscribers = [c for c in self.connections if "snapshot" in c.topics]
        if not subscribers:
            return  # nobody watching: not even serialised (idle CPU)
        record = self.loop._record
        if record is None or record is self._last_record:
            return  # already sent (a request published it before its reply)
        self._last_record = record
        snap = self.loop.snapshot()
        frame = protocol.encode({"type": "snapshot", "seq": snap["seq"]}, protocol.dumps(snap))
        self.published += 1
        for c in subscribers:
            c.offer(frame)

    def _on_event_threadsafe(self, ev: Event) -> None:
        if self._aio is None:
            return
        try:
            self._aio.call_soon_threadsafe(self._broadcast_event, ev.to_json())
        except RuntimeError:
            pass

    def _broadcast_event(self, data: dict[str, Any]) -> None:
        frame = protocol.encode({"type": "event", "data": data})
        for c in list(self.connections):
            if "event" in c.topics:
                c.send(frame)


__all__ = ["RuntimeService"]
