"""faulhaber-ascii and faulhaber-mcv3 against their emulators on a pty: motion, the stop lane, faults."""

from __future__ import annotations

import math
import threading
import time

import pytest

from drivers.base import DriverState
from drivers.errors import DriverConfigError, DriverLinkError, DriverOpenError, DriverProtocolError, DriverTimeoutError
from drivers.faulhaber import mcv3
from drivers.faulhaber.driver import FaulhaberAsciiDriver, FaulhaberMcV3Driver
from sim.devices.faulhaber_ascii import AsciiLine, DriveConfig, LineConfig
from sim.devices.faulhaber_mcv3 import McV3Bus, McV3BusConfig, McV3DriveConfig, make_frame
from sim.devices.pty import PtyRunner
from tests.conftest import wait_until

WHEELS = {
    "wheel_left": {"node": 1, "max_speed_rad_s": 20.0, "max_accel_rad_s2": 400.0, "gear_ratio": 5.0,
                   "counts_per_rev": 2048},
    "wheel_right": {"node": 2, "max_speed_rad_s": 20.0, "max_accel_rad_s2": 400.0, "gear_ratio": 5.0,
                    "counts_per_rev": 2048, "invert": True},
}
JOINTS = {
    "q1": {"node": 1, "mode": "position", "max_speed_rad_s": 3.0, "max_accel_rad_s2": 30.0, "gear_ratio": 66.0,
           "counts_per_rev": 2048, "min_rad": -2.5, "max_rad": 2.5, "current_limit_a": 1.5, "peak_current_a": 3.0},
    "q2": {"node": 2, "mode": "position", "max_speed_rad_s": 3.0, "max_accel_rad_s2": 30.0, "gear_ratio": 66.0,
           "counts_per_rev": 2048, "min_rad": -2.5, "max_rad": 2.5},
}
PROTOCOLS = {
    "faulhaber-ascii": (FaulhaberAsciiDriver, lambda: AsciiLine(LineConfig([DriveConfig(1), DriveConfig(2)]))),
    "faulhaber-mcv3": (FaulhaberMcV3Driver,
                       lambda: McV3Bus(McV3BusConfig([McV3DriveConfig(1, counts_per_rev=2048),
                                                      McV3DriveConfig(2, counts_per_rev=2048)]))),
}


@pytest.fixture(params=list(PROTOCOLS))
def protocol(request):
    return request.param


@pytest.fixture
def line(protocol):
    dev = PROTOCOLS[protocol][1]()
    with PtyRunner(dev, protocol) as runner:
        runner.dev = dev
        runner.protocol = protocol
        yield runner


def make(runner, axes=None, **over):
    cls = PROTOCOLS[runner.protocol][0]
    table = {"name": cls.name, "port": runner.port, "xonxoff": False, "axes": axes or WHEELS, **over}
    return cls.from_config(table, {})


def read_until(driver, predicate, timeout_s: float = 5.0, message: str = "condition"):
    holder = {}

    def once():
        holder["f"] = driver.read(0.01)
        return predicate(holder["f"])

    wait_until(once, timeout_s=timeout_s, interval_s=0.005, message=message)
    return holder["f"]


def stop_bytes(protocol: str) -> bytes:
    if protocol == "faulhaber-ascii":
        return b"1V0\r1DI\r2V0\r2DI\r"
    return mcv3.encode_sdo_write(1, mcv3.CONTROLWORD, 0, 0x0002) + mcv3.encode_sdo_write(2, mcv3.CONTROLWORD, 0, 2)


def motor(runner, node):
    return runner.dev.drives[node].motor


# ---------------------------------------------------------------- config
def test_ok__config_channels_and_actuators():
    d = FaulhaberAsciiDriver.from_config({"port": "loop://", "axes": JOINTS}, {})
    assert [c.name for c in d.channels()] == ["q1_rad", "q1_rad_s", "q1_a", "q2_rad", "q2_rad_s", "q2_a"]
    assert d.actuators() == {"q1": (-2.5, 2.5), "q2": (-2.5, 2.5)}
    assert d.baudrate == 9600 and d.xonxoff is True  # the manual's defaults
    m = FaulhaberMcV3Driver.from_config({"port": "loop://", "axes": WHEELS}, {})
    assert m.baudrate == 115200 and m.xonxoff is False
    assert m.actuators()["wheel_left"] == (-20.0, 20.0)


@pytest.mark.parametrize(
    "change, key",
    [
        ({"port": 3}, "port"),
        ({"timeouts_idle": 0}, "timeouts_idle"),
        ({"reply_timeout_s": -1}, "reply_timeout_s"),
        ({"speed": 1}, "speed"),
        ({"axes": {"q1": {"node": 1}}}, "axes.q1.max_speed_rad_s"),
        ({"axes": {"q1": {**JOINTS["q1"], "mode": "torque"}}}, "axes.q1.mode"),
        ({"axes": {"q1": {**JOINTS["q1"], "node": 300}}}, "axes.q1.node"),
        ({"axes": {"q1": {**JOINTS["q1"], "min_rad": 1, "max_rad": 0}}}, "axes.q1.max_rad"),
        ({"axes": {"q1": {**JOINTS["q1"], "gear": 2}}}, "axes.q1.gear"),
        ({"axes": {"q1": JOINTS["q1"], "q2": {**JOINTS["q2"], "node": 1}}}, "axes"),
        ({"axes": {}}, "axes"),
    ],
)
def test_fail__bad_config_names_the_key(change, key):
    with pytest.raises(DriverConfigError) as info:
        FaulhaberAsciiDriver.from_config({"port": "loop://", "axes": JOINTS, **change}, {})
    assert info.value.key == key


# ---------------------------------------------------------------- motion
def test_open_configures_the_drives_and_leaves_them_disabled(line):
    d = make(line)
    d.open()
    try:
        assert d.state is DriverState.INACTIVE
        assert not motor(line, 1).enabled and not motor(line, 2).enabled
        if line.protocol == "faulhaber-ascii":
            drive = line.dev.drives[1]
            assert (drive.answer_mode, drive.sp_rpm, drive.ac_rev_s2) == (2, 955, 318)  # 20 rad/s × 5 → 955 rpm
        f = read_until(d, lambda f: len(f.values) == 6, message="first samples")
        assert f.values["wheel_left_rad_s"] == 0.0
    finally:
        d.close()


def test_velocity_streaming_moves_the_wheels_and_halt_stops_them(line):
    d = make(line)
    d.open()
    d.activate()
    try:
        assert motor(line, 1).enabled
        for v in (2.0, 4.0, 6.0, 8.0, 10.0):  # a ramp, as the control loop streams it
            assert d.write({"wheel_left": v, "wheel_right": v}) is True
        f = read_until(d, lambda f: f.values["wheel_left_rad_s"] > 9.9 and f.values["wheel_right_rad_s"] > 9.9,
                       message="both wheels at 10 rad/s")
        assert motor(line, 2).speed_rev_s < 0  # the right drive is mounted inverted
        assert f.values["wheel_left_a"] > 0
        since = len(line.rx_log)
        d.halt()
        line.wait_for(stop_bytes(line.protocol), since=since)
        read_until(d, lambda f: abs(f.values["wheel_left_rad_s"]) < 0.01 and abs(f.values["wheel_right_rad_s"]) < 0.01,
                   message="wheels stopped")
        wait_until(lambda: not motor(line, 1).enabled, message="drive disabled after the stop")
        assert d.write({"wheel_left": 5.0}) is False
    finally:
        d.close()


def test_position_moves_reach_the_targets(line):
    d = make(line, axes=JOINTS)
    d.open()
    d.activate()
    try:
        d.write({"q1": 0.5, "q2": -0.25})
        read_until(d, lambda f: abs(f.values["q1_rad"] - 0.5) < 1e-3 and abs(f.values["q2_rad"] + 0.25) < 1e-3
                   and abs(f.values["q1_rad_s"]) < 1e-3 and abs(f.values["q2_rad_s"]) < 1e-3,
                   timeout_s=10, message="joints at rest at their targets")
        wait_until(lambda: motor(line, 1).counts == round(0.5 / (2 * math.pi) * 66 * 2048) and motor(line, 1).reached,
                   message="q1 settled on the exact increment")
        d.write({"q1": 0.5, "q2": -0.25})  # the same target again sends nothing new
        d.halt()
    finally:
        d.close()


def test_stop_bytes_reach_the_wire_while_a_poll_waits_for_its_answer(line):
    d = make(line, reply_timeout_s=5.0, timeouts_idle=50, timeouts_moving=50)
    d.open()
    d.activate()
    try:
        d.write({"wheel_left": 10.0, "wheel_right": 10.0})
        read_until(d, lambda f: f.values["wheel_left_rad_s"] > 5, message="moving")
        with line.lock:
            line.dev.inject("hold")  # the drive keeps its next answer: a poll now waits up to 5 s
        since = len(line.rx_log)
        wait_until(lambda: len(line.rx_log) > since, message="a request went out and waits")
        d.halt()
        line.wait_for(stop_bytes(line.protocol), since=since)
        assert d.health()["timeouts"] == 0  # the request was still waiting for its answer
        with line.lock:
            line.dev.inject("release", now_s=time.monotonic())
        read_until(d, lambda f: abs(f.values["wheel_left_rad_s"]) < 0.01, message="stopped")
    finally:
        d.close()


# ---------------------------------------------------------------- faults
def test_silent_drive_while_idle_faults_after_timeouts_idle(line):
    # 0.5 s a reply: two timeouts before the drive falls silent would fault it early on a loaded machine
    d = make(line, reply_timeout_s=0.5, timeouts_idle=2)
    d.open()
    try:
        read_until(d, lambda f: len(f.values) == 6)
        line.dev.inject("silent")
        with pytest.raises(DriverTimeoutError, match="limit 2 while idle"):
            read_until(d, lambda f: False, timeout_s=5.0)
    finally:
        d.close()


def test_while_moving_the_timeout_limit_is_higher(line):
    d = make(line, reply_timeout_s=0.5, timeouts_idle=2, timeouts_moving=5)
    d.open()
    d.activate()
    try:
        d.write({"wheel_left": 5.0, "wheel_right": 5.0})
        read_until(d, lambda f: f.values["wheel_left_rad_s"] > 4, message="moving")
        line.dev.inject("silent")
        wait_until(lambda: d.health()["consecutive_timeouts"] >= 3, timeout_s=10, message="3 timeouts")
        d.read(0.01)  # 3 < 5 while moving: not yet a fault
        with pytest.raises(DriverTimeoutError, match="limit 5 while moving"):
            read_until(d, lambda f: False, timeout_s=10.0)
        assert d.state is DriverState.INACTIVE
    finally:
        d.close()


def test_unknown_command_reply_is_a_protocol_error_and_halts():
    dev = AsciiLine(LineConfig([DriveConfig(1), DriveConfig(2)]))
    with PtyRunner(dev, "fa") as runner:
        d = FaulhaberAsciiDriver.from_config({"port": runner.port, "xonxoff": False, "axes": WHEELS}, {})
        d.open()
        d.activate()
        try:
            d.write({"wheel_left": 5.0, "wheel_right": 5.0})
            read_until(d, lambda f: f.values["wheel_left_rad_s"] > 4, message="moving")
            dev.inject("unknown")
            with pytest.raises(DriverProtocolError, match="Unknown command"):
                read_until(d, lambda f: False, timeout_s=5.0)
            assert d.state is DriverState.INACTIVE
            runner.wait_for(b"1V0\r1DI\r")
        finally:
            d.close()


def test_garbage_answer_to_a_query_is_a_protocol_error():
    dev = AsciiLine(LineConfig([DriveConfig(1), DriveConfig(2)]))
    with PtyRunner(dev, "fa") as runner:
        d = FaulhaberAsciiDriver.from_config({"port": runner.port, "xonxoff": False, "axes": WHEELS,
                                              "reply_timeout_s": 5.0}, {})
        d.open()
        try:
            read_until(d, lambda f: len(f.values) == 6)
            with runner.lock:
                dev.inject("hold")
            since = len(runner.rx_log)
            wait_until(lambda: len(runner.rx_log) > since, message="a query waits")
            with runner.lock:
                dev._send(b"\x00\xff\x13\r\ngarbage?!\r\n", time.monotonic())  # noise, then a line that is no number
            with pytest.raises(DriverProtocolError, match="expected a number"):
                read_until(d, lambda f: False, timeout_s=5.0)
            assert d.health()["invalid_frames"] == 1 and d.state is DriverState.INACTIVE
        finally:
            d.close()


def test_mcv3_wrong_crc_is_counted_and_retried_then_a_truncated_frame_resyncs():
    bus = McV3Bus(McV3BusConfig([McV3DriveConfig(1), McV3DriveConfig(2)]))
    with PtyRunner(bus, "mc") as runner:
        d = FaulhaberMcV3Driver.from_config({"port": runner.port, "axes": WHEELS}, {})
        d.open()
        try:
            read_until(d, lambda f: len(f.values) == 6)
            with runner.lock:
                bus.inject("corrupt_crc", count=1)
            wait_until(lambda: d.health()["crc_errors"] == 1 and d.health()["retries"] >= 1,
                       message="a CRC error, retried")
            with runner.lock:
                bus._send(make_frame(1, 1, b"\x41\x60\x00\x27\x02")[:5], time.monotonic())  # a frame cut short
            wait_until(lambda: d.health()["clean_polls"] > 5, message="polling goes on")
            d.read(0.01)
            with runner.lock:
                bus.inject("corrupt_crc", count=10**9)  # every answer damaged: timeouts → fault
            with pytest.raises(DriverTimeoutError):
                read_until(d, lambda f: False, timeout_s=5.0)
        finally:
            d.close()


def test_mcv3_drive_fault_is_reported():
    bus = McV3Bus(McV3BusConfig([McV3DriveConfig(1), McV3DriveConfig(2)]))
    with PtyRunner(bus, "mc") as runner:
        d = FaulhaberMcV3Driver.from_config({"port": runner.port, "axes": WHEELS}, {})
        d.open()
        d.activate()
        try:
            with runner.lock:
                bus.inject("fault")
            with pytest.raises(DriverProtocolError, match="in fault"):
                read_until(d, lambda f: False, timeout_s=5.0)
        finally:
            d.close()


def test_unplug_mid_motion_then_reconnect_disables_the_drives_and_stays_inactive(line):
    d = make(line)
    d.open()
    d.activate()
    try:
        d.write({"wheel_left": 8.0, "wheel_right": 8.0})
        read_until(d, lambda f: f.values["wheel_left_rad_s"] > 7, message="moving")
        line.unplug()
        with pytest.raises(DriverLinkError):
            read_until(d, lambda f: False, timeout_s=5.0)
        assert d.state is DriverState.INACTIVE
        assert motor(line, 1).enabled  # a pulled cable cannot carry the stop: the drive keeps going
        line.replug()
        assert d.reconnect(timeout_s=10.0) >= 1
        assert d.state is DriverState.INACTIVE
        assert not motor(line, 1).enabled  # configure() disables the drives first
        read_until(d, lambda f: abs(f.values["wheel_left_rad_s"]) < 0.01, timeout_s=10, message="coasted to rest")
        assert d.write({"wheel_left": 5.0}) is False
    finally:
        d.close()


def test_fail__open_against_no_drive_is_an_open_error():
    dev = AsciiLine(LineConfig([DriveConfig(5)]))  # the configured nodes 1, 2 are not on this line
    with PtyRunner(dev, "fa") as runner:
        d = FaulhaberAsciiDriver.from_config({"port": runner.port, "xonxoff": False, "axes": WHEELS,
                                              "reply_timeout_s": 0.05}, {})
        with pytest.raises(DriverOpenError, match="configuring the drives"):
            d.open()
        assert d.state is DriverState.CLOSED


def test_halt_from_another_thread_during_streaming(line):
    d = make(line)
    d.open()
    d.activate()
    stop = threading.Event()

    def stream():
        v = 0.0
        while not stop.is_set():
            v = (v + 0.5) % 15
            d.write({"wheel_left": v, "wheel_right": v})
            time.sleep(0.002)

    t = threading.Thread(target=stream)
    try:
        t.start()
        read_until(d, lambda f: f.values["wheel_left_rad_s"] > 1, message="moving")
        d.halt()
        stop.set()
        t.join(5)
        read_until(d, lambda f: math.isclose(f.values["wheel_left_rad_s"], 0.0, abs_tol=0.01), message="stopped")
        assert d.dropped_writes >= 0 and d.state is DriverState.INACTIVE
    finally:
        stop.set()
        d.close()


def test_the_documented_scara_table_runs_on_the_emulated_drives():
    from tests.drivers.test_firmata_driver import doc_table

    t = doc_table("### Example: a FAULHABER SCARA")
    dev = AsciiLine(LineConfig([DriveConfig(1), DriveConfig(2)]))
    with PtyRunner(dev, "fa") as runner:
        d = FaulhaberAsciiDriver.from_config({**t, "port": runner.port, "xonxoff": False}, {})
        d.open()
        d.activate()
        try:
            assert dev.drives[1].lcc_ma == 1000 and dev.drives[2].sp_rpm == round(2.0 / (2 * math.pi) * 60 * 43)
            d.write({"q1": 0.3, "q2": -0.4})
            read_until(d, lambda f: abs(f.values["q1_rad"] - 0.3) < 1e-3 and abs(f.values["q2_rad"] + 0.4) < 1e-3,
                       timeout_s=10, message="joints at their targets")
        finally:
            d.close()


def test_a_drive_rebooting_mid_motion_is_a_fault(line):
    d = make(line, reply_timeout_s=0.05)
    d.open()
    d.activate()
    try:
        d.write({"wheel_left": 8.0, "wheel_right": 8.0})
        read_until(d, lambda f: f.values["wheel_left_rad_s"] > 7, message="moving")
        with line.lock:
            line.dev.inject("reboot", now_s=time.monotonic(), boot_s=0.3)
        with pytest.raises((DriverTimeoutError, DriverProtocolError)):
            read_until(d, lambda f: False, timeout_s=5.0)
        assert d.state is DriverState.INACTIVE
        assert d.reconnect(timeout_s=10.0) >= 1  # and it comes back, disabled
        assert not motor(line, 1).enabled
    finally:
        d.close()
