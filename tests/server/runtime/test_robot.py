"""server/runtime/robot.py: a driver's bad table stops start-up naming '[driver.KEY]', whichever driver it is."""

from __future__ import annotations

import pytest

from server.config import ConfigError, load_config
from server.runtime.robot import Robot


@pytest.mark.parametrize("overrides, key", [
    ({"driver": {"time_scale": 0}}, "[driver.time_scale]"),
    ({"driver": {"doppler": {"rate_hz": 0}}}, "[driver.doppler.rate_hz]"),
    ({"driver": {"rover": {"track_m": -1}}}, "[driver.rover.track_m]"),
    ({"robot": {"profile": "scara"}, "driver": {"name": "sim-scara", "bogus": 1}}, "[driver.bogus]"),
    ({"robot": {"profile": "stewart"}, "driver": {"name": "sim-stewart", "start_pose": [0, 0]}},
     "[driver.start_pose]"),
    # the serial drivers named their keys 'driver.port' within the table, so start-up said [driver.driver.port]
    ({"driver": {"name": "firmata"}}, "[driver.port]"),
    ({"driver": {"name": "firmata", "port": "loop://", "analog": {"b": {"channel": 16}}}},
     "[driver.analog.b.channel]"),
    ({"driver": {"name": "faulhaber-ascii", "port": "loop://", "axes": {"q1": {"node": 300}}}},
     "[driver.axes.q1.node]"),
])
def test_fail__a_bad_driver_table_names_its_key(overrides: dict, key: str) -> None:
    with pytest.raises(ConfigError) as info:
        Robot(load_config(None, overrides=overrides))
    assert key in str(info.value) and "driver.driver" not in str(info.value)


# ---------------------------------------------------------------- capabilities are declared, not probed
def test_a_reconnect_method_alone_does_not_make_a_reconnecting_driver() -> None:
    from drivers.base import Capability
    from drivers.sim import SimDriver
    from server.runtime.reconnect import Activator, Reconnector

    class Quiet:
        def emit(self, *a, **k): ...
        def emit_now(self, *a, **k): ...

    class Undeclared(SimDriver):
        def reconnect(self, timeout_s=None, stop=None) -> int:  # a method, but no declared capability
            return 1

    class Declared(Undeclared):
        capabilities = frozenset({Capability.RECONNECT, Capability.SLOW_ACTIVATE})

    assert Reconnector.for_driver(Undeclared({}, {}), Quiet()) is None and Activator.for_driver(Undeclared({}, {})) is None
    assert Reconnector.for_driver(Declared({}, {}), Quiet()) is not None and Activator.for_driver(Declared({}, {}))


def test_the_link_verdict_thresholds_are_in_the_description() -> None:
    """telemetry.link_degraded_ms / link_bad_ms reach the dashboard through the robot description (link.js)."""
    described = Robot(load_config(None, overrides={"telemetry": {"link_degraded_ms": 80.0, "link_bad_ms": 250.0}}))
    assert described.describe()["link_verdict_ms"] == {"degraded": 80.0, "bad": 250.0}
    assert Robot(load_config(None)).describe()["link_verdict_ms"] == {"degraded": 150.0, "bad": 400.0}
