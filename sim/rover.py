"""A differential-drive rover in the 2D world: motors, encoders, sonars, battery, collisions.

Frames (REP-103): body x forward, y left, z up; world x east, y north, z up;
``yaw`` is the ENU yaw of body x (0 = east, counter-clockwise positive).
Attitude is Z-Y-X, ``R_world_body = Rz(yaw)·Ry(pitch)·Rx(roll)``: positive
pitch is nose down, positive roll is right side down.

Model, per step of ``dt_s`` (split into sub-steps of at most ``max_substep_s``):

* each wheel follows its speed command through a first-order lag ``tau_s``
  (discretised exactly, so the response does not depend on the step), its
  change limited to ``max_wheel_accel_rad_s2``; commands are clipped to
  ``±max_wheel_speed_rad_s``;
* the wheels turn by the trapezoid of their speeds; the body moves along the
  exact arc given by the distance and the heading change; on a ramp the
  horizontal advance is ``cos(pitch)`` of the distance rolled and ``z`` is
  integrated from the ground gradient (so ``z`` is relative to the start);
* the rectangular footprint (``length_m`` × ``width_m``, centred on the body
  origin) never crosses a wall or box edge: a motion that would is cut at
  contact (bisection along the arc), the wheel speeds are forced to 0 and the
  motors draw their stall current while they push. ``collided`` stays true
  while the footprint is within ``contact_skin_m`` of the obstacle;
  ``collisions`` counts contacts (once each) and ``contact_point`` is the
  world point of the last one;
* each sonar returns the nearest edge within its cone (``rays`` rays spread
  over ``±half_angle_rad``) plus Gaussian noise, clipped to its range.
  **Out of range is not infinite**: with no echo within ``max_range_m`` the
  reading is ``max_range_m`` and invalid; closer than ``min_range_m`` it is
  ``min_range_m`` and invalid (``range_valid[name]`` is then false). A stop
  rule "obstacle closer than x" therefore still fires when too close;
* per-motor current ``I = i0 + k_a·|dω/dt| + k_v·|ω|`` (stall current when
  blocked); the battery sees both motors plus its idle draw;
* wheel slip (off by default): on grass or gravel the ground does not follow the
  wheels exactly. The body's turn is ``(1 − s_turn)`` of what the wheels' difference
  says (a skid-steered turn in place scrubs), its advance ``(1 − s_linear)`` of their
  mean; each ``s = mean + sigma·ξ`` with ξ a unit Gauss-Markov process of correlation
  time ``slip_tau_s`` (one draw per step, only when its sigma > 0). The encoders count
  the wheels, so odometry does not see the slip: this is what makes an encoder-only
  heading adjustment miss by degrees (seeds/002 §1.2, Fig. 7: "wheel slip and the
  rotation centre moving make encoder-only heading adjustment unreliable").

Noise comes from the ``rng`` only (a fixed number of draws per step), so two
runs with the same seed and inputs are identical; nothing reads the clock.

>>> from sim.world import World
>>> world = World.from_config({"size_m": [6.0, 4.0]})
>>> rover = RoverSim(RoverParams().without_noise(), world, np.random.default_rng(0), (1.0, 2.0, 0.0))
>>> for _ in range(200):
...     rover.step(0.01, 10.0, 10.0)   # 10 rad/s × 0.05 m = 0.5 m/s
>>> round(rover.linear_m_s, 3), round(rover.x, 2)
(0.5, 1.96)
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Annotated, Any, Mapping

import msgspec
import numpy as np
from msgspec import Meta
from msgspec.structs import replace

from robotics.estimation.attitude import rotation_zyx  # re-exported: R_world_body of the rover's attitude
from sim.battery import Battery, BatteryParams
from sim.world import World
from robotics.angles import wrap_pi

logger = logging.getLogger(__name__)

_BISECT_ITERATIONS = 18


def _pos(lo_open: float = 0.0) -> Any:
    return Annotated[float, Meta(gt=lo_open)]


_NonNeg = Annotated[float, Meta(ge=0.0)]
#: the ``*_deg`` keys a config table may give instead of the ``*_rad`` fields
_DEGREE_KEYS = {"yaw_deg": "yaw_rad", "half_angle_deg": "half_angle_rad"}


class RangerParams(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """An ultrasonic ranger mounted at (x_m, y_m, yaw_rad) in the body frame. The ranges are checked (``Meta``)
    when a table is converted (:meth:`from_config`, the drivers' :func:`drivers.tables.convert_table`)."""

    name: Annotated[str, Meta(pattern=r"^[a-z][a-z0-9_]*$")]
    x_m: float = 0.15
    y_m: float = 0.0
    yaw_rad: float = 0.0
    min_range_m: _NonNeg = 0.02
    max_range_m: _pos() = 4.0
    half_angle_rad: Annotated[float, Meta(ge=0.0, lt=math.pi / 2)] = math.radians(15.0)
    noise_m: _NonNeg = 0.003
    rays: Annotated[int, Meta(ge=1)] = 5

    def __post_init__(self) -> None:
        if not self.min_range_m < self.max_range_m:
            raise ValueError(f"ranger {self.name}: need min_range_m < max_range_m")

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> "RangerParams":
        """From a config table; angles may be given in degrees (``yaw_deg``, ``half_angle_deg``).
        :class:`msgspec.ValidationError` (a ``ValueError``) names the bad field.

        >>> RangerParams.from_config({"name": "left", "yaw_deg": 90}).yaw_rad == math.pi / 2
        True
        """
        return msgspec.convert(in_radians(cfg), cls)


class RoverParams(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Everything physical about the rover, SI units (ranges checked on conversion, as :class:`RangerParams`)."""

    wheel_radius_m: _pos() = 0.05
    track_m: _pos() = 0.30
    tau_s: _pos() = 0.08
    max_wheel_accel_rad_s2: _pos() = 100.0
    max_wheel_speed_rad_s: _pos() = 20.0
    ticks_per_rev: Annotated[int, Meta(ge=1)] = 1024
    length_m: _pos() = 0.30
    width_m: _pos() = 0.25
    contact_skin_m: _NonNeg = 0.002
    max_substep_s: _pos() = 0.01
    # motor current model, per motor
    motor_i0_a: _NonNeg = 0.08
    motor_k_accel_a: _NonNeg = 0.004  # A per rad/s²
    motor_k_speed_a: _NonNeg = 0.03  # A per rad/s
    motor_stall_a: _NonNeg = 2.5
    current_noise_a: _NonNeg = 0.01
    # wheel slip on the ground (0: the wheels roll without slipping); fractions of the travel lost
    slip_turn: Annotated[float, Meta(ge=-0.5, le=0.5)] = 0.0
    slip_turn_sigma: Annotated[float, Meta(ge=0.0, le=0.5)] = 0.0
    slip_linear: Annotated[float, Meta(ge=-0.5, le=0.5)] = 0.0
    slip_linear_sigma: Annotated[float, Meta(ge=0.0, le=0.5)] = 0.0
    slip_tau_s: _pos() = 1.0
    rangers: tuple[RangerParams, ...] = (RangerParams("front"),)
    battery: BatteryParams = msgspec.field(default_factory=BatteryParams)

    def __post_init__(self) -> None:
        names = [r.name for r in self.rangers]
        if len(set(names)) != len(names):
            raise ValueError("rover: ranger names must be unique")

    @property
    def max_speed_m_s(self) -> float:
        return self.max_wheel_speed_rad_s * self.wheel_radius_m

    @property
    def max_turn_rad_s(self) -> float:
        return 2.0 * self.max_speed_m_s / self.track_m

    def without_noise(self) -> "RoverParams":
        """A copy with every noise σ at zero (the rng is still drawn, so sequences keep their shape)."""
        return replace(
            self,
            current_noise_a=0.0,
            slip_turn_sigma=0.0,
            slip_linear_sigma=0.0,
            rangers=tuple(replace(r, noise_m=0.0) for r in self.rangers),
            battery=replace(self.battery, noise_v=0.0),
        )

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> "RoverParams":
        """From a config table: field names as keys, ``battery`` a sub-table, ``rangers`` a list of tables
        (degrees allowed, as :meth:`RangerParams.from_config`).

        Unknown keys, wrong types and values out of range raise :class:`msgspec.ValidationError` (a
        ``ValueError`` that names the field: a typo must not silently keep a default).

        >>> p = RoverParams.from_config({"track_m": 0.4, "battery": {"capacity_ah": 5.0},
        ...                              "rangers": [{"name": "front"}, {"name": "rear", "yaw_deg": 180}]})
        >>> p.track_m, p.battery.capacity_ah, [r.name for r in p.rangers]
        (0.4, 5.0, ['front', 'rear'])
        """
        return msgspec.convert(rover_table(cfg), cls)


def in_radians(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """A ranger table with its ``*_deg`` keys as ``*_rad`` ones (a value that is not a number is passed on, for
    the conversion to name it).

    >>> in_radians({"name": "rear", "yaw_deg": 180})["yaw_rad"] == math.pi
    True
    """
    out = dict(cfg) if isinstance(cfg, Mapping) else cfg
    if not isinstance(out, dict):
        return out
    for deg, rad in _DEGREE_KEYS.items():
        if deg in out:
            if rad in out:
                raise ValueError(f"ranger: give {deg} or {rad}, not both")
            v = out.pop(deg)
            out[rad] = math.radians(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v
    return out


def rover_table(cfg: Mapping[str, Any]) -> Any:
    """A ``rover`` table with its rangers' degrees in radians (:func:`in_radians`), ready to convert."""
    if not isinstance(cfg, Mapping) or not isinstance(cfg.get("rangers"), (list, tuple)):
        return cfg
    return {**cfg, "rangers": [in_radians(r) for r in cfg["rangers"]]}


def attitude_from_gradient(gx: float, gy: float, yaw: float) -> tuple[float, float]:
    """(roll, pitch) of a body standing on ground of slope ``dz/dx = gx``, ``dz/dy = gy``, heading ``yaw``.

    REP-103 signs: facing up a slope the nose is up, which is *negative* pitch;
    ground rising to the left puts the right side down, *positive* roll.

    >>> roll, pitch = attitude_from_gradient(math.tan(0.1), 0.0, 0.0)   # facing east, uphill
    >>> round(roll, 6), round(pitch, 6)
    (0.0, -0.1)
    >>> roll, pitch = attitude_from_gradient(0.0, math.tan(0.1), 0.0)  # facing east, north (left) rises
    >>> round(roll, 6), round(pitch, 6)
    (0.1, 0.0)
    """
    c, s = math.cos(yaw), math.sin(yaw)
    ahead = gx * c + gy * s  # slope along the heading
    left = -gx * s + gy * c  # slope towards the body's left
    pitch = -math.atan(ahead) + 0.0  # + 0.0: no negative zero on flat ground
    # body z is the ground normal: in the heading frame its y component is -sin(roll)
    roll = math.asin(left / math.sqrt(1.0 + gx * gx + gy * gy))
    return roll, pitch


def _arc(x: float, y: float, yaw: float, ds: float, dth: float) -> tuple[float, float, float]:
    """Pose after rolling ``ds`` metres (horizontal) while turning ``dth`` rad along a circular arc."""
    half = 0.5 * dth
    chord = ds * (1.0 - half * half / 6.0 if abs(half) < 1e-4 else math.sin(half) / half)
    return x + chord * math.cos(yaw + half), y + chord * math.sin(yaw + half), yaw + dth




@dataclass(frozen=True)
class RoverReading:
    """What the rover's sensors report after a step (measured values, with noise), plus truth."""

    sim_time_s: float
    x: float
    y: float
    yaw: float
    z: float
    roll: float
    pitch: float
    linear_m_s: float
    angular_rad_s: float
    wheel_left_rad_s: float
    wheel_right_rad_s: float
    encoder_left_ticks: int
    encoder_right_ticks: int
    ranges: dict[str, float]
    range_valid: dict[str, bool]
    battery_v: float
    soc: float
    current_left_a: float
    current_right_a: float
    collided: bool
    collisions: int
    contact_point: tuple[float, float] | None


class RoverSim:
    """The rover's physics and sensors; advance it with :meth:`step`.

    ``start_pose`` is (x m, y m, yaw rad) in the world, by default the field's
    centre facing east; a start whose footprint touches an obstacle raises
    :class:`ValueError`. The world's edges are read once, at construction.
    """

    def __init__(
        self,
        params: RoverParams,
        world: World,
        rng: np.random.Generator,
        start_pose: tuple[float, float, float] | None = None,
    ) -> None:
        self.params = params
        self.world = world
        self.rng = rng
        segs = world.all_segments()
        self._seg_p = segs[:, :2].copy()
        self._seg_d = segs[:, 2:] - segs[:, :2]
        len2 = (self._seg_d ** 2).sum(axis=1)
        self._seg_inv_len2 = np.where(len2 > 0, 1.0 / np.where(len2 > 0, len2, 1.0), 0.0)
        if start_pose is None:
            start_pose = (world.width_m / 2.0, world.height_m / 2.0, 0.0)
        self.sim_time_s = 0.0
        self._x = self._y = self._yaw = 0.0
        self.z = 0.0
        # left, right as plain floats (two-element numpy arrays cost more than they save)
        self._w = [0.0, 0.0]  # wheel speeds, rad/s
        self._phi = [0.0, 0.0]  # cumulative wheel angles, rad
        self._cmd = (0.0, 0.0)  # clipped command, rad/s
        self._motor_i = [0.0, 0.0]  # true motor currents, A
        self._slip_xi = [0.0, 0.0]  # the slip processes (turn, linear), unit variance
        self._slip = (params.slip_turn, params.slip_linear)  # this step's slip fractions
        self._half_diagonal = 0.5 * math.hypot(params.length_m, params.width_m)
        # a disc around (x, y) of this radius is known to be free of edges: footprints inside skip the test
        self._free_disc = (0.0, 0.0, -1.0)
        self.battery = Battery(params.battery)
        self.collided = False
        self.collisions = 0
        self.contact_point: tuple[float, float] | None = None
        n = len(params.rangers)
        self._ranges = np.array([r.max_range_m for r in params.rangers], dtype=float)
        self._range_valid = np.zeros(n, dtype=bool)
        self._meas_v = self.battery.voltage_v
        self._meas_i = [0.0, 0.0]
        # ray fan of every ranger, body frame: origins (K, 2), angles (K,), owner index (K,)
        origins, angles, owner = [], [], []
        for i, r in enumerate(params.rangers):
            k = int(r.rays)
            spread = np.linspace(-r.half_angle_rad, r.half_angle_rad, k) if k > 1 else np.zeros(1)
            for a in spread:
                origins.append((r.x_m, r.y_m))
                angles.append(r.yaw_rad + a)
                owner.append(i)
        self._ray_o = np.array(origins, dtype=float).reshape(-1, 2)
        self._ray_a = np.array(angles, dtype=float)
        self._ray_start = np.searchsorted(np.array(owner, dtype=int), np.arange(n))
        self._range_lo = np.array([r.min_range_m for r in params.rangers], dtype=float)
        self._range_hi = np.array([r.max_range_m for r in params.rangers], dtype=float)
        self._range_sigma = np.array([r.noise_m for r in params.rangers], dtype=float)
        # the rays' true distances at the pose they were cast from: the edges never move, so a rover at rest (most
        # of a server's life; ~15 % of an idle runtime's CPU was casting the same rays) casts them once
        self._cast_pose: tuple[float, float, float] | None = None
        self._cast_dist = self._range_hi
        self.teleport(*start_pose)
        self._sample_sensors()

    # state ---------------------------------------------------------------
    @property
    def x(self) -> float:
        return self._x

    @property
    def y(self) -> float:
        return self._y

    @property
    def yaw(self) -> float:
        """Heading, wrapped to [-pi, pi)."""
        return self._yaw

    @property
    def pose(self) -> tuple[float, float, float]:
        """(x m, y m, yaw rad) in the world."""
        return self._x, self._y, self._yaw

    @property
    def attitude(self) -> tuple[float, float]:
        """(roll, pitch) rad from the ground under the body origin."""
        return attitude_from_gradient(*self.world.ground_gradient(self._x, self._y), self._yaw)

    @property
    def roll(self) -> float:
        return self.attitude[0]

    @property
    def pitch(self) -> float:
        return self.attitude[1]

    def pose3d(self) -> tuple[np.ndarray, np.ndarray]:
        """(position (3,) m, R_world_body (3, 3)): the hook for the IMU and magnetometer models.

        >>> from sim.world import World
        >>> r = RoverSim(RoverParams(), World.from_config({"size_m": [4.0, 3.0]}), np.random.default_rng(0), (1.0, 1.0, 0.0))
        >>> p, R = r.pose3d()
        >>> p.tolist(), np.allclose(R, np.eye(3))
        ([1.0, 1.0, 0.0], True)
        """
        roll, pitch = self.attitude
        return np.array([self._x, self._y, self.z]), rotation_zyx(roll, pitch, self._yaw)

    def point_world(self, body_point_m) -> np.ndarray:
        """World position (3,) m of a point fixed to the body at ``body_point_m`` (3,) m, body frame
        (e.g. the UWB tag on its mast: on a ramp it leans with the body).

        >>> from sim.world import World
        >>> r = RoverSim(RoverParams(), World.from_config({"size_m": [4.0, 3.0]}), np.random.default_rng(0), (1.0, 1.0, 0.0))
        >>> r.point_world((0.0, 0.0, 0.2)).tolist()
        [1.0, 1.0, 0.2]
        """
        position, rot = self.pose3d()
        return position + rot @ np.asarray(body_point_m, dtype=float).reshape(3)

    @property
    def wheel_speeds(self) -> tuple[float, float]:
        """(left, right) wheel speeds, rad/s (positive drives forward)."""
        return float(self._w[0]), float(self._w[1])

    @property
    def command(self) -> tuple[float, float]:
        """The last (left, right) wheel speed command, rad/s, after clipping."""
        return float(self._cmd[0]), float(self._cmd[1])

    @property
    def linear_m_s(self) -> float:
        """Forward speed from the wheels, m/s (body frame, along the ground)."""
        return float(self.params.wheel_radius_m * (self._w[0] + self._w[1]) / 2.0)

    @property
    def angular_rad_s(self) -> float:
        """Turn rate from the wheels, rad/s (counter-clockwise positive)."""
        return float(self.params.wheel_radius_m * (self._w[1] - self._w[0]) / self.params.track_m)

    @property
    def encoder_ticks(self) -> tuple[int, int]:
        """Cumulative signed (left, right) encoder counts since the start."""
        k = self.params.ticks_per_rev / (2.0 * math.pi)
        return math.floor(self._phi[0] * k), math.floor(self._phi[1] * k)

    @property
    def ranges(self) -> dict[str, float]:
        """Last sonar readings per ranger name, m (see the module doc for out-of-range values)."""
        return {r.name: float(v) for r, v in zip(self.params.rangers, self._ranges)}

    @property
    def range_valid(self) -> dict[str, bool]:
        """Whether each ranger had an echo within its [min, max] range."""
        return {r.name: bool(v) for r, v in zip(self.params.rangers, self._range_valid)}

    @property
    def battery_v(self) -> float:
        """Measured battery voltage (noisy; exact when forced)."""
        return self._meas_v

    @property
    def soc(self) -> float:
        return self.battery.soc

    @property
    def motor_currents(self) -> tuple[float, float]:
        """Measured (left, right) motor currents, A."""
        return float(self._meas_i[0]), float(self._meas_i[1])

    @property
    def true_motor_currents(self) -> tuple[float, float]:
        """True (left, right) motor currents, A (what heats the body and magnetises its iron)."""
        return float(self._motor_i[0]), float(self._motor_i[1])

    @property
    def slip(self) -> tuple[float, float]:
        """This step's (turn, linear) slip fractions (0, 0 without a slip model)."""
        return self._slip

    def reading(self) -> RoverReading:
        """Snapshot of every sensor and the ground truth."""
        roll, pitch = self.attitude
        ticks = self.encoder_ticks
        return RoverReading(
            sim_time_s=self.sim_time_s, x=self._x, y=self._y, yaw=self._yaw, z=self.z, roll=roll, pitch=pitch,
            linear_m_s=self.linear_m_s, angular_rad_s=self.angular_rad_s,
            wheel_left_rad_s=float(self._w[0]), wheel_right_rad_s=float(self._w[1]),
            encoder_left_ticks=ticks[0], encoder_right_ticks=ticks[1],
            ranges=self.ranges, range_valid=self.range_valid,
            battery_v=self._meas_v, soc=self.battery.soc,
            current_left_a=float(self._meas_i[0]), current_right_a=float(self._meas_i[1]),
            collided=self.collided, collisions=self.collisions, contact_point=self.contact_point,
        )

    # commands ------------------------------------------------------------
    def teleport(self, x: float, y: float, yaw: float) -> None:
        """Put the rover at (x, y, yaw), at rest; raises :class:`ValueError` if the footprint touches an obstacle."""
        x, y, yaw = float(x), float(y), float(yaw)
        if not all(map(math.isfinite, (x, y, yaw))):
            raise ValueError("teleport: pose must be finite")
        if self.world.inside_obstacle(x, y) or self._footprint_hit(x, y, yaw, 0.0)[0]:
            raise ValueError(f"teleport: the footprint at ({x:.3f}, {y:.3f}) touches an obstacle")
        self._x, self._y, self._yaw = x, y, wrap_pi(yaw)
        self._w = [0.0, 0.0]
        self.collided = False

    def step(self, dt_s: float, left_cmd_rad_s: float, right_cmd_rad_s: float) -> None:
        """Advance ``dt_s`` seconds with these wheel speed commands (rad/s, clipped to the motor limit)."""
        dt_s = float(dt_s)
        if not (math.isfinite(dt_s) and dt_s >= 0.0):
            raise ValueError(f"dt_s must be finite and >= 0, got {dt_s!r}")
        left, right = float(left_cmd_rad_s), float(right_cmd_rad_s)
        if not (math.isfinite(left) and math.isfinite(right)):
            raise ValueError("wheel commands must be finite")
        p = self.params
        lim = p.max_wheel_speed_rad_s
        self._cmd = (min(max(left, -lim), lim), min(max(right, -lim), lim))
        if dt_s > 0.0 and (p.slip_turn_sigma > 0.0 or p.slip_linear_sigma > 0.0):
            self._step_slip(dt_s)
        if dt_s > 0.0:
            n = max(1, math.ceil(dt_s / p.max_substep_s - 1e-9))
            h = dt_s / n
            for _ in range(n):
                self._substep(h)
        self.sim_time_s += dt_s
        self._sample_sensors()

    # physics -------------------------------------------------------------
    def _step_slip(self, dt_s: float) -> None:
        """Advance the slip processes (two draws, only with a slip sigma): exact Gauss-Markov steps."""
        p = self.params
        a = math.exp(-dt_s / p.slip_tau_s)
        b = math.sqrt(max(0.0, 1.0 - a * a))
        z = self.rng.standard_normal(2)
        self._slip_xi = [a * self._slip_xi[0] + b * float(z[0]), a * self._slip_xi[1] + b * float(z[1])]
        self._slip = (min(max(p.slip_turn + p.slip_turn_sigma * self._slip_xi[0], -0.5), 0.9),
                      min(max(p.slip_linear + p.slip_linear_sigma * self._slip_xi[1], -0.5), 0.9))

    def _substep(self, h: float) -> None:
        p = self.params
        decay = math.exp(-h / p.tau_s)
        max_dv = p.max_wheel_accel_rad_s2 * h
        w0 = self._w
        w1 = [0.0, 0.0]
        for k in (0, 1):
            dv = (self._cmd[k] - w0[k]) * (1.0 - decay)  # exact first-order step toward the command
            w1[k] = w0[k] + min(max(dv, -max_dv), max_dv)
        dphi = [0.5 * (w0[0] + w1[0]) * h, 0.5 * (w0[1] + w1[1]) * h]
        ds = p.wheel_radius_m * (dphi[0] + dphi[1]) / 2.0
        dth = p.wheel_radius_m * (dphi[1] - dphi[0]) / p.track_m
        if self._slip != (0.0, 0.0):  # the ground does not follow the wheels (the encoders count the wheels)
            dth *= 1.0 - self._slip[0]
            ds *= 1.0 - self._slip[1]
        ds_h = ds * math.cos(self.pitch)

        x0, y0, yaw0 = self._x, self._y, self._yaw
        x1, y1, yaw1 = _arc(x0, y0, yaw0, ds_h, dth)
        hit, contact = self._footprint_hit(x1, y1, yaw1, 0.0) if (ds_h or dth) else (False, None)
        frac = 1.0
        if hit:
            # cut the motion at contact: the pose at lo is free, at hi it touches; stop
            # once the bracket is under 1 µm of travel of any footprint point
            travel = abs(ds_h) + abs(dth) * self._half_diagonal
            near = self._near_edges(x0, y0, self._half_diagonal + travel)  # every edge the motion can reach
            lo, hi = 0.0, 1.0
            while (hi - lo) * travel > 1e-6 and hi - lo > 1e-12:
                mid = 0.5 * (lo + hi)
                h_mid, c_mid = self._footprint_hit(*_arc(x0, y0, yaw0, ds_h * mid, dth * mid), 0.0, near)
                if h_mid:
                    hi, contact = mid, c_mid
                else:
                    lo = mid
            frac = lo
            x1, y1, yaw1 = _arc(x0, y0, yaw0, ds_h * frac, dth * frac)
            w1 = [0.0, 0.0]
        self._integrate_z(x0, y0, x1, y1)
        self._x, self._y, self._yaw = x1, y1, wrap_pi(yaw1)
        self._phi = [self._phi[0] + dphi[0] * frac, self._phi[1] + dphi[1] * frac]
        self._w = w1

        if hit:
            if not self.collided:
                self.collisions += 1
                self.contact_point = contact
                logger.info("rover collision #%d at (%.3f, %.3f)", self.collisions, *contact)
            self.collided = True
        elif self.collided and not self._footprint_hit(x1, y1, yaw1, p.contact_skin_m)[0]:
            self.collided = False

        for k in (0, 1):
            if hit:  # pushing against the obstacle: the motor stalls at its duty cycle
                self._motor_i[k] = p.motor_stall_a * min(1.0, abs(self._cmd[k]) / p.max_wheel_speed_rad_s)
            elif w1[k] != 0.0 or w0[k] != 0.0:
                accel = (w1[k] - w0[k]) / h
                self._motor_i[k] = p.motor_i0_a + p.motor_k_accel_a * abs(accel) + p.motor_k_speed_a * abs(w1[k])
            else:
                self._motor_i[k] = 0.0
        self.battery.step(h, p.battery.idle_current_a + self._motor_i[0] + self._motor_i[1])

    def _integrate_z(self, x0: float, y0: float, x1: float, y1: float) -> None:
        gx, gy = self.world.ground_gradient(0.5 * (x0 + x1), 0.5 * (y0 + y1))
        self.z += gx * (x1 - x0) + gy * (y1 - y0)

    def _footprint_hit(
        self, x: float, y: float, yaw: float, margin: float, near: list[int] | None = None
    ) -> tuple[bool, tuple[float, float] | None]:
        """Whether the footprint (grown by ``margin``) at this pose touches an edge, and a contact point.

        Edges farther than the footprint's circumradius are culled (or only the
        indices ``near`` are tried); the few left are clipped against the
        footprint rectangle in the body frame (Liang–Barsky).
        """
        if len(self._seg_p) == 0:
            return False, None
        if near is None:
            reach = self._half_diagonal + margin  # the footprint lies within this radius of (x, y)
            cx, cy, free = self._free_disc
            if math.hypot(x - cx, y - cy) + reach < free:
                return False, None
            dist2 = self._edge_distances2(x, y)
            near = np.flatnonzero(dist2 <= reach * reach).tolist()
            if not near:
                self._free_disc = (x, y, math.sqrt(float(dist2.min())))
                return False, None
        c, s = math.cos(yaw), math.sin(yaw)
        hx = 0.5 * self.params.length_m + margin
        hy = 0.5 * self.params.width_m + margin
        best: tuple[float, float, float] | None = None  # (squared distance from the centre, body x, body y)
        for i in near:
            px, py = float(self._seg_p[i, 0]) - x, float(self._seg_p[i, 1]) - y
            sx, sy = float(self._seg_d[i, 0]), float(self._seg_d[i, 1])
            p0x, p0y = c * px + s * py, -s * px + c * py
            dx, dy = c * sx + s * sy, -s * sx + c * sy
            t0, t1 = 0.0, 1.0
            for pk, qk in ((-dx, p0x + hx), (dx, hx - p0x), (-dy, p0y + hy), (dy, hy - p0y)):
                if pk == 0.0:
                    if qk < 0.0:
                        t0, t1 = 1.0, 0.0  # parallel and outside this side
                        break
                elif pk < 0.0:
                    t0 = max(t0, qk / pk)
                else:
                    t1 = min(t1, qk / pk)
            if t0 <= t1:
                tm = 0.5 * (t0 + t1)
                bx, by = p0x + dx * tm, p0y + dy * tm
                if best is None or bx * bx + by * by < best[0]:
                    best = (bx * bx + by * by, bx, by)
        if best is None:
            return False, None
        _, bx, by = best
        return True, (x + c * bx - s * by, y + s * bx + c * by)

    def _near_edges(self, x: float, y: float, radius: float) -> list[int]:
        """Indices of the edges within ``radius`` of (x, y)."""
        return np.flatnonzero(self._edge_distances2(x, y) <= radius * radius).tolist()

    def _edge_distances2(self, x: float, y: float) -> np.ndarray:
        """Squared distance from (x, y) to every cached edge, (N,)."""
        rx = x - self._seg_p[:, 0]
        ry = y - self._seg_p[:, 1]
        u = np.clip((rx * self._seg_d[:, 0] + ry * self._seg_d[:, 1]) * self._seg_inv_len2, 0.0, 1.0)
        ex = rx - self._seg_d[:, 0] * u
        ey = ry - self._seg_d[:, 1] * u
        return ex * ex + ey * ey

    def _raycast(self) -> np.ndarray:
        """Distance along every ray of every ranger to the first edge (inf with none), (K,)."""
        c, s = math.cos(self._yaw), math.sin(self._yaw)
        ox = self._x + c * self._ray_o[:, 0] - s * self._ray_o[:, 1]
        oy = self._y + s * self._ray_o[:, 0] + c * self._ray_o[:, 1]
        ang = self._yaw + self._ray_a
        rx, ry = np.cos(ang)[:, None], np.sin(ang)[:, None]
        px = self._seg_p[None, :, 0] - ox[:, None]
        py = self._seg_p[None, :, 1] - oy[:, None]
        dx, dy = self._seg_d[None, :, 0], self._seg_d[None, :, 1]
        den = rx * dy - ry * dx
        with np.errstate(divide="ignore", invalid="ignore"):
            t = (px * dy - py * dx) / den
            u = (px * ry - py * rx) / den
        ok = (np.abs(den) > 1e-12) & (t >= 0.0) & (u >= -1e-9) & (u <= 1.0 + 1e-9)
        return np.where(ok, t, np.inf).min(axis=1, initial=np.inf)

    def _sample_sensors(self) -> None:
        """Sonars, battery voltage and currents with noise: a fixed number of draws per call."""
        p = self.params
        n = len(p.rangers)
        noise = self.rng.standard_normal(n + 3)
        if n:
            pose = (self._x, self._y, self._yaw)
            if pose != self._cast_pose:
                self._cast_pose = pose
                self._cast_dist = np.minimum.reduceat(self._raycast(), self._ray_start)
            dist = self._cast_dist
            lo, hi = self._range_lo, self._range_hi
            self._range_valid = (dist >= lo) & (dist <= hi)
            measured = np.where(self._range_valid, dist + self._range_sigma * noise[:n], np.where(dist < lo, lo, hi))
            self._ranges = np.clip(measured, lo, hi)
        if self.battery.forced_v is not None:
            self._meas_v = self.battery.forced_v
        else:
            self._meas_v = max(0.0, self.battery.voltage_v + p.battery.noise_v * float(noise[n]))
        self._meas_i = [max(0.0, self._motor_i[k] + p.current_noise_a * float(noise[n + 1 + k])) for k in (0, 1)]
