"""A rule channel that stops delivering fresh samples must stop the robot (issue 8, item 1).

Before: ``PUT /api/acquisition`` accepted ``rate_hz = 0.001``; the rover then drove into the
box with ``range_front_m`` frozen at 2.85 m, because staleness looked at when the driver was
read, not at the age of each sample.
"""

from __future__ import annotations

import pytest

from tests.conftest import ServerProc, module_server, wait_until
from tests.server.test_stop_paths import Heartbeat, at_rest, drive, events

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def server(server_factory) -> ServerProc:
    """A 5 s link timeout: on a loaded machine the heartbeat thread beats late, and a link-loss stop would take the
    place of the stale-sensor stop these tests are about (the watchdog has its own tests)."""
    return server_factory({"safety": {"command_timeout_s": 5.0}})


def all_channels(srv: ServerProc) -> list[str]:
    return srv.get("/api/acquisition")[1]["available"]


@pytest.fixture(scope="module")
def refusing(tmp_path_factory) -> ServerProc:
    """One server for the refusal rows: each checks that its refused request changed nothing."""
    srv = module_server(tmp_path_factory, {"safety": {"command_timeout_s": 5.0}})
    yield srv
    srv.kill()


@pytest.mark.parametrize("rate", [0.001, 0.05, 1.0, 3.9])
def test_fail__acquisition_rate_that_would_starve_a_rule_is_refused(refusing: ServerProc, rate: float) -> None:
    server = refusing
    before = server.get("/api/acquisition")[1]
    status, body = server.put("/api/acquisition", {"rate_hz": rate, "channels": all_channels(server)})
    assert status == 422, body
    assert body["error"]["code"] == "safety_rate"
    assert "obstacle_front" in body["error"]["message"]  # names the rule(s)
    assert server.get("/api/acquisition")[1] == before


def test_ok__acquisition_rate_that_keeps_rules_fresh(server: ServerProc) -> None:
    status, body = server.put("/api/acquisition", {"rate_hz": 4.0, "channels": all_channels(server)})
    assert status == 200 and body["rate_hz"] == 4.0
    assert body["min_rate_hz"] > 0


def test_frozen_range_sensor_stops_the_rover_before_contact(server: ServerProc) -> None:
    server.post("/api/debug/driver", {"teleport": [3.5, 2.0, 0.0]})  # facing the east wall, 2.5 m away
    drive(server, 0.3)
    with Heartbeat(server):
        wait_until(lambda: server.state()["values"]["linear_m_s"] > 0.1, 5, "rover moving")
        assert server.post("/api/debug/driver", {"freeze": ["range_front_m"]})[0] == 200
        wait_until(lambda: server.state()["state"] == "estop", 10, "stale-sensor e-stop")
    s = server.state()
    assert s["cause"]["trigger"] == "sensor_stale", s["cause"]
    assert s["cause"]["values"]["channel"] == "range_front_m" and s["cause"]["rule"] == "obstacle_front"
    assert "range_front_m" in s["stale"]
    wait_until(lambda: at_rest(server), 5, "rover at rest")
    assert server.state()["truth"]["collisions"] == 0
    # the cause persists while the sensor is stale; once it delivers again, reset works
    status, body = server.post("/api/reset")
    assert status == 409 and body["error"]["code"] == "cause_persists" and "range_front_m" in body["error"]["message"]
    server.post("/api/debug/driver", {"freeze": []})
    wait_until(lambda: server.post("/api/reset")[0] == 200, 5, "reset once the sensor is fresh")
    assert [e["trigger"] for e in events(server, "sensor_stale")] == ["sensor_stale"]


def test_a_sensor_reading_nan_counts_as_stale(server: ServerProc) -> None:
    drive(server, 0.2)
    with Heartbeat(server):
        server.post("/api/debug/driver", {"nan": ["range_front_m"]})
        wait_until(lambda: server.state()["state"] == "estop", 10, "stale-sensor e-stop")
    assert server.state()["cause"]["trigger"] == "sensor_stale"


def test_start_refused_while_a_rule_channel_is_stale(server: ServerProc) -> None:
    server.post("/api/debug/driver", {"freeze": ["battery_v"]})
    wait_until(lambda: "battery_v" in server.state()["stale"], 5, "battery_v reported stale")
    status, body = server.post("/api/start")
    assert status == 409 and body["error"]["code"] == "prestart_failed"
    assert "battery_v is stale" in body["error"]["message"]
    assert server.state()["state"] == "idle"
    server.post("/api/debug/driver", {"freeze": []})
    wait_until(lambda: server.post("/api/start")[0] == 200, 5, "start once fresh")


def test_derived_rule_channel_goes_stale_with_its_inputs(server: ServerProc) -> None:
    """``tilt_rad`` (the tilt rule) is computed from the IMU: a frozen accelerometer makes it stale."""
    drive(server, 0.2)
    with Heartbeat(server):
        wait_until(lambda: server.state()["values"]["linear_m_s"] > 0.1, 5, "rover moving")
        server.post("/api/debug/driver", {"freeze": ["imu_acc_x_m_s2"]})
        wait_until(lambda: server.state()["state"] == "estop", 10, "stale-sensor e-stop")
    cause = server.state()["cause"]
    assert cause["trigger"] == "sensor_stale" and cause["values"]["channel"] == "tilt_rad"
