"""Running an experiment, or any behaviour, on a robot whose loop is ticked by hand: scripts, tests, benches.

The runtime runs behaviours on its control thread in real time. A script that wants an experiment's
figures needs the same loop — driver, estimator stages, supervisor, controller, behaviour — but not the
wall clock: :class:`OfflineRobot` builds the runtime's :class:`~server.runtime.robot.Robot` from a profile
and calls :meth:`ControlLoop.run_tick <server.runtime.loop.ControlLoop.run_tick>` back to back, each tick
a fixed ``dt_s`` of loop time (the simulator advances ``dt_s · time_scale``), on the real monotonic
clock the simulated drivers stamp their samples with, so the staleness rules see fresh samples. It keeps
the link alive (the operator's heartbeat, every tick) unless told to stop, so a test can cut it.

Nothing is mocked: the same loop, supervisor and stop paths as the runtime; only the thread and the
pacing differ. At the profile's 100 Hz a tick costs ~0.3 ms here, so a 400 s experiment runs in ~15 s.

>>> bot = OfflineRobot(overrides={"driver": {"time_scale": 4.0}})
>>> bot.start()
'running'
>>> bot.loop.set_setpoint(RoverSetpoint(0.2, 0.0))
'running'
>>> bot.tick(100)
>>> round(bot.loop.snapshot()["values"]["linear_m_s"], 2)
0.2
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from server.config import DEFAULT_CONFIG, Profile, load_config
from server.runtime.controllers.rover import RoverSetpoint  # noqa: F401  (the doctest's)
from server.runtime.loop import Behavior
from server.runtime.robot import Robot
from server.runtime.supervisor import State


class OfflineRobot:
    """The runtime's robot for ``profile`` (a loaded :class:`Profile`, a TOML path, or None:
    ``config/rover-sim.toml``) with ``overrides`` merged, ticked by hand; see the module docstring."""

    def __init__(self, profile: Profile | str | Path | None = None, overrides: dict[str, Any] | None = None,
                 dt_s: float = 0.01) -> None:
        if not isinstance(profile, Profile):
            profile = load_config(DEFAULT_CONFIG if profile is None else Path(profile), overrides=overrides or {})
        self.profile = profile
        self.robot = Robot(profile)
        self.loop = self.robot.loop
        self.driver = self.robot.driver
        self.stage = self.robot.stage
        self.dt_s = float(dt_s)
        self.heartbeat = True  # the operator's heartbeat every tick (False: the link goes silent)
        self.now = time.monotonic()
        self.loop.clock = lambda: self.now
        self.driver.open()
        self.tick(3)

    def tick(self, n: int = 1) -> None:
        """``n`` ticks of :attr:`dt_s` loop time each."""
        loop, sup = self.loop, self.loop.supervisor
        for _ in range(n):
            self.now = time.monotonic()
            if self.heartbeat:
                sup.touch(self.now)
            loop.run_tick(self.now, 0.0, self.dt_s, 0)

    def start(self) -> str:
        """Start the robot (from idle)."""
        return self.loop.start_robot()

    @property
    def state(self) -> State:
        return self.loop.supervisor.state

    @property
    def truth(self) -> dict[str, Any]:
        return self.loop.truth

    def run(self, behavior: Behavior, max_ticks: int = 10_000_000) -> Behavior:
        """Start ``behavior`` (starting the robot if idle) and tick until it has ended; returns it."""
        if self.state is not State.RUNNING:
            self.start()
        self.loop.start_behavior(behavior)
        for _ in range(max_ticks):
            if self.loop.behavior is not behavior:
                return behavior
            self.tick()
        raise TimeoutError(f"{behavior.name} did not end within {max_ticks} ticks: {behavior.status()}")

    def teleport(self, x_m: float, y_m: float, yaw_rad: float) -> None:
        """Move the simulated rover (the sim driver's debug hook; the estimate follows by itself)."""
        self.loop.driver_debug({"teleport": [x_m, y_m, yaw_rad]})
        self.tick(1)


__all__ = ["OfflineRobot"]
