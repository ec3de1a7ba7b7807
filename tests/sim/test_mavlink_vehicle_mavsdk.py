"""The MAVLink emulator cross-checked by an independent implementation: MAVSDK (issue 24).

MAVSDK-Python 4.x carries the MAVSDK C++ core in-process (``mavsdk/lib/libcmavsdk.so``, driven through
ctypes): its own MAVLink parser, its own system discovery, its own telemetry and action plugins. If it finds
the emulated vehicle, reads its position, attitude and battery as the emulator's physics has them, and arms
it (and hears a refusal), the emulator speaks MAVLink as an autopilot does, not only as our driver expects —
as pyFirmata2 checks the Firmata emulator (tests/sim/test_devices_pyfirmata.py).

MAVSDK listens (``udpin://``) and the vehicle sends to it, as ArduPilot SITL does to a ground station.
"""

from __future__ import annotations

import math
import socket
import time

import pytest

mavsdk = pytest.importorskip("mavsdk", reason="MAVSDK (test extra) not installed")

from mavsdk import ComponentType, Configuration, Mavsdk  # noqa: E402
from mavsdk.plugins.action import Action  # noqa: E402
from mavsdk.plugins.telemetry import Telemetry  # noqa: E402

from sim.devices.mavlink_vehicle import MavlinkVehicle, VehicleConfig  # noqa: E402
from sim.devices.net import UdpRunner  # noqa: E402
from tests.conftest import wait_until  # noqa: E402

pytestmark = pytest.mark.timeout(120)


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def linked():
    """(vehicle, its runner, MAVSDK's system): MAVSDK has discovered the emulated autopilot."""
    port = free_udp_port()
    vehicle = MavlinkVehicle(VehicleConfig(start_pose=(6.0, 8.0, math.radians(30.0))))
    runner = UdpRunner(vehicle, "mavlink", send_to=("127.0.0.1", port))
    runner.start()
    sdk = Mavsdk(Configuration.create_with_component_type(ComponentType.GROUND_STATION))
    try:
        assert int(sdk.add_any_connection(f"udpin://127.0.0.1:{port}")) == 0  # ConnectionResult.SUCCESS
        system = sdk.first_autopilot(20.0)
        assert system is not None, "MAVSDK did not discover the emulated autopilot"
        yield vehicle, runner, system
    finally:
        sdk.destroy()
        runner.stop()


def test_mavsdk_discovers_it_as_an_ardupilot_rover(linked) -> None:
    vehicle, runner, system = linked
    assert system.has_autopilot() and system.get_system_id() == 1
    assert system.autopilot_type() is mavsdk.Autopilot.ARDUPILOT


def test_mavsdk_reads_position_attitude_and_battery_as_the_physics_has_them(linked) -> None:
    vehicle, runner, system = linked
    tel = Telemetry(system)
    for set_rate in (tel.set_rate_position, tel.set_rate_attitude_euler, tel.set_rate_battery):
        assert int(set_rate(10.0)) == 1  # Telemetry.Result.SUCCESS: MAV_CMD_SET_MESSAGE_INTERVAL accepted
    wait_until(lambda: math.isfinite(tel.position().latitude_deg) and math.isfinite(tel.battery().voltage_v), 10,
               "MAVSDK's first position and battery")
    with runner.lock:
        lat_e7, lon_e7 = vehicle._latlon()
        battery_v = vehicle.sim.battery_v
    pos = tel.position()
    assert pos.latitude_deg == pytest.approx(lat_e7 * 1e-7, abs=1e-6)
    assert pos.longitude_deg == pytest.approx(lon_e7 * 1e-7, abs=1e-6)
    # 8 m north and 6 m east of home, by MAVSDK's own arithmetic
    assert (pos.latitude_deg - 47.397742) * 111_320 == pytest.approx(8.0, abs=0.05)
    wait_until(lambda: math.isfinite(tel.attitude_euler().yaw_deg), 10, "MAVSDK's attitude")
    att = tel.attitude_euler()
    # ENU yaw 30° (north of east) is a compass heading of 60°; level ground: no roll, no pitch
    assert att.yaw_deg == pytest.approx(60.0, abs=0.1)
    assert att.roll_deg == pytest.approx(0.0, abs=0.1) and att.pitch_deg == pytest.approx(0.0, abs=0.1)
    assert tel.battery().voltage_v == pytest.approx(battery_v, abs=0.05)


def test_mavsdk_arms_it_and_hears_a_refusal(linked) -> None:
    vehicle, runner, system = linked
    tel = Telemetry(system)
    action = Action(system)
    action.arm()  # raises ActionError unless COMMAND_ACK said ACCEPTED
    with runner.lock:
        assert vehicle.armed
    wait_until(lambda: tel.armed(), 10, "MAVSDK sees it armed (HEARTBEAT)")
    action.disarm()
    wait_until(lambda: not tel.armed(), 10, "disarmed")
    with runner.lock:
        vehicle.inject("refuse_arm", reason="PreArm: Battery below minimum arming voltage")
    with pytest.raises(Exception) as err:
        action.arm()
    assert "COMMAND_DENIED" in str(err.value).upper() or "FAILED" in str(err.value).upper(), err.value
    time.sleep(0.2)
    with runner.lock:
        assert not vehicle.armed
        assert any("Battery below minimum" in text for _, _, text in vehicle.texts)
