"""A robot the project does not know, end to end (issue 24): docs/drivers.md's worked example, installed as a
distribution whose ``teleop.drivers`` entry point names it, driven by the real server with the page's own
profile, against the emulated line robot over TCP. Nothing in the project names the driver."""

from __future__ import annotations

import pytest

from sim.devices.net import TcpRunner
from tests.conftest import wait_until
from tests.drivers.linebot_device import LineBot
from tests.drivers.test_check import example, install
from tests.server.test_stop_paths import Heartbeat

pytestmark = pytest.mark.timeout(120)


def test_a_plugin_driver_runs_the_robot_through_the_server(server_factory, tmp_path, monkeypatch) -> None:
    install(tmp_path, monkeypatch, "linebot", "[teleop.drivers]\nlinebot = linebot_driver:LineBotDriver\n",
            {"linebot_driver": example("linebot_driver.py")})
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # the server's processes find the distribution too
    bot = LineBot(wall_m=3.0)
    with TcpRunner(bot, "linebot") as runner:
        host, port = runner.url.split(":")[1:]
        profile = tmp_path / "linebot.toml"
        profile.write_text(example("linebot.toml"))  # the page's profile as it is; only the port is this test's
        srv = server_factory({"driver": {"port": f"socket://{host}:{port}"}, "safety": {"sensor_stale_s": 2.0, "command_timeout_s": 2.0},
                              "loop": {"max_stall_s": 2.0}}, config=str(profile))
        status, robot = srv.get("/api/robot")
        assert status == 200 and robot["driver"] == "linebot" and robot["profile"] == "rover"
        assert {c["name"] for c in robot["channels"]} >= {"wheel_left_rad_s", "battery_v", "range_front_m"}
        assert srv.state()["values"]["battery_v"] == pytest.approx(12.4)
        with Heartbeat(srv):
            assert srv.post("/api/start")[0] == 200
            status, body = srv.post("/api/speed", {"linear": 0.3, "angular": 0.0})
            assert status == 200, body
            wait_until(lambda: min(bot.wheels) > 3.0, 10, "the robot's wheels turning")
            wait_until(lambda: srv.state()["values"]["wheel_left_rad_s"] > 3.0, 5, "the server reading them")
            # the sonar rule (0.3 m) stops it short of the wall 3 m ahead
            wait_until(lambda: srv.state()["state"] == "estop", 30, "the obstacle rule")
        s = srv.state()
        assert s["cause"]["rule"] == "obstacle_front", s["cause"]
        wait_until(lambda: bot.wheels == [0.0, 0.0], 5, "the wheels stopped")
        with runner.lock:
            assert bot.lines_in[-1][1] == "S" or any(line == "S" for _, line in bot.lines_in[-5:])
            assert bot.wall_m - bot.x_m > 0.1, "stopped before the wall"
