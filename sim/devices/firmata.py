"""An Arduino Uno running StandardFirmata 2.5 (or FirmataExpress), wired to the simulated rover.

Written from the Firmata protocol and the StandardFirmata/FirmataExpress
sketches, **not** from ``drivers.firmata.protocol``: the driver and this board
must not share one misreading of the spec (a test also drives this board with
pyfirmata2).

What it emulates, because the driver must cope with it:

* reset on open: when a host opens the port the board reboots; bytes sent
  during the boot (``banner_delay_s``; ~2 s on a real Uno: bootloader + version
  blink) are lost; then it sends ``F9 02 05`` and REPORT_FIRMWARE unprompted;
* the wire: with ``baudrate`` set, each byte takes 10/baud s and the 64-byte
  TX buffer stalls the sampling loop when the link is saturated, so a
  channel set × rate the baud rate cannot carry really comes out slower;
* sampling at the SAMPLING_INTERVAL (≥ 1 ms, default 19 ms) of every analog
  channel whose reporting is on and whose pin is in ANALOG mode; digital ports
  sent when reporting is turned on and then on every change;
* a 64-byte limit on incoming sysex (longer ones are dropped, as the firmware's
  ``MAX_DATA_BYTES`` buffer does);
* FirmataExpress KEEP_ALIVE (``firmware="FirmataExpress"``): when no keep-alive
  arrives for its period the board resets (every output low) and reboots;
  StandardFirmata ignores the sysex and keeps its outputs forever.

The rover: each wheel is a PWM pin (duty 0–255 → 0–``max_wheel_speed_rad_s``)
plus a direction pin (high = reverse); an optional safety relay pin must be
high for the motors to get power; an e-stop button pulls its input low.
Analog inputs (10-bit, 5 V reference): battery through a 1:3 divider, an
analog sonar (0–5 V over 0–``range_max_m``), two ACS712-05B current sensors
(2.5 V + 0.185 V/A) and two tachometers (2.5 V ± 2.5 V over ±max wheel speed).

Fault injection (:meth:`FirmataBoard.inject`): ``silent``, ``garbage``,
``truncated``, ``reboot``, ``estop`` (pressed / released), ``clear``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sim.devices.pty import serve_forever
from sim.rover import RoverParams, RoverSim
from sim.world import World

# the board's view of the protocol, written out here on purpose (see the module doc)
_SYSEX_START, _SYSEX_END = 0xF0, 0xF7
_MODE_INPUT, _MODE_OUTPUT, _MODE_ANALOG, _MODE_PWM, _MODE_SERVO, _MODE_PULLUP = 0, 1, 2, 3, 4, 11
_MAX_DATA_BYTES = 64
_TX_BUFFER = 64


@dataclass
class BoardConfig:
    firmware: str = "StandardFirmata"  # or "FirmataExpress" (KEEP_ALIVE)
    version: tuple[int, int] = (2, 5)
    total_pins: int = 20
    analog_pins: tuple[int, ...] = (14, 15, 16, 17, 18, 19)
    pwm_pins: tuple[int, ...] = (3, 5, 6, 9, 10, 11)
    adc_bits: int = 10
    banner_delay_s: float = 0.0
    reset_on_open: bool = True
    baudrate: int | None = None  # None: no wire delay (tests); 57600 / 115200 to emulate the link
    # rover wiring
    left_pwm: int = 5
    left_dir: int = 4
    right_pwm: int = 6
    right_dir: int = 7
    relay_pin: int | None = 8
    estop_pin: int | None = 2
    battery_channel: int = 0
    range_channel: int = 1
    current_left_channel: int = 2
    current_right_channel: int = 3
    tacho_left_channel: int = 4
    tacho_right_channel: int = 5
    range_max_m: float = 4.0
    seed: int = 1
    rover: dict = field(default_factory=dict)

    @property
    def firmware_name(self) -> str:
        return "FirmataExpress" if self.firmware == "FirmataExpress" else "StandardFirmata.ino"


class FirmataBoard:
    """The board; drive it with :class:`sim.devices.pty.PtyRunner` or call its methods with explicit times."""

    def __init__(self, config: BoardConfig | None = None) -> None:
        self.config = c = config or BoardConfig()
        self.rng = np.random.default_rng(c.seed)
        params = RoverParams.from_config(c.rover) if c.rover else RoverParams()
        self.max_wheel_speed_rad_s = params.max_wheel_speed_rad_s
        # a big field: the rover must not hit a wall during a test run
        self.rover = RoverSim(params, World.from_config({"size_m": [200.0, 200.0]}), self.rng, (100.0, 100.0, 0.0))
        self._out: list[tuple[float, bytes]] = []  # (release time, bytes)
        self._wire_free_t = 0.0
        self._last_t: float | None = None
        self._parse_state: list[int] = []
        self._in_sysex = False
        self.faults: set[str] = set()
        self.estop_pressed = False
        self.log: list[tuple[float, str]] = []  # (time, event) for tests: resets, keep-alive lapses
        self.keep_alives = 0
        self.sampling_interval_ms = 19
        self.keep_alive_s = 0
        self.last_keep_alive_t = 0.0
        self._booting_until = 0.0
        self._banner_due = False
        self._power_on(0.0, banner=False)

    # ------------------------------------------------------------------ state
    def _power_on(self, now: float, banner: bool = True) -> None:
        """Chip reset: every pin back to its default, reporting off, keep-alive off."""
        c = self.config
        self.mode = [(_MODE_ANALOG if p in c.analog_pins else _MODE_OUTPUT) for p in range(c.total_pins)]
        self.digital_out = [0] * c.total_pins
        self.pwm = [0] * c.total_pins
        self.servo: dict[int, tuple[int, int]] = {}
        self.report_analog = 0
        self.report_ports = [False] * ((c.total_pins + 7) // 8)
        self.last_ports = [-1] * len(self.report_ports)
        self.sampling_interval_ms = 19
        self.keep_alive_s = 0
        self._next_sample_t = now
        self._out.clear()
        self._parse_state.clear()
        self._in_sysex = False
        if banner:
            self._booting_until = now + c.banner_delay_s
            self._banner_due = True
        self.log.append((now, "reset"))

    def _system_reset(self) -> None:
        """SYSTEM_RESET (0xFF): firmware state back to defaults; the chip keeps running."""
        c = self.config
        for p in range(c.total_pins):
            self._set_mode(p, _MODE_ANALOG if p in c.analog_pins else _MODE_OUTPUT)
        self.report_analog = 0
        self.report_ports = [False] * len(self.report_ports)
        self.servo.clear()

    # ------------------------------------------------------------------ runner interface
    def host_opened(self, now_s: float) -> None:
        if self.config.reset_on_open:
            self._power_on(now_s)

    def next_wakeup_s(self, now_s: float) -> float:
        t = self._next_sample_t if (self.report_analog or any(self.report_ports)) else now_s + 0.02
        if self._out:
            t = min(t, self._out[0][0])
        if self._banner_due:
            t = min(t, self._booting_until)
        if self.keep_alive_s:
            t = min(t, self.last_keep_alive_t + self.keep_alive_s)
        return min(t, now_s + 0.01)  # the rover's physics runs at least at 100 Hz

    def receive(self, data: bytes, now_s: float) -> None:
        if "silent" in self.faults or now_s < self._booting_until:
            return  # a booting board's bootloader eats what arrives
        for b in data:
            self._parse(b, now_s)

    def advance(self, now_s: float) -> bytes:
        self._physics(now_s)
        c = self.config
        if self._banner_due and now_s >= self._booting_until:
            self._banner_due = False
            self._emit(bytes((0xF9, *c.version)), now_s)
            self._emit(self._firmware_report(), now_s)
        if now_s >= self._booting_until and not self._banner_due:
            self._check_digital_inputs(now_s)
            self._sample(now_s)
        out = bytearray()
        while self._out and self._out[0][0] <= now_s:
            out += self._out.pop(0)[1]
        if "silent" in self.faults:
            return b""
        return bytes(out)

    # ------------------------------------------------------------------ faults
    def inject(self, fault: str, now_s: float = 0.0, **kw: object) -> None:
        """``silent`` / ``garbage`` (``count`` random bytes) / ``truncated`` / ``reboot`` / ``estop`` (``pressed``) / ``clear``."""
        if fault == "silent":
            self.faults.add("silent")
        elif fault == "clear":
            self.faults.clear()
        elif fault == "garbage":
            n = int(kw.get("count", 32))  # type: ignore[arg-type]
            self._emit(bytes(self.rng.integers(0, 256, n, dtype=np.uint8)), now_s)
        elif fault == "truncated":
            self._emit(bytes((0xE0, 0x10)), now_s)  # an analog message missing its MSB
        elif fault == "reboot":
            self._power_on(now_s)
        elif fault == "estop":
            self.estop_pressed = bool(kw.get("pressed", True))
        else:
            raise ValueError(f"unknown fault {fault!r}")

    # ------------------------------------------------------------------ output
    def _emit(self, data: bytes, now_s: float) -> None:
        baud = self.config.baudrate
        if not baud:
            self._out.append((now_s, data))
            return
        start = max(now_s, self._wire_free_t)
        self._wire_free_t = start + len(data) * 10.0 / baud
        self._out.append((self._wire_free_t, data))

    def _firmware_report(self) -> bytes:
        name = self.config.firmware_name.encode("ascii")
        payload = bytearray((0x79, *self.config.version))
        for ch in name:
            payload += bytes((ch & 0x7F, ch >> 7))
        return bytes((_SYSEX_START,)) + bytes(payload) + bytes((_SYSEX_END,))

    def _backlog_s(self, now_s: float) -> float:
        return max(0.0, self._wire_free_t - now_s)

    def _sample(self, now_s: float) -> None:
        c = self.config
        if self.keep_alive_s and now_s - self.last_keep_alive_t > self.keep_alive_s:
            # FirmataExpress: systemResetCallback(); wdt_enable(WDTO_15MS); while (1);
            self.log.append((now_s, "keep-alive lapsed"))
            self._power_on(now_s)
            return
        interval = self.sampling_interval_ms / 1000.0
        while now_s >= self._next_sample_t:
            if c.baudrate and self._backlog_s(now_s) > _TX_BUFFER * 10.0 / c.baudrate:
                return  # Serial.write blocks on a full TX buffer: the loop stalls
            # the firmware's loop never stops sampling: an interval missed here (a runner that woke late)
            # is skipped, not made up for in a burst
            self._next_sample_t = max(self._next_sample_t + interval, now_s - interval + 1e-9)
            counts = self._analog_counts()
            msg = bytearray()
            for pin in c.analog_pins:
                ch = c.analog_pins.index(pin)
                if self.report_analog & (1 << ch) and self.mode[pin] == _MODE_ANALOG:
                    v = counts[ch]
                    msg += bytes((0xE0 | ch, v & 0x7F, (v >> 7) & 0x7F))
            if msg:
                self._emit(bytes(msg), now_s)

    def _analog_counts(self) -> list[int]:
        c = self.config
        full = (1 << c.adc_bits) - 1
        r = self.rover
        volts = [0.0] * len(c.analog_pins)

        def put(ch: int, v: float) -> None:
            if 0 <= ch < len(volts):
                volts[ch] = v

        put(c.battery_channel, r.battery_v / 3.0)
        rng_m = min(r.ranges.values(), default=c.range_max_m)
        put(c.range_channel, 5.0 * min(rng_m, c.range_max_m) / c.range_max_m)
        il, ir = r.motor_currents
        put(c.current_left_channel, 2.5 + 0.185 * il)
        put(c.current_right_channel, 2.5 + 0.185 * ir)
        wl, wr = r.wheel_speeds
        put(c.tacho_left_channel, 2.5 + 2.5 * wl / self.max_wheel_speed_rad_s)
        put(c.tacho_right_channel, 2.5 + 2.5 * wr / self.max_wheel_speed_rad_s)
        return [int(min(full, max(0, round(v / 5.0 * full)))) for v in volts]

    def pin_input(self, pin: int) -> int:
        """What a digital input reads (pull-ups read high; the e-stop button pulls its pin low)."""
        c = self.config
        if pin == c.estop_pin:
            return 0 if self.estop_pressed else 1
        return 1 if self.mode[pin] == _MODE_PULLUP else 0

    def _port_value(self, port: int) -> int:
        mask = 0
        for i in range(8):
            p = port * 8 + i
            if p < self.config.total_pins and self.mode[p] in (_MODE_INPUT, _MODE_PULLUP) and self.pin_input(p):
                mask |= 1 << i
        return mask

    def _check_digital_inputs(self, now_s: float) -> None:
        for port, on in enumerate(self.report_ports):
            if on:
                v = self._port_value(port)
                if v != self.last_ports[port]:
                    self.last_ports[port] = v
                    self._emit(bytes((0x90 | port, v & 0x7F, v >> 7)), now_s)

    # ------------------------------------------------------------------ physics
    def wheel_commands(self) -> tuple[float, float]:
        """The wheel speed the motor drivers are told, rad/s (0 without relay power)."""
        c = self.config
        if c.relay_pin is not None and not self.digital_out[c.relay_pin]:
            return 0.0, 0.0

        def wheel(pwm_pin: int, dir_pin: int) -> float:
            duty = self.pwm[pwm_pin] / 255.0 if self.mode[pwm_pin] == _MODE_PWM else 0.0
            sign = -1.0 if self.digital_out[dir_pin] else 1.0
            return sign * duty * self.max_wheel_speed_rad_s

        return wheel(c.left_pwm, c.left_dir), wheel(c.right_pwm, c.right_dir)

    def _physics(self, now_s: float) -> None:
        if self._last_t is None:
            self._last_t = now_s
            return
        dt = min(10.0, max(0.0, now_s - self._last_t))  # the rover sub-steps on its own
        self._last_t = now_s
        if dt > 0:
            left, right = self.wheel_commands()
            self.rover.step(dt, left, right)

    # ------------------------------------------------------------------ host → board
    def _parse(self, b: int, now_s: float) -> None:
        st = self._parse_state
        if self._in_sysex:
            if b == _SYSEX_END:
                self._in_sysex = False
                if len(st) <= _MAX_DATA_BYTES + 1:
                    self._sysex(st[0] if st else -1, st[1:], now_s)
                st.clear()
            elif b >= 0x80:  # a command inside a sysex: the firmware drops the sysex
                self._in_sysex = False
                st.clear()
                self._parse(b, now_s)
            else:
                st.append(b)
            return
        if b >= 0x80:
            st.clear()
            if b == _SYSEX_START:
                self._in_sysex = True
                return
            st.append(b)
        elif not st:
            return  # a data byte without a command: ignored
        else:
            st.append(b)
        cmd = st[0]
        need = {0x90: 3, 0xE0: 3, 0xC0: 2, 0xD0: 2}.get(cmd & 0xF0) if cmd < 0xF0 else \
            {0xF4: 3, 0xF5: 3, 0xF9: 1, 0xFF: 1}.get(cmd)
        if need is None:
            st.clear()
            return
        if len(st) < need:
            return
        args = st[1:]
        st.clear()
        self._command(cmd, args, now_s)

    def _command(self, cmd: int, args: list[int], now_s: float) -> None:
        c = self.config
        kind = cmd & 0xF0 if cmd < 0xF0 else cmd
        if kind == 0x90:  # digital port write: only OUTPUT pins change
            port, mask = cmd & 0x0F, args[0] | (args[1] << 7)
            for i in range(8):
                p = port * 8 + i
                if p < c.total_pins and self.mode[p] == _MODE_OUTPUT:
                    self.digital_out[p] = (mask >> i) & 1
        elif kind == 0xE0:  # analog write to pin n (PWM or servo)
            self._analog_write(cmd & 0x0F, args[0] | (args[1] << 7))
        elif kind == 0xC0:
            ch = cmd & 0x0F
            if ch < len(c.analog_pins):
                if args[0]:
                    self.report_analog |= 1 << ch
                    v = self._analog_counts()[ch]  # since 2.4: the current value at once
                    self._emit(bytes((0xE0 | ch, v & 0x7F, v >> 7)), now_s)
                else:
                    self.report_analog &= ~(1 << ch)
        elif kind == 0xD0:
            port = cmd & 0x0F
            if port < len(self.report_ports):
                self.report_ports[port] = bool(args[0])
                if args[0]:
                    v = self._port_value(port)
                    self.last_ports[port] = v
                    self._emit(bytes((0x90 | port, v & 0x7F, v >> 7)), now_s)
        elif kind == 0xF4:
            self._set_mode(args[0], args[1])
        elif kind == 0xF5:
            pin = args[0]
            if pin < c.total_pins and self.mode[pin] == _MODE_OUTPUT:
                self.digital_out[pin] = 1 if args[1] else 0
        elif kind == 0xF9:
            self._emit(bytes((0xF9, *c.version)), now_s)
        elif kind == 0xFF:
            self._system_reset()

    def _set_mode(self, pin: int, mode: int) -> None:
        c = self.config
        if pin >= c.total_pins or pin in (0, 1):
            return  # RX/TX and missing pins: IS_PIN_DIGITAL() is false
        if pin in c.analog_pins:
            ch = c.analog_pins.index(pin)
            if mode == _MODE_ANALOG:
                self.report_analog |= 1 << ch  # StandardFirmata turns reporting on with ANALOG mode
            else:
                self.report_analog &= ~(1 << ch)
        if mode == _MODE_PWM and pin not in c.pwm_pins:
            return
        if mode == _MODE_ANALOG and pin not in c.analog_pins:
            return
        if mode == _MODE_OUTPUT and self.mode[pin] == _MODE_PWM:
            self.digital_out[pin] = 0  # disable PWM: digitalWrite(LOW)
        if mode == _MODE_PWM or self.mode[pin] in (_MODE_PWM, _MODE_SERVO):
            self.pwm[pin] = 0
        if mode in (_MODE_INPUT, _MODE_PULLUP, _MODE_ANALOG):
            self.digital_out[pin] = 0
            self.pwm[pin] = 0
        self.mode[pin] = mode

    def _analog_write(self, pin: int, value: int) -> None:
        if pin >= self.config.total_pins:
            return
        if self.mode[pin] == _MODE_PWM:
            self.pwm[pin] = min(255, value)  # analogWrite clips at 255 on an 8-bit timer
        elif self.mode[pin] == _MODE_SERVO:
            self.pwm[pin] = value

    def _sysex(self, cmd: int, data: list[int], now_s: float) -> None:
        c = self.config
        if cmd == 0x79:
            self._emit(self._firmware_report(), now_s)
        elif cmd == 0x6B:  # capability query
            resp = bytearray((_SYSEX_START, 0x6C))
            for p in range(c.total_pins):
                if 2 <= p < c.total_pins:
                    resp += bytes((_MODE_INPUT, 1, _MODE_OUTPUT, 1, _MODE_PULLUP, 1))
                    if p in c.analog_pins:
                        resp += bytes((_MODE_ANALOG, c.adc_bits))
                    if p in c.pwm_pins:
                        resp += bytes((_MODE_PWM, 8))
                    if 2 <= p <= 13:
                        resp += bytes((_MODE_SERVO, 14))
                resp.append(0x7F)
            resp.append(_SYSEX_END)
            self._emit(bytes(resp), now_s)
        elif cmd == 0x69:  # analog mapping
            resp = bytearray((_SYSEX_START, 0x6A))
            for p in range(c.total_pins):
                resp.append(c.analog_pins.index(p) if p in c.analog_pins else 0x7F)
            resp.append(_SYSEX_END)
            self._emit(bytes(resp), now_s)
        elif cmd == 0x6D and data:  # pin state
            pin = data[0]
            if pin < c.total_pins:
                state = self.pwm[pin] if self.mode[pin] in (_MODE_PWM, _MODE_SERVO) else self.digital_out[pin]
                self._emit(bytes((_SYSEX_START, 0x6E, pin, self.mode[pin], state & 0x7F, (state >> 7) & 0x7F,
                                  _SYSEX_END)), now_s)
        elif cmd == 0x6F and len(data) >= 2:  # extended analog
            value = 0
            for i, v in enumerate(data[1:4]):
                value |= v << (7 * i)
            self._analog_write(data[0], value)
        elif cmd == 0x70 and len(data) >= 5:  # servo config
            pin = data[0]
            if 2 <= pin <= 13:
                self.servo[pin] = (data[1] | data[2] << 7, data[3] | data[4] << 7)
                self.mode[pin] = _MODE_SERVO
        elif cmd == 0x7A and len(data) >= 2:
            self.sampling_interval_ms = max(1, data[0] | (data[1] << 7))  # MINIMUM_SAMPLING_INTERVAL 1
        elif cmd == 0x50 and c.firmware == "FirmataExpress" and len(data) >= 2:
            self.keep_alive_s = data[0] | (data[1] << 7)
            self.last_keep_alive_t = now_s
            self.keep_alives += 1
        # anything else: StandardFirmata's sysexCallback ignores it

    # ------------------------------------------------------------------ test helpers
    def outputs_zero(self) -> bool:
        """No PWM duty on any pin and no digital output high."""
        return not any(self.pwm) and not any(self.digital_out)


def main() -> None:  # pragma: no cover - interactive
    import argparse

    ap = argparse.ArgumentParser(description="An emulated Firmata board (Uno, rover wiring) on a pty")
    ap.add_argument("--firmware", choices=("StandardFirmata", "FirmataExpress"), default="StandardFirmata")
    ap.add_argument("--banner-delay", type=float, default=2.0, help="boot time after open, s (a real Uno: ~2 s)")
    ap.add_argument("--baud", type=int, default=57600, help="emulated wire speed (0: none)")
    args = ap.parse_args()
    serve_forever(FirmataBoard(BoardConfig(firmware=args.firmware, banner_delay_s=args.banner_delay,
                                           baudrate=args.baud or None)), "firmata")


if __name__ == "__main__":  # pragma: no cover
    main()

