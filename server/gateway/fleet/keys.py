"""The fleet's key expressions: everything a robot says or answers is under ``teleop/<fleet>/<robot_id>/``
(one prefix per robot, so the router's access control confines a robot's certificate to its own keys).

>>> k = RobotKeys("lab", "r7")
>>> k.alive, k.summary, k.rpc
('teleop/lab/r7/alive', 'teleop/lab/r7/summary', 'teleop/lab/r7/rpc')
>>> FleetKeys("lab").all("summary"), robot_of("teleop/lab/r7/summary")
('teleop/lab/*/summary', 'r7')
"""

from __future__ import annotations

from dataclasses import dataclass

ROOT = "teleop"


@dataclass(frozen=True)
class RobotKeys:
    fleet: str
    robot: str

    @property
    def prefix(self) -> str:
        return f"{ROOT}/{self.fleet}/{self.robot}"

    @property
    def alive(self) -> str:  # liveliness token: online while declared
        return f"{self.prefix}/alive"

    @property
    def description(self) -> str:  # GET /api/robot, put when it changes
        return f"{self.prefix}/description"

    @property
    def summary(self) -> str:  # 1 Hz
        return f"{self.prefix}/summary"

    @property
    def event(self) -> str:  # as they happen
        return f"{self.prefix}/event"

    @property
    def telemetry(self) -> str:  # full snapshots, only while watched
        return f"{self.prefix}/telemetry"

    @property
    def rpc(self) -> str:  # the hub's signed queries: commands, lease, watch, state
        return f"{self.prefix}/rpc"


@dataclass(frozen=True)
class FleetKeys:
    fleet: str

    def all(self, leaf: str) -> str:
        return f"{ROOT}/{self.fleet}/*/{leaf}"

    def robot(self, robot: str) -> RobotKeys:
        return RobotKeys(self.fleet, robot)


def robot_of(key: str) -> str | None:
    """The robot id in ``teleop/<fleet>/<robot>/…`` (None for another key)."""
    parts = str(key).split("/")
    return parts[2] if len(parts) >= 4 and parts[0] == ROOT else None


__all__ = ["FleetKeys", "ROOT", "RobotKeys", "robot_of"]
