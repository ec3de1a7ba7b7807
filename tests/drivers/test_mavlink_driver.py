"""The MAVLink driver against the emulated vehicle (``sim/devices/mavlink_vehicle.py``): the driver contract
over a pty, then what only this driver does — arming and its refusals, GUIDED/OFFBOARD, HOLD on halt, the
heartbeat watch, the vehicle's own failsafe parameters, streams, UDP and TCP links.

What the vehicle did is read from the emulator (its mode, arming, the setpoints it received and when),
never from the driver's own account.
"""

from __future__ import annotations

import math
import time

import pytest

from drivers.base import Capability, DriverState
from drivers.errors import DriverConfigError, DriverError, DriverOpenError, DriverProtocolError, DriverStateError, \
    DriverTimeoutError
from drivers.mavlink.codec import MavlinkCodec
from drivers.mavlink.driver import ArmingRefused, MavlinkDriver
from sim.devices.mavlink_vehicle import MavlinkVehicle, VehicleConfig
from sim.devices.net import TcpRunner, UdpRunner
from sim.devices.pty import PtyRunner
from tests.conftest import wait_until
from tests.drivers.test_contract_serial import SerialContract

pytestmark = pytest.mark.timeout(120)

#: generous for a loaded 2-core box: the emulator's heartbeat is 1 Hz
TABLE = {"name": "mavlink", "rangers": {"front": {"orientation": 0, "max_range_m": 8.0}}, "rc_channels": 2,
         "heartbeat_timeout_s": 4.0, "connect_timeout_s": 10.0, "command_timeout_s": 5.0, "rate_hz": 20.0}


def vehicle_runner(kind: str = "pty", **config) -> tuple[MavlinkVehicle, object]:
    vehicle = MavlinkVehicle(VehicleConfig(**config))
    runner = {"pty": lambda: PtyRunner(vehicle, "mavlink"),
              "udp-in": lambda: UdpRunner(vehicle, "mavlink", listen=("127.0.0.1", 0)),
              "tcp": lambda: TcpRunner(vehicle, "mavlink")}[kind]()
    runner.start()
    return vehicle, runner


@pytest.fixture
def vehicle():
    # its GCS failsafe at 10 s, not ArduPilot's 1.5: the vehicle runs as a thread of this process, and on a loaded
    # machine our heartbeat (every 0.5 s) came late enough that it took the vehicle into HOLD in a test about
    # something else (a fresh-clone run); the failsafe's own test has a vehicle with the default
    v, runner = vehicle_runner(params={"FS_TIMEOUT": 10.0})
    v.runner = runner
    yield v
    runner.stop()


def make(vehicle: MavlinkVehicle, **over) -> MavlinkDriver:
    return MavlinkDriver.from_config({**TABLE, "port": vehicle.runner.port, **over}, {})


def on_vehicle(vehicle: MavlinkVehicle, fn):
    with vehicle.runner.lock:
        return fn(vehicle)


# ====================================================================== the contract
class TestMavlinkContract(SerialContract):
    @pytest.fixture
    def driver(self, vehicle) -> MavlinkDriver:
        d = make(vehicle)
        self.vehicle = vehicle
        yield d
        d.close()

    def motion(self, driver, frame) -> float:
        """The body twist the vehicle reports (VFR_HUD's groundspeed lags it: a 20 Hz stream of its own)."""
        return max((abs(frame.values[n]) for n in ("linear_m_s", "angular_rad_s") if n in frame.values), default=0.0)

    def inject_fault(self, driver, kind: str | None) -> None:
        v = self.vehicle
        if kind is None:
            on_vehicle(v, lambda x: x.inject("clear"))
            self.heal(driver)
        elif kind == "read_error":
            before = driver.health()["crc_errors"]
            on_vehicle(v, lambda x: x.inject("crc", count=200))
            wait_until(lambda: driver.health()["crc_errors"] >= before + 20, message="bad frames received")
        elif kind == "timeout":
            on_vehicle(v, lambda x: x.inject("silent"))
            wait_until(lambda: (driver.health()["heartbeat_age_s"] or 0) > 4.0, 20, "the vehicle silent")
        else:
            raise ValueError(kind)

    def test_declares_the_body_twist(self, driver):
        assert driver.has(Capability.BODY_TWIST) and driver.has(Capability.SLOW_ACTIVATE)
        assert set(driver.actuators()) == {"linear_m_s", "angular_rad_s"}


# ====================================================================== lifecycle on the autopilot's terms
def test_open_is_disarmed_telemetry_flowing_activate_arms_in_guided(vehicle):
    d = make(vehicle)
    d.open()
    try:
        assert on_vehicle(vehicle, lambda v: (v.armed, v.mode)) == (False, "MANUAL")
        frame = d.read(0.02)
        assert frame.values["armed"] == 0.0 and frame.values["battery_v"] > 11.0
        assert frame.values["est_x_m"] == pytest.approx(4.0) and frame.values["est_y_m"] == pytest.approx(10.0)
        assert frame.values["heading_deg"] == pytest.approx(90.0, abs=1e-3)  # facing east
        assert frame.values["yaw_rad"] == pytest.approx(0.0, abs=1e-6)
        d.activate()
        assert d.state is DriverState.ACTIVE
        assert on_vehicle(vehicle, lambda v: (v.armed, v.mode)) == (True, "GUIDED")
        assert d.read(0.02).values["guided"] == 1.0
    finally:
        d.close()
    # closing halts: the vehicle is left holding and disarmed (the emulator reads the pty in a thread of its own)
    wait_until(lambda: on_vehicle(vehicle, lambda v: (v.armed, v.mode)) == (False, "HOLD"), 5, "held and disarmed")


def test_speed_and_turn_move_the_vehicle_in_its_own_frame(vehicle):
    d = make(vehicle)
    d.open()
    try:
        d.activate()
        x0 = on_vehicle(vehicle, lambda v: v.sim.x)
        for _ in range(60):
            d.write({"linear_m_s": 0.5, "angular_rad_s": 0.0})
            d.read(0.02)
            time.sleep(0.02)
        assert on_vehicle(vehicle, lambda v: v.sim.x) > x0 + 0.2, "facing east, forward is +x"
        assert d.read(0.02).values["linear_m_s"] == pytest.approx(0.5, abs=0.05)
        # counter-clockwise (REP-103) is a negative NED yaw rate on the wire
        d.write({"linear_m_s": 0.0, "angular_rad_s": 0.5})
        wait_until(lambda: on_vehicle(vehicle, lambda v: v.setpoints[-1][2]) == pytest.approx(-0.5), 5,
                   "the yaw rate on the wire")
        yaw0 = on_vehicle(vehicle, lambda v: v.sim.yaw)
        for _ in range(40):
            d.write({"linear_m_s": 0.0, "angular_rad_s": 0.5})
            time.sleep(0.02)
        assert on_vehicle(vehicle, lambda v: v.sim.yaw) > yaw0 + 0.1, "turned left"
        assert d.read(0.02).values["angular_rad_s"] > 0.2
    finally:
        d.close()


def test_halt_puts_zero_velocity_then_hold_then_disarm_on_the_wire(vehicle):
    d = make(vehicle)
    d.open()
    try:
        d.activate()
        d.write({"linear_m_s": 0.6, "angular_rad_s": 0.0})
        wait_until(lambda: on_vehicle(vehicle, lambda v: v.moving), 5, "moving")
        since = len(vehicle.runner.rx_log)
        d.halt()
        wait_until(lambda: on_vehicle(vehicle, lambda v: not v.armed and v.mode == "HOLD"), 5, "held and disarmed")
        wire = [m for m in MavlinkCodec(1, 1).feed(b"".join(c for _, c in vehicle.runner.rx_log[since:]))
                if m.get_type() in ("SET_POSITION_TARGET_LOCAL_NED", "COMMAND_LONG")]
        first = wire[:3]
        assert first[0].get_type() == "SET_POSITION_TARGET_LOCAL_NED" and (first[0].vx, first[0].yaw_rate) == (0, 0)
        assert (first[1].command, first[1].param2) == (176, 4.0), "MAV_CMD_DO_SET_MODE HOLD"
        assert (first[2].command, first[2].param1) == (400, 0.0), "disarm"
        assert not any(m.get_type() == "SET_POSITION_TARGET_LOCAL_NED" and m.vx for m in wire), \
            "no motion after the halt"
        assert d.write({"linear_m_s": 0.5, "angular_rad_s": 0.0}) is False
        wait_until(lambda: not on_vehicle(vehicle, lambda v: v.moving), 5, "stopped")
    finally:
        d.close()


def test_disarm_on_halt_off_holds_armed(vehicle):
    d = make(vehicle, disarm_on_halt=False)
    d.open()
    try:
        d.activate()
        d.halt()
        wait_until(lambda: on_vehicle(vehicle, lambda v: v.mode == "HOLD"), 5, "held")
        assert on_vehicle(vehicle, lambda v: v.armed)
        d.activate()  # armed already: GUIDED again is enough
        assert on_vehicle(vehicle, lambda v: (v.armed, v.mode)) == (True, "GUIDED")
    finally:
        d.close()


def test_setpoints_come_from_writes_only(vehicle):
    """A stalled control loop is silence on the wire, and silence stops the vehicle (its 3 s guided timeout)."""
    d = make(vehicle)
    d.open()
    try:
        d.activate()
        d.write({"linear_m_s": 0.3, "angular_rad_s": 0.0})
        wait_until(lambda: on_vehicle(vehicle, lambda v: any(sp[1] == pytest.approx(0.3) for sp in v.setpoints)), 5,
                   "the setpoint arrived")
        n = on_vehicle(vehicle, lambda v: len(v.setpoints))
        for _ in range(30):
            d.read(0.02)  # reads (GCS heartbeats) but no writes
            time.sleep(0.02)
        assert on_vehicle(vehicle, lambda v: len(v.setpoints)) == n
    finally:
        d.close()


def test_fail__arming_refused_names_the_autopilots_reason(vehicle):
    on_vehicle(vehicle, lambda v: v.inject("refuse_arm", reason="PreArm: Hardware safety switch"))
    d = make(vehicle)
    d.open()
    try:
        with pytest.raises(ArmingRefused) as err:
            d.activate()
        assert "PreArm: Hardware safety switch" in str(err.value) and err.value.reason == \
            "PreArm: Hardware safety switch"
        assert d.state is DriverState.INACTIVE and not on_vehicle(vehicle, lambda v: v.armed)
        assert any(e[0] == "vehicle_text" and "Hardware safety switch" in e[1] for e in d.take_events())
    finally:
        d.close()


def test_fail__a_vehicle_that_leaves_guided_while_driven_is_a_fault(vehicle):
    d = make(vehicle)
    d.open()
    try:
        d.activate()
        d.read(0.02)
        on_vehicle(vehicle, lambda v: v._set_mode(v.modes["MANUAL"], time.monotonic(), "RC switch"))
        with pytest.raises(DriverStateError, match="left GUIDED .*now MANUAL"):
            wait_until(lambda: d.read(0.02) and False, 5, "the driver sees it")
        assert d.state is DriverState.INACTIVE
        with pytest.raises(DriverStateError):
            d.read(0.02)  # sticky
    finally:
        d.close()


# ====================================================================== the heartbeat watch and reconnect
def test_lost_heartbeat_is_a_timeout_and_reconnect_comes_back_disarmed(vehicle):
    d = make(vehicle)
    d.open()
    try:
        d.activate()
        d.write({"linear_m_s": 0.5, "angular_rad_s": 0.0})
        wait_until(lambda: on_vehicle(vehicle, lambda v: v.moving), 5, "moving")
        on_vehicle(vehicle, lambda v: v.inject("heartbeat_drop"))
        with pytest.raises(DriverTimeoutError, match="no HEARTBEAT"):
            wait_until(lambda: d.read(0.02) and False, 20, "the heartbeat watch")
        # telemetry still flowed: the driver's halt reached the vehicle
        wait_until(lambda: on_vehicle(vehicle, lambda v: v.mode == "HOLD" and not v.armed), 5, "held")
        with pytest.raises(DriverTimeoutError):
            d.read(0.02)
        on_vehicle(vehicle, lambda v: v.inject("clear"))
        assert d.reconnect(timeout_s=15) >= 1
        assert d.state is DriverState.INACTIVE
        frame = d.read(0.02)
        assert frame.values["armed"] == 0.0 and frame.values["guided"] == 0.0
        assert d.write({"linear_m_s": 0.5, "angular_rad_s": 0.0}) is False
    finally:
        d.close()


def test_fail__open_without_a_vehicle_says_so():
    d = MavlinkDriver.from_config({**TABLE, "port": "udpin:127.0.0.1:0", "connect_timeout_s": 0.3}, {})
    with pytest.raises(DriverOpenError, match="no HEARTBEAT from a vehicle"):
        d.open()
    assert not d.is_open


def test_fail__garbage_on_the_link_is_a_protocol_error(vehicle):
    d = make(vehicle)
    d.open()
    try:
        d.read(0.02)
        on_vehicle(vehicle, lambda v: v.inject("crc", count=50))
        with pytest.raises(DriverProtocolError, match="garbage"):
            wait_until(lambda: d.read(0.02) and False, 10, "the bad frames")
    finally:
        d.close()


def test_a_bad_frame_now_and_then_is_no_fault(vehicle):
    """A radio loses a frame now and then: only more bad frames than good ones (8 or more in 1 s) is a fault."""
    d = make(vehicle)
    d.open()
    try:
        before = d.health()["crc_errors"]
        for i in range(100):  # 2 s: one corrupted frame every 0.1 s, some 20 in all among ~300 good ones
            if i % 5 == 0:
                on_vehicle(vehicle, lambda v: v.inject("crc", count=1))
            d.read(0.02)
            time.sleep(0.02)
        assert d.health()["crc_errors"] >= before + 10 and d.health()["fault"] is None
    finally:
        d.close()


def test_fail__a_missing_stream_stops_open_naming_it(vehicle):
    d = make(vehicle, rangers={"rear": {"orientation": 4}}, connect_timeout_s=3.0)  # the emulator has no rear sonar
    with pytest.raises(DriverOpenError, match="range_rear_m come from \\(DISTANCE_SENSOR\\)"):
        d.open()


# ====================================================================== the vehicle's own failsafe
def test_failsafe_parameters_are_read_and_a_vehicle_without_one_is_warned_about():
    vehicle, runner = vehicle_runner(params={"FS_GCS_ENABLE": 0.0})
    try:
        d = MavlinkDriver.from_config({**TABLE, "port": runner.port}, {})
        d.open()
        try:
            events = d.take_events()
            warn = [e for e in events if e[0] == "vehicle_failsafe"]
            assert warn and warn[0][2] == "error" and "keep driving" in warn[0][1] and "FS_GCS_ENABLE=0" in warn[0][1]
            assert d.health()["failsafe_enabled"] is False
        finally:
            d.close()
        strict = MavlinkDriver.from_config({**TABLE, "port": runner.port, "failsafe": {"require": True}}, {})
        with pytest.raises(DriverOpenError, match="failsafe is off"):
            strict.open()
        fixing = MavlinkDriver.from_config({**TABLE, "port": runner.port,
                                            "failsafe": {"set": True, "require": True, "timeout_s": 1.0}}, {})
        fixing.open()
        try:
            assert fixing.health()["failsafe_enabled"] is True
            with runner.lock:
                assert (vehicle.params["FS_GCS_ENABLE"], vehicle.params["FS_ACTION"], vehicle.params["FS_TIMEOUT"]) == \
                    (1.0, 2.0, 1.0)
        finally:
            fixing.close()
    finally:
        runner.stop()


def test_without_our_heartbeat_the_vehicle_holds_by_itself():
    """The second layer: a driver that stops reading (the runtime dead) is a GCS gone to the autopilot."""
    vehicle, runner = vehicle_runner()  # ArduPilot's own FS_TIMEOUT, 1.5 s
    vehicle.runner = runner
    try:
        _holds_by_itself(vehicle)
    finally:
        runner.stop()


def _holds_by_itself(vehicle: MavlinkVehicle) -> None:
    d = make(vehicle)
    d.open()
    d.activate()
    d.write({"linear_m_s": 0.5, "angular_rad_s": 0.0})
    wait_until(lambda: on_vehicle(vehicle, lambda v: v.moving), 5, "moving")
    # no more reads or writes from here: only the vehicle's own clock runs
    wait_until(lambda: on_vehicle(vehicle, lambda v: v.mode == "HOLD"), 10, "the vehicle's GCS failsafe")
    assert on_vehicle(vehicle, lambda v: [c for _, c in v.failsafes]) == ["gcs"]
    wait_until(lambda: not on_vehicle(vehicle, lambda v: v.moving), 5, "stopped")
    d.close()


# ====================================================================== streams and acquisition
def test_acquisition_sets_the_message_intervals(vehicle):
    d = make(vehicle)
    d.open()
    try:
        assert on_vehicle(vehicle, lambda v: v.intervals["ATTITUDE"]) == pytest.approx(1 / 20)
        d.set_acquisition(5.0, ["battery_v", "armed"])
        wait_until(lambda: "ATTITUDE" not in on_vehicle(vehicle, lambda v: v.intervals), 5, "ATTITUDE off")
        assert on_vehicle(vehicle, lambda v: v.intervals["SYS_STATUS"]) == pytest.approx(1 / 5)
        assert set(d.read(0.02).values) == {"battery_v", "armed"}
        wait_until(lambda: d.rates_hz().get("SYS_STATUS", 0) > 2, 10, "SYS_STATUS streaming")
    finally:
        d.close()


# ====================================================================== other links and autopilots
@pytest.mark.parametrize("kind", ["udp-in", "tcp"])
def test_network_links_drive_and_halt(kind):
    vehicle, runner = vehicle_runner(kind)
    try:
        d = MavlinkDriver.from_config({**TABLE, "port": runner.port}, {})
        d.open()
        try:
            d.activate()
            for _ in range(30):
                d.write({"linear_m_s": 0.5, "angular_rad_s": 0.0})
                d.read(0.02)
                time.sleep(0.02)
            wait_until(lambda: vehicle.moving, 5, "moving")
            d.halt()
            wait_until(lambda: vehicle.mode == "HOLD" and not vehicle.armed, 5, "held")
        finally:
            d.close()
    finally:
        runner.stop()


def test_tcp_peer_gone_is_a_lost_link_and_reconnects():
    vehicle, runner = vehicle_runner("tcp")
    try:
        d = MavlinkDriver.from_config({**TABLE, "port": runner.port}, {})
        d.open()
        try:
            runner.unplug()
            with pytest.raises(DriverError, match="closed the connection|lost"):
                wait_until(lambda: d.read(0.02) and False, 10, "the lost link")
            assert d.reconnect(timeout_s=15) >= 1 and d.state is DriverState.INACTIVE
            assert "battery_v" in d.read(0.02).values
        finally:
            d.close()
    finally:
        runner.stop()


def test_px4_streams_setpoints_before_offboard_and_holds_in_auto_loiter():
    vehicle, runner = vehicle_runner(autopilot="px4")
    try:
        d = MavlinkDriver.from_config({**TABLE, "port": runner.port}, {})
        d.open()
        try:
            assert d.flavour.name == "px4"
            d.activate()
            with runner.lock:
                assert (vehicle.armed, vehicle.mode) == (True, "OFFBOARD")
                first_offboard = next(t for t, mode, _ in vehicle.mode_log if mode == "OFFBOARD")
                assert vehicle.setpoints and vehicle.setpoints[0][0] < first_offboard
            d.halt()
            wait_until(lambda: vehicle.mode == "HOLD" and not vehicle.armed, 5, "PX4 Hold")
            assert "ESTIMATOR_STATUS" in vehicle.intervals
        finally:
            d.close()
    finally:
        runner.stop()


# ====================================================================== config
@pytest.mark.parametrize("table, key", [
    ({"port": ""}, "port"), ({"system_id": 0}, "system_id"), ({"bogus": 1}, "bogus"),
    ({"setpoint_rate_hz": 5}, "setpoint_rate_hz"), ({"autopilot": "inav"}, "autopilot"),
    ({"rangers": {"front": {"orientation": "ahead"}}}, "rangers.front.orientation"),
    ({"rangers": {"Front": {}}}, "rangers.Front"), ({"failsafe": {"timeout_s": 0.1}}, "failsafe.timeout_s"),
    ({"max_linear_m_s": math.nan}, "max_linear_m_s"), ({"map_size_m": [20.0]}, "map_size_m"),
])
def test_fail__config_names_the_key(table, key):
    with pytest.raises(DriverConfigError) as err:
        MavlinkDriver.from_config({"port": "udpin:0.0.0.0:14550", **table}, {})
    assert err.value.key == key
