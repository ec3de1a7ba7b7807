"""The emulated MAVLink vehicle as a deterministic device: bytes in, time passed in, bytes out (no runner, no
clock). Its behaviours the driver and the server tests rely on, each on its own: streams on request, modes,
arming and its refusal, GUIDED's setpoint timeout, its GCS failsafe, the faults it injects."""

from __future__ import annotations

import math

import pytest

from drivers.mavlink import codec as mc
from drivers.serial.codec import Invalid
from sim.devices.mavlink_vehicle import GUIDED_TIMEOUT_S, MavlinkVehicle, VehicleConfig

mav = mc.mavlink


class Gcs:
    """A ground station talking to the vehicle with a clock of its own (``now``, advanced by hand)."""

    def __init__(self, vehicle: MavlinkVehicle) -> None:
        self.v = vehicle
        self.c = mc.MavlinkCodec(255, 190)
        self.now = 100.0
        self.rx: list = []

    def send(self, msg) -> None:
        self.v.receive(self.c.encode(msg), self.now)

    def heartbeat(self) -> None:
        self.send(mc.gcs_heartbeat(self.c))

    def command(self, command: int, *params: float) -> None:
        self.send(mc.command_long(self.c, 1, 1, command, *params))

    def run(self, seconds: float, step_s: float = 0.01, heartbeat: bool = False, setpoint=None) -> list:
        """Advance the vehicle ``seconds`` in steps; what it sent meanwhile (decoded)."""
        out = []
        t_end = self.now + seconds
        next_hb = self.now
        while self.now < t_end - 1e-9:
            self.now = round(self.now + step_s, 9)
            if heartbeat and self.now >= next_hb:
                self.heartbeat()
                next_hb += 0.5
            if setpoint is not None:
                self.send(mc.velocity_setpoint(self.c, 1, 1, *setpoint))
            out += self.c.feed(self.v.advance(self.now))
        self.rx += out
        return out

    def types(self, msgs) -> list[str]:
        return [m.get_type() if not isinstance(m, Invalid) else "invalid" for m in msgs]

    def arm_guided(self) -> None:
        self.command(mav.MAV_CMD_DO_SET_MODE, 1, 15)
        self.command(mav.MAV_CMD_COMPONENT_ARM_DISARM, 1)
        self.run(0.05, heartbeat=True)
        assert self.v.armed and self.v.mode == "GUIDED"


@pytest.fixture
def gcs() -> Gcs:
    g = Gcs(MavlinkVehicle(VehicleConfig(params={"FS_TIMEOUT": 1.0})))
    g.run(0.01)
    return g


def test_only_heartbeats_until_a_stream_is_asked_for(gcs) -> None:
    out = gcs.run(2.0)
    assert set(gcs.types(out)) == {"HEARTBEAT"} and len(out) == 2  # 1 Hz
    hb = out[0]
    assert (hb.type, hb.autopilot, hb.custom_mode) == (mav.MAV_TYPE_GROUND_ROVER, mav.MAV_AUTOPILOT_ARDUPILOTMEGA, 0)


def test_set_message_interval_streams_at_that_rate_and_minus_one_stops_it(gcs) -> None:
    gcs.command(mav.MAV_CMD_SET_MESSAGE_INTERVAL, mav.MAVLINK_MSG_ID_ATTITUDE, 50_000)  # 20 Hz
    out = gcs.run(1.0)
    acks = [m for m in out if m.get_type() == "COMMAND_ACK"]
    assert acks[0].command == mav.MAV_CMD_SET_MESSAGE_INTERVAL and acks[0].result == mav.MAV_RESULT_ACCEPTED
    assert gcs.types(out).count("ATTITUDE") == pytest.approx(20, abs=1)
    gcs.command(mav.MAV_CMD_SET_MESSAGE_INTERVAL, mav.MAVLINK_MSG_ID_ATTITUDE, -1)
    assert "ATTITUDE" not in gcs.types(gcs.run(1.0))


def test_attitude_and_position_are_in_mavlinks_frames(gcs) -> None:
    v = MavlinkVehicle(VehicleConfig(start_pose=(3.0, 7.0, math.radians(30.0))))
    g = Gcs(v)
    g.run(0.01)
    for msg in ("ATTITUDE", "LOCAL_POSITION_NED"):
        g.command(mav.MAV_CMD_REQUEST_MESSAGE, getattr(mav, f"MAVLINK_MSG_ID_{msg}"))
    out = {m.get_type(): m for m in g.run(0.05)}
    assert out["LOCAL_POSITION_NED"].x == pytest.approx(7.0) and out["LOCAL_POSITION_NED"].y == pytest.approx(3.0)
    assert out["ATTITUDE"].yaw == pytest.approx(math.radians(60.0), abs=1e-6)  # clockwise from north


def test_arming_refused_says_why_before_its_ack(gcs) -> None:
    gcs.v.inject("refuse_arm", reason="PreArm: Hardware safety switch")
    gcs.command(mav.MAV_CMD_COMPONENT_ARM_DISARM, 1)
    out = [m for m in gcs.run(0.05) if m.get_type() in ("STATUSTEXT", "COMMAND_ACK")]
    assert [m.get_type() for m in out] == ["STATUSTEXT", "COMMAND_ACK"]
    assert out[0].severity == mav.MAV_SEVERITY_CRITICAL and mc.status_text(out[0]) == "PreArm: Hardware safety switch"
    assert out[1].result == mav.MAV_RESULT_FAILED and not gcs.v.armed


def test_a_low_battery_refuses_to_arm_by_its_own_check() -> None:
    g = Gcs(MavlinkVehicle(VehicleConfig(params={"ARMING_VOLT_MIN": 13.0})))
    g.run(0.01)
    g.command(mav.MAV_CMD_COMPONENT_ARM_DISARM, 1)
    texts = [mc.status_text(m) for m in g.run(0.05) if m.get_type() == "STATUSTEXT"]
    assert texts and texts[0].startswith("PreArm: Battery below minimum arming voltage") and not g.v.armed


def test_guided_velocity_drives_and_times_out_after_3_s(gcs) -> None:
    gcs.arm_guided()
    gcs.run(1.0, heartbeat=True, setpoint=(0.5, 0.0))
    x = gcs.v.sim.x
    assert gcs.v.sim.linear_m_s == pytest.approx(0.5, abs=0.01)
    gcs.run(GUIDED_TIMEOUT_S + 1.0, heartbeat=True)  # GCS alive, no setpoints
    assert gcs.v.sim.linear_m_s == pytest.approx(0.0, abs=1e-3) and gcs.v.sim.x > x + 1.0
    assert any("target not received last 3secs" in t for _, _, t in gcs.v.texts)
    assert gcs.v.mode == "GUIDED" and not gcs.v.failsafes, "the setpoint timeout stops it; it is no failsafe"


def test_fail__accelerations_not_ignored_are_refused_as_ardupilot_does(gcs) -> None:
    gcs.arm_guided()
    msg = mc.velocity_setpoint(gcs.c, 1, 1, 0.5, 0.0)
    msg.type_mask = mc.VELOCITY_YAW_RATE_MASK & ~0x1C0  # accelerations used (bits 6-8 clear)
    gcs.send(msg)
    gcs.run(0.5, heartbeat=True)
    assert gcs.v.target is None and not gcs.v.moving


def test_gcs_failsafe_holds_an_armed_vehicle_fs_timeout_after_the_last_heartbeat(gcs) -> None:
    gcs.arm_guided()
    gcs.run(0.5, heartbeat=True, setpoint=(0.5, 0.0))
    last_hb = gcs.now - 0.01
    gcs.run(2.0, setpoint=(0.5, 0.0))  # setpoints still come, heartbeats do not
    (t, cause), = gcs.v.failsafes
    assert cause == "gcs" and t - gcs.v.last_gcs_t == pytest.approx(1.0, abs=0.02) and gcs.v.last_gcs_t >= last_hb - 0.5
    assert gcs.v.mode == "HOLD" and gcs.v.armed and not gcs.v.moving


def test_no_failsafe_when_disarmed_or_off() -> None:
    off = Gcs(MavlinkVehicle(VehicleConfig(params={"FS_GCS_ENABLE": 0.0})))
    off.run(0.01)
    off.arm_guided()
    off.run(3.0)
    assert not off.v.failsafes and off.v.mode == "GUIDED"
    disarmed = Gcs(MavlinkVehicle(VehicleConfig()))
    disarmed.heartbeat()
    disarmed.run(3.0)
    assert not disarmed.v.failsafes


def test_px4_enters_offboard_only_with_setpoints_streaming_and_leaves_it_without() -> None:
    g = Gcs(MavlinkVehicle(VehicleConfig(autopilot="px4")))
    g.run(0.01)
    g.command(mav.MAV_CMD_DO_SET_MODE, 1, 6, 0)
    acks = [m for m in g.run(0.02) if m.get_type() == "COMMAND_ACK"]
    assert acks[0].result == mav.MAV_RESULT_DENIED and g.v.mode == "MANUAL"
    g.run(0.3, heartbeat=True, setpoint=(0.0, 0.0))
    g.command(mav.MAV_CMD_DO_SET_MODE, 1, 6, 0)
    g.command(mav.MAV_CMD_COMPONENT_ARM_DISARM, 1)
    g.run(0.3, heartbeat=True, setpoint=(0.3, 0.0))
    assert g.v.mode == "OFFBOARD" and g.v.armed and g.v.moving
    g.run(1.5, heartbeat=True)  # COM_OF_LOSS_T = 1 s
    assert g.v.mode == "HOLD" and [c for _, c in g.v.failsafes] == ["offboard"]


@pytest.mark.parametrize("fault, kw, check", [
    ("heartbeat_drop", {}, lambda types: "HEARTBEAT" not in types and "ATTITUDE" in types),
    ("silent", {}, lambda types: types == []),
    ("crc", {"count": 5}, lambda types: types.count("invalid") == 5 and "ATTITUDE" in types),
    ("garbage", {"count": 500}, lambda types: "invalid" in types and "ATTITUDE" in types),
])
def test_injected_faults(gcs, fault, kw, check) -> None:
    gcs.command(mav.MAV_CMD_SET_MESSAGE_INTERVAL, mav.MAVLINK_MSG_ID_ATTITUDE, 50_000)
    gcs.run(0.1)
    gcs.v.inject(fault, **kw)
    assert check(gcs.types(gcs.run(2.0)))
    gcs.v.inject("clear")
    assert set(gcs.types(gcs.run(1.1))) == {"HEARTBEAT", "ATTITUDE"}


def test_lag_holds_every_frame(gcs) -> None:
    gcs.v.inject("lag", lag_s=0.5)
    gcs.command(mav.MAV_CMD_REQUEST_MESSAGE, mav.MAVLINK_MSG_ID_SYS_STATUS)
    assert "SYS_STATUS" not in gcs.types(gcs.run(0.4))
    assert "SYS_STATUS" in gcs.types(gcs.run(0.2))


def test_parameters_read_and_set_and_echoed(gcs) -> None:
    gcs.send(mc.param_read(gcs.c, 1, 1, "FS_TIMEOUT"))
    gcs.send(mc.param_set(gcs.c, 1, 1, "FS_TIMEOUT", 2.5))
    values = [(mc.param_name(m), m.param_value) for m in gcs.run(0.05) if m.get_type() == "PARAM_VALUE"]
    assert values == [("FS_TIMEOUT", 1.0), ("FS_TIMEOUT", 2.5)] and gcs.v.params["FS_TIMEOUT"] == 2.5


def test_the_same_inputs_give_the_same_bytes() -> None:
    def run() -> bytes:
        v = MavlinkVehicle(VehicleConfig(seed=4))
        g = Gcs(v)
        g.command(mav.MAV_CMD_SET_MESSAGE_INTERVAL, mav.MAVLINK_MSG_ID_DISTANCE_SENSOR, 20_000)
        out = bytearray()
        for i in range(200):
            g.now = 100.0 + i * 0.01
            out += v.advance(g.now)
        return bytes(out)

    assert run() == run()
