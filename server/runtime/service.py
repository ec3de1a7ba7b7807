"""The runtime's methods of the runtime API (docs/runtime-api.md), served by
:class:`server.runtime_api.service.ApiServer` on the runtime process's asyncio thread (the control loop
has a thread of its own).

Each method validates its parameters with the same structs the gateway uses at its edge
(:mod:`server.runtime_api.params`, ranges as ``Meta`` bounds on the struct) and the robot's limits, so
the runtime refuses anything out of range whoever sends it. The wire, the connections and the
publishing are the API package's; what is here needs the robot (why they live apart: the package's
docstring).
"""

from __future__ import annotations

import math
import time
import typing
from pathlib import Path
from typing import Any

from drivers.base import ChannelSpec
from drivers.errors import AcquisitionError, DriverError
from robotics.estimation.markers import MarkerObservation
from server.errors import ApiError, ConflictError, ValidationError
from server.runtime.behaviours.marker import GoToMarkerBehavior, bearing_channel, range_channel
from server.runtime.behaviours.trajectory import TrajectoryMethods
from server.runtime.behaviours.mission import MissionMethods
from server.runtime.experiments import ExperimentMethods
from server.runtime.controllers.rover import RoverSetpoint
from server.runtime.external import ExternalError, is_external
from server.runtime.robot import Robot
from server.runtime.supervisor import Refused
from server.runtime_api import protocol
from server.runtime_api.params import (MAX_REASON, SOURCES, AcquisitionParams, DebugParams, DeclareParams, Empty, EstopParams,
                                       EventsParams, GoToMarkerParams, HeadingParams, HeartbeatParams, MagParams, MeasurementsParams,
                                       PingParams, SetpointParams, SubscribeParams, UwbParams, setpoint_from)
from server.runtime_api.service import ApiServer
from server.validation import check_range

MAX_PAIRS = 2000


def accepts(setpoint_type: Any, kind: type) -> bool:
    """Whether a controller's declared ``setpoint_type`` (a struct or a union of them) takes ``kind``.

    >>> accepts(RoverSetpoint, RoverSetpoint), accepts(int | str, RoverSetpoint)
    (True, False)
    """
    return setpoint_type is kind or kind in typing.get_args(setpoint_type)
#: methods after which no snapshot needs to go out before the reply (they change nothing, or only the
#: link's age: a heartbeat at 50 Hz must not double the snapshot rate)
NO_PUBLISH = frozenset({"describe", "state", "events", "acquisition", "calibration", "ping", "subscribe", "heartbeat",
                        "loop_stats", "trajectory_upload", "trajectory", "trajectory_report", "program",
                        "declare_channels", "measurements", "external", "control", "mission", "mission_report",
                        "experiments", "experiment", "experiment_report"})


class RuntimeService(ApiServer):
    """Serves :class:`Robot` on ``socket_path``; see the module docstring."""

    no_publish = NO_PUBLISH

    def __init__(self, robot: Robot, socket_path: str | Path) -> None:
        self.robot = robot
        self.loop = robot.loop
        self._last_record: dict[str, Any] | None = None
        debug = robot.profile.debug.routes
        methods: dict[str, Any] = {
            "describe": (Empty, lambda p: robot.describe()),
            "state": (Empty, lambda p: self.loop.snapshot()),
            "events": (EventsParams, self._events),
            "start": (Empty, lambda p: {"ok": True, "state": self.loop.start_robot()}),
            "stop": (Empty, lambda p: {"ok": True, "state": self.loop.stop_robot()}),
            "reset": (Empty, lambda p: {"ok": True, "state": self.loop.reset()}),
            "heartbeat": (HeartbeatParams, self._heartbeat),
            "estop": (EstopParams, self._estop_any),  # listed for the docs; _handle latches it before anything
            "estop_reason": (EstopParams, self._estop_reason),
            "setpoint": (SetpointParams, self._setpoint),
            "acquisition": (Empty, lambda p: self._acquisition_json()),
            "set_acquisition": (AcquisitionParams, self._set_acquisition),
            "heading": (HeadingParams, self._heading),
            "calibrate_magnetometer": (MagParams, self._magnetometer),
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
        methods.update(self.trajectories.methods())
        self.missions = MissionMethods(robot)  # the rover's missions and the seed experiments (docs/missions.md)
        methods.update(self.missions.methods())
        self.experiments = ExperimentMethods(robot)
        methods.update(self.experiments.methods())
        if debug:
            methods["debug_driver"] = (DebugParams, self._debug_driver)
        super().__init__(socket_path, methods, debug=debug)

    # ------------------------------------------------------------------ the API server's hooks
    async def start(self) -> None:
        self.loop.on_event = lambda ev: self.event_threadsafe(ev.to_json())
        self.loop.on_publish = self.publish_threadsafe
        self.loop.liveness = lambda: self.live  # only the holder of control keeps the robot alive
        await super().start()

    def describe(self) -> dict[str, Any]:
        return self.robot.describe()

    def estop(self, params: Any) -> dict[str, Any]:
        return self._estop_any(params)

    def error_of(self, exc: Exception) -> ApiError | None:
        if isinstance(exc, Refused):
            return ConflictError(exc.message, code=exc.code, details=exc.details)
        if isinstance(exc, AcquisitionError):
            return ValidationError(str(exc), code="invalid")
        if isinstance(exc, DriverError):
            return ApiError(f"driver error: {exc}", code="driver_error", status=503)
        return None

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
        if p.source not in SOURCES:
            raise ValidationError(f"source must be one of {', '.join(SOURCES)}", code="invalid")
        state, dropped = self.loop.command(sp, p.ttl_s, p.source, p.stamp())
        return {"ok": True, "state": state, **({"dropped": dropped} if dropped else {})}

    def _heartbeat(self, p: HeartbeatParams) -> dict[str, Any]:
        state, dropped = self.loop.heartbeat(p.stamp())
        return {"ok": True, "state": state, **({"dropped": dropped} if dropped else {})}

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

    def _heading(self, p: HeadingParams) -> dict[str, Any]:  # heading_deg ranged by the struct (Meta)
        return self.robot.calibrations.heading(p.heading_deg)

    def _magnetometer(self, p: MagParams) -> dict[str, Any]:
        if p.revolutions is not None:  # the turn's goal and its timeout grow with it
            check_range("revolutions", p.revolutions, 1.0, 10.0)
        if p.rate_rad_s is not None:
            check_range("rate_rad_s", p.rate_rad_s, 0.01, 50.0)  # and the robot's own limit, in the calibration
        return self.robot.calibrations.magnetometer(p.revolutions, p.rate_rad_s)

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
        if not accepts(robot.controller.setpoint_type, RoverSetpoint):  # what the controller declares it takes
            raise ConflictError("go to marker drives a rover's setpoints; this robot's controller takes none",
                                code="unavailable")
        decl = ext.declared("vision")
        if decl is None:
            raise ConflictError("go to marker needs the vision pipeline, and it is off: [video] enabled and "
                                "[vision] enabled (docs/vision.md)", code="unavailable")
        if not decl.markers:
            raise ConflictError("go to marker needs a marker map ([vision] markers, or a simulated world's)",
                                code="unavailable")
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
                                      time_scale=stage.time_scale if stage is not None else 1.0, lost_s=p.lost_s)
        return {"ok": True, "state": self.loop.start_behavior(behavior), "behavior": behavior.status()}

    def _debug_driver(self, p: DebugParams) -> dict[str, Any]:
        return self.loop.driver_debug(p.command)

    # ------------------------------------------------------------------ publishing
    def snapshot_frames(self) -> list[tuple[str, bytes]] | None:
        """The newest record as a ``snapshot`` frame and, on a simulator, its true pose as a ``truth`` frame (the
        channel the gateway's sim camera renders from; docs/runtime-api.md), or None when it went out already."""
        record = self.loop._record
        if record is None or record is self._last_record:
            return None  # already sent (a request published it before its reply)
        self._last_record = record
        snap = self.loop.snapshot()
        frames = [("snapshot", protocol.encode({"type": "snapshot", "seq": snap["seq"]}, protocol.dumps(snap)))]
        truth = snap.get("truth")
        if truth and any("truth" in c.topics for c in self.connections):
            frames.append(("truth", protocol.encode({"type": "truth", "seq": snap["seq"], "data": truth})))
        return frames


__all__ = ["RuntimeService"]
