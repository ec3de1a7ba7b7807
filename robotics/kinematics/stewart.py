"""6-6 Stewart (Gough) platform: inverse kinematics and actuator limits.

Frames: the base frame is fixed, z up; the platform frame rides with the
platform, its origin at the platform centre. A pose is the position of the
platform centre in the base frame (m) and intrinsic X-Y-Z Euler angles (rad),
``R_base_platform = Rx(roll) · Ry(pitch) · Rz(yaw)``.

Leg i runs from base joint ``b_i`` to platform joint ``p_i``; its length is
``|t + R·p_i − b_i|`` (seeds/003, the inverse problem solved per trajectory
sample). A linear actuator saturates outside ``[leg_min, leg_max]``.

>>> base = joint_circle(0.5, math.radians(20))
>>> top = joint_circle(0.3, math.radians(100))
>>> sp = StewartPlatform(base, top, 0.4, 0.8)
>>> legs = sp.leg_lengths((0, 0, 0.5), (0, 0, 0))
>>> bool(np.allclose(legs, legs[0])), sp.within_limits((0, 0, 0.5), (0, 0, 0))
(True, True)

The forward problem (pose from the six lengths) has no closed form (seeds/003):
:meth:`StewartPlatform.forward` solves the six equations ``|t + R·p_i − b_i| = L_i``
by Newton's method from a guess, the last pose when tracking, so it follows the
branch the machine is on (a 6-6 platform has up to 40 assemblies for one set of
lengths). Its Jacobian, ``d L / d(t, roll, pitch, yaw)``, has rows
``[u_iᵀ, ((R·p_i) × u_i)ᵀ·E]`` with ``u_i`` the unit leg vector and ``E`` the map
from Euler rates to angular velocity for X-Y-Z angles,
``E = [x, Rx(roll)·y, Rx(roll)·Ry(pitch)·z]``.

>>> sp = StewartPlatform.symmetric()
>>> pose = ((0.02, -0.01, 0.52), (0.05, -0.03, 0.1))
>>> position, euler = sp.forward(sp.leg_lengths(*pose))
>>> np.round(position, 9).tolist(), np.round(euler, 9).tolist()
([0.02, -0.01, 0.52], [0.05, -0.03, 0.1])
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from robotics.kinematics import NoConvergence, Unreachable

__all__ = ["LegSaturation", "SaturationReport", "StewartPlatform", "joint_circle", "rotation_xyz"]

# Singular values of the forward Jacobian below this fraction of the largest: singular.
_SINGULAR_RCOND = 1e-9
_MAX_BACKTRACKS = 8


def rotation_xyz(roll: float, pitch: float, yaw: float) -> np.ndarray:
    """R_base_platform for intrinsic X-Y-Z Euler angles: Rx(roll)·Ry(pitch)·Rz(yaw).

    >>> np.round(rotation_xyz(0.0, 0.0, math.pi / 2) @ [1.0, 0.0, 0.0], 6).tolist()
    [0.0, 1.0, 0.0]
    """
    cr, sr = math.cos(roll), math.sin(roll)
    cp, sp = math.cos(pitch), math.sin(pitch)
    cy, sy = math.cos(yaw), math.sin(yaw)
    # Rx·Ry·Rz multiplied out (one array instead of three and two products: this runs per Newton step)
    return np.array(
        [
            [cp * cy, -cp * sy, sp],
            [cr * sy + sr * sp * cy, cr * cy - sr * sp * sy, -sr * cp],
            [sr * sy - cr * sp * cy, sr * cy + cr * sp * sy, cr * cp],
        ]
    )


def joint_circle(radius_m: float, pair_separation_rad: float, z_m: float = 0.0) -> np.ndarray:
    """Six joints (6, 3) on a circle, in three pairs centred at 90°, 210° and 330°.

    The two joints of a pair sit ``pair_separation_rad`` apart; the usual 6-6
    layout uses a small separation on one body and ``120° − small`` on the other,
    so that each leg crosses to the neighbouring pair.

    >>> np.round(joint_circle(1.0, 0.0)[:2], 6).tolist()
    [[0.0, 1.0, 0.0], [0.0, 1.0, 0.0]]
    """
    centres = np.radians([90.0, 210.0, 330.0])
    half = pair_separation_rad / 2.0
    angles = np.ravel(np.column_stack([centres - half, centres + half]))
    return np.column_stack([radius_m * np.cos(angles), radius_m * np.sin(angles), np.full(6, float(z_m))])


@dataclass(frozen=True)
class LegSaturation:
    """One leg whose requested length lies outside its stroke.

    ``leg`` is numbered 1..6 like the channels ``leg1_m`` … ``leg6_m`` (array index
    ``leg − 1``); ``excess_m = requested_m − limit_m`` is positive above ``leg_max``
    and negative below ``leg_min``.
    """

    leg: int
    requested_m: float
    limit_m: float
    excess_m: float

    def __str__(self) -> str:
        side = "above its maximum" if self.excess_m > 0 else "below its minimum"
        return f"leg {self.leg} at {self.requested_m:.4f} m is {abs(self.excess_m) * 1e3:.1f} mm {side} {self.limit_m:.4f} m"


@dataclass(frozen=True)
class SaturationReport:
    """Which legs :meth:`StewartPlatform.saturate` clamped, and by how much.

    >>> report = StewartPlatform.symmetric().saturate([0.6, 0.8, 0.6, 0.6, 0.44, 0.6])[1]
    >>> report.saturated, report.mask.tolist()
    (True, [False, True, False, False, True, False])
    >>> print(report)
    leg 2 at 0.8000 m is 50.0 mm above its maximum 0.7500 m; leg 5 at 0.4400 m is 10.0 mm below its minimum 0.4500 m
    """

    legs: tuple[LegSaturation, ...] = ()

    @property
    def saturated(self) -> bool:
        return bool(self.legs)

    @property
    def mask(self) -> np.ndarray:
        """(6,) bool, true for each clamped leg."""
        m = np.zeros(6, dtype=bool)
        m[[s.leg - 1 for s in self.legs]] = True
        return m

    def __str__(self) -> str:
        return "; ".join(map(str, self.legs)) if self.legs else "no leg saturated"

    def to_json(self) -> list[dict[str, float | int]]:
        return [
            {"leg": s.leg, "requested_m": s.requested_m, "limit_m": s.limit_m, "excess_m": s.excess_m}
            for s in self.legs
        ]


class StewartPlatform:
    """A 6-6 platform: base joints (6, 3) in the base frame, platform joints (6, 3)
    in the platform frame, leg length limits ``leg_min``/``leg_max`` (m, scalars or (6,)).

    ``home`` is the reference pose ``(position, euler_xyz)``: the default guess of
    :meth:`forward` and the pose of the nominal leg lengths (extension = length −
    nominal, seeds/003 eq. 8). By default it is level, centred, at the height where
    the legs are on average at mid-stroke (all of them for a symmetric platform).

    >>> sp = StewartPlatform(joint_circle(0.5, 0.3), joint_circle(0.3, 1.8), 0.4, 0.8)
    >>> sp.within_limits((0.0, 0.0, 2.0), (0.0, 0.0, 0.0))
    False
    """

    def __init__(self, base_joints, platform_joints, leg_min, leg_max, home=None) -> None:
        self.base_joints = np.array(base_joints, dtype=float)
        self.platform_joints = np.array(platform_joints, dtype=float)
        if self.base_joints.shape != (6, 3) or self.platform_joints.shape != (6, 3):
            raise ValueError(
                f"joints must be (6, 3) arrays, got {self.base_joints.shape} and {self.platform_joints.shape}"
            )
        if not (np.all(np.isfinite(self.base_joints)) and np.all(np.isfinite(self.platform_joints))):
            raise ValueError("joint coordinates must be finite")
        self.leg_min = np.broadcast_to(np.asarray(leg_min, dtype=float), (6,)).copy()
        self.leg_max = np.broadcast_to(np.asarray(leg_max, dtype=float), (6,)).copy()
        if np.any(self.leg_min < 0.0) or np.any(~(self.leg_min <= self.leg_max)):
            raise ValueError(f"need 0 <= leg_min <= leg_max, got {self.leg_min} and {self.leg_max}")
        self._home: tuple[np.ndarray, np.ndarray] | None = None
        if home is not None:
            self._home = _pose(home, "home")

    def __repr__(self) -> str:
        return (f"StewartPlatform(leg_min={self.leg_min.tolist()}, leg_max={self.leg_max.tolist()}, "
                f"home={[v.tolist() for v in self.home] if self._home is not None else None})")

    @classmethod
    def symmetric(
        cls,
        base_radius_m: float = 0.5,
        platform_radius_m: float = 0.3,
        base_spread_rad: float = math.radians(20.0),
        platform_spread_rad: float = math.radians(100.0),
        leg_min: float = 0.45,
        leg_max: float = 0.75,
        home=None,
    ) -> StewartPlatform:
        """The symmetric 6-6 layout from two radii and the angle between the joints of a pair.

        Joints come in three pairs centred at 90°, 210° and 330° on each body
        (:func:`joint_circle`); leg i joins base joint i to platform joint i, so with
        a small spread on one body and a large one (< 120°) on the other the legs
        cross between neighbouring pairs. The defaults are the project's reference
        platform: base radius 0.5 m, platform radius 0.3 m, spreads 20° and 100°,
        stroke 0.45–0.75 m, home 0.4998 m above the base with every leg at 0.60 m.

        >>> sp = StewartPlatform.symmetric()
        >>> round(float(sp.home[0][2]), 4), np.round(sp.nominal_lengths, 4).tolist()
        (0.4998, [0.6, 0.6, 0.6, 0.6, 0.6, 0.6])
        """
        return cls(
            joint_circle(base_radius_m, base_spread_rad),
            joint_circle(platform_radius_m, platform_spread_rad),
            leg_min,
            leg_max,
            home=home,
        )

    @property
    def home(self) -> tuple[np.ndarray, np.ndarray]:
        """Reference pose ``(position (3,), euler_xyz (3,))``; see the class docstring.

        Raises :class:`ValueError` when no level pose puts the legs at mid-stroke
        (then give ``home`` to the constructor).
        """
        if self._home is None:
            mid = (self.leg_min + self.leg_max) / 2.0
            offset = self.platform_joints - self.base_joints
            horizontal2 = np.sum(offset[:, :2] ** 2, axis=1)
            if np.any(mid * mid < horizontal2):
                raise ValueError("no level pose puts every leg at mid-stroke: give home=(position, euler_xyz)")
            z = float(np.mean(np.sqrt(mid * mid - horizontal2) - offset[:, 2]))
            self._home = (np.array([0.0, 0.0, z]), np.zeros(3))
        return self._home[0].copy(), self._home[1].copy()

    @property
    def nominal_lengths(self) -> np.ndarray:
        """Leg lengths (6,) m at the home pose."""
        return self.leg_lengths(*self.home)

    def leg_vectors(self, position, euler_xyz) -> np.ndarray:
        """Leg vectors (6, 3), base joint to platform joint, in the base frame (m).

        >>> sp = StewartPlatform(joint_circle(0.5, 0.3), joint_circle(0.5, 0.3), 0.0, 1.0)
        >>> np.round(sp.leg_vectors((0, 0, 0.6), (0, 0, 0))[0], 6).tolist()
        [0.0, 0.0, 0.6]
        """
        t = np.asarray(position, dtype=float).reshape(3)
        euler = np.asarray(euler_xyz, dtype=float).reshape(3)
        return self.platform_joints @ rotation_xyz(euler[0], euler[1], euler[2]).T + t - self.base_joints

    def leg_lengths(self, position, euler_xyz) -> np.ndarray:
        """Leg lengths (6,) m for the platform pose (inverse kinematics).

        >>> sp = StewartPlatform(joint_circle(0.5, 0.3), joint_circle(0.5, 0.3), 0.0, 1.0)
        >>> np.round(sp.leg_lengths((0, 0, 0.6), (0, 0, 0)), 6).tolist()
        [0.6, 0.6, 0.6, 0.6, 0.6, 0.6]
        """
        return np.linalg.norm(self.leg_vectors(position, euler_xyz), axis=1)

    def within_limits(self, position, euler_xyz) -> bool:
        """True if every leg length of the pose lies in [leg_min, leg_max].

        >>> sp = StewartPlatform(joint_circle(0.5, 0.3), joint_circle(0.5, 0.3), 0.5, 0.7)
        >>> sp.within_limits((0, 0, 0.6), (0, 0, 0)), sp.within_limits((0, 0, 0.8), (0, 0, 0))
        (True, False)
        """
        legs = self.leg_lengths(position, euler_xyz)
        return bool(np.all(legs >= self.leg_min) and np.all(legs <= self.leg_max))

    def extensions(self, position, euler_xyz) -> np.ndarray:
        """Leg extensions (6,) m from the nominal lengths: length − nominal (seeds/003 eq. 8).

        >>> sp = StewartPlatform.symmetric()
        >>> position, euler = sp.home
        >>> np.round(sp.extensions(position, euler), 12).tolist()
        [0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
        """
        return self.leg_lengths(position, euler_xyz) - self.nominal_lengths

    def saturate(self, lengths) -> tuple[np.ndarray, SaturationReport]:
        """Clamp leg lengths (6,) m to the strokes; the report names each clamped leg and by how much.

        >>> clamped, report = StewartPlatform.symmetric().saturate([0.6] * 5 + [0.9])
        >>> np.round(clamped, 3).tolist(), report.legs[0].leg, round(report.legs[0].excess_m, 3)
        ([0.6, 0.6, 0.6, 0.6, 0.6, 0.75], 6, 0.15)
        """
        lengths = _lengths(lengths)
        clamped = np.clip(lengths, self.leg_min, self.leg_max)
        legs = tuple(
            LegSaturation(int(i) + 1, float(lengths[i]), float(clamped[i]), float(lengths[i] - clamped[i]))
            for i in np.flatnonzero(clamped != lengths)
        )
        return clamped, SaturationReport(legs)

    def inverse(self, position, euler_xyz) -> np.ndarray:
        """Leg lengths (6,) m for a pose, refusing a pose that needs a leg outside its stroke.

        Raises :class:`robotics.kinematics.Unreachable` naming the legs and by how much
        (its ``report`` attribute holds the :class:`SaturationReport`).

        >>> sp = StewartPlatform.symmetric()
        >>> sp.inverse((0.0, 0.0, 0.8), (0.0, 0.0, 0.0))
        Traceback (most recent call last):
        ...
        robotics.kinematics.Unreachable: pose needs legs outside their stroke: leg 1 at 0.8661 m is 116.1 mm above its maximum 0.7500 m; ...
        """
        lengths = self.leg_lengths(position, euler_xyz)
        report = self.saturate(lengths)[1]
        if report.saturated:
            err = Unreachable(f"pose needs legs outside their stroke: {report}")
            err.report = report
            raise err
        return lengths

    def jacobian(self, position, euler_xyz) -> np.ndarray:
        """d(leg lengths)/d(x, y, z, roll, pitch, yaw), shape (6, 6), m/m and m/rad.

        >>> sp = StewartPlatform.symmetric()
        >>> J = sp.jacobian(*sp.home)
        >>> np.round(J[:, 2], 4).tolist()      # heave lengthens every leg alike
        [0.833, 0.833, 0.833, 0.833, 0.833, 0.833]
        """
        x = np.concatenate([np.asarray(position, dtype=float).reshape(3), np.asarray(euler_xyz, dtype=float).reshape(3)])
        return self._jacobian(x, *self._evaluate(x))

    def _evaluate(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For the pose vector x = (t, roll, pitch, yaw): R·p_i (6, 3), leg vectors (6, 3), lengths (6,)."""
        arm = self.platform_joints @ rotation_xyz(x[3], x[4], x[5]).T
        v = arm + x[:3] - self.base_joints
        return arm, v, np.sqrt(np.einsum("ij,ij->i", v, v))

    def _jacobian(self, x: np.ndarray, arm: np.ndarray, v: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        cr, sr = math.cos(x[3]), math.sin(x[3])
        sp, cp = math.sin(x[4]), math.cos(x[4])
        u = v / lengths[:, None]
        r0, r1, r2 = arm.T
        u0, u1, u2 = u.T
        c0, c1, c2 = r1 * u2 - r2 * u1, r2 * u0 - r0 * u2, r0 * u1 - r1 * u0  # (R·p_i) × u_i
        j = np.empty((6, 6))
        j[:, :3] = u
        # times E = [x, Rx(roll)·y, Rx(roll)·Ry(pitch)·z] = [(1,0,0), (0,cr,sr), (sp,−sr·cp,cr·cp)]
        j[:, 3] = c0
        j[:, 4] = c1 * cr + c2 * sr
        j[:, 5] = c0 * sp - c1 * sr * cp + c2 * cr * cp
        return j

    def forward(self, lengths, guess=None, *, tol_m: float = 1e-10, max_iterations: int = 50):
        """Pose ``(position (3,), euler_xyz (3,))`` whose legs have these ``lengths`` (6,) m.

        Newton's method on ``|t + R·p_i − b_i| − L_i = 0`` from ``guess`` =
        ``(position, euler_xyz)`` (default :attr:`home`), with step halving when a
        full step would not reduce the residual, and chord steps (the last
        Jacobian reused) while they cut the residual tenfold; it stops when every leg is
        within ``tol_m``. Pass the last pose as ``guess`` when tracking: the solution is the
        assembly nearest to it. Roll and yaw are returned in (−pi, pi].

        Raises :class:`robotics.kinematics.NoConvergence` when the Jacobian is
        singular on the way (legs in a singular configuration, or pitch at ±90°
        where the Euler angles lock) or the residual stalls or is still above
        ``tol_m`` after ``max_iterations`` (lengths no pose can have, or a guess too
        far away); :class:`ValueError` for lengths that are not six positive numbers.

        >>> sp = StewartPlatform.symmetric()
        >>> sp.forward([0.01] * 6)
        Traceback (most recent call last):
        ...
        robotics.kinematics.NoConvergence: forward kinematics did not converge: ...
        """
        target = _lengths(lengths)
        if np.any(target <= 0.0):
            raise ValueError(f"leg lengths must be positive, got {target.tolist()}")
        position, euler = self.home if guess is None else _pose(guess, "guess")
        x = np.concatenate([position, euler])
        arm, v, current = self._evaluate(x)
        residual = current - target
        inverse = None  # the SVD of the Jacobian in use (a chord step reuses it)
        for iteration in range(max_iterations):
            worst = float(np.max(np.abs(residual)))
            if worst <= tol_m:
                return x[:3].copy(), _wrap_euler(x[3:])
            cost = float(residual @ residual)
            if inverse is not None:
                # chord step: the Jacobian of an earlier iterate, kept while it cuts the residual tenfold (a failed
                # try costs one evaluation; counting evaluations and SVDs, two thirds of plain Newton's cost)
                u_, s_, vt = inverse
                x_try = x - vt.T @ ((u_.T @ residual) / s_)
                arm_try, v_try, current_try = self._evaluate(x_try)
                residual_try = current_try - target
                if float(residual_try @ residual_try) < 0.01 * cost:
                    x, arm, v, current, residual = x_try, arm_try, v_try, current_try, residual_try
                    continue
            u_, s_, vt = inverse = np.linalg.svd(self._jacobian(x, arm, v, current))
            if s_[-1] <= _SINGULAR_RCOND * s_[0]:
                raise NoConvergence(
                    f"forward kinematics met a singular Jacobian at iteration {iteration} "
                    f"(position {_fmt(x[:3])} m, euler {_fmt(x[3:])} rad; singular values "
                    f"{s_[-1]:.3g}/{s_[0]:.3g}): legs aligned, or pitch at ±90° where the Euler angles lock"
                )
            step = -(vt.T @ ((u_.T @ residual) / s_))
            for _ in range(_MAX_BACKTRACKS):
                x_try = x + step
                arm_try, v_try, current_try = self._evaluate(x_try)
                residual_try = current_try - target
                if float(residual_try @ residual_try) < cost:
                    break
                step = step / 2.0
            else:
                raise NoConvergence(
                    f"forward kinematics did not converge: the residual stalls at {worst:.3g} m after "
                    f"{iteration} iterations (position {_fmt(x[:3])} m, euler {_fmt(x[3:])} rad); "
                    f"no pose near the guess has legs {_fmt(target)} m"
                )
            x, arm, v, current, residual = x_try, arm_try, v_try, current_try, residual_try
        raise NoConvergence(
            f"forward kinematics did not converge: residual {float(np.max(np.abs(residual))):.3g} m > {tol_m:g} m "
            f"after {max_iterations} iterations (legs {_fmt(target)} m)"
        )


def _fmt(values) -> str:
    return "(" + ", ".join(f"{float(v):.4g}" for v in values) + ")"


def _wrap_euler(euler: np.ndarray) -> np.ndarray:
    return np.array([math.remainder(float(a), math.tau) for a in euler])


def _lengths(lengths) -> np.ndarray:
    try:
        out = np.asarray(lengths, dtype=float)
    except (TypeError, ValueError) as err:
        raise ValueError(f"leg lengths must be six numbers: {err}") from None
    if out.shape != (6,) or not np.all(np.isfinite(out)):
        raise ValueError(f"leg lengths must be six finite numbers, got shape {out.shape}")
    return out


def _pose(pose, what: str) -> tuple[np.ndarray, np.ndarray]:
    try:
        position, euler = pose
        position = np.asarray(position, dtype=float).reshape(3)
        euler = np.asarray(euler, dtype=float).reshape(3)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{what} must be (position (3,), euler_xyz (3,)): {err}") from None
    if not (np.all(np.isfinite(position)) and np.all(np.isfinite(euler))):
        raise ValueError(f"{what} must be finite")
    return position, euler
