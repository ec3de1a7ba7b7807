"""Serial drivers against their emulators on a pty: sample rates, command-to-wire and stop latency.

Run: ``.venv/bin/python bench/bench_serial.py [--quick] [--system]`` (``--system``: only the
figures through the real server). Figures, never assertions.

* **Analog samples/s achieved vs requested** (firmata): the emulated board
  puts each byte on its wire at 10/baud s and stalls its sampling loop when its
  64-byte TX buffer is full, as an Uno does; the driver refuses, before asking,
  any channel set × rate over 90 % of the link (3 bytes per sample).
* **Command-to-wire latency**: from ``driver.write()`` returning to the bytes
  arriving at the emulator (through the writer thread and the pty).
* **Stop latency**: from ``driver.halt()`` to the safe-state bytes arriving at
  the emulator — idle, while streaming, and (FAULHABER) while a request waits
  for an answer the drive holds back.

* **System stop latency, through the real server** (``python -m server`` with
  ``config/rover-firmata.toml`` / ``config/rover-faulhaber.toml``, the emulator in
  this process): from a fault at the device — the e-stop button pressed on the
  board, the board or a drive gone silent, a pulled cable — or the operator's
  HTTP e-stop, to the safe-state bytes arriving at the emulator. Both ends use
  this host's ``CLOCK_MONOTONIC``, so the runtime's event times compare too.

What a pty does not show: host → device bytes cross the pty at memory speed.
On a real link add the bytes' wire time (3 bytes at 57600 baud: 0.52 ms;
``1V0\\r1DI\\r`` at 9600 baud: 8.3 ms), a USB frame (1 ms) and, on FTDI
adapters, the latency timer (16 ms by default; set it to 1 ms).
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.common import summary_ms  # noqa: E402
from drivers.errors import AcquisitionError  # noqa: E402
from drivers.faulhaber.driver import FaulhaberAsciiDriver, FaulhaberMcV3Driver  # noqa: E402
from drivers.firmata.driver import FirmataDriver  # noqa: E402
from sim.devices.faulhaber_ascii import AsciiLine, DriveConfig, LineConfig  # noqa: E402
from sim.devices.faulhaber_mcv3 import McV3Bus  # noqa: E402
from sim.devices.firmata import BoardConfig, FirmataBoard  # noqa: E402
from sim.devices.pty import PtyRunner  # noqa: E402
from tests.drivers.test_faulhaber_driver import WHEELS  # noqa: E402
from tests.drivers.test_firmata_driver import TABLE  # noqa: E402

QUICK = "--quick" in sys.argv
MEASURE_S = 1.0 if QUICK else 3.0
N_LAT = 50 if QUICK else 200


def arrival(runner: PtyRunner, needle: bytes, since: int, timeout_s: float = 5.0) -> float:
    return runner.wait_for(needle, timeout_s=timeout_s, since=since)


def firmata_rates() -> None:
    print("\n== firmata: analog samples/s, achieved vs requested (emulated wire, TX buffer stalls) ==")
    print(f"{'baud':>7} {'channels':>8} {'rate_hz':>8} {'requested/s':>12} {'achieved/s':>11}  note")
    for baud in (57600, 115200):
        for n in (1, 6):
            for rate in (100, 250, 500, 1000):
                board = FirmataBoard(BoardConfig(baudrate=baud))
                with PtyRunner(board, "firmata") as runner:
                    table = {**TABLE, "port": runner.port, "baudrate": baud, "estop_pin": None}
                    d = FirmataDriver.from_config(table, {})
                    names = list(TABLE["analog"])[:n]
                    note = ""
                    try:
                        d.open()
                        d.set_acquisition(rate, names)
                    except AcquisitionError as err:
                        note = "refused: " + str(err).split(";")[1].strip()
                        d.close()
                        print(f"{baud:>7} {n:>8} {rate:>8} {n * rate:>12} {'-':>11}  {note}")
                        continue
                    time.sleep(0.3)
                    f0 = d.health()["frames_in"]
                    t0 = time.monotonic()
                    time.sleep(MEASURE_S)
                    achieved = (d.health()["frames_in"] - f0) / (time.monotonic() - t0)
                    d.close()
                print(f"{baud:>7} {n:>8} {rate:>8} {n * rate:>12} {achieved:>11.0f}  {note}")
    # what the board does when asked for more than its wire carries (the driver would refuse this)
    print("  without the driver's check, the board itself at 6 channels × 1 kHz:")
    for baud in (57600, 115200):
        board = FirmataBoard(BoardConfig(baudrate=baud))
        board.host_opened(0.0)
        board.advance(0.0)
        board.receive(bytes.fromhex("f0 7a 01 00 f7 c0 01 c1 01 c2 01 c3 01 c4 01 c5 01"), 0.0)
        received, t = 0, 0.0
        while t < 2.0:
            t += 0.0005
            received += len(board.advance(t))
        print(f"  {baud:>7} baud: {received / 3 / 2.0:6.0f} samples/s of 6000 asked (wire limit "
              f"{baud / 10 / 3:.0f})")


def firmata_latency() -> None:
    print("\n== firmata: command-to-wire and halt-to-safe-state latency (pty) ==")
    board = FirmataBoard(BoardConfig())
    with PtyRunner(board, "firmata") as runner:
        d = FirmataDriver.from_config({**TABLE, "port": runner.port}, {})
        d.open()
        d.activate()
        cmd, stop_idle, stop_streaming = [], [], []
        for i in range(N_LAT):
            duty = 10 + i % 200
            v = duty / 255 * 20.0
            since = len(runner.rx_log)
            d.write({"wheel_left": v, "wheel_right": v})
            t0 = time.monotonic()
            arrival(runner, bytes((0xE5, round(v / 20.0 * 255) & 0x7F)), since)
            cmd.append(runner.rx_log[-1][0] - t0)
            time.sleep(0.002)
        safe = d._safe_state_bytes()
        for i in range(N_LAT):
            d.activate()
            d.write({"wheel_left": 5.0 + i % 3, "wheel_right": 5.0})
            time.sleep(0.002)
            since = len(runner.rx_log)
            t0 = time.monotonic()
            d.halt()
            stop_idle.append(arrival(runner, safe, since) - t0)
        stop = threading.Event()

        def stream() -> None:
            k = 0
            while not stop.is_set():
                k += 1
                d.write({"wheel_left": 1.0 + (k % 50) * 0.3, "wheel_right": 1.0})
                time.sleep(0.001)

        for i in range(N_LAT // 2):
            d.activate()
            stop.clear()
            t = threading.Thread(target=stream)
            t.start()
            time.sleep(0.01)
            since = len(runner.rx_log)
            t0 = time.monotonic()
            d.halt()
            stop_streaming.append(arrival(runner, safe, since) - t0)
            stop.set()
            t.join()
        d.close()
    print(f"  write → wire (PWM)            {summary_ms(cmd)}")
    print(f"  halt → safe state, idle       {summary_ms(stop_idle)}")
    print(f"  halt → safe state, streaming  {summary_ms(stop_streaming)}")


def pyfirmata2_peer() -> None:
    try:
        import pyfirmata2
        import pyfirmata2.pyfirmata2 as pf
    except ImportError:  # pragma: no cover
        print("  (pyfirmata2 not installed: no peer figure)")
        return
    pf.BOARD_SETUP_WAIT_TIME = 0
    board = FirmataBoard(BoardConfig())
    with PtyRunner(board, "firmata") as runner:
        client = pyfirmata2.Arduino(runner.port)
        pin = client.get_pin("d:5:p")
        lat = []
        for i in range(N_LAT):
            value = (10 + i % 200) / 255
            since = len(runner.rx_log)
            t0 = time.monotonic()
            pin.write(value)  # pyfirmata2 writes in the caller's thread
            arrival(runner, bytes((0xE5,)), since)
            lat.append(runner.rx_log[-1][0] - t0)
            time.sleep(0.002)
        client.exit()
    print(f"  peer: pyfirmata2 pin.write → wire (blocking write in the caller)  {summary_ms(lat)}")


def faulhaber_latency(cls, device_factory, stop_needle: bytes, label: str) -> None:
    dev = device_factory()
    with PtyRunner(dev, label) as runner:
        d = cls.from_config({"port": runner.port, "xonxoff": False, "axes": WHEELS, "reply_timeout_s": 5.0,
                             "timeouts_idle": 100, "timeouts_moving": 100}, {})
        d.open()
        d.activate()
        cmd, stop_idle, stop_held = [], [], []
        for i in range(N_LAT):
            v = 1.0 + (i % 50) * 0.2
            rpm = d.axis("wheel_left").config.rpm(v)
            needle = f"1V{rpm}\r".encode() if cls is FaulhaberAsciiDriver else \
                int(rpm).to_bytes(4, "little", signed=True)
            since = len(runner.rx_log)
            d.write({"wheel_left": v, "wheel_right": v})
            t0 = time.monotonic()
            arrival(runner, needle, since)
            cmd.append(runner.rx_log[-1][0] - t0)
            time.sleep(0.005)
        for i in range(N_LAT // 2):
            d.activate()
            d.write({"wheel_left": 3.0, "wheel_right": 3.0})
            time.sleep(0.01)
            since = len(runner.rx_log)
            t0 = time.monotonic()
            d.halt()
            stop_idle.append(arrival(runner, stop_needle, since) - t0)
        for i in range(N_LAT // 4):
            d.activate()
            with runner.lock:
                dev.inject("hold")  # the next answer is held: a poll waits on the line
            since = len(runner.rx_log)
            while len(runner.rx_log) <= since:
                time.sleep(0.0005)
            time.sleep(0.002)
            since = len(runner.rx_log)
            t0 = time.monotonic()
            d.halt()
            stop_held.append(arrival(runner, stop_needle, since) - t0)
            with runner.lock:
                dev.inject("release", now_s=time.monotonic())
            time.sleep(0.01)
        d.close()
    print(f"  {label}: write → wire (setpoint)               {summary_ms(cmd)}")
    print(f"  {label}: halt → stop bytes, streaming          {summary_ms(stop_idle)}")
    print(f"  {label}: halt → stop bytes, answer held back   {summary_ms(stop_held)}")


# ---------------------------------------------------------------------- through the real server
def serve(config: str, port: str, overrides: dict | None = None, **driver):
    """``python -m server`` on ``config`` with its driver on ``port`` (and ``overrides`` merged in)."""
    import tempfile
    import tomllib

    import tomli_w

    from tests.conftest import TEST_DEFAULTS, ServerProc, deep_merge

    base = tomllib.loads((REPO / config).read_text())
    cfg = deep_merge(deep_merge(base, TEST_DEFAULTS), {"driver": {"port": port, **driver}, **(overrides or {})})
    path = Path(tempfile.mkdtemp(prefix="teleop-bench-")) / "serial.toml"
    path.write_text(tomli_w.dumps(cfg))
    return ServerProc(path).start()


def drive(srv, moving) -> None:
    from tests.conftest import wait_until

    wait_until(lambda: srv.post("/api/reset")[0] == 200, 30, "reset accepted")
    wait_until(lambda: srv.post("/api/start")[0] == 200, 10, "start accepted")
    status, body = srv.post("/api/speed", {"linear": 0.3, "angular": 0.0})
    assert status == 200, body
    # the driver active, not only the motors turning: a drive may still be coasting from the last stop
    wait_until(lambda: moving() and srv.state()["driver"]["state"] == "active", 10, "moving")


def last_zero_s(srv) -> float | None:
    """The runtime's own figure for the last stop: trigger → halt() returned (its ``outputs_zero`` event)."""
    evs = [e for e in srv.get("/api/events?limit=50")[1]["events"] if e["trigger"] == "outputs_zero"]
    return evs[-1]["values"]["after_trigger_s"] if evs else None


def system_firmata() -> None:
    from tests.conftest import wait_until
    from tests.server.test_stop_paths import Heartbeat

    print("\n== through the real server: rover-firmata.toml on the emulated board (pty) ==")
    safe = bytes.fromhex("e5 00 00 e6 00 00 f5 08 00 f5 04 00 f5 07 00")
    board = FirmataBoard(BoardConfig(banner_delay_s=0.0))
    sent_port: list[float] = []
    emit = board._emit

    def stamped(data: bytes, now_s: float) -> None:  # when the board put the e-stop input's change out
        if data and data[0] == 0x90:
            sent_port.append(now_s)
        emit(data, now_s)

    board._emit = stamped
    n = 10 if QUICK else 30
    with PtyRunner(board, "firmata") as runner:
        srv = serve("config/rover-firmata.toml", runner.port, banner_wait_s=0.0, reconnect_timeout_s=1.0)
        try:
            def moving() -> bool:
                return min(board.wheel_commands()) > 1.0

            button, button_host, button_rt, http, http_rt, silent, unplug = [], [], [], [], [], [], []
            with Heartbeat(srv, 0.05):
                for _ in range(n):
                    drive(srv, moving)
                    since = len(runner.rx_log)
                    with runner.lock:
                        t0 = time.monotonic()
                        board.inject("estop", pressed=True)
                        sent_port.clear()
                    t1 = arrival(runner, safe, since)
                    button.append(t1 - t0)
                    button_host.append(t1 - sent_port[0])
                    wait_until(lambda: srv.state()["state"] == "estop", 5, "e-stop")
                    button_rt.append(last_zero_s(srv))
                    with runner.lock:
                        board.inject("estop", pressed=False)
                for _ in range(n):
                    drive(srv, moving)
                    since = len(runner.rx_log)
                    t0 = time.monotonic()
                    srv.post("/api/estop")
                    http.append(arrival(runner, safe, since) - t0)
                    http_rt.append(last_zero_s(srv))
                for _ in range(3 if QUICK else 5):
                    drive(srv, moving)
                    since = len(runner.rx_log)
                    with runner.lock:
                        t0 = time.monotonic()
                        board.inject("silent")
                    silent.append(arrival(runner, safe, since) - t0)
                    wait_until(lambda: srv.state()["state"] == "fault", 10, "fault")
                    with runner.lock:
                        board.inject("clear")
                    wait_until(lambda: srv.state()["driver"]["reconnects"] > len(silent) - 1, 30, "reconnected")
                for _ in range(3 if QUICK else 5):
                    drive(srv, moving)
                    t0 = time.monotonic()
                    runner.unplug()
                    wait_until(lambda: srv.state()["state"] == "fault", 10, "fault")
                    fault_t = [e for e in srv.get("/api/events?limit=50")[1]["events"]
                               if e["trigger"] == "driver_fault"][-1]["t"]
                    unplug.append(fault_t - t0)
                    reconnects = srv.state()["driver"]["reconnects"]
                    runner.replug()
                    wait_until(lambda: srv.state()["driver"]["reconnects"] > reconnects, 30, "reconnected")
        finally:
            srv.stop()
    print(f"  e-stop button pressed → safe state on the wire     {summary_ms(button)}")
    print(f"    of which the board's message → safe state (host) {summary_ms(button_host)}")
    print(f"    runtime: the tick that read it → halt() returned {summary_ms(button_rt)}")
    print(f"  HTTP POST /api/estop sent → safe state on the wire {summary_ms(http)}")
    print(f"    runtime: request latched → halt() returned       {summary_ms(http_rt)}")
    print(f"  board silent → safe state on the wire (stale_s 0.5) {summary_ms(silent)}")
    print(f"  cable pulled → fault (outputs cannot be reached)   {summary_ms(unplug)}")


def system_faulhaber() -> None:
    from tests.conftest import wait_until
    from tests.server.test_stop_paths import Heartbeat

    print("\n== through the real server: rover-faulhaber.toml on emulated ASCII drives (pty) ==")
    stop = b"1V0\r1DI\r2V0\r2DI\r"
    line = AsciiLine(LineConfig([DriveConfig(1), DriveConfig(2)]))
    n = 10 if QUICK else 20
    with PtyRunner(line, "faulhaber-ascii") as runner:
        srv = serve("config/rover-faulhaber.toml", runner.port, reply_timeout_s=10.0, reconnect_timeout_s=1.0)
        try:
            def moving() -> bool:
                with runner.lock:
                    return line.drives[1].motor.speed_rev_s > 5.0

            held, held_rt, silent, activating = [], [], [], []
            with Heartbeat(srv, 0.05):
                for _ in range(n):
                    drive(srv, moving)
                    with runner.lock:
                        line.inject("hold")
                    wait_until(lambda: line._held, 5, "an answer held")
                    since = len(runner.rx_log)
                    t0 = time.monotonic()
                    srv.post("/api/estop")
                    held.append(arrival(runner, stop, since) - t0)
                    held_rt.append(last_zero_s(srv))
                    with runner.lock:
                        line.inject("release", now_s=time.monotonic())
            srv.stop()
            srv = serve("config/rover-faulhaber.toml", runner.port, reconnect_timeout_s=1.0)
            with Heartbeat(srv, 0.05):
                for _ in range(3 if QUICK else 5):
                    drive(srv, moving)
                    since = len(runner.rx_log)
                    with runner.lock:
                        t0 = time.monotonic()
                        line.inject("silent")
                    silent.append(arrival(runner, stop, since) - t0)
                    wait_until(lambda: srv.state()["state"] == "fault", 10, "fault")
                    with runner.lock:
                        line.inject("clear")
                    wait_until(lambda: srv.state()["driver"]["reconnects"] > len(silent) - 1, 30, "reconnected")
            srv.stop()
            # a start whose drives are being enabled (their answers held): no rules (nothing refreshes while held)
            srv = serve("config/rover-faulhaber.toml", runner.port, {"safety": {"rules": []}}, reply_timeout_s=10.0)
            for _ in range(n // 2):
                wait_until(lambda: srv.post("/api/reset")[0] == 200, 30, "reset accepted")
                with runner.lock:
                    line.inject("hold")
                wait_until(lambda: line._held, 5, "an answer held")
                srv.post("/api/start")
                wait_until(lambda: srv.state()["driver"].get("activating"), 5, "the drives being enabled")
                since = len(runner.rx_log)
                t0 = time.monotonic()
                srv.post("/api/estop")
                activating.append(arrival(runner, stop, since) - t0)
                with runner.lock:
                    line.inject("release", now_s=time.monotonic())
                wait_until(lambda: not srv.state()["driver"]["activating"], 15, "the activation over")
        finally:
            srv.stop()
    print(f"  HTTP e-stop, a poll's answer held → stop on the wire {summary_ms(held)}")
    print(f"    runtime: request latched → halt() returned         {summary_ms(held_rt)}")
    print(f"  HTTP e-stop while a start enables the drives (answers held) → stop {summary_ms(activating)}")
    print(f"  drives silent → stop on the wire (sensor_stale_s 0.5) {summary_ms(silent)}")


def main() -> None:
    if "--system" in sys.argv:  # only the figures through the real server
        system_firmata()
        system_faulhaber()
        return
    firmata_rates()
    firmata_latency()
    pyfirmata2_peer()
    print("\n== FAULHABER: command-to-wire and halt-to-stop latency (pty) ==")
    faulhaber_latency(FaulhaberAsciiDriver, lambda: AsciiLine(LineConfig([DriveConfig(1), DriveConfig(2)])),
                      b"1V0\r1DI\r2V0\r2DI\r", "faulhaber-ascii")
    from drivers.faulhaber import mcv3

    faulhaber_latency(FaulhaberMcV3Driver, McV3Bus, mcv3.encode_sdo_write(1, mcv3.CONTROLWORD, 0, 2),
                      "faulhaber-mcv3")
    system_firmata()
    system_faulhaber()


if __name__ == "__main__":
    main()
