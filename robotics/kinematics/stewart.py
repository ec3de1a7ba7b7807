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
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["StewartPlatform", "joint_circle", "rotation_xyz"]


def rotation_xyz(roll: float, pitch: float, yaw: float) -> np.ndarray:
    """R_base_platform for intrinsic X-Y-Z Euler angles: Rx(roll)·Ry(pitch)·Rz(yaw).

    >>> np.round(rotation_xyz(0.0, 0.0, math.pi / 2) @ [1.0, 0.0, 0.0], 6).tolist()
    [0.0, 1.0, 0.0]
    """
    cr, sr = math.cos(roll), math.sin(roll)
    cp, sp = math.cos(pitch), math.sin(pitch)
    cy, sy = math.cos(yaw), math.sin(yaw)
    rx = np.array([[1.0, 0.0, 0.0], [0.0, cr, -sr], [0.0, sr, cr]])
    ry = np.array([[cp, 0.0, sp], [0.0, 1.0, 0.0], [-sp, 0.0, cp]])
    rz = np.array([[cy, -sy, 0.0], [sy, cy, 0.0], [0.0, 0.0, 1.0]])
    return rx @ ry @ rz


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


class StewartPlatform:
    """A 6-6 platform: base joints (6, 3) in the base frame, platform joints (6, 3)
    in the platform frame, leg length limits ``leg_min``/``leg_max`` (m, scalars or (6,)).

    >>> sp = StewartPlatform(joint_circle(0.5, 0.3), joint_circle(0.3, 1.8), 0.4, 0.8)
    >>> sp.within_limits((0.0, 0.0, 2.0), (0.0, 0.0, 0.0))
    False
    """

    def __init__(self, base_joints, platform_joints, leg_min, leg_max) -> None:
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

    def leg_vectors(self, position, euler_xyz) -> np.ndarray:
        """Leg vectors (6, 3), base joint to platform joint, in the base frame (m).

        >>> sp = StewartPlatform(joint_circle(0.5, 0.3), joint_circle(0.5, 0.3), 0.0, 1.0)
        >>> np.round(sp.leg_vectors((0, 0, 0.6), (0, 0, 0))[0], 6).tolist()
        [0.0, 0.0, 0.6]
        """
        t = np.asarray(position, dtype=float).reshape(3)
        r = rotation_xyz(*np.asarray(euler_xyz, dtype=float).reshape(3))
        return t + self.platform_joints @ r.T - self.base_joints

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
