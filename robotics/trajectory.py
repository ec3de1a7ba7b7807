"""Programmed motions: times and values per axis, checked once, interpolated in the loop.

A :class:`Trajectory` is ``times_s`` (N,) strictly increasing and ``values``
(N, k) finite, one column per named axis (``"q1_rad"``, ``"z_m"``…). It is
validated when built — the control loop then only interpolates it — and bounded
(:data:`MAX_POINTS`, :data:`MAX_AXES`) because it may come from an upload.
:meth:`Trajectory.at` interpolates linearly and holds the first and last values
outside the time span.

The named series are the six test motions of the Stewart platform in seeds/003
(1000 points over 10 s at 0.01 s, sines that start from the home pose, "the start
of the trajectory is the middle of the graph"): 1 vertical motion; 2 and 3
simultaneous motion along two axes (up and left, down and right); 4–6 one Euler
angle alone. The paper's figures are lost in the text, so the axes of series 2
and 3 are our reading: series 2 moves z and y together (up and to the left,
y being left in REP-103), series 3 moves z down while x grows (down and to the
right in a side view). Amplitudes default to about 60 % of what the reference
platform (``StewartPlatform.symmetric()``) reaches along each series (in
brackets): vertical 0.10 m (0.173), up-left 0.06 m on each axis (0.114),
down-right 0.06 m (0.108), roll and pitch 20° (34.8°, 33.9°), yaw 25° (44.8°);
frequency 0.2 Hz, two whole cycles, so each series ends where it began.
:func:`scara_demo` is a joint-space motion for the SCARA arm that keeps the
elbow bent (away from the q2 = 0 singularity).

>>> tr = Trajectory([0.0, 1.0, 3.0], [[0.0, 10.0], [1.0, 10.0], [3.0, 0.0]], ("a", "b"))
>>> tr.at(2.0).tolist(), tr.at(-1.0).tolist(), tr.at(9.0).tolist()
([2.0, 5.0], [0.0, 10.0], [3.0, 0.0])
>>> s = stewart_series("vertical", home_position=(0.0, 0.0, 0.5))
>>> len(s), s.axes[:3], round(s.duration_s, 2), round(float(s.column("z_m").max()), 3)
(1000, ('x_m', 'y_m', 'z_m'), 9.99, 0.6)
"""

from __future__ import annotations

import csv
import math
from typing import Any, Mapping, Sequence

import numpy as np

__all__ = [
    "MAX_AXES",
    "MAX_POINTS",
    "POSE_AXES",
    "SCARA_AXES",
    "STEWART_SERIES",
    "Trajectory",
    "scara_demo",
    "stewart_series",
]

#: most samples a trajectory may hold (1000 s at 100 Hz)
MAX_POINTS = 100_000
#: most axes a trajectory may hold
MAX_AXES = 16
#: longest CSV text :meth:`Trajectory.from_csv` reads, characters
MAX_CSV_CHARS = 16 * 1024 * 1024

POSE_AXES = ("x_m", "y_m", "z_m", "roll_rad", "pitch_rad", "yaw_rad")
SCARA_AXES = ("q1_rad", "q2_rad")

_POINTS, _DT_S, _FREQUENCY_HZ = 1000, 0.01, 0.2
# name → (number in seeds/003, unit direction over POSE_AXES, default amplitude)
_SERIES = {
    "vertical": (1, (0, 0, 1, 0, 0, 0), 0.10),
    "up_left": (2, (0, 1, 1, 0, 0, 0), 0.06),
    "down_right": (3, (1, 0, -1, 0, 0, 0), 0.06),
    "roll": (4, (0, 0, 0, 1, 0, 0), math.radians(20.0)),
    "pitch": (5, (0, 0, 0, 0, 1, 0), math.radians(20.0)),
    "yaw": (6, (0, 0, 0, 0, 0, 1), math.radians(25.0)),
}
#: the six series of seeds/003, in the paper's order
STEWART_SERIES = tuple(_SERIES)


class Trajectory:
    """Times (N,) s and values (N, k) for the named ``axes``; see the module docstring.

    Raises :class:`ValueError` naming the first bad sample or axis.

    >>> Trajectory([0.0, 0.5, 0.5], [1, 2, 3], ("x_m",))
    Traceback (most recent call last):
    ...
    ValueError: times must increase strictly: t[2] = 0.5 s is not after t[1] = 0.5 s
    """

    __slots__ = ("times_s", "values", "axes")

    def __init__(self, times_s, values, axes: Sequence[str]) -> None:
        axes = tuple(axes)
        if not 1 <= len(axes) <= MAX_AXES or not all(isinstance(a, str) and a for a in axes):
            raise ValueError(f"axes must be 1 to {MAX_AXES} non-empty names, got {axes!r}")
        if len(set(axes)) != len(axes):
            raise ValueError(f"axis names repeat: {axes!r}")
        try:
            t = np.array(times_s, dtype=float)
            v = np.array(values, dtype=float)
        except (TypeError, ValueError) as err:
            raise ValueError(f"times and values must be numbers: {err}") from None
        if v.ndim == 1 and len(axes) == 1:
            v = v[:, None]
        if t.ndim != 1 or not 1 <= len(t) <= MAX_POINTS:
            raise ValueError(f"times must be a list of 1 to {MAX_POINTS} numbers, got shape {t.shape}")
        if v.shape != (len(t), len(axes)):
            raise ValueError(f"values must have shape ({len(t)}, {len(axes)}) for {len(t)} times and axes "
                             f"{', '.join(axes)}; got {v.shape}")
        bad = np.flatnonzero(~np.isfinite(t))
        if bad.size:
            raise ValueError(f"time t[{bad[0]}] = {t[bad[0]]} is not finite")
        rows, cols = np.nonzero(~np.isfinite(v))
        if rows.size:
            raise ValueError(f"value of {axes[cols[0]]} at t[{rows[0]}] = {t[rows[0]]:g} s is not finite")
        steps = np.flatnonzero(np.diff(t) <= 0.0)
        if steps.size:
            i = steps[0] + 1
            raise ValueError(f"times must increase strictly: t[{i}] = {t[i]:g} s is not after t[{i - 1}] = {t[i - 1]:g} s")
        t.flags.writeable = False
        v.flags.writeable = False
        self.times_s, self.values, self.axes = t, v, axes

    def __len__(self) -> int:
        return len(self.times_s)

    def __repr__(self) -> str:
        return f"Trajectory({len(self)} points over {self.duration_s:g} s, axes {', '.join(self.axes)})"

    @property
    def duration_s(self) -> float:
        """Time from the first sample to the last, s."""
        return float(self.times_s[-1] - self.times_s[0])

    def column(self, axis: str) -> np.ndarray:
        """The values (N,) of one axis."""
        try:
            return self.values[:, self.axes.index(axis)]
        except ValueError:
            raise ValueError(f"no axis {axis!r} (axes: {', '.join(self.axes)})") from None

    def at(self, t_s: float) -> np.ndarray:
        """Values (k,) at time ``t_s``, linear between samples, held before the first and after the last."""
        times = self.times_s
        if not math.isfinite(t_s):
            raise ValueError(f"t_s must be finite, got {t_s!r}")
        if t_s <= times[0]:
            return self.values[0].copy()
        if t_s >= times[-1]:
            return self.values[-1].copy()
        i = int(np.searchsorted(times, t_s, side="right"))
        t0, t1 = times[i - 1], times[i]
        w = (t_s - t0) / (t1 - t0)
        return self.values[i - 1] + w * (self.values[i] - self.values[i - 1])

    def sample(self, times_s) -> np.ndarray:
        """Values (M, k) at each of ``times_s`` (M,), as :meth:`at` gives them."""
        times_s = np.asarray(times_s, dtype=float)
        return np.column_stack([np.interp(times_s, self.times_s, self.values[:, j]) for j in range(len(self.axes))])

    def to_json(self) -> dict[str, list[float]]:
        """Columns ``{"t_s": [...], axis: [...], ...}`` (what :meth:`from_columns` reads)."""
        out = {"t_s": self.times_s.tolist()}
        out.update({a: self.values[:, j].tolist() for j, a in enumerate(self.axes)})
        return out

    @classmethod
    def from_columns(cls, columns: Mapping[str, Any], time_key: str = "t_s") -> Trajectory:
        """From ``{"t_s": [...], "axis": [...], ...}`` (a JSON body); the other keys are the axes, in order.

        >>> Trajectory.from_columns({"t_s": [0, 1], "q1_rad": [0.0, 0.5]}).at(0.5).tolist()
        [0.25]
        """
        if not isinstance(columns, Mapping) or time_key not in columns:
            raise ValueError(f"a trajectory needs a {time_key!r} column and one column per axis")
        axes = tuple(k for k in columns if k != time_key)
        if not axes:
            raise ValueError(f"a trajectory needs at least one axis besides {time_key!r}")
        times = columns[time_key]
        if not isinstance(times, (list, tuple, np.ndarray)):
            raise ValueError(f"column {time_key!r} must be a list of numbers")
        if len(times) > MAX_POINTS:
            raise ValueError(f"a trajectory holds at most {MAX_POINTS} points, got {len(times)}")
        cols = []
        for key in (time_key,) + axes:
            col = columns[key]
            if not isinstance(col, (list, tuple, np.ndarray)):
                raise ValueError(f"column {key!r} must be a list of numbers")
            if len(col) != len(times):
                raise ValueError(f"column {key!r} has {len(col)} values for {len(times)} times")
            if isinstance(col, np.ndarray):
                if col.dtype.kind not in "iuf":
                    raise ValueError(f"column {key!r} must hold numbers")
            elif not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in col):
                raise ValueError(f"column {key!r} must hold numbers only (no text, true/false or null)")
            cols.append(np.asarray(col, dtype=float))
        return cls(cols[0], np.column_stack(cols[1:]), axes)

    @classmethod
    def from_csv(cls, text: str, time_key: str = "t_s") -> Trajectory:
        """From CSV text with a header row (``t_s,q1_rad,q2_rad``); blank lines are skipped.

        >>> Trajectory.from_csv("t_s,z_m\\n0,0.5\\n2,0.6\\n").at(1.0).tolist()
        [0.55]
        """
        if not isinstance(text, str):
            raise TypeError(f"from_csv takes text, got {type(text).__name__}")
        if len(text) > MAX_CSV_CHARS:
            raise ValueError(f"CSV is {len(text)} characters long, more than the {MAX_CSV_CHARS} allowed")
        rows = [r for r in csv.reader(text.splitlines()) if any(c.strip() for c in r)]
        if not rows:
            raise ValueError("CSV is empty: expected a header row such as t_s,q1_rad")
        header = [c.strip() for c in rows[0]]
        if len(rows) - 1 > MAX_POINTS:
            raise ValueError(f"CSV has {len(rows) - 1} rows, more than the {MAX_POINTS} allowed")
        if time_key not in header:
            raise ValueError(f"CSV header {header} has no {time_key!r} column")
        data = []
        for n, row in enumerate(rows[1:], start=2):
            if len(row) != len(header):
                raise ValueError(f"CSV line {n}: {len(row)} fields for {len(header)} columns")
            try:
                data.append([float(c) for c in row])
            except ValueError:
                raise ValueError(f"CSV line {n}: {row!r} holds something that is not a number") from None
        if not data:
            raise ValueError("CSV has a header but no rows")
        arr = np.array(data)
        columns = {name: arr[:, j] for j, name in enumerate(header)}
        if len(columns) != len(header):
            raise ValueError(f"CSV header names a column twice: {header}")
        return cls.from_columns(columns, time_key)


def _sine_times(points: int, dt_s: float) -> np.ndarray:
    if isinstance(points, bool) or not isinstance(points, int) or not 2 <= points <= MAX_POINTS:
        raise ValueError(f"points must be an integer in [2, {MAX_POINTS}], got {points!r}")
    if not (math.isfinite(dt_s) and dt_s > 0.0):
        raise ValueError(f"dt_s must be > 0, got {dt_s!r}")
    return np.arange(points) * dt_s


def stewart_series(
    name: str | int,
    home_position=(0.0, 0.0, 0.0),
    home_euler=(0.0, 0.0, 0.0),
    amplitude: float | None = None,
    frequency_hz: float = _FREQUENCY_HZ,
    points: int = _POINTS,
    dt_s: float = _DT_S,
) -> Trajectory:
    """One of the six test series of seeds/003 as absolute poses over :data:`POSE_AXES`.

    ``name`` is one of :data:`STEWART_SERIES` or its number 1–6; the pose is
    ``home + amplitude·sin(2π·f·t)·direction`` (m or rad per unit direction).

    >>> s = stewart_series(6, home_position=(0.0, 0.0, 0.5))
    >>> round(float(np.degrees(s.column("yaw_rad").max())), 1), float(np.ptp(s.column("z_m")))
    (25.0, 0.0)
    """
    if isinstance(name, int) and not isinstance(name, bool) and 1 <= name <= 6:
        name = STEWART_SERIES[name - 1]
    if name not in _SERIES:
        raise ValueError(f"unknown series {name!r}: one of {', '.join(STEWART_SERIES)} or 1–6")
    _, direction, default = _SERIES[name]
    amplitude = default if amplitude is None else float(amplitude)
    if not math.isfinite(amplitude) or not math.isfinite(frequency_hz) or frequency_hz <= 0.0:
        raise ValueError(f"amplitude must be finite and frequency_hz > 0, got {amplitude!r}, {frequency_hz!r}")
    t = _sine_times(points, dt_s)
    home = np.concatenate([np.asarray(home_position, dtype=float).reshape(3),
                           np.asarray(home_euler, dtype=float).reshape(3)])
    wave = amplitude * np.sin(2.0 * math.pi * frequency_hz * t)
    return Trajectory(t, home + np.outer(wave, direction), POSE_AXES)


def scara_demo(points: int = _POINTS, dt_s: float = _DT_S) -> Trajectory:
    """A joint-space motion for the SCARA arm over :data:`SCARA_AXES` (10 s by default).

    ``q1 = 0.8·sin(2π·0.1·t)`` sweeps the shoulder ±46° once; ``q2 = 1.2 + 0.6·sin(2π·0.2·t)``
    bends the elbow between 0.6 and 1.8 rad twice, never straight (singular) nor
    near the ±150° limit of the shipped arm. Starts at (0, 1.2) rad.

    >>> d = scara_demo()
    >>> d.at(0.0).round(3).tolist(), round(float(d.column("q2_rad").min()), 2)
    ([0.0, 1.2], 0.6)
    """
    t = _sine_times(points, dt_s)
    q1 = 0.8 * np.sin(2.0 * math.pi * 0.1 * t)
    q2 = 1.2 + 0.6 * np.sin(2.0 * math.pi * 0.2 * t)
    return Trajectory(t, np.column_stack([q1, q2]), SCARA_AXES)
