"""Kinematics of the served robots: SCARA arm, Stewart platform, differential drive.

Pure functions and small classes on numpy arrays; SI units (m, rad, m/s, rad/s).
Errors are :class:`ValueError` subclasses so callers can catch either the
specific case or any bad request (one handler maps them all to a 422):

>>> all(issubclass(e, ValueError) for e in (Unreachable, Singular, NoConvergence))
True
"""

from __future__ import annotations

__all__ = ["NoConvergence", "Singular", "Unreachable"]


class Unreachable(ValueError):
    """A target lies outside the workspace or needs a joint beyond its limits."""


class Singular(ValueError):
    """The configuration is singular: the requested inverse does not exist."""


class NoConvergence(ValueError):
    """A numeric solve (Stewart forward kinematics) did not converge, or met a singular Jacobian."""
