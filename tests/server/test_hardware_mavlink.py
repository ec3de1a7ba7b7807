"""End to end on the MAVLink path: ``python -m server`` with ``config/rover-mavlink.toml`` driving the emulated
ArduPilot rover (``sim/devices/mavlink_vehicle.py``) on a pseudo-terminal (issue 24).

The emulator runs in this test process; the server is the real three-process server, its runtime talking
MAVLink 2 to the pty through the real driver. What the vehicle did — its mode, arming, position, every
setpoint it received and when — is read from the emulator, never from the server's own account.
"""

from __future__ import annotations

import os
import re
import signal
import time
import tomllib

import pytest

from sim.devices.mavlink_vehicle import MavlinkVehicle, VehicleConfig
from sim.devices.pty import PtyRunner
from tests.conftest import REPO, ServerProc, wait_until
from tests.server.gateway.auth.client import PASSWORD, make_users
from tests.server.test_stop_paths import Heartbeat, events

pytestmark = pytest.mark.timeout(180)

CONFIG = "config/rover-mavlink.toml"
#: an obstacle 4.35 m ahead of the start (4, 10) facing east: a box whose west face is at x = 8.5
WORLD = {"size_m": [20.0, 20.0], "boxes": [{"center": [9.0, 10.0], "size": [1.0, 4.0]}]}


def start_vehicle(**config) -> PtyRunner:
    vehicle = MavlinkVehicle(VehicleConfig(params={"FS_TIMEOUT": 1.5}, **config))
    runner = PtyRunner(vehicle, "mavlink")
    runner.vehicle = vehicle
    runner.start()
    return runner


@pytest.fixture
def vehicle():
    runner = start_vehicle()
    yield runner
    runner.stop()


@pytest.fixture(params=("local", "operator"))
def mode(request, tmp_path) -> dict:
    """The ``[auth]`` of a mode: ``local``, none (no users); ``operator``, a users file, and the test's requests
    carry an operator's bearer token, the operator holding the lease (:func:`as_operator`)."""
    if request.param == "local":
        return {}
    return {"auth": {"users_file": str(make_users(tmp_path / "users.json", {"olga": "operator"}))}}


def serve(server_factory, runner: PtyRunner, mode: dict | None = None, **driver) -> ServerProc:
    # a shared, loaded VM: the profile's 0.5 s staleness, link and 0.1 s stall limits would now and then stop a
    # healthy run (the heartbeat thread beat late); these tests are about other stops, and link loss still latches
    # well within test_link_loss_stops_the_vehicle's deadline
    srv = server_factory({"driver": {"port": runner.port, "heartbeat_timeout_s": 5.0, **driver},
                          "safety": {"sensor_stale_s": 2.0, "command_timeout_s": 2.0}, "loop": {"max_stall_s": 2.0},
                          **(mode or {})},
                         config=CONFIG)
    return as_operator(srv) if mode else srv


def as_operator(srv: ServerProc) -> ServerProc:
    """Every request of ``srv`` from now on carries an operator's bearer token, and that operator holds the lease;
    ``srv.anonymous`` is the plain client (no credentials)."""
    anonymous = srv.request
    status, body = anonymous("POST", "/api/auth/login", {"username": "olga", "password": PASSWORD, "bearer": True})
    assert status == 200, body
    auth = {"Authorization": f"Bearer {body['token']}"}

    def request(method, path, body=None, raw=None, headers=None, timeout_s=10.0):
        return anonymous(method, path, body=body, raw=raw, headers={**auth, **(headers or {})}, timeout_s=timeout_s)

    srv.request, srv.anonymous = request, anonymous
    status, body = srv.post("/api/lease/take", {})
    assert status == 200, body
    return srv


def refuses_strangers(srv: ServerProc, runner: "PtyRunner") -> None:
    """Logged in: a request without credentials starts nothing and sends no setpoint (401), whatever it asks."""
    if not hasattr(srv, "anonymous"):
        return
    for path, body in (("/api/start", {}), ("/api/speed", {"linear": 0.5, "angular": 0.0}), ("/api/reset", {})):
        status, reply = srv.anonymous("POST", path, body)
        assert status == 401, (path, status, reply)
    assert not seen(runner, lambda v: v.armed or v.moving)


def seen(runner: PtyRunner, fn):
    with runner.lock:
        return fn(runner.vehicle)


def armed_in(runner: PtyRunner, mode: str) -> bool:
    return seen(runner, lambda v: v.armed and v.mode == mode)


def start_and_drive(srv: ServerProc, runner: PtyRunner, linear: float = 0.5) -> None:
    status, body = srv.post("/api/start")
    assert status == 200, body
    wait_until(lambda: srv.state()["driver"]["state"] == "active", 10, "the driver active (armed, GUIDED)")
    status, body = srv.post("/api/speed", {"linear": linear, "angular": 0.0})
    assert status == 200, body
    wait_until(lambda: seen(runner, lambda v: v.moving), 10, "the vehicle moving")


def nonzero_after(runner: PtyRunner, t: float) -> list[tuple]:
    return seen(runner, lambda v: [sp for sp in v.setpoints if sp[0] > t and (sp[1] or sp[2])])


def test_the_profile_validates_and_matches_the_documented_table() -> None:
    from server.config import load_config
    from server.runtime.controllers.twist import TwistController
    from server.runtime.robot import Robot

    profile = load_config(REPO / CONFIG)
    robot = Robot(profile)
    assert robot.driver.name == "mavlink" and isinstance(robot.controller, TwistController)
    assert robot.stages == [], "the autopilot's EKF is the estimate: no estimator stage"
    assert {r.channel for r in profile.safety.rules} <= {c.name for c in robot.driver.channels()}
    text = (REPO / "docs" / "hardware.md").read_text().split("### Example: an ArduPilot rover", 1)[1]
    documented = tomllib.loads(re.search(r"```toml\n(.*?)```", text, re.S).group(1))["driver"]
    actual = tomllib.loads((REPO / CONFIG).read_text())["driver"]
    assert {k: actual.get(k) for k in documented} == documented


def test_start_arms_in_guided_and_speed_moves_the_vehicle(server_factory, vehicle, mode) -> None:
    srv = serve(server_factory, vehicle, mode)
    status, robot = srv.get("/api/robot")
    assert status == 200 and robot["driver"] == "mavlink" and robot["profile"] == "rover"
    assert "body_twist" in robot["driver_capabilities"] and robot["stages"] == [] and robot["commands"] == ["speed"]
    assert robot["world"]["size_m"] == [20.0, 20.0] and robot["limits"]["linear_m_s"] == [-1.0, 1.0]
    s = srv.state()
    assert s["state"] == "idle" and s["driver"]["state"] == "inactive" and "estimation" not in s
    assert s["values"]["armed"] == 0.0 and s["driver"]["mode"] == "MANUAL" and s["driver"]["failsafe_enabled"]
    assert not seen(vehicle, lambda v: v.armed)
    refuses_strangers(srv, vehicle)
    x0 = seen(vehicle, lambda v: v.sim.x)
    with Heartbeat(srv):
        start_and_drive(srv, vehicle, 0.6)
        assert armed_in(vehicle, "GUIDED")
        wait_until(lambda: seen(vehicle, lambda v: v.sim.x) > x0 + 0.5, 10, "the vehicle half a metre east")
        s = srv.state()
        assert s["state"] == "running" and s["values"]["guided"] == 1.0 and s["values"]["armed"] == 1.0
        assert s["values"]["linear_m_s"] == pytest.approx(0.6, abs=0.1)
        assert s["values"]["est_x_m"] > x0 + 0.4, "the map's position is the autopilot's"
        assert abs(s["values"]["est_y_m"] - 10.0) < 0.05 and s["values"]["heading_deg"] == pytest.approx(90, abs=1)
        # the frame the setpoints use and their type mask: velocity + yaw rate in the body frame
        frame, mask = seen(vehicle, lambda v: v.setpoints[-1][3:])
        assert (frame, mask) == (8, 0x05E7)
        assert srv.post("/api/stop")[0] == 200
        wait_until(lambda: srv.state()["state"] == "idle", 10, "the controlled stop done")
    wait_until(lambda: seen(vehicle, lambda v: v.mode == "HOLD" and not v.armed and not v.moving), 10, "held")
    triggers = [e["trigger"] for e in events(srv)]
    assert "vehicle_mode" in triggers and "vehicle_armed" in triggers and "vehicle_failsafe" in triggers


def test_estop_puts_zero_velocity_on_the_wire_then_hold(server_factory, vehicle, mode) -> None:
    srv = serve(server_factory, vehicle, mode)
    with Heartbeat(srv):
        start_and_drive(srv, vehicle)
        t0 = time.monotonic()
        status, body = srv.post("/api/estop")
        assert status == 200 and body["state"] == "estop"
        wait_until(lambda: seen(vehicle, lambda v: v.zero_setpoints_since(t0)), 5, "a zero setpoint received")
        wait_until(lambda: seen(vehicle, lambda v: v.mode == "HOLD" and not v.armed), 5, "HOLD, disarmed")
        wait_until(lambda: not seen(vehicle, lambda v: v.moving), 5, "stopped")
        first_zero = seen(vehicle, lambda v: v.zero_setpoints_since(t0)[0])
        hold_t = seen(vehicle, lambda v: next(t for t, mode, _ in v.mode_log if t >= t0 and mode == "HOLD"))
        assert first_zero <= hold_t, "zero velocity first, then HOLD"
        assert not nonzero_after(vehicle, first_zero), "nothing moved it after the zero"
    assert srv.state()["cause"]["trigger"] == "operator_estop"


def test_link_loss_stops_the_vehicle(server_factory, vehicle, mode) -> None:
    srv = serve(server_factory, vehicle, mode)
    hb = Heartbeat(srv)
    with hb:
        start_and_drive(srv, vehicle)
    # the operator went silent: the runtime ramps down (category 1), then cuts: HOLD
    wait_until(lambda: srv.state()["state"] == "estop", 10, "link loss latched")
    assert srv.state()["cause"]["trigger"] == "link_loss"
    wait_until(lambda: seen(vehicle, lambda v: v.mode == "HOLD" and not v.moving), 10, "held and stopped")
    t = seen(vehicle, lambda v: v.mode_log[-1][0])
    assert not nonzero_after(vehicle, t)
    assert seen(vehicle, lambda v: v.failsafes) == [], "the server stopped it, not the vehicle's failsafe"


def test_server_runtime_killed_the_vehicles_own_failsafe_holds_it(server_factory, vehicle) -> None:
    srv = serve(server_factory, vehicle)
    with Heartbeat(srv):
        start_and_drive(srv, vehicle, 0.4)
        runtime_pid = srv.get("/api/telemetry")[1]["runtime"]["pid"]
        # killing the launcher would SIGTERM the runtime (PR_SET_PDEATHSIG), which halts the vehicle itself: so the
        # launcher is frozen (it cannot restart a runtime that would make the vehicle safe on open) and the runtime,
        # the process that owns the link, is SIGKILLed: nobody halts, no heartbeat, no setpoint ever again
        os.kill(srv.proc.pid, signal.SIGSTOP)
        try:
            os.kill(runtime_pid, signal.SIGKILL)
            wait_until(lambda: seen(vehicle, lambda v: v.failsafes), 10, "the vehicle's GCS failsafe")
        finally:
            os.kill(srv.proc.pid, signal.SIGKILL)
            os.kill(srv.proc.pid, signal.SIGCONT)
    wait_until(lambda: not seen(vehicle, lambda v: v.moving), 5, "stopped by itself")
    with vehicle.lock:
        v = vehicle.vehicle
        assert [c for _, c in v.failsafes] == ["gcs"] and v.mode == "HOLD"
        assert v.mode_log[-1][2] == "failsafe: gcs"
        fs_t = v.failsafes[0][0]
        # it was the GCS failsafe (FS_TIMEOUT = 1.5 s after the last heartbeat), not GUIDED's 3 s setpoint timeout
        assert fs_t - v.last_gcs_t == pytest.approx(1.5, abs=0.5) and fs_t - v.setpoint_t < v.config.guided_timeout_s


def test_vehicle_heartbeat_lost_faults_reconnects_and_never_resumes(server_factory, vehicle) -> None:
    srv = serve(server_factory, vehicle, reconnect_timeout_s=1.0)
    with Heartbeat(srv):
        start_and_drive(srv, vehicle)
        with vehicle.lock:
            vehicle.vehicle.inject("heartbeat_drop")
        wait_until(lambda: srv.state()["state"] == "fault", 20, "fault on the lost heartbeat")
        cause = srv.state()["cause"]
        assert cause["trigger"] == "driver_fault" and "no HEARTBEAT" in cause["message"], cause
        # the rest of the link still works: the halt reached the vehicle
        wait_until(lambda: seen(vehicle, lambda v: v.mode == "HOLD" and not v.armed and not v.moving), 10, "held")
        fault_t = time.monotonic()
        with vehicle.lock:
            vehicle.vehicle.inject("clear")
        wait_until(lambda: events(srv, "driver_reconnected"), 30, "the driver back")
        s = srv.state()
        assert s["state"] == "fault" and s["driver"]["state"] == "inactive", s
        wait_until(lambda: srv.post("/api/reset")[0] == 200, 10, "reset once the heartbeat is back")
        assert srv.state()["state"] == "idle"
        status, body = srv.post("/api/speed", {"linear": 0.3, "angular": 0.0})
        assert status == 409 and body["error"]["code"] == "not_running"
    assert not seen(vehicle, lambda v: v.armed or v.moving) and not nonzero_after(vehicle, fault_t)


def test_fail__arming_refusal_is_a_clear_error_naming_the_autopilots_reason(server_factory, vehicle, mode) -> None:
    with vehicle.lock:
        vehicle.vehicle.inject("refuse_arm", reason="PreArm: Hardware safety switch")
    srv = serve(server_factory, vehicle, mode)
    with Heartbeat(srv):
        assert srv.post("/api/start")[0] == 200
        wait_until(lambda: srv.state()["state"] == "fault", 10, "the refusal faults the start")
    cause = srv.state()["cause"]
    assert "arming refused by the autopilot: PreArm: Hardware safety switch" in cause["message"], cause
    assert any("Hardware safety switch" in e["message"] for e in events(srv, "vehicle_text"))
    assert not seen(vehicle, lambda v: v.armed or v.moving)


def test_a_distance_sensor_rule_stops_it_before_the_obstacle(server_factory) -> None:
    runner = start_vehicle(world=WORLD)
    try:
        srv = serve(server_factory, runner)
        assert srv.state()["values"]["range_front_m"] == pytest.approx(4.35, abs=0.05)
        with Heartbeat(srv):
            start_and_drive(srv, runner, 0.8)
            wait_until(lambda: srv.state()["state"] == "estop", 20, "the obstacle rule")
        s = srv.state()
        assert s["cause"]["trigger"] == "rule" and s["cause"]["rule"] == "obstacle_front", s["cause"]
        wait_until(lambda: seen(runner, lambda v: v.mode == "HOLD" and not v.moving), 10, "held")
        with runner.lock:
            v = runner.vehicle
            assert v.sim.collisions == 0 and v.sim.ranges["front"] > 0.3, (v.sim.collisions, v.sim.ranges)
    finally:
        runner.stop()
