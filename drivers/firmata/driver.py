"""The ``firmata`` driver: an Arduino-class board running StandardFirmata or FirmataExpress as the DAQ.

Its ``[driver]`` table maps board pins to robot channels and actuators
(docs/hardware.md has the keys and an example):

* ``[driver.analog.<channel>]``: an analog input (``channel`` = A-number),
  raw counts → SI by a polynomial ``poly = [c0, c1, …]`` (linear: two terms);
* ``[driver.digital.<channel>]``: a digital input (``pin``, ``pullup``,
  ``active_low``), 1.0 when active;
* ``[driver.wheels.<actuator>]``: a motor = PWM pin + direction pin, the
  command in rad/s (``max_rad_s`` at full duty);
* ``[driver.servos.<actuator>]``: a hobby servo, the command in rad;
* ``[driver.outputs.<actuator>]``: a digital output, 0 or 1;
* ``estop_pin`` (optional): a hardware e-stop input, channel ``estop`` (1.0 =
  pressed) for the supervisor's rule; ``relay_pin`` (optional): a safety relay
  output, high only while the driver is active, released on every halt.

Timing: the board samples every analog channel at one global interval
(SAMPLING_INTERVAL); the achieved rate is ``1000 / round(1000 / rate)`` Hz and a
channel set × rate the baud rate cannot carry (3 bytes per sample, 10 bits per
byte) is refused with an :class:`AcquisitionError` naming both. Every value
carries the host time its bytes arrived (Firmata has no device timestamp);
digital inputs are sent on change only, so they carry the time of the last
message from the board (proof it would have reported a change), and the
driver keeps at least one analog channel reporting as that heartbeat.

Safety: halt writes zero duty on every wheel, direction low and the relay
low through the transport's stop lane; close adds SYSTEM_RESET. StandardFirmata
has no watchdog — PWM keeps its last value if this host dies — so with it a
hardware relay on the e-stop line is required. FirmataExpress has KEEP_ALIVE:
the driver arms it (``keep_alive_s``) and refreshes it on every read (or
:meth:`FirmataDriver.keep_alive`), and the board resets (outputs low) when the
refresh stops.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass
from typing import Any, Mapping

from drivers.base import Acquisition, Capability, ChannelSpec, Driver, Frame
from drivers.errors import (AcquisitionError, DriverConfigError, DriverError, DriverLinkError, DriverOpenError,
                            DriverProtocolError, DriverTimeoutError)
from drivers.firmata import protocol as fp
from drivers.serial.link import LinkCounters, SerialLink
from drivers.firmata.config import AnalogTable, DigitalTable, FirmataTable, OutputTable, ServoTable, WheelTable
from drivers.serial.support import named_tables, reconnect
from drivers.tables import convert_table

logger = logging.getLogger(__name__)

#: bits on the wire per byte (start + 8 data + stop) and the share of the link samples may use
_BITS_PER_BYTE = 10
_LINK_SHARE = 0.9
#: invalid frames between two reads that make a read fail (a noisy line, a wrong baud rate)
_INVALID_BURST = 8


@dataclass(frozen=True)
class AnalogSpec:
    name: str
    channel: int
    poly: tuple[float, ...]
    spec: ChannelSpec

    def scale(self, counts: int) -> float:
        """Horner's rule on ``poly`` (c0 + c1·x + c2·x² …)."""
        v = 0.0
        for c in reversed(self.poly):
            v = v * counts + c
        return v


@dataclass(frozen=True)
class DigitalSpec:
    name: str
    pin: int
    pullup: bool
    active_low: bool


@dataclass(frozen=True)
class WheelSpec:
    name: str
    pwm_pin: int
    dir_pin: int
    max_rad_s: float
    invert: bool
    pwm_max: int


@dataclass(frozen=True)
class ServoSpec:
    name: str
    pin: int
    min_rad: float
    max_rad: float
    min_pulse_us: int
    max_pulse_us: int


@dataclass(frozen=True)
class OutputSpec:
    name: str
    pin: int


class FirmataDriver(Driver):
    name = "firmata"
    max_rate_hz = 1000.0  # SAMPLING_INTERVAL >= 1 ms
    min_rate_hz = 0.1
    # a board that reset or went silent is reopened by reconnect(); activating (the relay) goes to the line,
    # kept off the tick like every device driver's
    capabilities = frozenset({Capability.RECONNECT, Capability.SLOW_ACTIVATE})

    # ------------------------------------------------------------------ config
    @classmethod
    def from_config(cls, table: Mapping[str, Any], profile: Mapping[str, Any]) -> "FirmataDriver":
        """The ``[driver]`` table (:class:`drivers.firmata.config.FirmataTable` and its sub-tables); the loop's
        rate (at most 100 Hz) is the default sampling rate."""
        t = convert_table(table, FirmataTable)
        loop_rate = profile.get("loop", {}).get("rate_hz", 50.0) if isinstance(profile, Mapping) else 50.0
        analog = [AnalogSpec(name, a.channel, tuple(a.poly), ChannelSpec(
            name=name, unit=a.unit, min=a.min, max=a.max, widget=a.widget, label=a.label, plot=a.plot,
            warn_low=a.warn_low, warn_high=a.warn_high, crit_low=a.crit_low, crit_high=a.crit_high))
            for name, a in named_tables(t.analog, AnalogTable, "analog").items()]
        digital = [DigitalSpec(name, d.pin, d.pullup, d.active_low)
                   for name, d in named_tables(t.digital, DigitalTable, "digital").items()]
        wheels = [WheelSpec(name, w.pwm_pin, w.dir_pin, w.max_rad_s, w.invert, w.pwm_max)
                  for name, w in named_tables(t.wheels, WheelTable, "wheels").items()]
        servos = [ServoSpec(name, v.pin, v.min_rad, v.max_rad, v.min_pulse_us, v.max_pulse_us)
                  for name, v in named_tables(t.servos, ServoTable, "servos").items()]
        outputs = [OutputSpec(name, o.pin) for name, o in named_tables(t.outputs, OutputTable, "outputs").items()]
        return cls(t.port, baudrate=57600 if t.baudrate is None else t.baudrate,
                   rate_hz=min(float(loop_rate), 100.0) if t.rate_hz is None else t.rate_hz,
                   analog=analog, digital=digital, wheels=wheels, servos=servos, outputs=outputs,
                   banner_wait_s=t.banner_wait_s, query_timeout_s=t.query_timeout_s, stale_s=t.stale_s,
                   keep_alive_s=t.keep_alive_s, require_keep_alive=t.require_keep_alive, estop_pin=t.estop_pin,
                   estop_active_low=t.estop_active_low, relay_pin=t.relay_pin,
                   reconnect_timeout_s=t.reconnect_timeout_s)

    def __init__(self, port: str, *, baudrate: int = 57600, rate_hz: float = 50.0,
                 analog: list[AnalogSpec] = (), digital: list[DigitalSpec] = (), wheels: list[WheelSpec] = (),
                 servos: list[ServoSpec] = (), outputs: list[OutputSpec] = (), banner_wait_s: float = 5.0,
                 query_timeout_s: float = 1.0, stale_s: float = 0.5, keep_alive_s: int = 1,
                 require_keep_alive: bool = False, estop_pin: int | None = None, estop_active_low: bool = True,
                 relay_pin: int | None = None, reconnect_timeout_s: float = 10.0) -> None:
        super().__init__()
        self.port = port
        self.baudrate = baudrate
        self.analog = list(analog)
        self.digital = list(digital)
        if estop_pin is not None:
            self.digital.append(DigitalSpec("estop", estop_pin, True, estop_active_low))
        self.wheels = list(wheels)
        self.servos = list(servos)
        self.outputs = list(outputs)
        self.banner_wait_s = banner_wait_s
        self.query_timeout_s = query_timeout_s
        self.stale_s = stale_s
        self.keep_alive_s = keep_alive_s
        self.require_keep_alive = require_keep_alive
        self.relay_pin = relay_pin
        self.reconnect_timeout_s = reconnect_timeout_s
        names = [a.name for a in self.analog] + [d.name for d in self.digital]
        if len(set(names)) != len(names):
            raise DriverConfigError("", f"channel names repeat: {names}")
        acts = [w.name for w in self.wheels] + [s.name for s in self.servos] + [o.name for o in self.outputs]
        if len(set(acts)) != len(acts):
            raise DriverConfigError("", f"actuator names repeat: {acts}")
        pins = [w.pwm_pin for w in self.wheels] + [w.dir_pin for w in self.wheels] + [s.pin for s in self.servos] + \
            [o.pin for o in self.outputs] + [d.pin for d in self.digital] + ([relay_pin] if relay_pin is not None else [])
        dup = sorted({p for p in pins if pins.count(p) > 1})
        if dup:
            raise DriverConfigError("", f"pin(s) {dup} used twice")
        if not names:
            raise DriverConfigError("analog", "configure at least one channel")
        self._channel_specs = [a.spec for a in self.analog] + [
            ChannelSpec(name=d.name, unit="", min=0.0, max=1.0, widget="lamp", kind="digital", decimals=0)
            for d in self.digital]
        interval = self._interval_ms(rate_hz)
        self._acquisition = Acquisition(1000.0 / interval, tuple(names))
        self._check_bandwidth(self._acquisition.rate_hz, self._acquisition.channels)
        self._lock = threading.Lock()
        self._link: SerialLink | None = None
        self.counters = LinkCounters()  # the port's, across reconnects
        self._reset_values()
        self.firmware: tuple[int, int, str] | None = None
        self.protocol_version: tuple[int, int] | None = None
        self.pin_capabilities: tuple[dict[int, int], ...] = ()
        self.analog_map: tuple[int | None, ...] = ()
        self.has_keep_alive = False
        self._last_keep_alive_t = 0.0
        self._sent: dict[int, int] = {}  # pin → last PWM/servo value sent
        self._sent_t = 0.0
        self._seen_invalid = 0

    def _reset_values(self) -> None:
        self._analog_raw: dict[int, tuple[int, float]] = {}  # channel → (counts, host time)
        self._ports: dict[int, int] = {}
        self._last_rx_t = 0.0
        self._version_event = threading.Event()
        self._firmware_event = threading.Event()

    # ------------------------------------------------------------------ description
    def channels(self) -> list[ChannelSpec]:
        return list(self._channel_specs)

    def actuators(self) -> dict[str, tuple[float, float]]:
        acts = {w.name: (-w.max_rad_s, w.max_rad_s) for w in self.wheels}
        acts.update({s.name: (s.min_rad, s.max_rad) for s in self.servos})
        acts.update({o.name: (0.0, 1.0) for o in self.outputs})
        return acts

    # ------------------------------------------------------------------ acquisition
    @staticmethod
    def _interval_ms(rate_hz: float) -> int:
        return int(min(fp.MAX_SAMPLING_INTERVAL_MS, max(fp.MIN_SAMPLING_INTERVAL_MS, round(1000.0 / rate_hz))))

    def _check_bandwidth(self, rate_hz: float, channels: tuple[str, ...]) -> None:
        n = sum(1 for a in self.analog if a.name in channels)
        need_bps = n * 3 * _BITS_PER_BYTE * rate_hz
        have_bps = self.baudrate * _LINK_SHARE
        if need_bps > have_bps:
            most = int(have_bps / (3 * _BITS_PER_BYTE * max(n, 1)))
            raise AcquisitionError(
                f"rate_hz={rate_hz:g} × {n} analog channels needs {need_bps / _BITS_PER_BYTE:.0f} B/s; "
                f"{self.baudrate} baud carries {have_bps / _BITS_PER_BYTE:.0f} B/s (at most {most} Hz for {n} channels)")

    def _set_acquisition(self, rate_hz: float, channels: tuple[str, ...]) -> Acquisition:
        interval = self._interval_ms(rate_hz)
        achieved = 1000.0 / interval
        self._check_bandwidth(achieved, channels)
        acq = Acquisition(achieved, channels)
        if self._link is not None and self._link.is_open:
            self._configure_reporting(acq, interval)
        return acq

    def _configure_reporting(self, acq: Acquisition, interval_ms: int) -> None:
        link = self._link
        assert link is not None
        data = bytearray(fp.encode_sampling_interval(interval_ms))
        active = [a for a in self.analog if a.name in acq.channels]
        if not active and self.analog:
            active = [self.analog[0]]  # the heartbeat: digital inputs are only sent on change
        on = {a.channel for a in active}
        for a in self.analog:
            data += fp.encode_report_analog(a.channel, a.channel in on)
        link.send(bytes(data), droppable=False)

    # ------------------------------------------------------------------ lifecycle
    def _open(self) -> None:
        self._reset_values()
        self._fault = None
        self._board_reset = False
        self._configured = False
        link = SerialLink(self.port, fp.FirmataDecoder(), baudrate=self.baudrate, on_message=self._on_message,
                          reply_timeout_s=self.query_timeout_s, name=f"firmata {self.port}", counters=self.counters)
        # a new connection starts a new garbage window: frames the last one's reader was still finding invalid when
        # it closed (a loaded machine's reader lags the line) are that connection's, already reported
        self._seen_invalid = self.counters.invalid_frames
        link.open()
        self._link = link
        try:
            self._handshake(link)
            self._configure(link)
        except BaseException:
            self._link = None
            link.close(drain_timeout_s=0.0)
            raise

    def _handshake(self, link: SerialLink) -> None:
        # the board resets when the port opens; StandardFirmata sends its version after the boot blink
        if not self._version_event.wait(self.banner_wait_s):
            link.send(fp.encode_report_version() + fp.encode_query_firmware(), droppable=False)
            if not self._version_event.wait(self.query_timeout_s):
                raise DriverOpenError(f"firmata: no answer from {self.port!r} within "
                                      f"{self.banner_wait_s + self.query_timeout_s:g} s (is StandardFirmata loaded, "
                                      f"is the baud rate {self.baudrate}?)")
        if not self._firmware_event.wait(self.query_timeout_s):
            link.send(fp.encode_query_firmware(), droppable=False)
            self._firmware_event.wait(self.query_timeout_s)
        try:
            caps = link.request(fp.encode_capability_query(), lambda m: isinstance(m, fp.CapabilityResponse),
                                retries=1)
            amap = link.request(fp.encode_analog_mapping_query(), lambda m: isinstance(m, fp.AnalogMapping),
                                retries=1)
        except DriverTimeoutError as err:
            raise DriverOpenError(f"firmata: the board on {self.port!r} did not answer the capability query") from err
        self.pin_capabilities = caps.pins  # type: ignore[attr-defined]
        self.analog_map = amap.channels  # type: ignore[attr-defined]
        name = self.firmware[2] if self.firmware else ""
        self.has_keep_alive = "FirmataExpress" in name
        if self.require_keep_alive and not self.has_keep_alive:
            raise DriverOpenError(f"firmata: firmware {name!r} has no KEEP_ALIVE and require_keep_alive is set")
        self._check_pins()
        logger.info("firmata: %s protocol %s on %s, %d pins", name or "unknown firmware", self.protocol_version,
                    self.port, len(self.pin_capabilities))

    def _check_pins(self) -> None:
        caps = self.pin_capabilities

        def need(pin: int, mode: fp.PinMode, what: str) -> None:
            if pin >= len(caps) or int(mode) not in caps[pin]:
                raise DriverOpenError(f"firmata: pin {pin} ({what}) cannot be {mode.name} on this board")

        channels = {c for c in self.analog_map if c is not None}
        for a in self.analog:
            if a.channel not in channels:
                raise DriverOpenError(f"firmata: analog channel A{a.channel} ({a.name}) does not exist on this board")
        for w in self.wheels:
            need(w.pwm_pin, fp.PinMode.PWM, f"{w.name}.pwm_pin")
            need(w.dir_pin, fp.PinMode.OUTPUT, f"{w.name}.dir_pin")
            bits = caps[w.pwm_pin][int(fp.PinMode.PWM)]
            if w.pwm_max >= (1 << bits):
                raise DriverOpenError(f"firmata: {w.name}.pwm_max={w.pwm_max} exceeds the pin's {bits}-bit PWM")
        for s in self.servos:
            need(s.pin, fp.PinMode.SERVO, s.name)
        for o in self.outputs:
            need(o.pin, fp.PinMode.OUTPUT, o.name)
        for d in self.digital:
            need(d.pin, fp.PinMode.PULLUP if d.pullup else fp.PinMode.INPUT, d.name)
        if self.relay_pin is not None:
            need(self.relay_pin, fp.PinMode.OUTPUT, "relay_pin")

    def _configure(self, link: SerialLink) -> None:
        data = bytearray()
        for w in self.wheels:
            data += fp.encode_set_pin_mode(w.dir_pin, fp.PinMode.OUTPUT) + fp.encode_set_digital_pin(w.dir_pin, False)
            data += fp.encode_set_pin_mode(w.pwm_pin, fp.PinMode.PWM) + fp.encode_analog_write(w.pwm_pin, 0)
        for o in self.outputs:
            data += fp.encode_set_pin_mode(o.pin, fp.PinMode.OUTPUT) + fp.encode_set_digital_pin(o.pin, False)
        if self.relay_pin is not None:
            data += fp.encode_set_pin_mode(self.relay_pin, fp.PinMode.OUTPUT)
            data += fp.encode_set_digital_pin(self.relay_pin, False)
        for s in self.servos:
            data += fp.encode_servo_config(s.pin, s.min_pulse_us, s.max_pulse_us)
        ports = set()
        for d in self.digital:
            data += fp.encode_set_pin_mode(d.pin, fp.PinMode.PULLUP if d.pullup else fp.PinMode.INPUT)
            ports.add(d.pin // 8)
        for port in sorted(ports):
            data += fp.encode_report_digital(port, True)
        for a in self.analog:  # ANALOG mode turns reporting on: set it, then choose below
            pin = self.analog_map.index(a.channel)
            data += fp.encode_set_pin_mode(pin, fp.PinMode.ANALOG)
        link.send(bytes(data), droppable=False)  # a halt right after open must not drop the configuration
        self._sent.clear()
        acq = self._acquisition
        self._configure_reporting(acq, self._interval_ms(acq.rate_hz))
        if self.has_keep_alive and self.keep_alive_s:
            link.send(fp.encode_keep_alive(self.keep_alive_s), droppable=False)
            self._last_keep_alive_t = time.monotonic()
        self._configured = True

    def _activate(self) -> None:
        if self._fault is not None:
            raise self._fault
        link = self._require_link()
        if self.relay_pin is not None:
            link.send(fp.encode_set_digital_pin(self.relay_pin, True))

    def _halt(self) -> None:
        link = self._link
        if link is None or link.lost is not None:
            return
        link.send_stop(self._safe_state_bytes())
        self._sent = {w.pwm_pin: 0 for w in self.wheels}

    def _safe_state_bytes(self) -> bytes:
        """Zero duty first (the motors stop even if a later byte is lost), then directions, outputs, relay."""
        data = bytearray()
        for w in self.wheels:
            data += fp.encode_analog_write(w.pwm_pin, 0)
        if self.relay_pin is not None:
            data += fp.encode_set_digital_pin(self.relay_pin, False)
        for w in self.wheels:
            data += fp.encode_set_digital_pin(w.dir_pin, False)
        for o in self.outputs:
            data += fp.encode_set_digital_pin(o.pin, False)
        return bytes(data)

    def _close(self) -> None:
        link, self._link = self._link, None
        if link is None:
            return
        if link.lost is None:
            tail = fp.encode_keep_alive(0) if self.has_keep_alive and self.keep_alive_s else b""
            link.send_stop(self._safe_state_bytes() + tail + fp.encode_system_reset())
        link.close()

    def reconnect(self, timeout_s: float | None = None, stop: threading.Event | None = None) -> int:
        """Close and reopen with backoff until the board answers; stays ``inactive`` (never restarts motion).

        Returns the attempts made; raises the last :class:`DriverError` after ``timeout_s``
        (default ``reconnect_timeout_s``)."""
        self.close()
        return reconnect(self.open, self.reconnect_timeout_s if timeout_s is None else timeout_s, stop,
                         what=f"firmata {self.port}")

    def keep_alive(self) -> None:
        """Refresh FirmataExpress's KEEP_ALIVE now (the control loop may call it; every read does)."""
        link = self._link
        if link is not None and self.has_keep_alive and self.keep_alive_s and link.lost is None:
            link.send(fp.encode_keep_alive(self.keep_alive_s), droppable=False)
            self._last_keep_alive_t = time.monotonic()

    # ------------------------------------------------------------------ I/O
    def _require_link(self) -> SerialLink:
        link = self._link
        if link is None:
            raise DriverLinkError("firmata: not connected")
        link.check()
        return link

    def _on_message(self, msg: object, t: float) -> None:
        with self._lock:
            self._last_rx_t = t
            if isinstance(msg, fp.AnalogValue):
                self._analog_raw[msg.channel] = (msg.value, t)
            elif isinstance(msg, fp.DigitalPort):
                self._ports[msg.port] = msg.mask
            elif isinstance(msg, fp.ProtocolVersion):
                self.protocol_version = (msg.major, msg.minor)
                self._version_event.set()
            elif isinstance(msg, fp.FirmwareReport):
                self.firmware = (msg.major, msg.minor, msg.name)
                self._firmware_event.set()
                if self._configured:
                    # a banner after the configuration: the board rebooted (power, watchdog, keep-alive lapse)
                    # and lost its pin modes; only a reconnect configures it again
                    logger.warning("firmata: the board on %s reset itself (banner seen)", self.port)
                    self._board_reset = True

    _board_reset = False
    _configured = False

    def _fail(self, err: DriverError) -> DriverError:
        """Make the outputs safe before the error reaches the control loop (it faults on it).

        The fault sticks: every later read raises it until :meth:`reconnect` (a driver
        never heals itself behind the supervisor's back)."""
        self._fault = err
        self.halt()
        return err

    _fault: DriverError | None = None

    def _read(self, dt_s: float) -> Frame:
        link = self._link
        if link is None:
            raise DriverLinkError("firmata: not connected")
        if self._fault is not None:
            raise self._fail(self._fault)
        if link.lost is not None:
            raise self._fail(link.lost)
        if self._board_reset:
            self._board_reset = False
            raise self._fail(DriverProtocolError(f"firmata: the board on {self.port} reset itself (power, watchdog "
                                                 "or keep-alive); reconnect to configure it again"))
        invalid = link.counters.invalid_frames
        if invalid - self._seen_invalid >= _INVALID_BURST:
            self._seen_invalid = invalid
            raise self._fail(DriverProtocolError(f"firmata: garbage on {self.port} ({_INVALID_BURST}+ invalid "
                                                 "messages since the last read; wrong baud rate or a noisy line?)"))
        self._seen_invalid = invalid
        with self._lock:
            last_rx = self._last_rx_t
            raw = dict(self._analog_raw)
            ports = dict(self._ports)
        now = time.monotonic()  # after the snapshot: no sample is newer than the frame
        if now - last_rx > self.stale_s:
            raise self._fail(DriverTimeoutError(f"firmata: nothing from the board on {self.port} for "
                                                f"{now - last_rx:.2f} s (stale_s={self.stale_s:g})"))
        if self.has_keep_alive and self.keep_alive_s and now - self._last_keep_alive_t > self.keep_alive_s / 4.0:
            self.keep_alive()
        active = self._acquisition.channels
        frame = Frame(t=now)
        for a in self.analog:
            if a.name in active:
                counts, t = raw.get(a.channel, (None, 0.0))
                if counts is None:
                    continue
                frame.values[a.name] = float(a.scale(counts))
                frame.sample_t[a.name] = t
        for d in self.digital:
            if d.name in active:
                mask = ports.get(d.pin // 8)
                if mask is None:
                    continue
                level = (mask >> (d.pin % 8)) & 1
                frame.values[d.name] = float(level == (0 if d.active_low else 1))
                frame.sample_t[d.name] = last_rx
        missing = [n for n in active if n not in frame.values]
        if missing:
            # a channel just enabled has not reported yet: wait for its first sample (bounded)
            return self._first_samples(frame, missing)
        return frame

    def _first_samples(self, frame: Frame, missing: list[str]) -> Frame:
        deadline = time.monotonic() + self.stale_s
        while time.monotonic() < deadline:
            time.sleep(0.001)
            link = self._link
            if link is not None and link.lost is not None:
                raise self._fail(link.lost)
            with self._lock:
                raw = dict(self._analog_raw)
                ports = dict(self._ports)
                raw_t = self._last_rx_t
            still = []
            for name in missing:
                a = next((x for x in self.analog if x.name == name), None)
                if a is not None and a.channel in raw:
                    frame.values[name] = float(a.scale(raw[a.channel][0]))
                    frame.sample_t[name] = raw[a.channel][1]
                    continue
                d = next((x for x in self.digital if x.name == name), None)
                if d is not None and d.pin // 8 in ports:
                    level = (ports[d.pin // 8] >> (d.pin % 8)) & 1
                    frame.values[name] = float(level == (0 if d.active_low else 1))
                    frame.sample_t[name] = raw_t
                    continue
                still.append(name)
            missing = still
            if not missing:
                frame.t = time.monotonic()
                return frame
        raise self._fail(DriverTimeoutError(f"firmata: no sample yet for {', '.join(missing)} after "
                                            f"{self.stale_s:g} s"))

    def _write(self, command: dict[str, float]) -> None:
        link = self._link
        if link is None or link.lost is not None:
            return
        now = time.monotonic()
        refresh = now - self._sent_t > 0.25  # resend unchanged values now and then: Firmata has no checksum
        data = bytearray()
        for name, value in command.items():
            w = next((x for x in self.wheels if x.name == name), None)
            if w is not None:
                duty = int(round(min(1.0, abs(value) / w.max_rad_s) * w.pwm_max))
                reverse = (value < 0) != w.invert
                if refresh or self._sent.get(w.pwm_pin) != duty or self._sent.get(w.dir_pin) != reverse:
                    data += fp.encode_set_digital_pin(w.dir_pin, reverse) + fp.encode_analog_write(w.pwm_pin, duty)
                    self._sent[w.pwm_pin], self._sent[w.dir_pin] = duty, int(reverse)
                continue
            s = next((x for x in self.servos if x.name == name), None)
            if s is not None:
                deg = int(round(math.degrees(value - s.min_rad) * 180.0 / math.degrees(s.max_rad - s.min_rad)))
                if refresh or self._sent.get(s.pin) != deg:
                    data += fp.encode_analog_write(s.pin, max(0, min(180, deg)))
                    self._sent[s.pin] = deg
                continue
            o = next(x for x in self.outputs if x.name == name)
            high = value >= 0.5
            if refresh or self._sent.get(o.pin) != int(high):
                data += fp.encode_set_digital_pin(o.pin, high)
                self._sent[o.pin] = int(high)
        if refresh:
            self._sent_t = now
        if data:
            link.send(bytes(data))

    # ------------------------------------------------------------------ health
    def health(self) -> dict[str, Any]:
        link = self._link
        out: dict[str, Any] = {"port": self.port, "baudrate": self.baudrate, "keep_alive": self.has_keep_alive,
                               "firmware": self.firmware[2] if self.firmware else None}
        out.update(self.counters.as_dict())  # also while reconnecting (no link then)
        out["connected"] = link is not None and link.lost is None
        out["silent_s"] = round(time.monotonic() - self._last_rx_t, 3) if link is not None and self._last_rx_t else None
        out["fault"] = str(self._fault) if self._fault is not None else None
        return out
