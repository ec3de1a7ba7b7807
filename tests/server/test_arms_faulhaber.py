"""The scara-faulhaber profile end to end: the real server (runtime + gateway) drives two FAULHABER ASCII drives
emulated on a pseudo-terminal in this test process (sim.devices.faulhaber_ascii behind sim.devices.pty), so real
bytes flow: joint targets reach the drives as position commands, the joints arrive, an e-stop disables the
drives, and the program route uses the drives' own gearing."""

from __future__ import annotations

import math

import pytest

from sim.devices.faulhaber_ascii import AsciiLine, DriveConfig, LineConfig
from sim.devices.pty import PtyRunner
from tests.conftest import wait_until

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def line():
    with PtyRunner(AsciiLine(LineConfig([DriveConfig(1), DriveConfig(2)])), "faulhaber-ascii") as runner:
        yield runner


def test_scara_on_faulhaber_drives_moves_stops_and_programs(server_factory, line) -> None:
    srv = server_factory({"safety": {"command_timeout_s": 60.0}, "driver": {"port": line.port, "xonxoff": False}},
                         config="config/scara-faulhaber.toml")
    robot = srv.get("/api/robot")[1]
    assert robot["profile"] == "scara" and robot["driver"] == "faulhaber-ascii"
    assert set(robot["actuators"]) == {"q1", "q2"}
    # the soft limits: the narrower of [robot] (±140°, ±145°) and the drives' (±2.5, ±2.6 rad), minus 2°
    assert robot["limits"]["q1_rad"] == pytest.approx([math.radians(-138.0), math.radians(138.0)])
    assert robot["limits"]["hard_q2_rad"] == pytest.approx([math.radians(-145.0), math.radians(145.0)])
    rules = {r["name"] for r in robot["safety"]["rules"]}
    assert {"q1_below_limit", "q2_above_limit"} <= rules and "q1_at_limit" not in rules  # no end-stop channel here

    assert srv.post("/api/start") == (200, {"ok": True, "state": "running"})
    assert srv.post("/api/joints", {"q1_rad": 0.5, "q2_rad": -0.3})[0] == 200
    resolution = 2 * math.pi / (43.0 * 2048)  # one increment of the elbow's encoder, rad
    wait_until(lambda: abs(srv.state()["values"]["q1_rad"] - 0.5) < 2 * resolution
               and abs(srv.state()["values"]["q2_rad"] + 0.3) < 2 * resolution, timeout_s=20.0,
               message="the joints at (0.5, -0.3) rad")
    sent = line.received()
    # position commands on the wire: the last targets are 0.5 rad × 66 × 2048 / 2π and −0.3 rad × 43 × 2048 / 2π
    assert b"1LA10756\r" in sent and b"2LA-4205\r" in sent and b"1M\r" in sent
    status, reply = srv.post("/api/tool", {"x_m": 0.6, "y_m": 0.0})
    assert (status, reply["error"]["code"]) == (422, "unreachable")

    before = len(line.rx_log)
    assert srv.post("/api/estop")[1]["state"] == "estop"
    line.wait_for(b"1DI\r", since=before)
    line.wait_for(b"2DI\r", since=before)

    status, doc = srv.post("/api/program?format=json", {"t_s": [0.0, 2.0], "q1_rad": [0.0, 0.5],
                                                        "q2_rad": [0.0, -0.3]})
    assert status == 200
    assert [(a["node"], a["gear_ratio"], a["from_driver"]) for a in doc["axes"]] == [(1, 66.0, True), (2, 43.0, True)]
    lines = doc["text"].splitlines()
    # SP = 1.5 rad/s × 66 → 945 rpm, AC = 6 rad/s² × 66 / 2π → 63 rev/s²; the targets in the drives' increments
    assert lines[:4] == ["1SP945", "1AC63", "1DEC63", "1EN"]
    assert "1LA10756" in lines and "2LA-4205" in lines
