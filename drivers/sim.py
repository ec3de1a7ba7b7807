"""The simulator as a driver: a :class:`sim.rover.RoverSim` behind the :class:`Driver` interface.

It plays the role of ros2_control's mock hardware: a real driver the server
cannot tell from hardware, plus ground truth in ``Frame.truth`` and test hooks
in :meth:`SimDriver.debug`. The only driver-layer module that imports ``sim``.

Time: each ``read(dt_s)`` advances the simulation by ``dt_s · time_scale``
(sim seconds per real second, so tests run faster than real time) using the
last written command; ``Frame.t`` is the simulation clock. Sensor values are
sampled at the acquisition rate and held in between (like a DAQ); ground
truth is fresh at every read.

Settings (the ``[driver]`` table; every key optional):

==================  =====================================================================
``time_scale``      sim seconds per real second, > 0 (default 1.0)
``rate_hz``         initial acquisition rate (default 100.0, the control loop's default)
``noise``           false turns every sensor noise off (default true)
``start_pose``      ``[x_m, y_m, yaw_deg]`` in the world (default: field centre, facing east)
``max_read_dt_s``   longest simulated step per read, sim seconds (default 0.5): a stalled
                    loop does not make the next read simulate minutes
``rover``           table of :class:`sim.rover.RoverParams` fields (``battery`` a sub-table);
                    the same fields are also accepted flat in ``[driver]`` (the server
                    passes ``wheel_radius_m`` and ``track_m`` from ``[robot]`` that way)
``rangers``         list of ranger tables (``name``, ``x_m``, ``y_m``, ``yaw_deg``,
                    ``min_range_m``, ``max_range_m``, ``half_angle_deg``, ``noise_m``,
                    ``rays``); replaces the default single ``front`` ranger
==================  =====================================================================

>>> d = SimDriver({"time_scale": 10.0}, {"size_m": [6.0, 4.0]})
>>> d.open()
>>> d.write({"wheel_left": 10.0, "wheel_right": 10.0})
>>> for _ in range(20):
...     frame = d.read(0.01)                       # 20 × 0.1 s of sim time
>>> round(frame.t, 6), round(frame.values["linear_m_s"], 2)
(2.0, 0.5)
>>> d.close()
"""

from __future__ import annotations

import logging
import math
from dataclasses import fields
from typing import Any, Mapping

import numpy as np

from drivers.base import Acquisition, ChannelSpec, Driver, Frame
from drivers.errors import DriverError, DriverOpenError, DriverTimeoutError
from sim.rover import RoverParams, RoverSim
from sim.world import World

logger = logging.getLogger(__name__)

_FAULTS = (None, "read_error", "timeout", "open_error")
_IGNORED_KEYS = ("name",)  # the [driver] table names the driver itself
_KNOWN_KEYS = ("time_scale", "rate_hz", "noise", "start_pose", "max_read_dt_s", "rover", "rangers")


class SimDriver(Driver):
    """The simulated rover. ``settings`` is the ``[driver]`` table, ``world_cfg`` the ``[sim.world]`` one.

    Invalid settings raise :class:`ValueError` from the constructor; a world
    that cannot be built (or a start pose inside an obstacle) raises
    :class:`drivers.errors.DriverOpenError` from :meth:`open`.
    """

    name = "sim"
    max_rate_hz = 1000.0

    def __init__(self, settings: Mapping[str, Any], world_cfg: Mapping[str, Any], seed: int = 0) -> None:
        super().__init__()
        settings = dict(settings or {})
        rover_keys = {f.name for f in fields(RoverParams)}
        unknown = sorted(k for k in settings if k not in _KNOWN_KEYS + _IGNORED_KEYS and k not in rover_keys)
        if unknown:
            raise ValueError(f"sim driver: unknown setting(s) {', '.join(map(str, unknown))}")
        self._world_cfg = dict(world_cfg or {})
        self._seed = int(seed)
        self.time_scale = float(settings.get("time_scale", 1.0))
        if not (math.isfinite(self.time_scale) and self.time_scale > 0):
            raise ValueError("sim driver: time_scale must be > 0")
        self.max_read_dt_s = float(settings.get("max_read_dt_s", 0.5))
        if not (math.isfinite(self.max_read_dt_s) and self.max_read_dt_s > 0):
            raise ValueError("sim driver: max_read_dt_s must be > 0")
        rover_cfg = dict(settings.get("rover", {}))
        for key in sorted(rover_keys & set(settings)):  # flat keys, e.g. wheel_radius_m from [robot]
            if key in rover_cfg and rover_cfg[key] != settings[key]:
                raise ValueError(f"sim driver: {key} given twice with different values")
            rover_cfg[key] = settings[key]
        params = RoverParams.from_config(rover_cfg)
        if not settings.get("noise", True):
            params = params.without_noise()
        self.params = params
        self._start_pose: tuple[float, float, float] | None = None
        if "start_pose" in settings:
            sp = [float(v) for v in settings["start_pose"]]
            if len(sp) != 3:
                raise ValueError("sim driver: start_pose is [x_m, y_m, yaw_deg]")
            self._start_pose = (sp[0], sp[1], math.radians(sp[2]))

        self._channels = self._describe_channels()
        rate_hz = float(settings.get("rate_hz", 100.0))
        if not 0 < rate_hz <= self.max_rate_hz:
            raise ValueError(f"sim driver: rate_hz must be in (0, {self.max_rate_hz:g}]")
        self._acquisition = Acquisition(rate_hz, tuple(c.name for c in self._channels))

        self._sim: RoverSim | None = None
        # (left, right) rad/s; replaced whole, never mutated, so halt() from another thread is atomic
        self._command: tuple[float, float] = (0.0, 0.0)
        self._fault: str | None = None
        self._forced_battery_v: float | None = None
        self._held: dict[str, float] = {}
        self._next_sample_t = 0.0
        # the latest pose for other threads (the sim camera): replaced whole, never mutated
        self._pose: dict[str, float] = {}
        # the camera's own generator (a Generator is not thread-safe), independent of the sim's
        self._camera_rng = np.random.default_rng(np.random.SeedSequence(self._seed).spawn(1)[0])

    # lifecycle -----------------------------------------------------------
    def open(self) -> None:
        """Build the world and a fresh rover (seeded: every open replays the same run)."""
        if self._fault == "open_error":
            raise DriverOpenError("injected open error")
        try:
            world = World.from_config(self._world_cfg)
            sim = RoverSim(self.params, world, np.random.default_rng(self._seed), self._start_pose)
        except (ValueError, KeyError, TypeError, IndexError) as err:
            raise DriverOpenError(f"sim world or start pose: {err}") from err
        if self._forced_battery_v is not None:
            sim.battery.force_voltage(self._forced_battery_v)
        self._command = (0.0, 0.0)
        self._held = {}
        self._next_sample_t = 0.0
        self._sim = sim
        self._pose = self._pose_of(sim)
        self.is_open = True
        logger.info("sim driver open: world %.1f × %.1f m, seed %d", world.width_m, world.height_m, self._seed)

    def close(self) -> None:
        """Halt and close; the last :attr:`sim` stays readable."""
        self.halt()
        if self.is_open:
            logger.info("sim driver closed")
        self.is_open = False

    @property
    def sim(self) -> RoverSim | None:
        """The simulated rover (``None`` before the first :meth:`open`), for the sim camera."""
        return self._sim

    # description ---------------------------------------------------------
    def channels(self) -> list[ChannelSpec]:
        return list(self._channels)

    def actuators(self) -> dict[str, tuple[float, float]]:
        m = self.params.max_wheel_speed_rad_s
        return {"wheel_left": (-m, m), "wheel_right": (-m, m)}

    def _describe_channels(self) -> list[ChannelSpec]:
        p = self.params
        w, v, turn = p.max_wheel_speed_rad_s, p.max_speed_m_s, p.max_turn_rad_s
        full = p.battery.full_v
        stall = max(p.motor_stall_a, 0.1)
        specs = [
            ChannelSpec("wheel_left_rad_s", "rad/s", -w, w, "dial", "Left wheel", plot=True),
            ChannelSpec("wheel_right_rad_s", "rad/s", -w, w, "dial", "Right wheel", plot=True),
            ChannelSpec("encoder_left_ticks", "ticks", -(2.0 ** 31), 2.0 ** 31 - 1, "digital", "Left encoder", decimals=0),
            ChannelSpec("encoder_right_ticks", "ticks", -(2.0 ** 31), 2.0 ** 31 - 1, "digital", "Right encoder", decimals=0),
            ChannelSpec("linear_m_s", "m/s", -v, v, "dial", "Speed", plot=True),
            ChannelSpec("angular_rad_s", "rad/s", -turn, turn, "dial", "Turn rate", plot=True),
        ]
        for i, r in enumerate(p.rangers):
            warn = 0.5 if r.min_range_m < 0.5 < r.max_range_m else None
            crit = 0.25 if r.min_range_m < 0.25 < r.max_range_m else None
            specs.append(
                ChannelSpec(
                    f"range_{r.name}_m", "m", r.min_range_m, r.max_range_m, "bar", f"Sonar {r.name}",
                    warn_low=warn, crit_low=crit, plot=i == 0, decimals=3,
                )
            )
        specs += [
            # thresholds for the default 3S pack (12.6 V full), scaled for others
            ChannelSpec("battery_v", "V", round(p.battery.empty_v, 3), full, "bar", "Battery",
                        warn_low=11.0 * (full / 12.6), crit_low=10.5 * (full / 12.6), plot=True),
            ChannelSpec("current_left_a", "A", 0.0, 1.2 * stall, "bar", "Left motor current",
                        warn_high=0.6 * stall, crit_high=0.9 * stall),
            ChannelSpec("current_right_a", "A", 0.0, 1.2 * stall, "bar", "Right motor current",
                        warn_high=0.6 * stall, crit_high=0.9 * stall),
        ]
        return specs

    # I/O -----------------------------------------------------------------
    def read(self, dt_s: float) -> Frame:
        """Step the simulation by ``dt_s · time_scale`` with the last command and return a frame."""
        if self._fault == "read_error":
            raise DriverError("injected read error")
        if self._fault == "timeout":
            raise DriverTimeoutError("injected timeout: no frame from the simulator")
        sim = self._sim
        if not self.is_open or sim is None:
            raise DriverError("sim driver is not open")
        dt = float(dt_s) * self.time_scale
        if not (math.isfinite(dt) and dt >= 0.0):
            raise DriverError(f"read: dt_s must be finite and >= 0, got {dt_s!r}")
        if dt > self.max_read_dt_s:
            logger.debug("read: dt %.3f s of sim time capped to %.3f s", dt, self.max_read_dt_s)
            dt = self.max_read_dt_s
        left, right = self._command
        sim.step(dt, left, right)

        t = sim.sim_time_s
        period = 1.0 / self._acquisition.rate_hz
        # sample when the next sample instant is nearer than half this step: a loop
        # running at the acquisition rate samples every tick despite jitter
        if not self._held or t >= self._next_sample_t - 0.5 * dt:
            self._held = self._sample(sim)
            self._next_sample_t += period
            if self._next_sample_t <= t:  # fell behind (first read, long step): restart the grid
                self._next_sample_t = t + period
        pose = self._pose_of(sim)
        self._pose = pose
        truth = {
            "x": pose["x"], "y": pose["y"], "yaw": pose["yaw"], "roll": pose["roll"], "pitch": pose["pitch"],
            "z": pose["z"], "collided": sim.collided, "collisions": sim.collisions, "sim_time_s": t,
            "soc": sim.soc, "contact_point": list(sim.contact_point) if sim.contact_point else None,
        }
        return Frame(t=t, values=dict(self._held), truth=truth)

    @staticmethod
    def _pose_of(sim: RoverSim) -> dict[str, float]:
        roll, pitch = sim.attitude
        return {"x": sim.x, "y": sim.y, "z": sim.z, "yaw": sim.yaw, "pitch": pitch, "roll": roll, "t": sim.sim_time_s}

    def camera_source(self, settings: Mapping[str, Any]):
        """A first-person camera rendered from this simulator's world and the rover's true pose."""
        from drivers.camera.sim import SimCamera

        if self._sim is None:
            return None
        return SimCamera(settings, self._sim.world, self.pose_snapshot, self._camera_rng)

    def pose_snapshot(self) -> dict[str, float]:
        """The latest true pose (``x, y, z`` m; ``yaw, pitch, roll`` rad; ``t`` sim s), a copy.

        Cheap and safe from any thread (the sim camera's capture thread calls it);
        empty before the first :meth:`open`.
        """
        return dict(self._pose)

    def _sample(self, sim: RoverSim) -> dict[str, float]:
        wl, wr = sim.wheel_speeds
        el, er = sim.encoder_ticks
        il, ir = sim.motor_currents
        values = {
            "wheel_left_rad_s": wl,
            "wheel_right_rad_s": wr,
            "encoder_left_ticks": float(el),
            "encoder_right_ticks": float(er),
            "linear_m_s": sim.linear_m_s,
            "angular_rad_s": sim.angular_rad_s,
            "battery_v": sim.battery_v,
            "current_left_a": il,
            "current_right_a": ir,
        }
        for name, value in sim.ranges.items():
            values[f"range_{name}_m"] = value
        active = self._acquisition.channels
        return {name: values[name] for name in active}

    def write(self, command: Mapping[str, float]) -> None:
        """Set wheel speed commands (rad/s), clipped to the motor limit; missing wheels keep theirs."""
        if not self.is_open:
            raise DriverError("sim driver is not open")
        limits = self.actuators()
        unknown = [k for k in command if k not in limits]
        if unknown:
            raise DriverError(f"unknown actuator(s): {', '.join(map(str, unknown))}")
        left, right = self._command
        try:
            new = {k: float(v) for k, v in command.items()}
        except (TypeError, ValueError) as err:
            self.halt()
            raise DriverError(f"actuator command is not a number: {err}") from err
        if not all(math.isfinite(v) for v in new.values()):
            self.halt()
            raise DriverError("non-finite actuator command; halted")
        lo, hi = limits["wheel_left"]
        if "wheel_left" in new:
            left = min(max(new["wheel_left"], lo), hi)
        if "wheel_right" in new:
            right = min(max(new["wheel_right"], lo), hi)
        self._command = (left, right)

    def halt(self) -> None:
        """Zero the stored command (one atomic assignment: safe from any thread, never raises)."""
        self._command = (0.0, 0.0)

    @property
    def command(self) -> tuple[float, float]:
        """The stored (left, right) wheel command, rad/s."""
        return self._command

    # acquisition ---------------------------------------------------------
    def set_acquisition(self, rate_hz: float, channels: list[str] | tuple[str, ...]) -> Acquisition:
        """As :meth:`Driver.set_acquisition`; the next read samples at once with the new settings."""
        acq = super().set_acquisition(rate_hz, channels)
        self._held = {}
        self._next_sample_t = 0.0
        return acq

    # test hooks ----------------------------------------------------------
    def debug(self, command: Mapping[str, Any]) -> dict[str, Any]:
        """Fault injection and state control for tests; returns the debug state.

        Keys (each optional, applied in this order):

        * ``"fault"``: ``"read_error"`` (reads raise :class:`DriverError`),
          ``"timeout"`` (reads raise :class:`DriverTimeoutError`), ``"open_error"``
          (:meth:`open` raises :class:`DriverOpenError`) or ``None`` to clear.
          Sticky, across close and open, until cleared.
        * ``"battery_v"``: pin the battery voltage reading (V), ``None`` to release.
        * ``"teleport"``: ``[x_m, y_m, yaw_rad]``; the rover stops there (driver must be open).

        Bad values raise :class:`ValueError` and change nothing.

        >>> d = SimDriver({}, {"size_m": [4.0, 3.0]})
        >>> d.debug({"fault": "read_error"})["fault"]
        'read_error'
        """
        unknown = [k for k in command if k not in ("fault", "battery_v", "teleport")]
        if unknown:
            raise ValueError(f"unknown debug key(s): {', '.join(map(str, unknown))}")
        if "fault" in command and command["fault"] not in _FAULTS:
            raise ValueError(f"fault must be one of {_FAULTS}")
        battery_v = command.get("battery_v")
        if battery_v is not None:
            battery_v = float(battery_v)
            if not math.isfinite(battery_v):
                raise ValueError("battery_v must be finite")
        pose = None
        if command.get("teleport") is not None:
            pose = [float(v) for v in command["teleport"]]
            if len(pose) != 3:
                raise ValueError("teleport is [x_m, y_m, yaw_rad]")
            if self._sim is None or not self.is_open:
                raise ValueError("teleport needs an open driver")
            self._sim.teleport(*pose)  # ValueError if the footprint would touch an obstacle

        if "fault" in command:
            if command["fault"] != self._fault:
                logger.warning("sim fault injection: %s", command["fault"])
            self._fault = command["fault"]
        if "battery_v" in command:
            self._forced_battery_v = battery_v
            if self._sim is not None:
                self._sim.battery.force_voltage(battery_v)
        if pose is not None and self._sim is not None:
            self._held = {}  # the next read samples the new place
            self._pose = self._pose_of(self._sim)
        return self.debug_state()

    def debug_state(self) -> dict[str, Any]:
        """The current fault, forced battery voltage and (when open) the true pose."""
        state: dict[str, Any] = {"fault": self._fault, "battery_v": self._forced_battery_v}
        if self._sim is not None:
            state["pose"] = list(self._sim.pose)
            state["sim_time_s"] = self._sim.sim_time_s
        return state
