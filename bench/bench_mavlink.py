"""The MAVLink driver against the emulated vehicle, and pymavlink's own ``mavutil`` sending the same messages as
the peer, in the same run, on the same link: command → bytes on the wire, halt → zero velocity on the wire,
telemetry rates achieved vs requested; then the e-stop through the real server.

Run: ``.venv/bin/python bench/bench_mavlink.py [--quick]``. Figures, never assertions.

* **Command to wire**: from ``driver.write()`` returning (active, a new forward speed each time, 40 ms apart so
  the driver's 50 Hz rate limit never holds one back) to that SET_POSITION_TARGET_LOCAL_NED arriving at the
  emulator (the runner's clock, this host's CLOCK_MONOTONIC). The peer: ``mavutil.mavlink_connection(...)``'s
  ``mav.set_position_target_local_ned_send(...)`` with the same fields, from the calling thread.
* **Halt to zero velocity**: from ``driver.halt()`` (it returns at once: the stop lane) to the zero setpoint at
  the emulator, while moving; the peer sends the same zero setpoint, then DO_SET_MODE HOLD and disarm, as
  ``halt()`` does. The HOLD that follows: its COMMAND_LONG's arrival.
* **Telemetry rates**: MAV_CMD_SET_MESSAGE_INTERVAL for ATTITUDE, LOCAL_POSITION_NED, SYS_STATUS and
  DISTANCE_SENSOR at each rate, then messages per second counted over ``MEASURE_S`` (the driver's
  ``rates_hz()``; the peer's own count of ``recv_match``).
* **Through the server** (``config/rover-mavlink.toml`` on a pty): HTTP ``POST /api/estop`` sent → the first zero
  setpoint at the emulator, and → the HOLD command; the loop runs at 50 Hz (a 20 ms tick).

Links: a pty (a serial radio or USB without the wire time: add a 65-byte frame's 11 ms at 57600 baud) and
UDP on loopback. Both ends are processes of this host; everything shares the two cores with the emulator.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.common import summary_ms  # noqa: E402
from drivers.mavlink.driver import MavlinkDriver  # noqa: E402
from sim.devices.mavlink_vehicle import MavlinkVehicle, VehicleConfig  # noqa: E402
from sim.devices.net import UdpRunner  # noqa: E402
from sim.devices.pty import PtyRunner  # noqa: E402

os.environ.setdefault("MAVLINK20", "1")  # mavutil: MAVLink 2, as the driver
from pymavlink import mavutil  # noqa: E402

QUICK = "--quick" in sys.argv
N = 60 if QUICK else 300
MEASURE_S = 1.5 if QUICK else 4.0
STREAMS = ("ATTITUDE", "LOCAL_POSITION_NED", "SYS_STATUS", "DISTANCE_SENSOR")
TABLE = {"rangers": {"front": {}}, "rate_hz": 10.0, "heartbeat_timeout_s": 5.0, "command_timeout_s": 5.0}
HOLD = 4


def make_link(kind: str):
    vehicle = MavlinkVehicle(VehicleConfig(world={"size_m": [400.0, 400.0]}, start_pose=(5.0, 200.0, 0.0)))
    runner = (PtyRunner(vehicle, "mavlink") if kind == "pty" else
              UdpRunner(vehicle, "mavlink", listen=("127.0.0.1", 0)))
    runner.start()
    return vehicle, runner


def arrival_of(runner, vehicle, pred, since: int, timeout_s: float = 5.0) -> float:
    """The arrival time of the first setpoint after index ``since`` that ``pred(vx, yaw_rate)`` accepts."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with runner.lock:
            for t, vx, yr, _, _ in vehicle.setpoints[since:]:
                if pred(vx, yr):
                    return t
        time.sleep(0.0002)
    raise TimeoutError("setpoint not received")


def command_arrival(runner, vehicle, since_t: float, command: int, timeout_s: float = 5.0) -> float:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with runner.lock:
            for t, cmd, _ in vehicle.commands:
                if t >= since_t and cmd == command:
                    return t
        time.sleep(0.0002)
    raise TimeoutError("command not received")


# ---------------------------------------------------------------- the driver
def ours(kind: str) -> dict[str, list[float]]:
    vehicle, runner = make_link(kind)
    out: dict[str, list[float]] = {"write": [], "halt_zero": [], "halt_hold": []}
    d = MavlinkDriver.from_config({**TABLE, "port": runner.port}, {})
    try:
        d.open()
        d.activate()
        for i in range(N):
            v = 0.2 + (i % 50) * 0.01
            with runner.lock:
                since = len(vehicle.setpoints)
            d.write({"linear_m_s": v, "angular_rad_s": 0.0})
            t0 = time.monotonic()
            out["write"].append(arrival_of(runner, vehicle, lambda vx, yr, v=v: abs(vx - v) < 1e-6, since) - t0)
            d.read(0.02)
            time.sleep(0.04)
        for _ in range(N // 10):
            d.activate()
            d.write({"linear_m_s": 0.5, "angular_rad_s": 0.0})
            time.sleep(0.05)
            with runner.lock:
                since = len(vehicle.setpoints)
            t0 = time.monotonic()
            d.halt()
            out["halt_zero"].append(arrival_of(runner, vehicle, lambda vx, yr: vx == 0 and yr == 0, since) - t0)
            out["halt_hold"].append(command_arrival(runner, vehicle, t0, 176) - t0)
            d.read(0.02)
        out["rates"] = rates_ours(d)
    finally:
        d.close()
        runner.stop()
    return out


def rates_ours(d: MavlinkDriver) -> dict[float, dict[str, float]]:
    result = {}
    channels = ["linear_m_s", "est_x_m", "battery_v", "range_front_m", "armed"]
    for rate in (5.0, 10.0, 20.0, 50.0):
        d.set_acquisition(rate, channels)
        deadline = time.monotonic() + 0.5 + MEASURE_S
        while time.monotonic() < deadline:
            d.read(0.02)
            time.sleep(0.02)
        got = d.rates_hz(window_s=MEASURE_S)
        result[rate] = {m: got.get(m, 0.0) for m in STREAMS}
    return result


# ---------------------------------------------------------------- the peer: pymavlink's mavutil
def peer(kind: str) -> dict[str, list[float]]:
    vehicle, runner = make_link(kind)
    url = runner.port if kind == "pty" else runner.port  # mavutil takes "udpout:host:port" and device paths
    conn = mavutil.mavlink_connection(url, baud=57600, source_system=255, source_component=190,
                                      dialect="ardupilotmega", autoreconnect=False)
    out: dict[str, list[float]] = {"write": [], "halt_zero": [], "halt_hold": []}
    stop = threading.Event()
    counts: dict[str, list[float]] = {}

    def reader() -> None:  # mavutil's way: a loop of recv_match in a thread of the application's
        while not stop.is_set():
            msg = conn.recv_match(blocking=True, timeout=0.05)
            if msg is not None:
                counts.setdefault(msg.get_type(), []).append(time.monotonic())

    try:
        conn.mav.heartbeat_send(mavutil.mavlink.MAV_TYPE_GCS, mavutil.mavlink.MAV_AUTOPILOT_INVALID, 0, 0, 4)
        conn.wait_heartbeat(timeout=10)
        threading.Thread(target=reader, daemon=True).start()
        target = (conn.target_system, 1)

        def hb() -> None:
            conn.mav.heartbeat_send(mavutil.mavlink.MAV_TYPE_GCS, mavutil.mavlink.MAV_AUTOPILOT_INVALID, 0, 0, 4)

        def setpoint(v: float) -> None:
            conn.mav.set_position_target_local_ned_send(0, *target, 8, 0x05E7, 0, 0, 0, v, 0, 0, 0, 0, 0, 0, 0.0)

        def command(cmd: int, *params: float) -> None:
            p = list(params) + [0.0] * (7 - len(params))
            conn.mav.command_long_send(*target, cmd, 0, *p)

        command(176, 1, 15)
        command(400, 1)
        time.sleep(0.3)
        for i in range(N):
            v = 0.2 + (i % 50) * 0.01
            with runner.lock:
                since = len(vehicle.setpoints)
            setpoint(v)
            t0 = time.monotonic()
            out["write"].append(arrival_of(runner, vehicle, lambda vx, yr, v=v: abs(vx - v) < 1e-6, since) - t0)
            if i % 10 == 0:
                hb()
            time.sleep(0.04)
        for _ in range(N // 10):
            command(176, 1, 15)
            command(400, 1)
            setpoint(0.5)
            time.sleep(0.05)
            with runner.lock:
                since = len(vehicle.setpoints)
            t0 = time.monotonic()
            setpoint(0.0)
            command(176, 1, HOLD)
            command(400, 0)
            out["halt_zero"].append(arrival_of(runner, vehicle, lambda vx, yr: vx == 0 and yr == 0, since) - t0)
            out["halt_hold"].append(command_arrival(runner, vehicle, t0, 176) - t0)
            hb()
        result = {}
        for rate in (5.0, 10.0, 20.0, 50.0):
            for name in STREAMS:
                command(511, getattr(mavutil.mavlink, f"MAVLINK_MSG_ID_{name}"), 1e6 / rate)
            time.sleep(0.5)
            t_from = time.monotonic()
            end = t_from + MEASURE_S
            while time.monotonic() < end:
                hb()
                time.sleep(0.25)
            result[rate] = {}
            for name in STREAMS:
                ts = [t for t in counts.get(name, []) if t_from <= t <= end]
                result[rate][name] = round((len(ts) - 1) / (ts[-1] - ts[0]), 2) if len(ts) > 1 else 0.0
        out["rates"] = result
    finally:
        stop.set()
        time.sleep(0.1)
        conn.close()
        runner.stop()
    return out


# ---------------------------------------------------------------- through the real server
def system() -> None:
    from bench.bench_serial import serve
    from tests.conftest import wait_until
    from tests.server.test_stop_paths import Heartbeat

    print("\n== through the real server: config/rover-mavlink.toml on the emulated vehicle (pty), loop 50 Hz ==")
    vehicle, runner = make_link("pty")
    n = 10 if QUICK else 30
    zero, hold = [], []
    srv = serve("config/rover-mavlink.toml", runner.port, {"safety": {"sensor_stale_s": 2.0}, "loop": {"max_stall_s": 2.0}})
    try:
        with Heartbeat(srv, 0.05):
            for _ in range(n):
                wait_until(lambda: srv.post("/api/reset")[0] == 200, 30, "reset accepted")
                wait_until(lambda: srv.post("/api/start")[0] == 200, 10, "start accepted")
                wait_until(lambda: srv.state()["driver"]["state"] == "active", 10, "active")
                srv.post("/api/speed", {"linear": 0.5, "angular": 0.0})
                wait_until(lambda: vehicle.moving, 10, "moving")
                with runner.lock:
                    since = len(vehicle.setpoints)
                t0 = time.monotonic()
                srv.post("/api/estop")
                zero.append(arrival_of(runner, vehicle, lambda vx, yr: vx == 0 and yr == 0, since) - t0)
                hold.append(command_arrival(runner, vehicle, t0, 176) - t0)
    finally:
        srv.stop()
        runner.stop()
    print(f"  HTTP POST /api/estop sent → zero velocity on the wire  {summary_ms(zero)}")
    print(f"  HTTP POST /api/estop sent → HOLD on the wire           {summary_ms(hold)}")


def main() -> None:
    for kind in ("pty", "udp"):
        print(f"\n== {kind}: the MAVLink driver vs pymavlink's mavutil, same messages, same emulated vehicle ==")
        a, b = ours(kind), peer(kind)
        import numpy as np

        for key, label in (("write", "command → setpoint on the wire"), ("halt_zero", "halt → zero velocity on the wire"),
                           ("halt_hold", "halt → HOLD on the wire")):
            ra, rb = np.percentile(np.array(a[key]) * 1e3, [50, 99]), np.percentile(np.array(b[key]) * 1e3, [50, 99])
            print(f"  {label:<36} driver {summary_ms(a[key])}")
            print(f"  {'':<36} mavutil {summary_ms(b[key])}")
            print(f"  {'':<36} ratio p50 {ra[0] / rb[0]:.2f}, p99 {ra[1] / rb[1]:.2f}")
        print(f"  telemetry rates achieved (Hz) vs requested, {', '.join(STREAMS)}:")
        for rate in a["rates"]:
            ours_r = " ".join(f"{a['rates'][rate][m]:6.2f}" for m in STREAMS)
            peer_r = " ".join(f"{b['rates'][rate][m]:6.2f}" for m in STREAMS)
            print(f"    {rate:5.1f} Hz   driver {ours_r}   mavutil {peer_r}")
    system()


if __name__ == "__main__":
    main()
