"""The controller registry and what each controller declares (issue 19, item 2): tables by profile, commands,
stop categories, stages; and a robot kind added by registering a controller alone, nothing in the loop."""

from __future__ import annotations

import logging
import math
import sys
import types
from typing import Any, Mapping

import msgspec
import pytest

from drivers.base import Capability
from server.config import ConfigError, Table, load_config
from server.runtime.controllers.base import ALL_STOP_CATEGORIES, Command, Controller
from server.runtime.controllers.registry import CONTROLLERS, TABLES, controller_class, tables_of
from server.runtime.robot import Robot
from server.runtime.stage import STAGES
from server.runtime.supervisor import Motion, OutputMode


@pytest.mark.parametrize("profile", sorted(CONTROLLERS))
def test_every_registered_controller_declares_what_the_runtime_needs(profile: str) -> None:
    cls = controller_class(profile)
    assert issubclass(cls, Controller) and cls.profile == profile
    assert issubclass(cls.robot_type, Table) and msgspec.convert({}, cls.robot_type).profile == profile
    assert issubclass(cls.limits_type, Table) and msgspec.convert({}, cls.limits_type).ttl_max_s > 0
    assert cls.commands and all(isinstance(c, Command) and issubclass(c.params, msgspec.Struct) for c in cls.commands)
    assert 0 in cls.stop_categories <= ALL_STOP_CATEGORIES  # faults always cut
    assert all(name in STAGES for name in cls.stages)


# ---------------------------------------------------------------- [robot] and [limits] by profile
@pytest.mark.parametrize("overrides, table, struct", [
    ({}, "robot", "RoverRobot"),
    ({"robot": {"profile": "scara"}}, "robot", "ScaraRobot"),
    ({}, "limits", "RoverLimits"),
    ({"robot": {"profile": "scara"}, "limits": {"ttl_max_s": 5.0}}, "limits", "ScaraLimits"),
    ({"robot": {"profile": "stewart"}}, "limits", "StewartLimits"),
])
def test_ok__each_profile_loads_its_controllers_tables(overrides: dict, table: str, struct: str) -> None:
    cfg = load_config(None, overrides=overrides)
    assert type(getattr(cfg, table)).__name__ == struct


@pytest.mark.parametrize("overrides, key", [
    ({"robot": {"profile": "tank"}}, "robot.profile"),
    ({"robot": {"profile": 3}}, "robot.profile"),
    ({"robot": {"profile": "scara", "track_m": 0.3}}, "robot.track_m"),  # a rover key on an arm
    ({"limits": {"linear_m_s": "quick"}}, "limits.linear_m_s"),
    ({"robot": {"profile": "scara"}, "limits": {"bogus": 1}}, "limits.bogus"),
    ({"robot": {"profile": "stewart"}, "limits": {"ttl_max_s": 0}}, "limits.ttl_max_s"),
])
def test_fail__a_table_of_the_wrong_profile_names_the_key(overrides: dict, key: str) -> None:
    with pytest.raises(ConfigError, match=f"'{key}"):
        load_config(None, overrides=overrides)


def test_ok__a_rover_limit_in_an_arm_profile_still_loads_with_a_deprecation_warning(caplog) -> None:
    # [limits] was the rover's struct for every profile: an arm's profile could carry its keys (ignored)
    with caplog.at_level(logging.WARNING, logger="server.config"):
        cfg = load_config(None, overrides={"robot": {"profile": "scara"}, "limits": {"linear_m_s": 0.3,
                                                                                     "ttl_max_s": 4.0}})
    assert cfg.limits.ttl_max_s == 4.0 and not hasattr(cfg.limits, "linear_m_s")
    assert "'limits.linear_m_s' has no effect" in caplog.text


# ---------------------------------------------------------------- what GET /api/robot says
@pytest.mark.parametrize("config, commands", [
    ("rover-sim", ["speed"]), ("scara-sim", ["joints", "jog", "tool", "tool_jog"]), ("stewart-sim", ["pose"])])
def test_describe_lists_the_commands_with_their_body_schema(config: str, commands: list[str]) -> None:
    from server.config import REPO_ROOT

    desc = Robot(load_config(REPO_ROOT / "config" / f"{config}.toml")).describe()
    assert desc["commands"] == commands and sorted(desc["command_params"]) == sorted(commands)
    for name in commands:
        schema = desc["command_params"][name]
        body = schema["$defs"][schema["$ref"].rsplit("/", 1)[-1]]
        assert body["type"] == "object" and body["properties"]
    assert desc["stop_categories"] == [0, 1, 2]


def test_describe_names_the_drivers_declared_capabilities() -> None:
    from server.config import REPO_ROOT

    desc = Robot(load_config(REPO_ROOT / "config" / "scara-sim.toml")).describe()
    assert desc["driver_capabilities"] == [Capability.PROGRAMS.value]


# ---------------------------------------------------------------- stop categories
def test_fail__a_stop_category_the_controller_cannot_carry_out_stops_start_up(monkeypatch) -> None:
    cls = controller_class("rover")
    monkeypatch.setattr(cls, "stop_categories", frozenset({0, 1}))
    with pytest.raises(ConfigError, match="'safety.link_loss_category' asks for stop category 2"):
        Robot(load_config(None, overrides={"safety": {"link_loss_category": 2}}))
    Robot(load_config(None, overrides={"safety": {"link_loss_category": 1}}))  # one it can: starts


def test_the_tables_named_apart_from_a_controller_are_its_own() -> None:
    # TABLES lets the launcher read an arm's tables without importing its controller (and numpy)
    for profile, (robot, limits) in TABLES.items():
        cls = controller_class(profile)
        assert tables_of(profile) == (cls.robot_type, cls.limits_type), (profile, robot, limits)
    assert set(TABLES) <= set(CONTROLLERS)


# ---------------------------------------------------------------- a new robot kind: its controller only
class ToyRobot(Table, tag_field="profile", tag="toy"):
    name: str = "Toy"

    @property
    def profile(self) -> str:
        return "toy"


class ToyLimits(Table):
    ttl_max_s: float = 1.0


class Spin(msgspec.Struct, forbid_unknown_fields=True):
    rate: float = 0.0


class ToyController(Controller):
    """Spins the sim rover's wheels in opposite directions at ``rate`` (a robot kind of its own)."""

    profile = "toy"
    robot_type = ToyRobot
    limits_type = ToyLimits
    setpoint_type = Spin
    commands = (Command("spin", Spin),)

    def __init__(self) -> None:
        self.rate = 0.0

    @classmethod
    def from_profile(cls, profile: Any, driver: Any) -> "ToyController":
        return cls()

    def zero(self) -> Spin:
        return Spin()

    def check(self, setpoint: Spin) -> None:
        pass

    def motion_of(self, setpoint: Spin) -> Motion:
        return Motion(setpoint.rate != 0.0)

    def motion(self, values: Mapping[str, float]) -> Motion:
        return Motion(self.rate != 0.0)

    def update(self, dt_s: float, mode: OutputMode, setpoint: Spin) -> dict[str, float]:
        self.rate = setpoint.rate if mode is OutputMode.TRACK else 0.0
        return {"wheel_left": -self.rate, "wheel_right": self.rate}

    def reset(self) -> None:
        self.rate = 0.0

    @property
    def stopped(self) -> bool:
        return self.rate == 0.0

    def command_json(self) -> dict[str, float]:
        return {"rate": self.rate}

    def setpoint_json(self, setpoint: Spin) -> dict[str, Any]:
        return {"rate": setpoint.rate}

    def describe(self) -> dict[str, Any]:
        return {"limits": {"ttl_max_s": 1.0}}


def test_a_robot_kind_registered_with_its_controller_alone_runs_in_the_loop(monkeypatch) -> None:
    module = types.ModuleType("toy_controller")
    module.ToyController = ToyController
    monkeypatch.setitem(sys.modules, "toy_controller", module)
    monkeypatch.setitem(CONTROLLERS, "toy", "toy_controller:ToyController")
    cfg = load_config(None, overrides={"robot": {"profile": "toy"}, "driver": {"noise": False},
                                       "safety": {"command_timeout_s": 60.0, "rules": []}})
    robot = Robot(cfg)
    assert robot.describe()["commands"] == ["spin"] and robot.stage is None
    loop, clock = robot.loop, [0.0]
    robot.driver.open()
    loop.clock = lambda: clock[0]

    def tick() -> None:
        clock[0] += 0.01
        loop.run_tick(clock[0], 0.0, 0.01, 0)

    tick()
    loop.start_robot()
    loop.set_setpoint(Spin(rate=4.0))
    for _ in range(50):
        tick()
    values = loop.snapshot()["values"]
    assert values["angular_rad_s"] > 0.5 and abs(values["linear_m_s"]) < 1e-6  # it turns in place
    loop.estop("test")
    tick()
    assert robot.driver.command == (0.0, 0.0) and math.isclose(loop.snapshot()["command"]["rate"], 0.0)
    robot.driver.close()
