"""Assemble the robot a profile describes: driver, supervisor, controller, stages, behaviours.

``[robot] profile`` picks the controller from the registry (:mod:`server.runtime.controllers.registry`)
and the controller declares the rest (:class:`~server.runtime.controllers.base.Controller`): its
``[robot]`` and ``[limits]`` structs, its commands, its stop categories (a profile whose safety
table asks for another one does not start), the estimation stages it needs (built here from
:data:`server.runtime.stage.STAGES` when the driver has their inputs) and its own limit rules,
added to the supervisor's. The driver builds itself from ``[driver]`` (``Driver.from_config``) and
declares its optional capabilities (``Driver.capabilities``: reconnect, a slow activation, motion
programs), so nothing here knows a driver or a robot by name. Every profile takes external
channels (the gateway's vision pipeline, :mod:`server.runtime.external`).
"""

from __future__ import annotations

import logging
from typing import Any

import msgspec

from drivers.base import Driver
from drivers.errors import DriverConfigError, DriverError
from drivers.registry import driver_class
from server.config import ConfigError, Profile
from server.runtime.calibration import Calibrations
from server.runtime.controllers.base import Controller
from server.runtime.controllers.registry import controller_for
from server.runtime.estimation import EstimationStage
from server.runtime.external import ExternalChannels, is_external
from server.runtime.loop import ControlLoop, GcPolicy
from server.runtime.reconnect import Activator, Reconnector
from server.runtime.stage import Stage, stage_builder
from server.runtime.supervisor import Supervisor

log = logging.getLogger(__name__)


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
        # the profile's controller, or the one its driver's capabilities choose (a body twist: an autopilot)
        self.controller: Controller = controller_for(profile.robot.profile, self.driver.capabilities).from_profile(
            profile, self.driver)
        check_stop_categories(profile, self.controller)
        driver_channels = {c.name for c in self.driver.channels()}
        self.safety = msgspec.structs.replace(
            profile.safety, rules=[*profile.safety.rules, *self.controller.limit_rules(driver_channels)])
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
        #: the controller's estimation stages the driver has the inputs for, in the order it names them
        self.stages: list[Stage] = [st for st in (stage_builder(name)(profile, self.driver)
                                                  for name in self.controller.stages) if st is not None]
        #: the estimator, when there is one: calibrations, marker fixes and the rover's behaviours use it
        self.stage: EstimationStage | None = next(
            (st for st in self.stages if isinstance(st, EstimationStage)), None)
        self._derived = {c.name: st for st in self.stages for c in st.channels()}  # derived channel → its stage
        # measurements from outside (the gateway's vision pipeline), first in the tick with their capture times
        self.external = ExternalChannels(max_age_s=profile.safety.sensor_stale_s, clock=self.loop.clock,
                                         reserved=driver_channels | set(self._derived))
        self.external.estimation = self.stage
        self.loop.stages[:] = [self.external, *self.stages]
        for rule in self.safety.rules:  # a rule on a derived channel is as fresh as the stage's inputs
            if rule.channel not in driver_channels and rule.channel in self._derived:
                self.loop.derived_sources[rule.channel] = tuple(sorted(self._sources(rule.channel)))
        unknown = sorted({r.channel for r in self.safety.rules if not is_external(r.channel)}
                         - driver_channels - set(self._derived))
        if unknown:
            raise ConfigError(f"{profile.source}: 'safety.rules' name channel(s) the robot does not have: "
                              f"{', '.join(unknown)}")
        self.calibrations = Calibrations(self.loop, self.stage, profile)

    def _sources(self, channel: str) -> set[str]:
        """The driver channels ``channel`` comes from (itself when no stage derives it)."""
        stage = self._derived.get(channel)
        return stage.sources([channel]) if stage is not None else {channel}

    def channels(self) -> list[dict[str, Any]]:
        return [c.to_json() for c in self.driver.channels()] + \
            [c.to_json() for st in self.stages for c in st.channels()] + \
            [c.to_json() for c in self.external.channels()]

    def rule_sources(self) -> dict[str, list[str]]:
        """Driver channel → the safety rules that need it acquired (derived channels map to their inputs)."""
        needed: dict[str, list[str]] = {}
        for rule in self.safety.rules:
            if is_external(rule.channel):
                continue  # measured outside the driver: nothing to keep acquired
            for ch in self._sources(rule.channel):
                needed.setdefault(ch, []).append(rule.name)
        return needed

    def describe(self) -> dict[str, Any]:
        """``GET /api/robot`` as the runtime knows it (the gateway adds video and its own settings)."""
        p = self.profile
        return {
            "profile": self.controller.profile,
            "name": p.robot.name,
            "driver": self.driver.name,
            "driver_capabilities": sorted(c.value for c in self.driver.capabilities),
            "channels": self.channels(),
            "actuators": {k: list(v) for k, v in self.driver.actuators().items()},
            **self.controller.capabilities(),
            **self.controller.describe(),
            "safety": {"command_timeout_s": p.safety.command_timeout_s,
                       "sensor_stale_s": p.safety.sensor_stale_s,
                       "rules": [_rule_json(r) for r in self.safety.rules]},
            "telemetry_rate_hz": p.telemetry.rate_hz,
            "link_verdict_ms": {"degraded": p.telemetry.link_degraded_ms, "bad": p.telemetry.link_bad_ms},
            "loop_rate_hz": p.loop.rate_hz,
            "external": self.external.describe(),
            **self.driver.describe(),
        }


def check_stop_categories(profile: Profile, controller: Controller) -> None:
    """:class:`ConfigError` naming the first ``[safety]`` key whose stop category the controller cannot carry out."""
    safety = profile.safety
    asked = [("safety.link_loss_category", safety.link_loss_category),
             ("safety.operator_estop_category", safety.operator_estop_category),
             ("safety.overrun_category", safety.overrun_category)]
    asked += [(f"safety.rules[{i}].category", rule.category) for i, rule in enumerate(safety.rules)]
    can = controller.stop_categories
    for key, category in asked:
        if category not in can:
            raise ConfigError(f"{profile.source}: '{key}' asks for stop category {category}, which a "
                              f"{controller.profile} cannot carry out (it does {', '.join(map(str, sorted(can)))})")


def _rule_json(rule: Any) -> dict[str, Any]:
    return {"name": rule.name, "channel": rule.channel, "below": rule.below, "above": rule.above,
            "when": rule.when, "category": rule.category, "message": rule.message}


__all__ = ["Robot", "build_driver", "check_stop_categories"]
