"""The twist controller, chosen by the driver's declared capability (issue 24): a rover whose driver takes the
body twist itself gets the rover's ramp without the wheel mixer and without an estimator stage; a driver's own
events reach the loop's log."""

from __future__ import annotations

import sys
import types
from typing import Any, Mapping

import pytest

from drivers.base import Capability, ChannelSpec, Driver, Frame
from drivers.registry import DRIVERS
from server.config import ConfigError, load_config
from server.errors import ValidationError
from server.runtime.controllers.registry import controller_for
from server.runtime.controllers.rover import RoverController, RoverSetpoint
from server.runtime.controllers.twist import TwistController
from server.runtime.robot import Robot
from server.runtime.supervisor import OutputMode


class TwistToy(Driver):
    """A vehicle that takes the body twist (what an autopilot's driver declares), recording what it is sent."""

    name = "twist-toy"
    capabilities = frozenset({Capability.BODY_TWIST})

    def __init__(self) -> None:
        super().__init__()
        self.written: list[dict[str, float]] = []
        self.events = [("vehicle_text", "vehicle: PreArm: Compass not calibrated", "error", {"severity": "CRITICAL"})]
        self._acquisition = self._acquisition.__class__(50.0, ("linear_m_s", "angular_rad_s"))

    @classmethod
    def from_config(cls, table: Mapping[str, Any], profile: Mapping[str, Any]) -> "TwistToy":
        return cls()

    def _open(self) -> None:
        pass

    def _close(self) -> None:
        pass

    def _read(self, dt_s: float) -> Frame:
        last = self.written[-1] if self.written else {"linear_m_s": 0.0, "angular_rad_s": 0.0}
        return Frame(t=0.0, values=dict(last))

    def _write(self, command: dict[str, float]) -> None:
        self.written.append(dict(command))

    def _halt(self) -> None:
        self.written.append({"linear_m_s": 0.0, "angular_rad_s": 0.0})

    def channels(self) -> list[ChannelSpec]:
        return [ChannelSpec("linear_m_s", "m/s", -1.0, 1.0), ChannelSpec("angular_rad_s", "rad/s", -2.0, 2.0)]

    def actuators(self) -> dict[str, tuple[float, float]]:
        return {"linear_m_s": (-0.4, 0.4), "angular_rad_s": (-1.0, 1.0)}

    def take_events(self) -> list[tuple[str, str, str, dict[str, Any]]]:
        out, self.events = self.events, []
        return out


@pytest.fixture
def robot(monkeypatch) -> Robot:
    module = types.ModuleType("twist_toy")
    module.TwistToy = TwistToy
    monkeypatch.setitem(sys.modules, "twist_toy", module)
    monkeypatch.setitem(DRIVERS, "twist-toy", "twist_toy:TwistToy")
    cfg = load_config(None, overrides={"driver": {"name": "twist-toy"}, "limits": {"linear_m_s": 1.0},
                                       "safety": {"command_timeout_s": 60.0, "rules": []}})
    return Robot(cfg)


def test_the_registry_chooses_by_the_drivers_declared_capability() -> None:
    assert controller_for("rover", {Capability.BODY_TWIST}) is TwistController
    assert controller_for("rover", {Capability.RECONNECT}) is RoverController
    assert controller_for("scara", {Capability.BODY_TWIST}).__name__ == "ScaraController"  # no twist for an arm


def test_a_twist_driver_gets_the_twist_controller_without_an_estimator(robot) -> None:
    assert isinstance(robot.controller, TwistController) and robot.stages == [] and robot.stage is None
    desc = robot.describe()
    assert desc["profile"] == "rover" and desc["commands"] == ["speed"] and desc["stages"] == []
    assert desc["limits"]["linear_m_s"] == [-0.4, 0.4], "narrowed to the driver's actuator"
    assert desc["limits"]["angular_rad_s"] == [-1.0, 1.0] and "geometry" not in desc
    with pytest.raises(ValidationError):
        robot.controller.check(RoverSetpoint(0.6, 0.0))  # within [limits] (1 m/s), beyond the vehicle
    robot.controller.check(RoverSetpoint(0.4, -1.0))


def test_the_ramped_twist_is_written_as_it_is_and_a_stop_zeroes_it(robot) -> None:
    loop, clock, driver = robot.loop, [0.0], robot.driver
    driver.open()
    loop.clock = lambda: clock[0]

    def tick(n: int = 1) -> None:
        for _ in range(n):
            clock[0] += 0.02
            loop.run_tick(clock[0], 0.0, 0.02, 0)

    tick()
    loop.start_robot()
    loop.set_setpoint(RoverSetpoint(0.3, -0.5))
    tick()
    assert driver.written[-1] == pytest.approx({"linear_m_s": 0.016, "angular_rad_s": -0.08})  # 0.8 m/s², 4 rad/s²
    tick(50)
    assert driver.written[-1] == pytest.approx({"linear_m_s": 0.3, "angular_rad_s": -0.5})
    assert "wheel_left" not in driver.written[-1]
    events = [e.trigger for e in loop.events]
    assert "vehicle_text" in events, "the driver's own events reach the loop's log"
    loop.estop("test")
    assert driver.written[-1] == {"linear_m_s": 0.0, "angular_rad_s": 0.0}
    tick()
    assert loop.snapshot()["command"] == {"linear": 0.0, "angular": 0.0}
    driver.close()


def test_ramp_mode_decelerates_with_the_decel_limit() -> None:
    c = TwistController(load_config(None).limits)
    c.linear, c.angular = 0.5, 1.0
    out = c.update(0.1, OutputMode.RAMP, RoverSetpoint(0.5, 1.0))
    assert out == pytest.approx({"linear_m_s": 0.35, "angular_rad_s": 0.4})  # 1.5 m/s², 6 rad/s² (defaults)
    assert c.update(1.0, OutputMode.CUT, RoverSetpoint()) == {"linear_m_s": 0.0, "angular_rad_s": 0.0}


def test_fail__the_twist_controller_refuses_a_driver_without_the_twist() -> None:
    cfg = load_config(None)  # the simulated rover: wheels, no body twist
    robot = Robot(cfg)
    assert isinstance(robot.controller, RoverController) and not isinstance(robot.controller, TwistController)
    with pytest.raises(ConfigError, match="does not take a body twist"):
        TwistController.from_profile(cfg, robot.driver)
