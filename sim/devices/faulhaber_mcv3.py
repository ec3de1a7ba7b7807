"""FAULHABER MC V3.0 drives (MC 5004/5005/5010) speaking the binary RS232 protocol, CiA 402 inside.

Written from the Communications Manual 7000.05052 as summarised in
hardware-protocols §2.2, **not** from ``drivers.faulhaber.mcv3``: the CRC here
is table-driven, the driver's bitwise, so a shared slip would show.

Frames ``'S' LEN NODE CMD payload CRC 'E'``; a frame with a wrong CRC, a bad
length or no ``'E'`` is dropped without an answer (counted in
``crc_errors`` / ``bad_frames``). SDO read (CMD 1) → CMD 1 with the data; SDO
write (CMD 2) → CMD 2 without data; an unknown object → CMD 3 with abort
code 0x06020000 ("object does not exist"), a read-only one written → 0x06010002.

CiA 402 device control on the controlword (0x6040), state in the statusword
(0x6041): switch on disabled → (0x06) ready → (0x07) switched on → (0x0F)
operation enabled; quick stop (bit 2 low) decelerates on the quick-stop ramp
to switch on disabled; 0x00 disables the voltage (the motor coasts); a fault
reset (bit 7 rising) leaves the fault state. Modes (0x6060): 1 profile
position (bit 4 rising edge starts a move to 0x607A, bit 6 relative; bit 10
"target reached", bit 12 "set-point acknowledge"), 3 profile velocity (0x60FF
rpm). Bit 8 (halt) stops on the deceleration ramp. Velocities in rpm,
accelerations in rpm/s [verify: FAULHABER's factory units], positions in
encoder increments.

Fault injection (:meth:`McV3Bus.inject`): ``drop``, ``delay``, ``hold`` /
``release``, ``corrupt_crc`` (the next ``count`` answers), ``silent``,
``garbage``, ``reboot`` (state back to switch on disabled, position zero, a
boot frame CMD 0 after ``boot_s``), ``fault`` (the drive enters FAULT),
``clear``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sim.devices.bus import SerialBus
from sim.devices.motor import AxisMode, MotorAxis
from sim.devices.pty import serve_forever


def _make_table() -> list[int]:
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0xD5 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _make_table()


def frame_crc(data: bytes) -> int:
    """Table-driven CRC-8 (reflected 0xD5, init 0xFF), the emulator's own."""
    crc = 0xFF
    for b in data:
        crc = _TABLE[(crc ^ b) & 0xFF]
    return crc


def make_frame(node: int, cmd: int, payload: bytes) -> bytes:
    body = bytes((len(payload) + 4, node, cmd)) + payload
    return b"S" + body + bytes((frame_crc(body),)) + b"E"


# statusword bits
_SW_READY, _SW_ON, _SW_OP, _SW_FAULT, _SW_VOLTAGE, _SW_QS, _SW_DISABLED = 0x1, 0x2, 0x4, 0x8, 0x10, 0x20, 0x40
_SW_REMOTE, _SW_REACHED, _SW_ACK = 0x200, 0x400, 0x1000


@dataclass
class McV3DriveConfig:
    node: int = 1
    counts_per_rev: int = 4096
    max_rpm: int = 10000
    quick_stop_decel_rpm_s: int = 30000


@dataclass
class McV3BusConfig:
    drives: list[McV3DriveConfig] = field(default_factory=lambda: [McV3DriveConfig(1), McV3DriveConfig(2)])
    baudrate: int | None = None
    response_delay_s: float = 0.0
    boot_s: float = 0.5
    seed: int = 1


class McV3Drive:
    STATES = ("switch_on_disabled", "ready", "switched_on", "operation_enabled", "quick_stop", "fault")

    def __init__(self, cfg: McV3DriveConfig) -> None:
        self.cfg = cfg
        self.reset()

    def reset(self) -> None:
        self.state = "switch_on_disabled"
        self.controlword = 0
        self.mode = 0
        self.target_position = 0
        self.target_velocity = 0
        self.profile_velocity = 3000
        self.profile_accel = 30000
        self.profile_decel = 30000
        self.setpoint_ack = False
        self.motor = MotorAxis(max_speed_rev_s=self.cfg.max_rpm / 60.0, accel_rev_s2=500.0, decel_rev_s2=500.0,
                               counts_per_rev=self.cfg.counts_per_rev)
        self._apply_profile()

    def _apply_profile(self) -> None:
        m = self.motor
        m.max_speed_rev_s = min(self.profile_velocity, self.cfg.max_rpm) / 60.0 if self.mode == 1 else \
            self.cfg.max_rpm / 60.0
        m.accel_rev_s2 = max(1, self.profile_accel) / 60.0
        m.decel_rev_s2 = max(1, self.profile_decel) / 60.0

    @property
    def statusword(self) -> int:
        base = {"switch_on_disabled": _SW_DISABLED, "ready": _SW_QS | _SW_READY,
                "switched_on": _SW_QS | _SW_ON | _SW_READY,
                "operation_enabled": _SW_QS | _SW_OP | _SW_ON | _SW_READY,
                "quick_stop": _SW_OP | _SW_ON | _SW_READY, "fault": _SW_FAULT}[self.state]
        sw = base | _SW_REMOTE | (_SW_VOLTAGE if self.state != "switch_on_disabled" else 0)
        m = self.motor
        if self.mode == 1 and m.reached:
            sw |= _SW_REACHED
        if self.mode == 3 and abs(m.speed_rev_s - m.target_speed_rev_s) < 1e-6:
            sw |= _SW_REACHED
        if self.setpoint_ack:
            sw |= _SW_ACK
        return sw

    def write_controlword(self, cw: int) -> None:
        prev, self.controlword = self.controlword, cw
        m = self.motor
        if self.state == "fault":
            if cw & 0x80 and not prev & 0x80:
                self.state = "switch_on_disabled"
            return
        cmd = cw & 0x8F
        if cw & 0x02 == 0:  # disable voltage
            self.state = "switch_on_disabled"
        elif cw & 0x04 == 0:  # quick stop
            if self.state == "operation_enabled":
                self.state = "quick_stop"
                m.decel_rev_s2 = self.cfg.quick_stop_decel_rpm_s / 60.0
                m.set_speed(0.0)
            else:
                self.state = "switch_on_disabled"
        elif cmd & 0x0F == 0x06:
            self.state = "ready"
        elif cmd & 0x0F == 0x07 and self.state in ("ready", "operation_enabled"):
            self.state = "switched_on"
        elif cmd & 0x0F == 0x0F and self.state in ("switched_on", "ready", "operation_enabled"):
            if self.state != "operation_enabled":
                self.state = "operation_enabled"
                m.set_speed(0.0) if self.mode != 1 else m.move_to(m.position_rev)
        m.enabled = self.state in ("operation_enabled", "quick_stop")
        if self.state != "operation_enabled":
            if self.state != "quick_stop":
                m.target_speed_rev_s = 0.0
            return
        halt = bool(cw & 0x100)
        if self.mode == 3:
            m.set_speed(0.0 if halt else self.target_velocity / 60.0)
        elif self.mode == 1:
            if halt:
                m.set_speed(0.0)
            elif cw & 0x10 and not prev & 0x10:  # new set-point, rising edge
                target = self.target_position + (m.counts if cw & 0x40 else 0)
                m.move_to(target / self.cfg.counts_per_rev)
                self.setpoint_ack = True
            elif not cw & 0x10:
                self.setpoint_ack = False

    def step(self, dt: float) -> None:
        m = self.motor
        m.step(dt)
        if self.state == "quick_stop" and m.speed_rev_s == 0.0:
            self.state = "switch_on_disabled"
            m.enabled = False
            self._apply_profile()


# object → (size, signed, writable)
_OBJECTS = {0x6040: (2, False, True), 0x6041: (2, False, False), 0x6060: (1, True, True),
            0x6061: (1, True, False), 0x6064: (4, True, False), 0x606C: (4, True, False),
            0x607A: (4, True, True), 0x6081: (4, False, True), 0x6083: (4, False, True),
            0x6084: (4, False, True), 0x60FF: (4, True, True), 0x6078: (2, True, False)}


class McV3Bus(SerialBus):
    """Drives sharing one serial line, addressed by node number in each frame (the wire and the answers'
    faults: :class:`sim.devices.bus.SerialBus`)."""

    COUNTED = (*SerialBus.COUNTED, "corrupt_crc")

    def __init__(self, config: McV3BusConfig | None = None) -> None:
        config = config or McV3BusConfig()
        super().__init__(config, {d.node: McV3Drive(d) for d in config.drives})
        self._boot_due: float | None = None
        self.crc_errors = 0
        self.bad_frames = 0
        self.frames: list[tuple[float, int, int, bytes]] = []  # (time, node, cmd, payload) received

    def host_opened(self, now_s: float) -> None:
        """A USB/RS232 MC V3.0 does not reset on open."""

    def next_wakeup_s(self, now_s: float) -> float:
        t = super().next_wakeup_s(now_s)
        return t if self._boot_due is None else min(t, self._boot_due)

    def receive(self, data: bytes, now_s: float) -> None:
        self._physics(now_s)
        self._buf += data
        buf = self._buf
        while buf:
            start = buf.find(b"S")
            if start < 0:
                self.bad_frames += 1 if buf else 0
                buf.clear()
                break
            if start:
                self.bad_frames += 1
                del buf[:start]
            if len(buf) < 2:
                break
            n = buf[1]
            if n < 4 or n > 64:
                self.bad_frames += 1
                del buf[:1]
                continue
            if len(buf) < n + 2:
                break
            frame = bytes(buf[:n + 2])
            if frame[-1] != 0x45:
                self.bad_frames += 1
                del buf[:1]
                continue
            del buf[:n + 2]
            body, crc = frame[1:-2], frame[-2]
            if frame_crc(body) != crc:
                self.crc_errors += 1
                continue
            self._frame(body[1], body[2], body[3:], now_s)

    def _due(self, now_s: float) -> None:
        if self._boot_due is not None and now_s >= self._boot_due:  # each drive's boot-up message
            self._boot_due = None
            for node in self.drives:
                self._send(make_frame(node, 0, b""), now_s)

    def _reboot(self, now_s: float, boot_s: float) -> None:
        super()._reboot(now_s, boot_s)
        self._boot_due = now_s + boot_s

    def _inject(self, fault: str, now_s: float) -> None:
        if fault != "fault":
            super()._inject(fault, now_s)
        for d in self.drives.values():
            d.state = "fault"
            d.motor.enabled = False

    # frames ------------------------------------------------------------------------
    def _frame(self, node: int, cmd: int, payload: bytes, now_s: float) -> None:
        if now_s < self._silent_until or "silent" in self.faults:
            return
        self.frames.append((now_s, node, cmd, payload))
        d = self.drives.get(node)
        if d is None or cmd not in (1, 2, 4) or (cmd != 4 and len(payload) < 3):
            return
        if cmd == 4:
            d.write_controlword(int.from_bytes(payload[:2], "little"))
            self._reply(make_frame(node, 5, d.statusword.to_bytes(2, "little")), now_s)
            return
        index, sub = int.from_bytes(payload[:2], "little"), payload[2]
        key = payload[:3]
        obj = _OBJECTS.get(index)
        if obj is None or sub != 0:
            self._reply(make_frame(node, 3, key + (0x06020000).to_bytes(4, "little")), now_s)
            return
        size, signed, writable = obj
        if cmd == 1:
            value = self._read(d, index)
            data = (value & ((1 << (8 * size)) - 1)).to_bytes(size, "little")
            self._reply(make_frame(node, 1, key + data), now_s)
            return
        if not writable:
            self._reply(make_frame(node, 3, key + (0x06010002).to_bytes(4, "little")), now_s)
            return
        raw = payload[3:3 + size]
        value = int.from_bytes(raw.ljust(size, b"\0"), "little", signed=signed)
        self._write(d, index, value)
        self._reply(make_frame(node, 2, key), now_s)

    def _read(self, d: McV3Drive, index: int) -> int:
        m = d.motor
        return {
            0x6040: d.controlword, 0x6041: d.statusword, 0x6060: d.mode, 0x6061: d.mode,
            0x6064: m.counts, 0x606C: int(round(m.speed_rev_s * 60.0)), 0x607A: d.target_position,
            0x6081: d.profile_velocity, 0x6083: d.profile_accel, 0x6084: d.profile_decel,
            0x60FF: d.target_velocity, 0x6078: int(round(m.current_a * 1000.0)),
        }[index]

    def _write(self, d: McV3Drive, index: int, value: int) -> None:
        if index == 0x6040:
            d.write_controlword(value)
        elif index == 0x6060:
            d.mode = value
            d.motor.mode = AxisMode.POSITION if value == 1 else AxisMode.VELOCITY
            if value == 1:
                d.motor.move_to(d.motor.position_rev)
            else:
                d.motor.set_speed(0.0)
            d._apply_profile()
        elif index == 0x607A:
            d.target_position = value
        elif index == 0x60FF:
            d.target_velocity = max(-d.cfg.max_rpm, min(d.cfg.max_rpm, value))
            if d.mode == 3 and d.state == "operation_enabled" and not d.controlword & 0x100:
                d.motor.set_speed(d.target_velocity / 60.0)
        elif index in (0x6081, 0x6083, 0x6084):
            setattr(d, {0x6081: "profile_velocity", 0x6083: "profile_accel", 0x6084: "profile_decel"}[index],
                    value)
            d._apply_profile()

    def _reply(self, frame: bytes, now_s: float) -> None:
        if self._take("drop"):
            return
        if self._take("corrupt_crc"):
            frame = frame[:-2] + bytes(((frame[-2] ^ 0x5A),)) + frame[-1:]
        self._answer(frame, now_s)

    def _physics(self, now_s: float) -> None:
        dt = self._elapsed(now_s)
        if dt > 0:
            for d in self.drives.values():
                d.step(dt)


def main() -> None:  # pragma: no cover - interactive
    import argparse

    ap = argparse.ArgumentParser(description="FAULHABER MC V3.0 drives (binary protocol) on a pty")
    ap.add_argument("--nodes", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--baud", type=int, default=115200, help="emulated wire speed (0: none)")
    args = ap.parse_args()
    serve_forever(McV3Bus(McV3BusConfig([McV3DriveConfig(n) for n in args.nodes], baudrate=args.baud or None)),
                  "faulhaber-mcv3")


if __name__ == "__main__":  # pragma: no cover
    main()
