"""The simulated drivers' ``[driver]`` tables as msgspec Structs: every key typed, every range a ``Meta`` bound.

One struct per table, each owning its keys: :class:`RoverSimTable` (``sim``) with its sensors —
:class:`ImuTable`, :class:`MagnetometerTable`, :class:`UwbTable`, :class:`DopplerTable` — and the
rover's physics (``rover``, or its keys flat in ``[driver]``), which is :class:`sim.rover.RoverParams`;
:class:`SimArmTable` with :class:`ScaraSimTable` (``sim-scara``) and :class:`StewartSimTable`
(``sim-stewart``). :func:`drivers.tables.convert_table` converts them, so a bad value is a
:class:`~drivers.errors.DriverConfigError` naming its dotted key. A sensor table builds its
simulator part (:meth:`ImuTable.imu`, …); ``noise = false`` in ``[driver]`` turns its noise off.

>>> from drivers.tables import convert_table
>>> t = convert_table({"doppler": {"rate_hz": 10}}, RoverSimTable)
>>> t.doppler.rate_hz, t.doppler.quadrature, t.imu is None
(10.0, True, True)
>>> convert_table({"uwb": {"anchors": [[0, 0, 2]], "rate_hz": 10}}, RoverSimTable)
Traceback (most recent call last):
...
drivers.errors.DriverConfigError: uwb: needs at least 3 anchors [x, y, z] in metres
"""

from __future__ import annotations

import math
from typing import Annotated, Any

import msgspec
import numpy as np
from msgspec import Meta

from drivers.errors import DriverConfigError
from sim.doppler import MovingTarget, min_detectable_speed
from sim.imu import ImuNoise
from sim.magnetic import HardIronDrift
from sim.magnetometer import Magnetometer
from sim.uwb import UwbRanger

_UT = 1e-6  # tesla per microtesla
Vec3 = tuple[float, float, float]
Pair = tuple[float, float]
NonNeg = Annotated[float, Meta(ge=0.0)]
Probability = Annotated[float, Meta(ge=0.0, le=1.0)]
Positive = Annotated[float, Meta(gt=0.0)]


def _between(lo: float, hi: float) -> Any:
    return Annotated[float, Meta(ge=lo, le=hi)]


class _Table(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Base of the tables: unknown keys refused, every key named."""


# ---------------------------------------------------------------------- the rover's sensors
class ImuTable(_Table):
    """``[driver.imu]``: a 6-axis IMU on the rover's 3D pose (:class:`sim.imu.VirtualImu`) and its error model."""

    enabled: bool = True
    acc_sigma_m_s2: NonNeg = 0.0
    gyro_sigma_rad_s: NonNeg = 0.0
    acc_bias_m_s2: float | Vec3 = 0.0  # a scalar for every axis, or [x, y, z]
    gyro_bias_rad_s: float | Vec3 = 0.0
    acc_scale: float | Vec3 = 1.0
    gyro_scale: float | Vec3 = 1.0
    acc_bias_walk_m_s2_sqrt_s: NonNeg = 0.0
    gyro_bias_walk_rad_s_sqrt_s: NonNeg = 0.0
    acc_range_m_s2: Annotated[float, Meta(ge=1e-3)] | None = None  # saturation; none: unlimited
    gyro_range_rad_s: Annotated[float, Meta(ge=1e-3)] | None = None
    lever_arm_m: Vec3 = (0.0, 0.0, 0.0)
    gravity_m_s2: NonNeg = 9.80665

    def imu(self, noise: bool) -> dict[str, Any] | None:
        """Keyword arguments of :class:`sim.imu.VirtualImu` (noise model included), or None when disabled."""
        if not self.enabled:
            return None
        model = ImuNoise(
            acc_sigma=self.acc_sigma_m_s2, gyro_sigma=self.gyro_sigma_rad_s,
            acc_bias=np.asarray(self.acc_bias_m_s2, dtype=float), gyro_bias=np.asarray(self.gyro_bias_rad_s, dtype=float),
            acc_scale=np.asarray(self.acc_scale, dtype=float), gyro_scale=np.asarray(self.gyro_scale, dtype=float),
            acc_bias_walk=self.acc_bias_walk_m_s2_sqrt_s, gyro_bias_walk=self.gyro_bias_walk_rad_s_sqrt_s,
            acc_range=math.inf if self.acc_range_m_s2 is None else self.acc_range_m_s2,
            gyro_range=math.inf if self.gyro_range_rad_s is None else self.gyro_range_rad_s,
        )
        return {"gravity": self.gravity_m_s2, "lever_arm_m": np.asarray(self.lever_arm_m, dtype=float),
                "noise": model if noise else None}


class ScaraImuTable(ImuTable):
    """``[driver.imu]`` of the simulated SCARA arm: a 6-axis IMU fixed to ``link`` (1 or 2), at ``lever_arm_m`` in
    that link's frame (x along the link from its joint, z up; seeds/000's virtual sensor on the arm's forearm)."""

    link: Annotated[int, Meta(ge=1, le=2)] = 2


class MagnetometerTable(_Table):
    """``[driver.magnetometer]``: a 3-axis magnetometer (:class:`sim.magnetometer.Magnetometer`), microtesla."""

    enabled: bool = True
    field_strength_ut: _between(0.0, 1e4) = 50.0
    declination_deg: _between(-180.0, 180.0) = 0.0  # 0: magnetic north is true north
    dip_deg: _between(-90.0, 90.0) = 60.0
    hard_iron_ut: Vec3 = (0.0, 0.0, 0.0)
    soft_iron: Annotated[list[float | Vec3], Meta(min_length=3, max_length=3)] = msgspec.field(
        default_factory=lambda: [1.0, 1.0, 1.0])  # [x, y, z] gains or a 3×3 matrix
    noise_ut: NonNeg = 0.0  # σ per axis per sample
    lever_arm_m: Vec3 = (0.0, 0.0, 0.0)  # the sensor in the body: where the steel's field is felt
    # hard iron that drifts (sim.magnetic.HardIronDrift): µT per A of each motor (left, right), µT per K
    drift_ut_per_a: tuple[Vec3, Vec3] = ((0.0, 0.0, 0.0), (0.0, 0.0, 0.0))
    drift_ut_per_k: Vec3 = (0.0, 0.0, 0.0)
    heating_k_per_a2: _between(0.0, 1e4) = 0.0  # steady temperature rise per A² of Σ I²
    thermal_tau_s: _between(1.0, 1e6) = 300.0

    def __post_init__(self) -> None:
        rows = [isinstance(v, tuple) for v in self.soft_iron]
        if any(rows) and not all(rows):
            raise ValueError("soft_iron must be [x, y, z] gains or a 3×3 matrix")

    def drift(self) -> HardIronDrift | None:
        """The hard-iron drift model, or None when every coefficient is 0 (or the sensor is off)."""
        if not self.enabled or (not any(map(any, self.drift_ut_per_a)) and not any(self.drift_ut_per_k)):
            return None
        return HardIronDrift(per_amp_t=np.asarray(self.drift_ut_per_a, dtype=float) * _UT,
                             per_kelvin_t=np.asarray(self.drift_ut_per_k, dtype=float) * _UT,
                             heating_k_per_a2=self.heating_k_per_a2, thermal_tau_s=self.thermal_tau_s)

    def magnetometer(self, noise: bool) -> Magnetometer | None:
        if not self.enabled:
            return None
        return Magnetometer(
            field_strength_t=self.field_strength_ut * _UT, declination=math.radians(self.declination_deg),
            dip=math.radians(self.dip_deg), hard_iron_t=np.asarray(self.hard_iron_ut, dtype=float) * _UT,
            soft_iron=np.asarray(self.soft_iron, dtype=float), noise_sigma_t=self.noise_ut * _UT if noise else 0.0,
        )


class UwbTable(_Table):
    """``[driver.uwb]``: a UWB tag ranging to fixed anchors (:class:`sim.uwb.UwbRanger`); the server passes the
    top-level ``[uwb] anchors``."""

    enabled: bool = True
    anchors: list[Vec3] | None = None  # [[x, y, z], ...] m, world frame
    tag_height_m: _between(-10.0, 10.0) = 0.15  # above the body origin, leaning with the body
    rate_hz: Annotated[float, Meta(gt=0.0, le=1000.0)] = 10.0
    sigma_m: NonNeg = 0.05
    nlos_probability: Probability = 0.0
    nlos_bias_m: NonNeg = 0.3  # mean excess path
    distortion: Vec3 = (0.0, 1.0, 0.0)  # raw = a + b·d + c·d²
    dropout_probability: Probability = 0.0
    # the field's errors (sim/uwb.py): heavier tails, outliers, NLOS through obstacles, static multipath
    noise_dof: Annotated[float, Meta(gt=2.0, le=1e6)] | None = None  # Student-t; none: Gaussian
    outlier_probability: Probability = 0.0
    outlier_m: _between(0.0, 100.0) = 0.0  # a late peak: uniform in [0, outlier_m]
    nlos_excess_per_m: _between(0.0, 100.0) = 0.0  # per metre of obstacle the line of sight crosses
    nlos_sigma_m: _between(0.0, 100.0) = 0.0  # and its spread, |N(0, σ²)|
    multipath_m: _between(0.0, 10.0) = 0.0  # σ of the static position-dependent bias
    multipath_length_m: _between(0.01, 100.0) = 1.0  # its correlation length

    def __post_init__(self) -> None:
        if self.enabled and self.anchors is None:
            raise ValueError("needs anchors (the top-level [uwb] anchors = [[x, y, z], ...])")
        if self.anchors is not None and len(self.anchors) < 3:
            raise ValueError("needs at least 3 anchors [x, y, z] in metres")

    def ranger(self, noise: bool) -> tuple[UwbRanger, float, float] | None:
        """(ranger, rate_hz, tag_height_m), or None when disabled."""
        if not self.enabled:
            return None
        ranger = UwbRanger(
            np.asarray(self.anchors, dtype=float), sigma_m=self.sigma_m if noise else 0.0,
            nlos_probability=self.nlos_probability if noise else 0.0, nlos_bias_m=self.nlos_bias_m,
            distortion=self.distortion, dropout_probability=self.dropout_probability if noise else 0.0,
            noise_dof=math.inf if self.noise_dof is None or not noise else self.noise_dof,
            outlier_probability=self.outlier_probability if noise else 0.0, outlier_m=self.outlier_m,
            nlos_excess_per_m=self.nlos_excess_per_m if noise else 0.0,
            nlos_sigma_m=self.nlos_sigma_m if noise else 0.0,
            multipath_m=self.multipath_m if noise else 0.0, multipath_length_m=self.multipath_length_m,
        )
        return ranger, self.rate_hz, self.tag_height_m


class DopplerTargetTable(_Table):
    """A point walking back and forth between ``from`` and ``to`` (seen only by the radar)."""

    from_: Pair = msgspec.field(name="from")
    to: Pair
    speed_m_s: Annotated[float, Meta(gt=0.0, le=100.0)] = 1.0
    start_s: NonNeg = 0.0

    def __post_init__(self) -> None:
        if self.from_ == self.to:
            raise ValueError("needs from != to")


class DopplerTable(_Table):
    """``[driver.doppler]``: a microwave Doppler radar (:class:`sim.doppler.DopplerRadar`)."""

    enabled: bool = True
    rate_hz: Annotated[float, Meta(gt=0.0, le=1000.0)] = 20.0
    frequency_ghz: _between(0.1, 1000.0) = 24.125
    depression_deg: _between(0.0, 80.0) = 35.0  # the beam below body x
    window_s: _between(1e-3, 10.0) | None = None  # default 1/rate_hz
    min_speed_m_s: _between(0.0, 100.0) | None = None  # default one spectral bin
    sigma_rel: Probability = 0.02
    sigma_m_s: _between(0.0, 10.0) = 0.005
    quadrature: bool = True  # signed speed
    mount_forward_m: _between(-10.0, 10.0) = 0.15
    motion_range_m: _between(0.01, 1000.0) = 5.0
    motion_half_angle_deg: _between(0.1, 180.0) = 40.0
    motion_min_speed_m_s: _between(0.0, 100.0) = 0.1
    false_alarm_probability: Probability = 0.0
    miss_probability: Probability = 0.0
    targets: list[DopplerTargetTable] = []

    def radar(self, noise: bool) -> tuple[dict[str, Any], float] | None:
        """(keyword arguments of :class:`DopplerRadar` but ``world``, rate_hz), or None when disabled."""
        if not self.enabled:
            return None
        depression = math.radians(self.depression_deg)
        window_s = 1.0 / self.rate_hz if self.window_s is None else self.window_s
        min_speed = (min_detectable_speed(self.frequency_ghz * 1e9, depression, window_s)
                     if self.min_speed_m_s is None else self.min_speed_m_s)
        kw = {
            "depression_rad": depression, "min_speed_m_s": min_speed,
            "sigma_rel": self.sigma_rel if noise else 0.0, "sigma_m_s": self.sigma_m_s if noise else 0.0,
            "quadrature": self.quadrature, "mount_forward_m": self.mount_forward_m,
            "motion_range_m": self.motion_range_m, "motion_half_angle_rad": math.radians(self.motion_half_angle_deg),
            "motion_min_speed_m_s": self.motion_min_speed_m_s,
            "false_alarm_probability": self.false_alarm_probability if noise else 0.0,
            "miss_probability": self.miss_probability if noise else 0.0,
            "targets": tuple(MovingTarget(t.from_, t.to, t.speed_m_s, t.start_s) for t in self.targets),
        }
        return kw, self.rate_hz


class RoverSimTable(_Table):
    """``[driver]`` of the simulated rover (``sim``); the rover's physics is ``rover`` (or flat keys), converted
    to :class:`sim.rover.RoverParams` apart."""

    name: str = "sim"
    seed: int = 0
    time_scale: Positive = 1.0  # sim seconds per real second
    rate_hz: Annotated[float, Meta(gt=0.0, le=1000.0)] = 100.0  # initial acquisition rate
    noise: bool = True  # false: every sensor noise off
    start_pose: Vec3 | None = None  # [x_m, y_m, yaw_deg]; default: field centre, facing east
    max_read_dt_s: Positive = 0.5  # longest simulated step per read, sim seconds
    rover: dict[str, Any] = {}  # sim.rover.RoverParams fields
    imu: ImuTable | None = None
    magnetometer: MagnetometerTable | None = None
    uwb: UwbTable | None = None
    doppler: DopplerTable | None = None


# ---------------------------------------------------------------------- the arms
class SimArmTable(_Table):
    """What every simulated arm's ``[driver]`` has."""

    name: str = ""
    seed: int = 0
    time_scale: Positive = 1.0
    rate_hz: Annotated[float, Meta(ge=0.1, le=1000.0)] | None = None  # default: the loop's rate
    max_read_dt_s: Positive = 0.5

    def common(self, loop_rate_hz: float) -> dict[str, Any]:
        """Keyword arguments of :class:`drivers.sim.arm.SimArmDriver`."""
        return {"seed": self.seed, "time_scale": self.time_scale, "max_read_dt_s": self.max_read_dt_s,
                "rate_hz": loop_rate_hz if self.rate_hz is None else self.rate_hz}

    def given(self, keys: tuple[str, ...]) -> dict[str, Any]:
        """The ``keys`` this table gives (not None), as plain values."""
        out = {}
        for key in keys:
            value = getattr(self, key)
            if value is not None:
                out[key] = msgspec.to_builtins(value)
        return out


def _optional(keys: dict[str, Any]) -> list[tuple[str, Any, None]]:
    """defstruct fields: each key optional (None: not given; ``[robot]``'s, or the simulator's default)."""
    return [(key, tp | None, None) for key, tp in keys.items()]


#: the arm keys of a SCARA's [driver] table and their types (:class:`sim.scara.ScaraParams` checks the geometry)
SCARA_ARM: dict[str, Any] = {
    "l1_m": float, "l2_m": float, "q_min_deg": Pair, "q_max_deg": Pair, "q_min_rad": Pair, "q_max_rad": Pair,
    "max_velocity_rad_s": Pair, "max_acceleration_rad_s2": Pair, "encoder_noise_rad": NonNeg,
}
#: ``[driver]`` of the simulated SCARA arm (``sim-scara``): the :data:`SCARA_ARM` keys (those it lacks come
#: from ``[robot]``), ``start_q_deg`` ([q1, q2]) and ``imu`` (:class:`ScaraImuTable`)
ScaraSimTable = msgspec.defstruct(
    "ScaraSimTable", [*_optional(SCARA_ARM), ("start_q_deg", Pair, (0.0, 0.0)), ("imu", ScaraImuTable | None, None)],
    bases=(SimArmTable,),
    kw_only=True, forbid_unknown_fields=True, module=__name__)

Joints = Annotated[list[Vec3], Meta(min_length=6, max_length=6)]
#: the geometry keys of a platform: the symmetric layout's radii and spreads, or the joints (six [x, y, z]
#: points each); the stroke
STEWART_GEOMETRY: dict[str, Any] = {
    "base_radius_m": Positive, "platform_radius_m": Positive, "base_spread_deg": float, "platform_spread_deg": float,
    "base_joints_m": Joints, "platform_joints_m": Joints, "leg_min_m": Positive, "leg_max_m": Positive,
}
#: the keys of its actuators (:class:`sim.stewart.ActuatorParams`)
STEWART_ACTUATORS: dict[str, Any] = {"max_velocity_m_s": Positive, "max_acceleration_m_s2": Positive,
                                     "length_noise_m": NonNeg}


class _StewartTable(SimArmTable):
    """What :data:`StewartSimTable` can check that its fields cannot say alone."""

    def check_layout(self) -> None:
        """The joints or the symmetric layout's radii and spreads, not both; :class:`DriverConfigError` naming the
        key (a struct's ``__post_init__`` could not name it)."""
        if (self.base_joints_m is None) != (self.platform_joints_m is None):
            raise DriverConfigError("base_joints_m", "give base_joints_m and platform_joints_m together")
        radial = [k for k in ("base_radius_m", "platform_radius_m", "base_spread_deg", "platform_spread_deg")
                  if getattr(self, k) is not None]
        if self.base_joints_m is not None and radial:
            raise DriverConfigError(radial[0], "give the joints or the radii and spreads, not both")


#: ``[driver]`` of the simulated Stewart platform (``sim-stewart``): the :data:`STEWART_GEOMETRY` and
#: :data:`STEWART_ACTUATORS` keys and ``start_pose`` ([x, y, z m, roll, pitch, yaw °])
StewartSimTable = msgspec.defstruct(
    "StewartSimTable", [*_optional(STEWART_GEOMETRY), *_optional(STEWART_ACTUATORS),
                        ("start_pose", tuple[float, float, float, float, float, float] | None, None)],
    bases=(_StewartTable,), kw_only=True, forbid_unknown_fields=True, module=__name__)


__all__ = ["DopplerTable", "DopplerTargetTable", "ImuTable", "MagnetometerTable", "RoverSimTable", "SCARA_ARM",
           "STEWART_ACTUATORS", "STEWART_GEOMETRY", "ScaraImuTable", "ScaraSimTable", "SimArmTable", "StewartSimTable", "UwbTable"]
