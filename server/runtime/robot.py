"""Assemble the robot a profile describes: driver, supervisor, controller, stages, behaviours.

``[robot] profile`` picks the controller (``rover``, ``scara``, ``stewart``: each controller's
module owns its ``[robot]`` struct); the driver builds itself from ``[driver]``
(``Driver.from_config``), so nothing here knows a driver by name. The rover alone has the
estimators and the navigation behaviours; every profile takes external channels (the gateway's
vision pipeline, :mod:`server.runtime.external`); an arm or a platform adds its joint or leg
limits to the supervisor's rules (``controller.limit_rules``).
"""

from __future__ import annotations

import logging
from typing import Annotated, Any

import msgspec
from msgspec import Meta

from drivers.base import Driver
from drivers.errors import DriverConfigError, DriverError
from drivers.registry import driver_class
from server.config import ConfigError, Profile, Table
from server.runtime.calibration import Calibrations
from server.runtime.controllers.base import Controller
from server.runtime.controllers.rover import RoverController
from server.runtime.controllers.scara import ScaraController, ScaraRobot
from server.runtime.controllers.stewart import StewartController, StewartRobot
from server.runtime.estimation import EstimationStage, build_estimation
from server.runtime.external import ExternalChannels, is_external
from server.runtime.loop import ControlLoop, GcPolicy
from server.runtime.reconnect import Activator, Reconnector
from server.runtime.supervisor import Supervisor

log = logging.getLogger(__name__)


class RoverRobot(Table, tag_field="profile", tag="rover"):
    """``[robot]`` of a differential-drive rover."""

    name: str = "Simulated rover"
    wheel_radius_m: Annotated[float, Meta(gt=0.0, le=10.0)] = 0.05
    track_m: Annotated[float, Meta(gt=0.0, le=10.0)] = 0.30

    @property
    def profile(self) -> str:
        return "rover"


class RobotConfig:
    """``[robot]``: one struct per profile, chosen by its ``profile`` key (default ``rover``);
    msgspec converts the table to the matching struct (a tagged union)."""

    struct_type = RoverRobot | ScaraRobot | StewartRobot

    @staticmethod
    def prepare(table: dict[str, Any]) -> dict[str, Any]:
        return {"profile": "rover", **table}


def build_driver(profile: Profile) -> Driver:
    """The configured driver, from its own table; bad settings are a :class:`ConfigError` naming the key."""
    name = profile.driver.get("name", "sim")
    try:
        return driver_class(name).from_config(profile.driver, profile.to_dict())
    except DriverConfigError as err:
        key = f"driver.{err.key}" if err.key else "driver"
        raise ConfigError(f"{profile.source}: [{key}] {err.message}") from err
    except DriverError as err:
        raise ConfigError(f"{profile.source}: [driver] {err}") from err


class Robot:
    """Everything the runtime runs, built from a profile (nothing opened or started yet)."""

    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        self.driver = build_driver(profile)
        self.controller: Controller = self._controller()
        limit_rules = getattr(self.controller, "limit_rules", None)
        self.safety = profile.safety if limit_rules is None else msgspec.structs.replace(
            profile.safety, rules=[*profile.safety.rules, *limit_rules({c.name for c in self.driver.channels()})])
        self.supervisor = Supervisor(self.safety, profile.loop.max_consecutive_overruns, profile.loop.max_stall_s)
        loop_cfg = profile.loop
        self.loop = ControlLoop(
            self.driver, self.supervisor, self.controller,
            rate_hz=loop_cfg.rate_hz, spin_s=loop_cfg.spin_us * 1e-6, realtime=loop_cfg.realtime,
            event_log_size=profile.telemetry.event_log_size,
            publish_every=max(1, round(loop_cfg.rate_hz / profile.telemetry.rate_hz)),
            gc_policy=GcPolicy(loop_cfg.gc),
        )
        # device drivers: reopen on a fault, and activate off the tick (server/runtime/reconnect.py)
        self.loop.reconnector = Reconnector.for_driver(self.driver, self.loop)
        self.loop.activator = Activator.for_driver(self.driver)
        self.stage: EstimationStage | None = \
            build_estimation(profile, self.driver) if self.controller.profile == "rover" else None
        if self.stage is not None:
            self.loop.stages.append(self.stage)
        driver_channels = {c.name for c in self.driver.channels()}
        # measurements from outside (the gateway's vision pipeline), first in the tick with their capture times
        self.external = ExternalChannels(max_age_s=profile.safety.sensor_stale_s, clock=self.loop.clock,
                                         reserved=driver_channels | set(self._derived_channels()))
        self.external.estimation = self.stage
        self.loop.stages.insert(0, self.external)
        for rule in self.safety.rules:  # a rule on a derived channel is as fresh as the stage's inputs
            if rule.channel not in driver_channels and self.stage is not None and not is_external(rule.channel):
                self.loop.derived_sources[rule.channel] = tuple(sorted(self.stage.sources([rule.channel])))
        unknown = sorted({r.channel for r in self.safety.rules if not is_external(r.channel)}
                         - driver_channels - set(self._derived_channels()))
        if unknown:
            raise ConfigError(f"{profile.source}: 'safety.rules' name channel(s) the robot does not have: "
                              f"{', '.join(unknown)}")
        self.calibrations = Calibrations(self.loop, self.stage, profile)

    def _controller(self) -> Controller:
        robot = self.profile.robot
        if robot.profile == "scara":
            return ScaraController.from_profile(self.profile, self.driver)
        if robot.profile == "stewart":
            return StewartController.from_profile(self.profile, self.driver)
        wheel_limit = min(hi for lo, hi in self.driver.actuators().values())
        return RoverController(self.profile.limits, robot.wheel_radius_m, robot.track_m, wheel_limit)

    def _derived_channels(self) -> list[str]:
        return [c.name for c in self.stage.channels()] if self.stage is not None else []

    def channels(self) -> list[dict[str, Any]]:
        return [c.to_json() for c in self.driver.channels()] + \
            ([c.to_json() for c in self.stage.channels()] if self.stage is not None else []) + \
            [c.to_json() for c in self.external.channels()]

    def rule_sources(self) -> dict[str, list[str]]:
        """Driver channel → the safety rules that need it acquired (derived channels map to their inputs)."""
        needed: dict[str, list[str]] = {}
        for rule in self.safety.rules:
            if is_external(rule.channel):
                continue  # measured outside the driver: nothing to keep acquired
            sources = self.stage.sources([rule.channel]) if self.stage is not None else {rule.channel}
            for ch in sources:
                needed.setdefault(ch, []).append(rule.name)
        return needed

    def describe(self) -> dict[str, Any]:
        """``GET /api/robot`` as the runtime knows it (the gateway adds video and its own settings)."""
        p = self.profile
        return {
            "profile": self.controller.profile,
            "name": p.robot.name,
            "driver": self.driver.name,
            "channels": self.channels(),
            "actuators": {k: list(v) for k, v in self.driver.actuators().items()},
            **self.controller.describe(),
            "safety": {"command_timeout_s": p.safety.command_timeout_s,
                       "sensor_stale_s": p.safety.sensor_stale_s,
                       "rules": [_rule_json(r) for r in self.safety.rules]},
            "telemetry_rate_hz": p.telemetry.rate_hz,
            "loop_rate_hz": p.loop.rate_hz,
            **({"uwb": {"anchors": p.uwb.anchors, "tag_height_m": p.uwb.tag_height_m}}
               if self.controller.profile == "rover" else {}),
            "external": self.external.describe(),
            **self.driver.describe(),
        }


def _rule_json(rule: Any) -> dict[str, Any]:
    return {"name": rule.name, "channel": rule.channel, "below": rule.below, "above": rule.above,
            "when": rule.when, "category": rule.category, "message": rule.message}


__all__ = ["Robot", "RobotConfig", "RoverRobot", "ScaraRobot", "StewartRobot", "build_driver"]
