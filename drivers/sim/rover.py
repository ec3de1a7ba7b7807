"""The simulated rover as a driver (registry name ``sim``): a :class:`sim.rover.RoverSim` behind the
:class:`Driver` interface.

It plays the role of ros2_control's mock hardware: a real driver the server
cannot tell from hardware, plus ground truth in ``Frame.truth`` and test hooks
in :meth:`SimDriver.debug` (:mod:`drivers.sim.debug`). Its ``[driver]`` table is
:class:`drivers.sim.config.RoverSimTable`, every key typed and ranged there.

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
``imu``             table: a 6-axis IMU (:class:`sim.imu.VirtualImu`) on the rover's 3D pose
``magnetometer``    table: a 3-axis magnetometer (:class:`sim.magnetometer.Magnetometer`)
``uwb``             table: a UWB tag ranging to fixed anchors (:class:`sim.uwb.UwbRanger`)
``doppler``         table: a microwave Doppler radar (:class:`sim.doppler.DopplerRadar`)
==================  =====================================================================

The inertial and UWB sensors are on when their table is present (``enabled = false``
in it turns one off again); every key of theirs is optional and unknown keys are
refused. Channels and their units (body frame: x forward, y left, z up):

* ``imu_acc_{x,y,z}_m_s2`` specific force, m/s² (at rest and level z reads +9.81, REP-145);
  ``imu_gyro_{x,y,z}_rad_s`` angular rate, rad/s. Sampled with the other channels, at the
  acquisition rate: the accelerometer differences the poses *of the samples* and the gyro
  is the mean rate between two samples. Keys: ``acc_sigma_m_s2``, ``gyro_sigma_rad_s``
  (white noise per sample), ``acc_bias_m_s2``, ``gyro_bias_rad_s`` (constant, scalar or
  ``[x, y, z]``), ``acc_scale``, ``gyro_scale``, ``acc_bias_walk_m_s2_sqrt_s``,
  ``gyro_bias_walk_rad_s_sqrt_s``, ``acc_range_m_s2``, ``gyro_range_rad_s`` (saturation),
  ``lever_arm_m`` (sensor position in the body, ``[x, y, z]``), ``gravity_m_s2``.
* ``mag_{x,y,z}_ut`` magnetic field in **microtesla** (for readability; the models work in
  tesla). Keys: ``field_strength_ut`` (50), ``declination_deg`` (0: magnetic north is true
  north), ``dip_deg`` (60), ``hard_iron_ut`` ``[x, y, z]``, ``soft_iron`` (``[x, y, z]``
  gains or a 3×3 matrix), ``noise_ut`` (σ per axis per sample), ``lever_arm_m`` (the sensor in
  the body, where the world's ``[[sim.world.steel]]`` dipoles are felt, :mod:`sim.magnetic`), and a
  hard-iron drift: ``drift_ut_per_a`` (``[[x, y, z] left, [x, y, z] right]``, µT per A of motor
  current), ``drift_ut_per_k`` (µT per K), ``heating_k_per_a2``, ``thermal_tau_s``.
  ``Frame.truth`` then holds ``mag_steel_ut`` and ``mag_drift_ut`` (the magnitudes of the steel's
  field at the sensor and of the drift) and ``mag_temperature_rise_k``.
* ``uwb_range_{i}_m`` the raw range to anchor ``i``, m, measured at ``rate_hz`` (10) on the
  simulation clock and held in between; a dropout is reported as NaN (non-finite, so the
  telemetry shows ``null``). Keys: ``anchors`` (``[[x, y, z], ...]`` m, world frame; the
  server passes the top-level ``[uwb] anchors``), ``tag_height_m`` (tag above the body
  origin, leaning with the body), ``rate_hz``, ``sigma_m`` (0.05), ``nlos_probability``,
  ``nlos_bias_m`` (mean excess path), ``distortion`` ``[a, b, c]`` (raw = a + b·d + c·d²),
  ``dropout_probability``, and the field's errors (:mod:`sim.uwb`): ``noise_dof`` (Student-t
  noise), ``outlier_probability``, ``outlier_m``, ``nlos_excess_per_m`` and ``nlos_sigma_m`` (when
  the line to an anchor crosses a ``[[sim.world.boxes]]`` box; ``Frame.truth["uwb_blocked_m"]``
  holds the metres crossed per anchor), ``multipath_m``, ``multipath_length_m``. ``Frame.truth["uwb_true_m"]`` holds the true tag-anchor distances
  of the latest measurement (the "surveyed" distances a range calibration needs).

* ``doppler_speed_m_s`` speed over ground along body x, m/s (0 below the radar's minimum
  detectable speed; never negative without ``quadrature``), ``doppler_motion`` 1 when a moving
  object is in the forward beam, else 0, ``doppler_target_speed_m_s`` its closing speed (m/s,
  positive approaching, NaN with none); measured at ``rate_hz`` (20) on the simulation clock
  and held in between, each value carrying the host time of its measurement, so a rule on
  them goes stale like any other. Keys: ``rate_hz``, ``frequency_ghz`` (24.125),
  ``depression_deg`` (35, beam below body x), ``window_s`` (1/``rate_hz``), ``min_speed_m_s``
  (default: one spectral bin, ``c/(2·f0·cos(depression)·window_s)``), ``sigma_rel`` (0.02),
  ``sigma_m_s`` (0.005), ``quadrature`` (true: signed speed), ``mount_forward_m`` (0.15),
  ``motion_range_m`` (5), ``motion_half_angle_deg`` (40), ``motion_min_speed_m_s`` (0.1),
  ``false_alarm_probability``, ``miss_probability`` (0), ``targets`` (``[{from = [x, y],
  to = [x, y], speed_m_s, start_s}]``: points walking back and forth, seen only by the radar).
  ``Frame.truth`` holds ``doppler_true_speed_m_s`` and ``doppler_targets`` (their ``[x, y]``).

``noise = false`` also turns off the IMU's whole error model, the magnetometer's noise and
the UWB noise, NLOS excess and dropouts, and the radar's noise, false alarms and misses; the magnetometer's iron and the UWB polynomial
distortion stay (they are what the calibrations remove). Each sensor draws from its own
generator spawned from ``seed``, so enabling one does not change another's sequence.

>>> d = SimDriver({"time_scale": 10.0}, {"size_m": [6.0, 4.0]})
>>> d.open()
>>> d.activate()                                   # outputs reach the wheels only while active
>>> d.write({"wheel_left": 10.0, "wheel_right": 10.0})
True
>>> for _ in range(20):
...     frame = d.read(0.01)                       # 20 × 0.1 s of sim time
>>> round(frame.t, 6), round(frame.values["linear_m_s"], 2)
(2.0, 0.5)
>>> d.close()
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any, Mapping

import msgspec
import numpy as np

from drivers.base import Acquisition, ChannelSpec, Driver, Frame
from drivers.errors import DriverConfigError, DriverError, DriverOpenError
from drivers.sim.config import RoverSimTable
from drivers.sim.debug import Faults, RoverCommand, parse
from drivers.tables import convert_table
from sim.doppler import DopplerRadar
from sim.imu import VirtualImu
from sim.magnetic import field_of
from sim.rover import RoverParams, RoverSim, rover_table
from sim.world import World

logger = logging.getLogger(__name__)

_AXES = ("x", "y", "z")
# child keys of SeedSequence(seed) per random stream; the camera uses (0,)
_SEED_IMU, _SEED_MAG, _SEED_UWB, _SEED_DOPPLER, _SEED_MULTIPATH = 1, 2, 3, 4, 5
DOPPLER_CHANNELS = ("doppler_speed_m_s", "doppler_motion", "doppler_target_speed_m_s")
_UT = 1e-6  # tesla per microtesla


class SimDriver(Driver):
    """The simulated rover. ``settings`` is the ``[driver]`` table, ``world_cfg`` the ``[sim.world]`` one.

    Invalid settings raise :class:`ValueError` from the constructor; a world
    that cannot be built (or a start pose inside an obstacle) raises
    :class:`drivers.errors.DriverOpenError` from :meth:`open`.
    """

    name = "sim"
    max_rate_hz = 1000.0

    @classmethod
    def from_config(cls, table: Mapping[str, Any], profile: Mapping[str, Any]) -> "SimDriver":
        """The ``[driver]`` table plus what the profile shares: wheel geometry from ``[robot]``,
        the loop rate as the default acquisition rate, the UWB anchors from ``[uwb]`` and the
        world from ``[sim.world]``."""
        settings = dict(table)
        robot = profile.get("robot", {})
        if isinstance(settings.get("rover", {}), Mapping):  # the geometry the controller uses, for the physics
            settings["rover"] = {**{k: robot[k] for k in ("wheel_radius_m", "track_m") if k in robot},
                                 **settings.get("rover", {})}
        settings.setdefault("rate_hz", profile.get("loop", {}).get("rate_hz", 100.0))
        uwb_cfg = profile.get("uwb", {})
        if uwb_cfg.get("anchors") and isinstance(settings.get("uwb", {}), Mapping):
            # configured once, top-level: the same anchors for the sim and the estimator
            uwb = dict(settings.get("uwb", {}))
            uwb.setdefault("anchors", uwb_cfg["anchors"])
            uwb.setdefault("tag_height_m", uwb_cfg.get("tag_height_m", 0.15))
            settings["uwb"] = uwb
        try:
            return cls(settings, profile.get("sim", {}).get("world", {}))
        except DriverConfigError:
            raise
        except (ValueError, TypeError) as err:
            raise DriverConfigError("", str(err)) from err

    def __init__(self, settings: Mapping[str, Any], world_cfg: Mapping[str, Any], seed: int | None = None) -> None:
        """``settings``: the ``[driver]`` table (:class:`drivers.sim.config.RoverSimTable`, the rover's physics
        in ``rover`` or flat); ``seed`` overrides its ``seed``. A bad key raises
        :class:`~drivers.errors.DriverConfigError` (a ``ValueError``) naming it."""
        super().__init__()
        settings = dict(settings or {})
        rover_keys = set(msgspec.structs.asdict(RoverParams()))
        flat = {k: settings.pop(k) for k in list(settings) if k in rover_keys}  # e.g. wheel_radius_m from [robot]
        table = convert_table(settings, RoverSimTable)
        rover_cfg = dict(table.rover)
        for key in sorted(flat):
            if key in rover_cfg and rover_cfg[key] != flat[key]:
                raise DriverConfigError(key, "given twice with different values (in [driver] and in its rover)")
            rover_cfg[key] = flat[key]
        params = convert_table(rover_table(rover_cfg), RoverParams, "rover")
        self._world_cfg = dict(world_cfg or {})
        self._seed = table.seed if seed is None else int(seed)
        self.time_scale = table.time_scale
        self.max_read_dt_s = table.max_read_dt_s
        noise = table.noise
        self.params = params if noise else params.without_noise()
        self._imu_kw = table.imu.imu(noise) if table.imu is not None else None
        self._mag = table.magnetometer.magnetometer(noise) if table.magnetometer is not None else None
        self._mag_table = table.magnetometer
        self._mag_lever = np.asarray(table.magnetometer.lever_arm_m if self._mag else (0.0, 0.0, 0.0), dtype=float)
        self._mag_drift = None  # sim.magnetic.HardIronDrift, rebuilt by open()
        self._uwb = table.uwb.ranger(noise) if table.uwb is not None else None
        self._doppler_cfg = table.doppler.radar(noise) if table.doppler is not None else None
        sp = table.start_pose
        self._start_pose = None if sp is None else (sp[0], sp[1], math.radians(sp[2]))

        self._channels = self._describe_channels()
        self._acquisition = Acquisition(table.rate_hz, tuple(c.name for c in self._channels))

        self._sim: RoverSim | None = None
        # (left, right) rad/s; replaced whole, never mutated, so halt() from another thread is atomic
        self._command: tuple[float, float] = (0.0, 0.0)
        self._faults = Faults("simulator")
        self._frozen: tuple[str, ...] = ()
        self._nan: tuple[str, ...] = ()
        self._forced_battery_v: float | None = None
        self._held: dict[str, float] = {}
        self._held_t: dict[str, float] = {}
        self._uwb_host_t = -math.inf
        self._doppler: DopplerRadar | None = None
        self._doppler_rng: np.random.Generator | None = None
        self._doppler_out: list[float] = [0.0, 0.0, math.nan]
        self._doppler_truth: dict[str, Any] = {}
        self._doppler_host_t = -math.inf
        self._next_doppler_t = 0.0
        self._next_sample_t = 0.0
        # the latest pose for other threads (the sim camera): replaced whole, never mutated
        self._pose: dict[str, float] = {}
        # the camera's own generator (a Generator is not thread-safe), independent of the sim's
        self._camera_rng = np.random.default_rng(np.random.SeedSequence(self._seed).spawn(1)[0])
        # inertial and UWB sensor state, rebuilt by open()
        self._imu: VirtualImu | None = None
        self._imu_t = -math.inf
        self._imu_out: list[float] = [0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
        self._mag_rng: np.random.Generator | None = None
        self._uwb_rng: np.random.Generator | None = None
        self._uwb_ranges: list[float] = []
        self._uwb_true: list[float] = []
        self._next_uwb_t = 0.0

    # lifecycle -----------------------------------------------------------
    def _open(self) -> None:
        """Build the world and a fresh rover (seeded: every open replays the same run)."""
        self._faults.check_open()
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
        self._open_sensors()
        self._doppler = DopplerRadar(**self._doppler_cfg[0], world=world) if self._doppler_cfg else None
        self._sim = sim
        self._pose = self._pose_of(sim)
        logger.info("sim driver open: world %.1f × %.1f m, seed %d", world.width_m, world.height_m, self._seed)

    def _open_sensors(self) -> None:
        """Fresh sensor state and generators (seeded: every open replays the same streams)."""
        streams = np.random.SeedSequence(self._seed).spawn(6)
        self._imu = None
        if self._imu_kw is not None:
            rng = np.random.default_rng(streams[_SEED_IMU]) if self._imu_kw["noise"] is not None else None
            self._imu = VirtualImu(**self._imu_kw, rng=rng)
        self._imu_t = -math.inf
        g = self._imu_kw["gravity"] if self._imu_kw else 0.0
        self._imu_out = [0.0, 0.0, g, 0.0, 0.0, 0.0]
        self._mag_rng = np.random.default_rng(streams[_SEED_MAG])
        self._uwb_rng = np.random.default_rng(streams[_SEED_UWB])
        if self._uwb is not None:  # the static multipath field: drawn once per open, from its own stream
            self._uwb[0].seed_multipath(np.random.default_rng(streams[_SEED_MULTIPATH]))
        self._uwb_blocked: list[float] | None = None
        self._mag_drift = self._mag_table.drift() if self._mag is not None else None
        self._uwb_ranges = [math.nan] * (len(self._uwb[0].anchors) if self._uwb else 0)
        self._uwb_true = list(self._uwb_ranges)
        self._next_uwb_t = 0.0
        self._doppler_rng = np.random.default_rng(streams[_SEED_DOPPLER])
        self._doppler_out = [0.0, 0.0, math.nan]
        self._doppler_truth = {}
        self._next_doppler_t = 0.0

    def _close(self) -> None:
        """The last :attr:`sim` stays readable."""
        logger.info("sim driver closed")

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
        if self._imu_kw is not None:
            noise = self._imu_kw["noise"]
            acc_max = min(noise.acc_range, 160.0) if noise is not None else 40.0
            gyro_max = min(noise.gyro_range, 35.0) if noise is not None else 35.0
            specs += [ChannelSpec(f"imu_acc_{a}_m_s2", "m/s²", -acc_max, acc_max, "digital", f"Accel {a}")
                      for a in _AXES]
            specs += [ChannelSpec(f"imu_gyro_{a}_rad_s", "rad/s", -gyro_max, gyro_max, "digital", f"Gyro {a}",
                                  decimals=3) for a in _AXES]
        if self._mag is not None:
            full = max(100.0, 2.0 * self._mag.field_strength_t / _UT)
            specs += [ChannelSpec(f"mag_{a}_ut", "µT", -full, full, "digital", f"Magnetometer {a}", decimals=1)
                      for a in _AXES]
        if self._doppler_cfg is not None:
            top = max(1.0, round(1.5 * p.max_speed_m_s, 1))
            specs += [
                ChannelSpec("doppler_speed_m_s", "m/s", -top if self._doppler_cfg[0]["quadrature"] else 0.0, top,
                            "dial", "Radar ground speed", plot=True, decimals=3),
                ChannelSpec("doppler_motion", "", 0.0, 1.0, "digital", "Radar motion", decimals=0),
                ChannelSpec("doppler_target_speed_m_s", "m/s", -5.0, 5.0, "digital", "Radar target closing",
                            decimals=2),
            ]
        if self._uwb is not None:
            anchors = self._uwb[0].anchors
            span = float(np.linalg.norm(anchors.max(axis=0) - anchors.min(axis=0)))
            specs += [ChannelSpec(f"uwb_range_{i}_m", "m", 0.0, round(span + 5.0, 1), "digital", f"UWB anchor {i}",
                                  decimals=3) for i in range(len(anchors))]
        return specs

    # I/O -----------------------------------------------------------------
    def _read(self, dt_s: float) -> Frame:
        """Step the simulation by ``dt_s · time_scale`` with the last command and return a frame."""
        self._faults.check_read()
        sim = self._sim
        if sim is None:
            raise DriverError("sim driver is not open")
        dt = float(dt_s) * self.time_scale
        if not (math.isfinite(dt) and dt >= 0.0):
            raise DriverError(f"read: dt_s must be finite and >= 0, got {dt_s!r}")
        if dt > self.max_read_dt_s:
            logger.debug("read: dt %.3f s of sim time capped to %.3f s", dt, self.max_read_dt_s)
            dt = self.max_read_dt_s
        left, right = self._command
        sim.step(dt, left, right)
        if self._mag_drift is not None:
            self._mag_drift.step(dt, sim.true_motor_currents)

        t = sim.sim_time_s
        now = time.monotonic()
        if self._uwb is not None and t >= self._next_uwb_t - 0.5 * dt:
            self._measure_uwb(sim, t)
            self._uwb_host_t = now
        if self._doppler is not None and t >= self._next_doppler_t - 0.5 * dt:
            self._measure_doppler(sim, t)
            self._doppler_host_t = now
        period = 1.0 / self._acquisition.rate_hz
        # sample when the next sample instant is nearer than half this step: a loop
        # running at the acquisition rate samples every tick despite jitter
        if not self._held or t >= self._next_sample_t - 0.5 * dt:
            old, old_t = self._held, self._held_t
            self._held = self._sample(sim)
            # each value keeps the host time it was sampled (the UWB ranges: when they were measured)
            self._held_t = {name: (self._uwb_host_t if name.startswith("uwb_range_") else
                                   self._doppler_host_t if name in DOPPLER_CHANNELS else now)
                            for name in self._held}
            for name in self._frozen:  # debug: a sensor that stopped updating (its old sample stays)
                if name in old and name in self._held:
                    self._held[name], self._held_t[name] = old[name], old_t[name]
            for name in self._nan:  # debug: a sensor that reports no value
                if name in self._held:
                    self._held[name] = math.nan
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
        if self._uwb is not None:
            truth["uwb_true_m"] = self._uwb_true
            if self._uwb_blocked is not None:
                truth["uwb_blocked_m"] = self._uwb_blocked
        if self._mag is not None and (sim.world.steel or self._mag_drift is not None):
            field, drift = self._mag_disturbance(sim)
            truth["mag_steel_ut"] = 0.0 if field is None else float(np.linalg.norm(field)) / _UT
            truth["mag_drift_ut"] = 0.0 if drift is None else float(np.linalg.norm(drift)) / _UT
            if self._mag_drift is not None:
                truth["mag_temperature_rise_k"] = self._mag_drift.temperature_rise_k
        truth.update(self._doppler_truth)
        return Frame(t=t, values=dict(self._held), truth=truth, sample_t=dict(self._held_t))

    def _measure_uwb(self, sim: RoverSim, t: float) -> None:
        """One set of ranges on the UWB's own grid (like :meth:`read`'s sampling grid)."""
        ranger, rate_hz, tag_height_m = self._uwb
        tag = sim.point_world((0.0, 0.0, tag_height_m))
        # new lists, never mutated: the frame and its truth may still hold the old ones
        blocked = None
        if (ranger.nlos_excess_per_m > 0.0 or ranger.nlos_sigma_m > 0.0) and sim.world.boxes:
            blocked = [sim.world.penetration_m(tag, a) for a in ranger.anchors]
            self._uwb_blocked = blocked
        self._uwb_ranges = ranger.ranges(tag, self._uwb_rng, penetration_m=blocked).tolist()
        self._uwb_true = ranger.true_ranges(tag).tolist()
        self._next_uwb_t += 1.0 / rate_hz
        if self._next_uwb_t <= t:
            self._next_uwb_t = t + 1.0 / rate_hz

    def _measure_doppler(self, sim: RoverSim, t: float) -> None:
        """One radar reading on its own grid (the speed is the mean since the previous one)."""
        position, rot = sim.pose3d()
        r = self._doppler.measure(t, position, rot, self._doppler_rng)
        self._doppler_out = [r.speed_m_s, r.motion, r.target_speed_m_s]  # new lists: frames may hold the old
        self._doppler_truth = {"doppler_true_speed_m_s": r.true_speed_m_s,
                               "doppler_targets": [target.position(t).tolist() for target in self._doppler.targets]}
        rate_hz = self._doppler_cfg[1]
        self._next_doppler_t += 1.0 / rate_hz
        if self._next_doppler_t <= t:
            self._next_doppler_t = t + 1.0 / rate_hz

    @staticmethod
    def _pose_of(sim: RoverSim) -> dict[str, float]:
        roll, pitch = sim.attitude
        return {"x": sim.x, "y": sim.y, "z": sim.z, "yaw": sim.yaw, "pitch": pitch, "roll": roll, "t": sim.sim_time_s}

    def describe(self) -> dict[str, Any]:
        """The simulated world, for the dashboard's map."""
        return {"world": dict(self._world_cfg)}

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
        if self._imu is not None or self._mag is not None:
            position, rot = sim.pose3d()
            if self._imu is not None:
                t = sim.sim_time_s
                if t > self._imu_t:  # a second sample at the same instant (dt 0) repeats the last one
                    acc, gyro = self._imu.update(t, position, rot)
                    self._imu_out = [*acc.tolist(), *gyro.tolist()]
                    self._imu_t = t
                ax, ay, az, gx, gy, gz = self._imu_out
                values.update(imu_acc_x_m_s2=ax, imu_acc_y_m_s2=ay, imu_acc_z_m_s2=az,
                              imu_gyro_x_rad_s=gx, imu_gyro_y_rad_s=gy, imu_gyro_z_rad_s=gz)
            if self._mag is not None:
                if sim.world.steel or self._mag_drift is not None:
                    disturbance, drift = self._mag_disturbance(sim)
                    reading = self._mag.read(rot, self._mag_rng, disturbance_t=disturbance, drift_t=drift)
                else:
                    reading = self._mag.read(rot, self._mag_rng)
                mx, my, mz = (reading / _UT).tolist()
                values.update(mag_x_ut=mx, mag_y_ut=my, mag_z_ut=mz)
        for i, r in enumerate(self._uwb_ranges):
            values[f"uwb_range_{i}_m"] = r
        if self._doppler is not None:
            values.update(zip(DOPPLER_CHANNELS, self._doppler_out))
        active = self._acquisition.channels
        return {name: values[name] for name in active}

    def _mag_disturbance(self, sim: RoverSim) -> tuple[np.ndarray | None, np.ndarray | None]:
        """(the steel's field at the sensor, world frame; the hard-iron drift, body frame), T; None: none."""
        field = None
        if sim.world.steel:
            field = field_of(sim.world.steel, sim.point_world(self._mag_lever))
        drift = self._mag_drift.offset_t(sim.true_motor_currents) if self._mag_drift is not None else None
        return field, drift

    def _write(self, command: Mapping[str, float]) -> None:
        """Set wheel speed commands (rad/s, already checked against the limits); missing wheels keep theirs."""
        left, right = self._command
        self._command = (command.get("wheel_left", left), command.get("wheel_right", right))

    def _halt(self) -> None:
        """Zero the stored command (one atomic assignment: safe from any thread, never raises)."""
        self._command = (0.0, 0.0)

    @property
    def command(self) -> tuple[float, float]:
        """The stored (left, right) wheel command, rad/s."""
        return self._command

    # acquisition ---------------------------------------------------------
    def _set_acquisition(self, rate_hz: float, channels: tuple[str, ...]) -> Acquisition:
        """The next read samples at once with the new settings."""
        self._held = {}
        self._next_sample_t = 0.0
        return Acquisition(rate_hz, channels)

    # test hooks ----------------------------------------------------------
    def debug(self, command: Mapping[str, Any]) -> dict[str, Any]:
        """Fault injection and state control for tests (:class:`drivers.sim.debug.RoverCommand`: ``fault``,
        ``battery_v``, ``freeze``, ``nan``, ``teleport``); returns the debug state. A teleport keeps the IMU's
        history, so it sees the jump as one sample of violent motion: the gyro carries the turn (an attitude
        filter follows at once), the accelerometer spikes.

        Bad values raise :class:`ValueError` and change nothing.

        >>> d = SimDriver({}, {"size_m": [4.0, 3.0]})
        >>> d.debug({"fault": "read_error"})["fault"]
        'read_error'
        """
        cmd = parse(RoverCommand, command)
        names = {c.name for c in self._channels}
        for key, channels in (("freeze", cmd.freeze), ("nan", cmd.nan)):
            if channels is not msgspec.UNSET and not all(c in names for c in channels):
                raise ValueError(f"{key} must be a list of channel names")
        if cmd.teleport is not msgspec.UNSET and cmd.teleport is not None:
            if self._sim is None or not self.is_open:
                raise ValueError("teleport needs an open driver")
            self._sim.teleport(*cmd.teleport)  # ValueError if the footprint would touch an obstacle
            if self._doppler is not None:
                self._doppler.reset()  # a jump is not a speed
            self._held = {}  # the next read samples the new place
            self._pose = self._pose_of(self._sim)
        if cmd.fault is not msgspec.UNSET:
            self._faults.set(cmd.fault)
        if cmd.freeze is not msgspec.UNSET:
            self._frozen = tuple(cmd.freeze)
        if cmd.nan is not msgspec.UNSET:
            self._nan = tuple(cmd.nan)
        if cmd.battery_v is not msgspec.UNSET:
            self._forced_battery_v = cmd.battery_v
            if self._sim is not None:
                self._sim.battery.force_voltage(cmd.battery_v)
        return self.debug_state()

    def debug_state(self) -> dict[str, Any]:
        """The current fault, forced battery voltage and (when open) the true pose."""
        state: dict[str, Any] = {"fault": self._faults.fault, "battery_v": self._forced_battery_v,
                                 "freeze": list(self._frozen), "nan": list(self._nan)}
        if self._sim is not None:
            state["pose"] = list(self._sim.pose)
            state["sim_time_s"] = self._sim.sim_time_s
        return state
