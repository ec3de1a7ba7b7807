"""Every stop path, on the real server over real HTTP, with the simulated rover.

Time bounds are read from the server's own event log (monotonic stamps taken in
the control thread), not from the test's wall clock.
"""

from __future__ import annotations

import threading

import pytest

from tests.conftest import ServerProc, wait_until

pytestmark = pytest.mark.timeout(90)



def events(srv: ServerProc, trigger: str | None = None) -> list[dict]:
    status, body = srv.get("/api/events?limit=1000")
    assert status == 200
    return [e for e in body["events"] if trigger is None or e["trigger"] == trigger]


def drive(srv: ServerProc, linear: float, angular: float = 0.0) -> None:
    assert srv.post("/api/start")[0] == 200
    status, body = srv.post("/api/speed", {"linear": linear, "angular": angular})
    assert status == 200, body


class Heartbeat:
    """Keeps the link alive from a thread until stopped (like a dashboard would)."""

    def __init__(self, srv: ServerProc, period_s: float = 0.1) -> None:
        self.srv, self.period_s = srv, period_s
        self.stop_flag = threading.Event()
        self.last_sent = 0.0
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while True:  # the first at once: a test that drove just before must not wait a period for it
            try:
                self.srv.post("/api/heartbeat", timeout_s=5)
            except OSError:
                pass
            if self.stop_flag.wait(self.period_s):
                return

    def __enter__(self) -> "Heartbeat":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop_flag.set()
        self.thread.join(5)


def moving(srv: ServerProc) -> bool:
    return srv.state()["values"]["linear_m_s"] > 0.1


def at_rest(srv: ServerProc) -> bool:
    v = srv.state()["values"]
    return abs(v["wheel_left_rad_s"]) < 1e-3 and abs(v["wheel_right_rad_s"]) < 1e-3


def test_start_speed_moves_the_rover(server: ServerProc) -> None:
    before = server.state()["values"]
    drive(server, 0.3, 0.2)
    with Heartbeat(server):
        wait_until(lambda: moving(server), 5, "linear speed above 0.1 m/s")
        s = server.state()
        assert s["state"] == "running"
        assert s["values"]["encoder_left_ticks"] > before["encoder_left_ticks"]
        assert s["values"]["encoder_right_ticks"] > s["values"]["encoder_left_ticks"]  # turning left
        assert s["loop"]["ticks"] > 0 and s["loop"]["realtime"]


def test_link_loss_stops_within_timeout_plus_decel(server: ServerProc) -> None:
    drive(server, 0.4)
    with Heartbeat(server):
        wait_until(lambda: moving(server), 5, "rover moving")
    # heartbeats stopped: the server must stop by itself
    wait_until(lambda: server.state()["state"] == "estop", 5, "link-loss e-stop")
    cause = server.state()["cause"]
    assert cause["trigger"] == "link_loss" and cause["category"] == 1
    timeout_s = server.state()["link"]["timeout_s"]
    assert cause["values"]["age_s"] >= timeout_s, cause  # it waited for the timeout (how late: bench_core.py)
    wait_until(lambda: events(server, "outputs_zero"), 5, "outputs zero")
    zero = events(server, "outputs_zero")[-1]
    assert zero["values"]["trigger"] == "link_loss" and zero["values"]["after_trigger_s"] >= 0.0, zero
    wait_until(lambda: at_rest(server), 5, "wheels at rest")


def test_ttl_expires_like_a_lost_link(server: ServerProc) -> None:
    assert server.post("/api/start")[0] == 200
    assert server.post("/api/speed", {"linear": 0.2, "angular": 0.0, "ttl_s": 0.2})[0] == 200
    with Heartbeat(server, 0.05):  # heartbeats do not extend a command's time-to-live
        wait_until(lambda: server.state()["state"] == "estop", 5, "ttl e-stop")
    assert "time-to-live" in server.state()["cause"]["message"]


def test_obstacle_rule_stops_before_contact(server: ServerProc) -> None:
    server.post("/api/debug/driver", {"teleport": [4.0, 2.0, 0.0]})  # 2 m from the east wall, facing it
    drive(server, 0.5)
    with Heartbeat(server):
        wait_until(lambda: server.state()["state"] == "estop", 15, "obstacle e-stop")
    s = server.state()
    assert s["cause"]["trigger"] == "rule" and s["cause"]["rule"] == "obstacle_front"
    wait_until(lambda: at_rest(server), 5, "rover at rest")
    truth = server.state()["truth"]
    assert truth["collisions"] == 0 and not truth["collided"]
    assert server.state()["values"]["range_front_m"] > 0.05


def test_wall_is_hit_when_rules_are_off(server_factory) -> None:
    # the wall is under test, not the watchdog: with the default 0.5 s link timeout a loaded machine's slow
    # requests (start, speed, the first heartbeat) e-stopped the rover by link loss before it reached the wall
    srv = server_factory({"safety": {"rules": [], "command_timeout_s": 10.0}})
    srv.post("/api/debug/driver", {"teleport": [4.5, 2.0, 0.0]})
    with Heartbeat(srv):
        drive(srv, 0.5)
        wait_until(lambda: srv.state()["truth"]["collisions"] > 0, 15, "collision with the wall")
    assert srv.state()["truth"]["x"] < 6.0  # never passes through


def test_operator_estop_latches_and_zeroes_outputs(server: ServerProc) -> None:
    drive(server, 0.4)
    with Heartbeat(server):
        wait_until(lambda: moving(server), 5, "rover moving")
        status, body = server.post("/api/estop")
        assert status == 200 and body["state"] == "estop"
        s = server.state()
        assert s["command"] == {"linear": 0.0, "angular": 0.0}
        zero = events(server, "outputs_zero")[-1]
        assert zero["values"]["trigger"] == "operator_estop" and zero["values"]["after_trigger_s"] >= 0.0
        status, body = server.post("/api/speed", {"linear": 0.1, "angular": 0.0})
        assert status == 409 and body["error"]["code"] == "estop_latched"
        wait_until(lambda: at_rest(server), 5, "rover at rest")
    # stays latched until reset; reset does not restart motion
    assert server.state()["state"] == "estop"
    assert server.post("/api/reset")[1]["state"] == "idle"
    status, body = server.post("/api/speed", {"linear": 0.1, "angular": 0.0})
    assert status == 409 and body["error"]["code"] == "not_running"


def test_driver_fault_halts_and_reset_waits_for_recovery(server: ServerProc) -> None:
    drive(server, 0.4)
    with Heartbeat(server):
        wait_until(lambda: moving(server), 5, "rover moving")
        server.post("/api/debug/driver", {"fault": "read_error"})
        wait_until(lambda: server.state()["state"] == "fault", 5, "fault state")
    s = server.state()
    assert s["cause"]["trigger"] == "driver_fault"
    assert events(server, "outputs_zero"), "outputs were halted"
    status, body = server.post("/api/reset")
    assert status == 409 and body["error"]["code"] == "cause_persists"
    assert server.state()["state"] == "fault"
    server.post("/api/debug/driver", {"fault": None})
    wait_until(lambda: server.post("/api/reset")[0] == 200, 5, "reset accepted after recovery")
    assert server.state()["state"] == "idle", events(server)
    wait_until(lambda: at_rest(server), 5, "wheels halted")


def test_reset_refused_while_battery_low(server: ServerProc) -> None:
    drive(server, 0.2)
    with Heartbeat(server):
        server.post("/api/debug/driver", {"battery_v": 10.0})
        wait_until(lambda: server.state()["state"] == "estop", 5, "battery e-stop")
        assert server.state()["cause"]["rule"] == "battery_low"
        status, body = server.post("/api/reset")
        assert status == 409 and "battery_low" in body["error"]["message"]
        status, body = server.post("/api/start")
        assert status == 409
        server.post("/api/debug/driver", {"battery_v": None})
        wait_until(lambda: server.post("/api/reset")[0] == 200, 5, "reset once the battery is back")


def test_start_refused_with_failing_prestart_checks(server: ServerProc) -> None:
    server.post("/api/debug/driver", {"battery_v": 10.0})
    wait_until(lambda: server.state()["values"]["battery_v"] < 10.5, 5, "low battery visible")
    status, body = server.post("/api/start")
    assert status == 409 and body["error"]["code"] == "prestart_failed"
    assert "battery_low" in body["error"]["message"]
    assert server.state()["state"] == "idle"


def test_blocked_event_loop_does_not_delay_the_stop(server: ServerProc) -> None:
    """A request handler blocks the asyncio loop for 2 s while the rover moves: the control thread stops it anyway."""
    drive(server, 0.4)
    with Heartbeat(server, 0.05):
        wait_until(lambda: moving(server), 5, "rover moving")
        status, block = server.post("/api/debug/block", {"seconds": 2.0}, timeout_s=30)
    assert status == 200
    link_loss = events(server, "link_loss")
    zero = events(server, "outputs_zero")
    assert link_loss and zero, "the stop happened"
    timeout_s = server.state()["link"]["timeout_s"]
    # both happened while the event loop was still blocked, on time
    assert link_loss[-1]["t"] < block["t_end"] and zero[-1]["t"] < block["t_end"]
    assert link_loss[-1]["values"]["age_s"] >= timeout_s  # how soon after it: bench/bench_core.py's figure


def test_sigterm_halts_then_exits_zero(server: ServerProc) -> None:
    drive(server, 0.3)
    wait_until(lambda: moving(server), 5, "rover moving")
    assert server.stop() == 0
    out = "".join(server.output)
    assert "halting the robot first" in out
    assert out.index("halting the robot first") < out.index("sim driver closed")


def test_controlled_stop_returns_to_idle(server: ServerProc) -> None:
    drive(server, 0.3)
    with Heartbeat(server):
        wait_until(lambda: moving(server), 5, "rover moving")
        assert server.post("/api/stop")[1]["state"] in ("stopping", "idle")
        wait_until(lambda: server.state()["state"] == "idle", 5, "idle after the ramp")
    wait_until(lambda: at_rest(server), 5, "rover at rest")
    assert not events(server, "link_loss")


def test_robot_description_and_drawing(server: ServerProc) -> None:
    status, robot = server.get("/api/robot")
    assert status == 200 and robot["profile"] == "rover"
    names = [c["name"] for c in robot["channels"]]
    assert len(names) == len(set(names)) and "range_front_m" in names and "heading_deg" in names
    status, svg = server.request("GET", "/api/robot.svg")
    assert status == 200 and svg.startswith(b"<svg") and b'class="wheel"' in svg and b"front" in svg
