"""Kinematics of the served robots: SCARA arm, Stewart platform, differential drive.

Pure functions and small classes on numpy arrays; SI units (m, rad, m/s, rad/s).
Errors are :class:`ValueError` subclasses so callers can catch either the
specific case or any bad request:

>>> issubclass(Unreachable, ValueError) and issubclass(Singular, ValueError)
True
"""

from __future__ import annotations

__all__ = ["Unreachable", "Singular"]


class Unreachable(ValueError):
    """A target lies outside the workspace or needs a joint beyond its limits."""


class Singular(ValueError):
    """The configuration is singular: the requested inverse does not exist."""
