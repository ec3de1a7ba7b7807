"""FAULHABER ASCII programs from a programmed joint motion (issue 13 item 8), and their execution.

A programmed motion is a table of waypoints: time (s) and joint targets (rad).
The program is what an operator could type into a terminal on the drives'
line, one command per line, each with its node prefix:

1. set-up, per node in node order: ``SP`` (the axis' max speed, rpm), ``AC`` and
   ``DEC`` (its acceleration, rev/s²), ``EN``;
2. the move to the first waypoint at max speed: ``LA`` (increments) + ``M``;
3. per segment i (from waypoint i−1 at t[i−1] to waypoint i at t[i]) and per
   joint whose target changes: ``SP`` for this segment, ``LA``, ``M``.

The segment speed is the peak of a trapezoid that covers the distance ``d`` in
the segment time ``T`` with the drive's acceleration ``a`` (ramps up and down at
``a``): ``v = (a·T − sqrt(a²·T² − 4·a·d)) / 2``, rounded *up* to a whole rpm so
the joint is never late. A segment no trapezoid can do in time
(``a·T² < 4·d``) or that needs more than the axis' max speed is refused with
:class:`ProgramError` naming the segment and the joint.

FAULHABER ASCII has no wait or comment command: the times live in
:class:`Program` (each :class:`ProgramStep` has its start time) and
:class:`ProgramRunner` sends each step at its time through the
``faulhaber-ascii`` driver (each line awaiting its ``OK``; a halt stops it).

>>> from drivers.faulhaber.axis import AxisConfig, AxisMode
>>> axes = {"q1": AxisConfig("q1", node=1, mode=AxisMode.POSITION, counts_per_rev=1000, gear_ratio=1.0,
...                          max_speed_rad_s=20.0, max_accel_rad_s2=100.0)}
>>> print(generate_program([(0.0, {"q1": 0.0}), (1.0, {"q1": 3.0})], axes).text(), end="")
1SP191
1AC16
1DEC16
1EN
1LA0
1M
1SP30
1LA477
1M
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

from drivers.faulhaber.axis import AxisConfig

if TYPE_CHECKING:  # pragma: no cover
    from drivers.faulhaber.driver import FaulhaberAsciiDriver

logger = logging.getLogger(__name__)

#: latest waypoint time, s after the first (a day); beyond it a segment's speed rounds to nothing
MAX_PROGRAM_S = 86_400.0


class ProgramError(ValueError):
    """A programmed motion that cannot become a FAULHABER program (the message names where)."""


@dataclass(frozen=True)
class ProgramStep:
    t_s: float  # when the step starts, s after the timed part of the program starts
    lines: tuple[str, ...]
    targets: tuple[tuple[str, float], ...] = ()  # joint → rad this step moves to


@dataclass(frozen=True)
class Program:
    setup: tuple[str, ...]
    start: ProgramStep  # the move to the first waypoint (untimed: the runner waits until it is reached)
    steps: tuple[ProgramStep, ...]

    def lines(self) -> list[str]:
        out = list(self.setup) + list(self.start.lines)
        for s in self.steps:
            out += s.lines
        return out

    def text(self) -> str:
        """The program as text, one command per line (send each with a CR)."""
        return "".join(line + "\n" for line in self.lines())


def _segment_speed(distance: float, duration: float, accel: float) -> float | None:
    """Peak speed of a symmetric trapezoid covering ``distance`` in ``duration``; None if none can.

    >>> _segment_speed(1.0, 2.0, 10.0) < 1.0 / 2.0 * 1.2
    True
    >>> _segment_speed(10.0, 1.0, 10.0) is None
    True
    """
    if distance == 0:
        return 0.0
    # the same root as (a·T − sqrt(a²·T² − 4·a·d)) / 2, written so that nothing overflows or cancels: a²·T²
    # of T = 1e300 s was infinite, the speed −inf and the rpm's ceil an OverflowError (issue 18)
    reach = accel * duration * duration  # 0 when it underflows (T = 1e-308 s): no trapezoid then
    disc = 1.0 - 4.0 * distance / reach if reach > 0 else -1.0
    if not disc >= 0:
        return None
    return 2.0 * distance / (duration * (1.0 + math.sqrt(disc)))


def generate_program(waypoints: Sequence[tuple[float, Mapping[str, float]]],
                     axes: Mapping[str, AxisConfig]) -> Program:
    """The ASCII program for ``waypoints`` [(t_s, {joint: rad})] on ``axes`` (joint name → config)."""
    if len(waypoints) < 1:
        raise ProgramError("a programmed motion needs at least one waypoint")
    times = []
    for i, (t, targets) in enumerate(waypoints):
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t < 0:
            raise ProgramError(f"waypoint {i}: time must be a finite number >= 0, not {t!r}")
        if times and t <= times[-1]:
            raise ProgramError(f"waypoint {i}: times must increase ({t} after {times[-1]})")
        if t - (times[0] if times else t) > MAX_PROGRAM_S:
            raise ProgramError(f"waypoint {i}: t = {t:g} s is more than {MAX_PROGRAM_S:g} s after the first")
        times.append(float(t))
        for joint, q in targets.items():
            if joint not in axes:
                raise ProgramError(f"waypoint {i}: unknown joint {joint!r}; known: {', '.join(sorted(axes))}")
            if isinstance(q, bool) or not isinstance(q, (int, float)) or not math.isfinite(q):
                raise ProgramError(f"waypoint {i}: {joint} must be a finite number, not {q!r}")
            a = axes[joint]
            if not a.min_rad <= q <= a.max_rad:
                raise ProgramError(f"waypoint {i}: {joint}={q:g} rad is outside [{a.min_rad:g}, {a.max_rad:g}]")
    order = sorted(axes, key=lambda j: axes[j].node)
    first = waypoints[0][1]
    missing = [j for j in order if j not in first]
    if missing:
        raise ProgramError(f"waypoint 0 must give every joint (the start pose); missing: {', '.join(missing)}")
    setup: list[str] = []
    accel_rad_s2: dict[str, float] = {}
    for j in order:
        c = axes[j]
        ac = c.rev_s2(c.max_accel_rad_s2)
        # the drive ramps at the integer AC: plan with that, not with the configured value
        accel_rad_s2[j] = ac * 2 * math.pi / c.gear_ratio
        setup += [f"{c.node}SP{abs(c.rpm(c.max_speed_rad_s))}", f"{c.node}AC{ac}", f"{c.node}DEC{ac}",
                  f"{c.node}EN"]
    start_lines: list[str] = []
    for j in order:
        c = axes[j]
        start_lines += [f"{c.node}LA{c.counts(first[j])}", f"{c.node}M"]
    start = ProgramStep(0.0, tuple(start_lines), tuple((j, float(first[j])) for j in order))
    current = {j: float(first[j]) for j in order}
    steps: list[ProgramStep] = []
    t0 = times[0]
    for i in range(1, len(waypoints)):
        duration = times[i] - times[i - 1]
        lines: list[str] = []
        moved: list[tuple[str, float]] = []
        for j in order:
            if j not in waypoints[i][1]:
                continue
            c = axes[j]
            q = float(waypoints[i][1][j])
            if c.counts(q) == c.counts(current[j]):
                continue
            v = _segment_speed(abs(q - current[j]), duration, accel_rad_s2[j])
            if v is None:
                raise ProgramError(f"segment {i} ({times[i - 1]:g}–{times[i]:g} s): {j} cannot move "
                                   f"{abs(q - current[j]):.4g} rad in {duration:g} s at {accel_rad_s2[j]:.4g} rad/s²")
            rpm_f = abs(v) / (2 * math.pi) * 60.0 * c.gear_ratio - 1e-9
            if not rpm_f <= abs(c.rpm(c.max_speed_rad_s)):
                raise ProgramError(f"segment {i} ({times[i - 1]:g}–{times[i]:g} s): {j} needs {v:.4g} rad/s, "
                                   f"more than its max_speed_rad_s {c.max_speed_rad_s:g}")
            rpm = math.ceil(rpm_f)
            lines += [f"{c.node}SP{max(1, rpm)}", f"{c.node}LA{c.counts(q)}", f"{c.node}M"]
            moved.append((j, q))
            current[j] = q
        if lines:
            steps.append(ProgramStep(times[i - 1] - t0, tuple(lines), tuple(moved)))
    return Program(tuple(setup), start, tuple(steps))


class ProgramRunner:
    """Runs a :class:`Program` on the ``faulhaber-ascii`` driver's axes, step by step at its times.

    The driver must be active (its control loop keeps reading); a halt makes
    the next line fail, which ends the run with :class:`drivers.errors.DriverError`.
    ``stop`` ends the run between lines. Waiting uses ``stop.wait`` with
    deadlines, never a bare sleep.
    """

    def __init__(self, driver: "FaulhaberAsciiDriver", clock: Callable[[], float] = time.monotonic) -> None:
        self.driver = driver
        self.clock = clock
        self.lines_sent = 0

    def run(self, program: Program, stop: threading.Event | None = None, reach_tolerance_rad: float = 0.01,
            reach_timeout_s: float = 30.0) -> None:
        stop = stop or threading.Event()
        for line in program.setup + program.start.lines:
            self._send(line, stop)
        self._wait_reached(dict(program.start.targets), reach_tolerance_rad, reach_timeout_s, stop)
        t0 = self.clock()
        for step in program.steps:
            wait = t0 + step.t_s - self.clock()
            if wait > 0 and stop.wait(wait):
                return
            for line in step.lines:
                self._send(line, stop)
        end = dict(program.start.targets)
        for step in program.steps:
            end.update(step.targets)
        self._wait_reached(end, reach_tolerance_rad, reach_timeout_s, stop)

    def _send(self, line: str, stop: threading.Event) -> None:
        if stop.is_set():
            raise ProgramError(f"program stopped before {line!r}")
        self.driver.run_line(line)
        self.lines_sent += 1

    def _wait_reached(self, targets: dict[str, float], tol: float, timeout_s: float, stop: threading.Event) -> None:
        deadline = self.clock() + timeout_s
        # never finer than the encoder: a target is reached when it reads back within half an increment
        tols = {}
        for j in targets:
            c = self.driver.axis(j).config
            tols[j] = max(tol, 0.51 * 2 * math.pi / (c.gear_ratio * c.counts_per_rev))
        while True:
            pos = self.driver.positions()
            if all(j in pos and abs(pos[j] - q) <= tols[j] for j, q in targets.items()):
                return
            if self.clock() > deadline:
                raise ProgramError(f"joints did not reach {targets} within {timeout_s:g} s (at {pos})")
            if stop.wait(0.005):
                raise ProgramError("program stopped while waiting for the joints")
