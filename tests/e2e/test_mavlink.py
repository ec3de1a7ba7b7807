"""The dashboard in real Chromium driving the emulated MAVLink vehicle (issue 24): ``python -m server`` with
``config/rover-mavlink.toml``, its runtime talking MAVLink 2 over a pty to ``sim/devices/mavlink_vehicle.py``
(an ArduPilot rover) running in this test process. Local mode and logged in as an operator who takes the lease
with the dashboard's button (conftest.py).

What the vehicle did — armed, its mode, its position, every velocity setpoint it received — is read from the
emulator, never from the server's own account. Every wait has a deadline.
"""

from __future__ import annotations

import time

import pytest

from sim.devices.mavlink_vehicle import MavlinkVehicle, VehicleConfig
from sim.devices.pty import PtyRunner

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

CONFIG = "config/rover-mavlink.toml"


@pytest.fixture
def vehicle():
    vehicle = MavlinkVehicle(VehicleConfig(params={"FS_TIMEOUT": 1.5}))
    runner = PtyRunner(vehicle, "mavlink")
    runner.vehicle = vehicle
    runner.start()
    yield runner
    runner.stop()


def seen(runner: PtyRunner, fn):
    with runner.lock:
        return fn(runner.vehicle)


def served(dashboard_server, runner: PtyRunner):
    # its own server (the pty is this test's); a loaded VM (load 15-20 here): the profile's link timeout (a
    # Chromium's heartbeats), staleness and stall limits would now and then stop a healthy run, and this test is
    # about the stops the operator makes (link loss over MAVLink: tests/server/test_hardware_mavlink.py)
    return dashboard_server({"driver": {"port": runner.port, "heartbeat_timeout_s": 5.0},
                             "safety": {"sensor_stale_s": 2.0, "command_timeout_s": 5.0},
                             "loop": {"max_stall_s": 2.0}},
                            config=CONFIG, fresh=True)


def test_the_dashboard_drives_the_vehicle_and_its_estop_holds_it(dashboard_server, open_dashboard, vehicle,
                                                                  wait_for) -> None:
    srv = served(dashboard_server, vehicle)
    dash = open_dashboard(srv)
    page = dash.page
    # the rover's panels for a twist-driven vehicle: the joystick; the autopilot's own values on gauges
    assert page.locator("#joystick").is_visible()
    page.wait_for_selector('[data-channel="armed"]', timeout=20000)
    assert not seen(vehicle, lambda v: v.armed)

    dash.click_start()  # the badge says running once the runtime started: armed and GUIDED on the vehicle
    wait_for(lambda: seen(vehicle, lambda v: v.armed and v.mode == "GUIDED"), 20, "armed in GUIDED")
    x0 = seen(vehicle, lambda v: v.sim.x)
    dash.press_joystick(0.0, 0.8)
    wait_for(lambda: seen(vehicle, lambda v: v.sim.x) > x0 + 0.3, 20, "the vehicle driven east by the joystick")
    assert srv.state()["setpoint"]["source"] == "websocket"
    # the page shows the autopilot's speed (VFR_HUD), not a number of its own
    page.wait_for_function(
        "() => parseFloat(document.querySelector('.gauge[data-channel=linear_m_s] .v').textContent) > 0.05",
        timeout=20000)
    dash.screenshot("mavlink-driving.png")

    dash.release_mouse()  # released: zero velocity on the wire, the vehicle at rest, still armed and running
    wait_for(lambda: not seen(vehicle, lambda v: v.moving), 20, "the vehicle at rest after the release")
    last = seen(vehicle, lambda v: v.setpoints[-1])
    assert last[1] == 0.0 and last[2] == 0.0, last
    assert srv.state()["state"] == "running" and seen(vehicle, lambda v: v.armed)

    page.locator("#joystick").focus()  # now the keyboard drives, and the E-STOP button is clicked while it does
    page.keyboard.down("KeyW")
    wait_for(lambda: seen(vehicle, lambda v: v.moving), 20, "moving again, W held")
    t0 = time.monotonic()
    page.click("#estop")
    dash.wait_badge("estop")
    wait_for(lambda: seen(vehicle, lambda v: v.zero_setpoints_since(t0)), 10, "a zero setpoint after the E-STOP")
    wait_for(lambda: seen(vehicle, lambda v: v.mode == "HOLD" and not v.armed and not v.moving), 20,
             "HOLD, disarmed, stopped")
    first_zero = seen(vehicle, lambda v: v.zero_setpoints_since(t0)[0])
    moved = seen(vehicle, lambda v: [sp for sp in v.setpoints if sp[0] > first_zero and (sp[1] or sp[2])])
    assert not moved, "nothing moved it after the zero, though W is still held"
    assert srv.state()["cause"]["trigger"] == "operator_estop"
    page.keyboard.up("KeyW")
    assert not dash.console_errors(), dash.console_errors()
